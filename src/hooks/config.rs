//! Hook configuration per CLI: what phoenix installs (Claude Code `.claude/settings.json`,
//! Codex `.codex/hooks.json`, Gemini CLI `.gemini/settings.json`), merged into existing files so
//! that the user's own settings and hooks stay, and removed again entry by entry. Beside them,
//! phoenix's MCP server entry: in the hook file, in a JSON file of its own (Claude Code's
//! `.mcp.json`), or in a TOML config (Codex's `.codex/config.toml`, `mcp_toml`).
//!
//! Generating and merging are pure; `write_file` is the only function here that touches disk.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::spec::{AgentSpec, Cli};
use crate::state::bounded::{self, Links};

pub use crate::agent_cli::{HOOKED, MAX_CONFIG_BYTES, is_phoenix_handler};

/// Where a CLI reads project hooks from, relative to the agent's workdir.
pub fn relative_path(cli: Cli) -> Option<&'static str> {
    cli.adapter().hook_file()
}

pub fn path_in(cli: Cli, workdir: &Path) -> Option<PathBuf> {
    crate::agent_cli::hook_path_in(cli, workdir)
}

/// The CLI whose hook file this is, from its last two path components (Claude Code's
/// `.mcp.json` too: phoenix's MCP server entry is written there).
pub fn cli_of(path: &Path) -> Option<Cli> {
    HOOKED
        .into_iter()
        .find(|cli| relative_path(*cli).is_some_and(|rel| path.ends_with(rel)))
        .or_else(|| {
            HOOKED
                .into_iter()
                .find(|cli| own_mcp_file(*cli).is_some_and(|f| path.ends_with(f)))
        })
}

/// The name of phoenix's MCP server in a CLI's config (`mcp__phoenix__send_message`).
pub const MCP_SERVER: &str = "phoenix";

pub use crate::agent_cli::{mcp_path_in, own_mcp_file};

/// What the plan calls a file phoenix writes: its path relative to the workdir.
pub fn label_of(path: &Path, cli: Cli) -> &'static str {
    match own_mcp_file(cli) {
        Some(f) if path.ends_with(f) => f,
        _ => relative_path(cli).unwrap_or_default(),
    }
}

/// The MCP server entry: `phoenix --config … mcp`, which the CLI starts with its own
/// environment, so the server knows the agent from `PHOENIX_AGENT` (set by its wrapper),
/// never from this file.
pub fn mcp_server_entry(phoenix: &Path, config: &Path) -> Value {
    json!({
        "command": phoenix.to_string_lossy(),
        "args": ["--config", config.to_string_lossy(), "mcp"],
    })
}

/// Does this hook file content hold any phoenix handler for `agent`?
pub fn has_agent_entries(text: &str, agent: &str) -> bool {
    let Ok(Value::Object(root)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    handlers(&root).any(|h| is_phoenix_handler(h, agent))
}

pub use crate::text::sh_quote;

/// Everything the generated commands depend on.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// Absolute path of the phoenix binary.
    pub exe: &'a Path,
    /// Absolute path of phoenix.toml.
    pub config: &'a Path,
    pub agent: &'a str,
    pub cli: Cli,
    pub guard: bool,
    /// The installed version of the CLI the hooks are made for (`None`: not known; they are
    /// then made for the oldest version phoenix was proven with).
    pub version: Option<crate::agent_cli::Version>,
}

impl<'a> Target<'a> {
    /// The hooks of `agent`, for the `version` of its CLI that is installed.
    pub fn new(
        exe: &'a Path,
        config: &'a Path,
        agent: &'a AgentSpec,
        version: Option<crate::agent_cli::Version>,
    ) -> Target<'a> {
        Target {
            exe,
            config,
            agent: &agent.name,
            cli: agent.cli,
            guard: agent.guard_structured_files,
            version,
        }
    }

    /// The words of `phoenix --config … hook <hook> --agent NAME --cli CLI`.
    fn words(&self, hook: &str) -> Vec<String> {
        let exe = self.exe.to_string_lossy();
        let config = self.config.to_string_lossy();
        let cli = self.cli.as_str();
        [
            &exe, "--config", &config, "hook", hook, "--agent", self.agent, "--cli", cli,
        ]
        .map(str::to_string)
        .to_vec()
    }

    /// `phoenix --config … hook <hook> --agent NAME --cli CLI`, every word quoted.
    pub fn command(&self, hook: &str) -> String {
        let quoted: Vec<String> = self.words(hook).iter().map(|w| sh_quote(w)).collect();
        quoted.join(" ")
    }

    /// The `notify` line for a CLI's config (`AgentCli::notify_config`; its payload arrives as
    /// the last argument).
    pub fn notify_command(&self) -> Vec<String> {
        self.words("turn-complete")
    }

    /// phoenix's part of the hook file: `{"hooks": {Event: [group, …]}}`, or `None` for a CLI
    /// without hook files.
    pub fn desired(&self) -> Option<Value> {
        let list = crate::agent_cli::hooks_for(self.cli, self.version);
        if list.is_empty() {
            return None;
        }
        let mut hooks = Map::new();
        for crate::agent_cli::version::Fitted { entry, matcher } in list {
            let mut handler = Map::new();
            // A CLI that identifies handlers by name (Gemini) gets one.
            if !entry.name.is_empty() {
                handler.insert("name".into(), entry.name.into());
            }
            handler.insert("type".into(), "command".into());
            handler.insert("command".into(), self.command(entry.hook).into());
            handler.insert("timeout".into(), entry.timeout.into());
            let mut group = Map::new();
            if let Some(m) = matcher {
                group.insert("matcher".into(), m.into());
            }
            group.insert("hooks".into(), Value::Array(vec![Value::Object(handler)]));
            hooks
                .entry(entry.event)
                .or_insert_with(|| Value::Array(vec![]))
                .as_array_mut()
                .expect("built as an array")
                .push(Value::Object(group));
        }
        let mut part = json!({ "hooks": hooks });
        let adapter = self.cli.adapter();
        // A CLI that reads MCP servers from its hook file (Gemini CLI) gets phoenix's there.
        if adapter.mcp_file().is_some() && adapter.mcp_file() == adapter.hook_file() {
            part["mcpServers"] = json!({ MCP_SERVER: self.mcp_entry() });
        }
        // One with a file of its own (`desired_for`) asks before it starts a server it was
        // not told to trust (Claude Code): phoenix's is listed.
        if let Some(key) = adapter.mcp_enable_key() {
            part[key] = json!([MCP_SERVER]);
        }
        Some(part)
    }

    /// phoenix's part of the file at `path`: the hook file's ([`Self::desired`]), or the MCP
    /// server entry of a CLI that keeps its servers in a file of their own.
    pub fn desired_for(&self, path: &Path) -> Option<Value> {
        if own_mcp_file(self.cli).is_some_and(|f| path.ends_with(f)) {
            return Some(json!({ "mcpServers": { MCP_SERVER: self.mcp_entry() } }));
        }
        self.desired()
    }

    fn mcp_entry(&self) -> Value {
        // `phoenix-hook` has no `mcp`: the phoenix it belongs to.
        mcp_server_entry(&crate::process::main_binary_beside(self.exe), self.config)
    }
}

/// phoenix's part of a TOML MCP config (`desired_for` of Codex's `.codex/config.toml`) as
/// the TOML it is merged in as.
pub fn mcp_toml_text(desired: &Value) -> String {
    super::mcp_toml::merge(None, Some(desired))
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The program hook files call: `phoenix-hook` next to `exe` when it is there (it starts
/// faster: no Lua, no HTTP client, no command-line parser), else `exe` itself. Both take the
/// same `--config … hook <event> --agent …` arguments.
pub fn hook_binary(exe: &Path) -> std::path::PathBuf {
    crate::process::companion(exe, "-hook")
}

enum Stripped {
    Kept(Value),
    Removed,
}

fn strip_group(group: Value, agent: &str) -> Stripped {
    let Value::Object(mut obj) = group else {
        return Stripped::Kept(group);
    };
    let Some(Value::Array(handlers)) = obj.get_mut("hooks") else {
        return Stripped::Kept(Value::Object(obj));
    };
    let before = handlers.len();
    handlers.retain(|h| !is_phoenix_handler(h, agent));
    if handlers.is_empty() && before > 0 {
        Stripped::Removed
    } else {
        Stripped::Kept(Value::Object(obj))
    }
}

/// Merge phoenix's entries for `agent` (`desired`, or none to remove them) into a hook file's
/// content. phoenix's groups take the place of the ones they replace, so a second merge is a
/// no-op and entries the user moved stay where they are. Returns `None` when nothing is left
/// (the file can go).
pub fn merge(
    existing: Option<&str>,
    agent: &str,
    desired: Option<&Value>,
) -> Result<Option<Value>, String> {
    let mut root = match existing {
        Some(text) if !text.trim().is_empty() => {
            serde_json::from_str::<Value>(text).map_err(|e| {
                format!("is not valid JSON ({e}); fix it and phoenix will merge into it")
            })?
        }
        _ => Value::Object(Map::new()),
    };
    let Value::Object(obj) = &mut root else {
        return Err("is not a JSON object".into());
    };

    // Where phoenix's groups were, per event, so that replacements land in the same place.
    let mut slots: HashMap<String, usize> = HashMap::new();
    let mut stripped_all = false;
    if let Some(hooks) = obj.get_mut("hooks") {
        let Value::Object(hooks) = hooks else {
            return Err("has a `hooks` key that is not an object".into());
        };
        for (event, groups) in hooks.iter_mut() {
            let Value::Array(groups) = groups else {
                continue;
            };
            let mut kept = Vec::with_capacity(groups.len());
            for group in groups.drain(..) {
                match strip_group(group, agent) {
                    Stripped::Kept(g) => kept.push(g),
                    Stripped::Removed => {
                        slots.entry(event.clone()).or_insert(kept.len());
                    }
                }
            }
            *groups = kept;
        }
        hooks.retain(|event, groups| {
            !(slots.contains_key(event) && groups.as_array().is_some_and(Vec::is_empty))
        });
        stripped_all = hooks.is_empty() && !slots.is_empty();
    }

    let wanted = desired
        .and_then(|d| d.get("hooks"))
        .and_then(Value::as_object);
    match wanted {
        Some(wanted) if !wanted.is_empty() => {
            let hooks = obj
                .entry("hooks")
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("checked above");
            for (event, groups) in wanted {
                let slot = hooks
                    .entry(event.clone())
                    .or_insert_with(|| Value::Array(vec![]));
                let Value::Array(list) = slot else {
                    return Err(format!("has `hooks.{event}` that is not an array"));
                };
                let at = slots
                    .get(event)
                    .copied()
                    .unwrap_or(list.len())
                    .min(list.len());
                for (k, group) in groups.as_array().into_iter().flatten().enumerate() {
                    list.insert(at + k, group.clone());
                }
            }
        }
        _ if stripped_all => {
            obj.remove("hooks");
        }
        _ => {}
    }
    // The MCP server entry serves every agent of the workdir: it goes with the last one.
    let shared = desired.is_some() || !any_phoenix_handler(obj);
    if shared {
        merge_mcp_server(obj, desired)?;
        merge_enabled_server(obj, desired)?;
    }
    Ok((!obj.is_empty()).then_some(root))
}

/// Every handler of a settings file's `hooks` (event → groups → `hooks`).
fn handlers(root: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    root.get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|h| h.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|g| g.get("hooks").and_then(Value::as_array))
        .flatten()
}

/// Does the file still hold a phoenix hook handler, of any agent?
fn any_phoenix_handler(obj: &Map<String, Value>) -> bool {
    handlers(obj)
        .filter_map(|h| h.get("command").and_then(Value::as_str))
        .filter_map(shlex::split)
        .any(|argv| {
            argv.first()
                .is_some_and(|p| p.rsplit('/').next().unwrap_or(p).starts_with("phoenix"))
                && argv.iter().any(|a| a == "hook")
        })
}

/// `mcpServers.phoenix`: phoenix's own entry, replaced in place or removed whole; the user's
/// servers stay, and an `mcpServers` left empty by the removal goes.
fn merge_mcp_server(obj: &mut Map<String, Value>, desired: Option<&Value>) -> Result<(), String> {
    let wanted = desired
        .and_then(|d| d.get("mcpServers"))
        .and_then(|s| s.get(MCP_SERVER));
    match (obj.get_mut("mcpServers"), wanted) {
        (Some(Value::Object(servers)), Some(entry)) => {
            servers.insert(MCP_SERVER.into(), entry.clone());
        }
        (Some(Value::Object(servers)), None) => {
            if servers.shift_remove(MCP_SERVER).is_some() && servers.is_empty() {
                obj.shift_remove("mcpServers");
            }
        }
        (Some(_), Some(_)) => return Err("has an `mcpServers` key that is not an object".into()),
        (Some(_), None) => {}
        (None, Some(entry)) => {
            obj.insert("mcpServers".into(), json!({ MCP_SERVER: entry }));
        }
        (None, None) => {}
    }
    Ok(())
}

/// `"phoenix"` in the list of project servers a CLI may start without asking (Claude Code's
/// `enabledMcpjsonServers`), beside the user's own names.
fn merge_enabled_server(
    obj: &mut Map<String, Value>,
    desired: Option<&Value>,
) -> Result<(), String> {
    const KEY: &str = "enabledMcpjsonServers";
    let wanted = desired
        .and_then(|d| d.get(KEY))
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|n| n == MCP_SERVER));
    match obj.get_mut(KEY) {
        Some(Value::Array(list)) => {
            let had = list.iter().any(|n| n == MCP_SERVER);
            if wanted && !had {
                list.push(MCP_SERVER.into());
            } else if !wanted && had {
                list.retain(|n| n != MCP_SERVER);
                if list.is_empty() {
                    obj.shift_remove(KEY);
                }
            }
        }
        Some(_) if wanted => return Err(format!("has a `{KEY}` key that is not a list")),
        Some(_) => {}
        None if wanted => {
            obj.insert(KEY.into(), json!([MCP_SERVER]));
        }
        None => {}
    }
    Ok(())
}

/// The text phoenix writes: pretty JSON with a final newline.
pub fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("json serialises");
    text.push('\n');
    text
}

/// What a hook file needs, judged from its current content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// Write the merged content (`create`: the file does not exist yet).
    Write { create: bool, diff: String },
    /// Nothing of the user's is left: delete the file.
    Delete { diff: String },
    /// The file cannot be merged into (not JSON, wrong shape).
    Unmergeable { problem: String },
}

/// Compare a hook file's content with what it should hold. Pure. `None`: nothing to do.
/// Formatting alone never counts as a change.
pub fn plan_file(
    label: &str,
    existing: Option<&str>,
    agent: &str,
    desired: Option<&Value>,
) -> Option<FileChange> {
    if is_toml(Path::new(label)) {
        return plan_toml(label, existing, desired);
    }
    let before = match existing {
        Some(text) if !text.trim().is_empty() => serde_json::from_str::<Value>(text).ok(),
        _ => None,
    };
    let after = match merge(existing, agent, desired) {
        Ok(after) => after,
        Err(problem) => return Some(FileChange::Unmergeable { problem }),
    };
    if before == after {
        return None;
    }
    let old = before.as_ref().map(pretty).unwrap_or_default();
    let new = after.as_ref().map(pretty).unwrap_or_default();
    Some(change_of(
        label,
        existing.is_none(),
        &old,
        after.is_some().then_some(&new),
    ))
}

/// A write of `new` (a delete when `None`) over `old`, with its diff.
fn change_of(label: &str, create: bool, old: &str, new: Option<&String>) -> FileChange {
    let diff = similar::TextDiff::from_lines(old, new.map_or("", |n| n.as_str()))
        .unified_diff()
        .context_radius(2)
        .header(label, label)
        .to_string();
    match new {
        Some(_) => FileChange::Write { create, diff },
        None => FileChange::Delete { diff },
    }
}

/// Is this a TOML config (Codex's `config.toml`)? phoenix's other files are JSON.
pub fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// [`plan_file`] of a TOML config: its text is edited in place, so the diff is of the text as
/// written; what counts as a change is the parsed content.
fn plan_toml(label: &str, existing: Option<&str>, desired: Option<&Value>) -> Option<FileChange> {
    let parsed = |t: &str| toml::from_str::<toml::Table>(t).ok();
    let before = existing.filter(|t| !t.trim().is_empty()).and_then(parsed);
    let after_text = match super::mcp_toml::merge(existing, desired) {
        Ok(text) => text,
        Err(problem) => return Some(FileChange::Unmergeable { problem }),
    };
    let after = after_text.as_deref().and_then(parsed);
    if before == after {
        return None;
    }
    let old = existing.unwrap_or_default();
    Some(change_of(
        label,
        existing.is_none(),
        old,
        after_text.as_ref(),
    ))
}

/// Merge phoenix's entries for `agent` into the file at `path` (or remove them when `desired`
/// is `None`) and write it atomically, keeping its mode; the result is read back and parsed,
/// and the previous content is restored if it does not match. The previous content is kept in
/// `backup_dir` (the agent's state dir) first. Follows a symlinked file to its target.
pub fn write_file(
    path: &Path,
    agent: &str,
    desired: Option<&Value>,
    backup_dir: Option<&Path>,
) -> Result<String, String> {
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path).unwrap_or(path.into()),
        _ => path.to_path_buf(),
    };
    // The agent can write its workdir: a FIFO or a huge file there is refused, not waited on.
    let existing = match bounded::read_string(&target, MAX_CONFIG_BYTES, Links::Follow) {
        Ok(text) => Some(text),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.to_string()),
    };
    let toml = is_toml(path);
    let merged = if toml {
        super::mcp_toml::merge(existing.as_deref(), desired)
    } else {
        merge(existing.as_deref(), agent, desired).map(|m| m.as_ref().map(pretty))
    }
    .map_err(|p| format!("`{}` {p}", target.display()))?;
    let parses = |t: &str| {
        if toml {
            toml::from_str::<toml::Table>(t).is_ok()
        } else {
            serde_json::from_str::<Value>(t).is_ok()
        }
    };
    if let (Some(dir), Some(old)) = (backup_dir, &existing) {
        let name = format!(
            "{}.last-good",
            target
                .to_string_lossy()
                .trim_start_matches('/')
                .replace('/', "%")
        );
        let backups = dir.join("hook-backups");
        crate::state::create_private_dir(&backups)
            .and_then(|_| crate::state::atomic_write(&backups.join(name), old.as_bytes()))
            .map_err(|e| format!("cannot back up `{}`: {e}", target.display()))?;
    }
    let Some(merged) = merged else {
        if existing.is_some() {
            fs::remove_file(&target)
                .map_err(|e| format!("cannot remove `{}`: {e}", target.display()))?;
            return Ok(format!("removed {} (nothing else in it)", target.display()));
        }
        return Ok(format!("{} needs nothing", target.display()));
    };
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
    }
    let mode = fs::metadata(&target)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let text = merged;
    crate::state::atomic_write_mode(&target, text.as_bytes(), mode)
        .map_err(|e| format!("cannot write `{}`: {e}", target.display()))?;
    let back = bounded::read_string(&target, MAX_CONFIG_BYTES, Links::Follow).unwrap_or_default();
    if back != text || !parses(&back) {
        let restored = match &existing {
            Some(old) => crate::state::atomic_write_mode(&target, old.as_bytes(), mode),
            None => fs::remove_file(&target),
        };
        return Err(format!(
            "`{}` did not read back as written; {}",
            target.display(),
            match restored {
                Ok(()) => "its previous content is back".to_string(),
                Err(e) => format!("restoring its previous content failed too: {e}"),
            }
        ));
    }
    Ok(format!("wrote {}", target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(cli: Cli) -> Target<'static> {
        Target {
            exe: Path::new("/opt/phoenix bin/phoenix"),
            config: Path::new("/srv/it's/phoenix.toml"),
            agent: "trades",
            cli,
            guard: false,
            version: None,
        }
    }

    #[test]
    fn cli_from_path() {
        assert_eq!(
            cli_of(Path::new("/w/.gemini/settings.json")),
            Some(Cli::Gemini)
        );
        assert_eq!(cli_of(Path::new("/w/.codex/hooks.json")), Some(Cli::Codex));
        assert_eq!(cli_of(Path::new("/w/settings.json")), None);
    }

    #[test]
    fn commands_are_quoted_and_split_back() {
        let cmd = target(Cli::Claude).command("heartbeat");
        assert_eq!(
            cmd,
            r"'/opt/phoenix bin/phoenix' --config '/srv/it'\''s/phoenix.toml' hook heartbeat --agent trades --cli claude"
        );
        let argv = shlex::split(&cmd).unwrap();
        assert_eq!(argv[0], "/opt/phoenix bin/phoenix");
        assert_eq!(argv[2], "/srv/it's/phoenix.toml");
        assert_eq!(sh_quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(sh_quote(""), "''");
    }

    /// The first group `cli` gets for `event` has `matcher` and a handler with `fields`.
    fn assert_first_group(cli: Cli, event: &str, matcher: &str, fields: Value) {
        let v = target(cli).desired().unwrap();
        let group = &v["hooks"][event][0];
        assert_eq!(group["matcher"], matcher, "{cli} {event}");
        for (key, want) in fields.as_object().unwrap() {
            assert_eq!(&group["hooks"][0][key], want, "{cli} {event} {key}");
        }
    }

    #[test]
    fn claude_config_matches_the_reference() {
        let fields = json!({"type": "command", "timeout": 10});
        assert_first_group(
            Cli::Claude,
            "SessionStart",
            "startup|resume|clear|compact|fork",
            fields,
        );
        assert_first_group(Cli::Claude, "PreCompact", "manual|auto", json!({}));
        assert_first_group(Cli::Claude, "PreToolUse", "*", json!({}));
        let v = target(Cli::Claude).desired().unwrap();
        assert!(
            v["hooks"]["PostToolUseFailure"][0]["hooks"][0]["command"]
                .as_str()
                .unwrap()
                .contains("hook tool-error --agent trades")
        );
    }

    #[test]
    fn gemini_timeouts_are_milliseconds_and_hooks_are_named() {
        let fields = json!({"name": "phoenix-heartbeat", "timeout": 5000});
        assert_first_group(Cli::Gemini, "AfterTool", ".*", fields);
        let v = target(Cli::Gemini).desired().unwrap();
        assert_eq!(v["hooks"]["PreCompress"][0]["hooks"][0]["timeout"], 30000);
        for (_, groups) in v["hooks"].as_object().unwrap() {
            for g in groups.as_array().unwrap() {
                let t = g["hooks"][0]["timeout"].as_u64().unwrap();
                assert!(t >= 1000, "gemini timeouts are in ms: {t}");
            }
        }
    }

    #[test]
    fn codex_handlers_use_only_known_keys_and_a_short_session_end() {
        let v = target(Cli::Codex).desired().unwrap();
        let known = [
            "type",
            "command",
            "commandWindows",
            "timeout",
            "async",
            "statusMessage",
        ];
        for (_, groups) in v["hooks"].as_object().unwrap() {
            for g in groups.as_array().unwrap() {
                for (k, _) in g["hooks"][0].as_object().unwrap() {
                    assert!(known.contains(&k.as_str()), "{k}");
                }
            }
        }
        assert!(
            v["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"]
                .as_u64()
                .unwrap()
                <= 3
        );
    }

    #[test]
    fn every_tool_call_is_announced_with_or_without_the_guard() {
        for guard in [false, true] {
            let mut t = target(Cli::Claude);
            t.guard = guard;
            let v = t.desired().unwrap();
            assert_eq!(v["hooks"]["PreToolUse"][0]["matcher"], "*");
        }
        let v = target(Cli::Gemini).desired().unwrap();
        assert_eq!(v["hooks"]["BeforeTool"][0]["matcher"], ".*");
        let v = target(Cli::Codex).desired().unwrap();
        assert!(v["hooks"]["PreToolUse"][0].get("matcher").is_none());
        assert_eq!(target(Cli::Custom).desired(), None);
    }

    const USER: &str = r#"{
  "model": "opus",
  "hooks": {
    "PostToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo user"}]}
    ]
  },
  "permissions": {"allow": ["Bash"]}
}"#;

    #[test]
    fn merge_keeps_user_settings_and_is_idempotent() {
        let desired = target(Cli::Claude).desired().unwrap();
        let once = merge(Some(USER), "trades", Some(&desired))
            .unwrap()
            .unwrap();
        assert_eq!(once["model"], "opus");
        assert_eq!(once["permissions"]["allow"][0], "Bash");
        let post = once["hooks"]["PostToolUse"].as_array().unwrap();
        assert_eq!(post.len(), 2);
        assert_eq!(post[0]["hooks"][0]["command"], "echo user");
        let keys: Vec<&String> = once.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["model", "hooks", "permissions", "enabledMcpjsonServers"],
            "order is kept"
        );

        let text = pretty(&once);
        let twice = merge(Some(&text), "trades", Some(&desired))
            .unwrap()
            .unwrap();
        assert_eq!(pretty(&twice), text);
        assert_eq!(plan_file("f", Some(&text), "trades", Some(&desired)), None);
    }

    #[test]
    fn a_changed_command_replaces_phoenix_entries_in_place() {
        let desired = target(Cli::Claude).desired().unwrap();
        let mut installed = merge(Some(USER), "trades", Some(&desired))
            .unwrap()
            .unwrap();
        // The user puts their own group after phoenix's.
        installed["hooks"]["PostToolUse"]
            .as_array_mut()
            .unwrap()
            .push(json!({"hooks": [{"type": "command", "command": "echo later"}]}));
        let mut moved = target(Cli::Claude);
        moved.exe = Path::new("/usr/local/bin/phoenix");
        let next = merge(
            Some(&pretty(&installed)),
            "trades",
            moved.desired().as_ref(),
        )
        .unwrap()
        .unwrap();
        let post = next["hooks"]["PostToolUse"].as_array().unwrap();
        assert_eq!(post.len(), 3);
        assert!(
            post[1]["hooks"][0]["command"]
                .as_str()
                .unwrap()
                .starts_with("/usr/local/bin/phoenix ")
        );
        assert_eq!(post[2]["hooks"][0]["command"], "echo later");
    }

    #[test]
    fn removing_leaves_only_the_user_entries() {
        let desired = target(Cli::Claude).desired().unwrap();
        let installed = pretty(
            &merge(Some(USER), "trades", Some(&desired))
                .unwrap()
                .unwrap(),
        );
        let removed = merge(Some(&installed), "trades", None).unwrap().unwrap();
        let user: Value = serde_json::from_str(USER).unwrap();
        assert_eq!(removed, user);
        // Another agent's entries are not phoenix's to remove for `trades`.
        let other = merge(Some(&installed), "other", None).unwrap().unwrap();
        assert_eq!(pretty(&other), installed);
    }

    #[test]
    fn a_file_phoenix_created_goes_away_on_removal() {
        let desired = target(Cli::Gemini).desired().unwrap();
        let created = pretty(&merge(None, "trades", Some(&desired)).unwrap().unwrap());
        assert_eq!(merge(Some(&created), "trades", None).unwrap(), None);
        assert!(matches!(
            plan_file("f", Some(&created), "trades", None),
            Some(FileChange::Delete { .. })
        ));
    }

    #[test]
    fn mixed_groups_lose_only_phoenix_handlers() {
        let cmd = target(Cli::Claude).command("heartbeat");
        let text = json!({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": "echo mine"},
            {"type": "command", "command": cmd}
        ]}]}})
        .to_string();
        let out = merge(Some(&text), "trades", None).unwrap().unwrap();
        assert_eq!(
            out["hooks"]["PostToolUse"][0]["hooks"],
            json!([{"type": "command", "command": "echo mine"}])
        );
    }

    #[test]
    fn unmergeable_files_are_reported_not_overwritten() {
        let desired = target(Cli::Claude).desired().unwrap();
        for text in [
            "{not json",
            "[1]",
            r#"{"hooks": []}"#,
            r#"{"hooks": {"Stop": 1}}"#,
        ] {
            assert!(
                matches!(
                    plan_file("f", Some(text), "trades", Some(&desired)),
                    Some(FileChange::Unmergeable { .. })
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn plan_shows_a_diff_and_formatting_is_not_a_change() {
        let desired = target(Cli::Claude).desired().unwrap();
        let Some(FileChange::Write { create, diff }) = plan_file(
            ".claude/settings.json",
            Some(USER),
            "trades",
            Some(&desired),
        ) else {
            panic!("expected a write");
        };
        assert!(!create);
        assert!(diff.contains("+++ .claude/settings.json"), "{diff}");
        assert!(
            diff.contains("+        \"matcher\": \"startup|resume|clear|compact|fork\""),
            "{diff}"
        );
        let compact =
            serde_json::to_string(&merge(Some(USER), "trades", Some(&desired)).unwrap()).unwrap();
        assert_eq!(
            plan_file("f", Some(&compact), "trades", Some(&desired)),
            None
        );
    }

    #[test]
    fn the_mcp_server_entry_is_merged_beside_the_users_and_removed_alone() {
        // Claude Code: the server in `.mcp.json`, enabled in its settings beside the user's.
        let t = target(Cli::Claude);
        let mcp_json = Path::new("/w/.mcp.json");
        assert_eq!(cli_of(mcp_json), Some(Cli::Claude));
        assert_eq!(label_of(mcp_json, Cli::Claude), ".mcp.json");
        let desired = t.desired_for(mcp_json).unwrap();
        let user = r#"{"mcpServers": {"db": {"command": "db-mcp"}}}"#;
        let merged = merge(Some(user), "trades", Some(&desired))
            .unwrap()
            .unwrap();
        assert_eq!(merged["mcpServers"]["db"]["command"], "db-mcp");
        let entry = &merged["mcpServers"]["phoenix"];
        assert_eq!(entry["command"], "/opt/phoenix bin/phoenix");
        assert_eq!(
            entry["args"],
            json!(["--config", "/srv/it's/phoenix.toml", "mcp"])
        );
        let text = pretty(&merged);
        assert_eq!(
            plan_file(".mcp.json", Some(&text), "trades", Some(&desired)),
            None
        );
        let removed = merge(Some(&text), "trades", None).unwrap().unwrap();
        assert_eq!(removed, serde_json::from_str::<Value>(user).unwrap());
        // A file that held only phoenix's entry goes.
        let alone = pretty(&merge(None, "trades", Some(&desired)).unwrap().unwrap());
        assert!(matches!(
            plan_file(".mcp.json", Some(&alone), "trades", None),
            Some(FileChange::Delete { .. })
        ));
        let settings = r#"{"enabledMcpjsonServers": ["db"]}"#;
        let merged = merge(Some(settings), "trades", t.desired().as_ref())
            .unwrap()
            .unwrap();
        assert_eq!(merged["enabledMcpjsonServers"], json!(["db", "phoenix"]));
        let removed = merge(Some(&pretty(&merged)), "trades", None)
            .unwrap()
            .unwrap();
        assert_eq!(removed["enabledMcpjsonServers"], json!(["db"]));
        // The hook binary's sibling runs the server: phoenix-hook has no `mcp`.
        let mut hooked = target(Cli::Claude);
        hooked.exe = Path::new("/opt/bin/phoenix-hook");
        assert_eq!(
            hooked.desired_for(mcp_json).unwrap()["mcpServers"]["phoenix"]["command"],
            "/opt/bin/phoenix"
        );

        // Gemini CLI: `mcpServers` in the same settings file as its hooks.
        let gemini = target(Cli::Gemini).desired().unwrap();
        assert!(gemini["mcpServers"]["phoenix"].is_object(), "{gemini}");
        // It has no file of its own for them.
        assert_eq!(mcp_path_in(Cli::Gemini, Path::new("/w")), None);
        let user = r#"{"mcpServers": {"db": {"command": "db-mcp"}}, "theme": "dark"}"#;
        let merged = merge(Some(user), "trades", Some(&gemini)).unwrap().unwrap();
        let removed = merge(Some(&pretty(&merged)), "trades", None)
            .unwrap()
            .unwrap();
        assert_eq!(removed, serde_json::from_str::<Value>(user).unwrap());
        assert!(
            merge(Some(r#"{"mcpServers": 3}"#), "trades", Some(&gemini))
                .unwrap_err()
                .contains("mcpServers")
        );
    }

    #[test]
    fn codexs_server_goes_into_its_project_config_toml_and_out_again() {
        let config = Path::new("/w/.codex/config.toml");
        assert_eq!(cli_of(config), Some(Cli::Codex));
        assert_eq!(label_of(config, Cli::Codex), ".codex/config.toml");
        assert_eq!(
            mcp_path_in(Cli::Codex, Path::new("/w")),
            Some(config.into())
        );
        let desired = target(Cli::Codex).desired_for(config).unwrap();
        let user = "model = \"o4-mini\" # mine\n\n[mcp_servers.db]\ncommand = \"db-mcp\"\n";
        let Some(FileChange::Write { create, diff }) =
            plan_file(".codex/config.toml", Some(user), "trades", Some(&desired))
        else {
            panic!("expected a write");
        };
        assert!(!create);
        assert!(diff.contains("+[mcp_servers.phoenix]"), "{diff}");
        assert!(
            diff.contains("+args = [\"--config\", \"/srv/it's/phoenix.toml\", \"mcp\"]"),
            "{diff}"
        );
        assert!(!diff.contains("-model"), "the user's lines stay: {diff}");

        // Written, then planned again: nothing to do.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".codex/config.toml");
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, user).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let backups = dir.path().join("state");
        write_file(&path, "trades", Some(&desired), Some(&backups)).unwrap();
        let written = fs::read_to_string(&path).unwrap();
        assert!(written.starts_with(user), "{written}");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            plan_file(
                ".codex/config.toml",
                Some(&written),
                "trades",
                Some(&desired)
            ),
            None
        );
        // Removed entry by entry: the user's server and settings stay, as written.
        assert!(matches!(
            plan_file(".codex/config.toml", Some(&written), "trades", None),
            Some(FileChange::Write { .. })
        ));
        write_file(&path, "trades", None, Some(&backups)).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), user);
        // A file phoenix created goes with its entry.
        fs::remove_file(&path).unwrap();
        write_file(&path, "trades", Some(&desired), None).unwrap();
        assert!(matches!(
            plan_file(
                ".codex/config.toml",
                Some(&fs::read_to_string(&path).unwrap()),
                "trades",
                None
            ),
            Some(FileChange::Delete { .. })
        ));
        write_file(&path, "trades", None, None).unwrap();
        assert!(!path.exists());

        // Not TOML: reported with the file's path, and left as it is.
        let broken = "model = \"o4-mini\"\n[mcp_servers\n";
        fs::write(&path, broken).unwrap();
        assert!(matches!(
            plan_file(".codex/config.toml", Some(broken), "trades", Some(&desired)),
            Some(FileChange::Unmergeable { .. })
        ));
        let e = write_file(&path, "trades", Some(&desired), None).unwrap_err();
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("is not valid TOML"), "{e}");
        assert_eq!(fs::read_to_string(&path).unwrap(), broken);
    }
}
