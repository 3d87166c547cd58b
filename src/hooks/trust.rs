//! Making Codex CLI and Gemini CLI trust what phoenix installed, before the wrapper starts them.
//!
//! Codex loads `<workdir>/.codex/hooks.json` only in a trusted project, and runs a hook from it
//! only once that hook is trusted: `[projects."<dir>"] trust_level = "trusted"` and
//! `[hooks.state."<hooks.json>:<event>:<group>:<handler>"] trusted_hash = "sha256:…"` in
//! `$CODEX_HOME/config.toml`. Gemini CLI runs project hooks only in a trusted folder
//! (`~/.gemini/trustedFolders.json`). Without these the interactive CLI stops at a dialog and
//! phoenix's hooks never run (`codex exec` even skips untrusted hooks without a word).
//!
//! phoenix trusts the agent's workdir and its own handlers for that agent, recognised by
//! command and hashed the way Codex does — never the user's hooks — and leaves alone a directory
//! the user marked untrusted. Planning is pure; `ensure` is the only function that touches disk.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::config::{self, is_phoenix_handler};
use crate::spec::{AgentSpec, Cli};
use crate::state::bounded::{self, Links};

/// What `ensure` changed: the file and one line per entry added or updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    pub file: PathBuf,
    pub entries: Vec<String>,
}

/// Record the trust the agent's CLI needs to run phoenix's hooks in its workdir. `Ok(None)`:
/// nothing to do (another CLI, no phoenix hooks installed, or already trusted). `Err`: why the
/// trust could not be recorded (the hooks will not run; the message says what to do).
///
/// Agents started together share the CLI's file: the read-change-write runs under an exclusive
/// lock on `lock` (a file in the fleet's state dir), so no agent's entries are lost.
pub fn ensure(agent: &AgentSpec, lock: &Path) -> Result<Option<Trusted>, String> {
    if !matches!(agent.cli, Cli::Codex | Cli::Gemini) {
        return Ok(None);
    }
    // 0600 and never through a link, as every file of the state dir.
    let file = crate::state::file::open_lock(lock)
        .map_err(|e| format!("cannot open `{}`: {e}", lock.display()))?;
    let _held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock `{}`: {e}", lock.display()))?;
    ensure_locked(agent)
}

fn ensure_locked(agent: &AgentSpec) -> Result<Option<Trusted>, String> {
    let lookup = |key: &str| {
        agent
            .env
            .get(key)
            .cloned()
            .or_else(|| std::env::var(key).ok())
            .filter(|v| !v.is_empty())
    };
    let Some(hooks_path) = config::path_in(agent.cli, &agent.workdir) else {
        return Ok(None);
    };
    let Ok(hooks_text) = bounded::read_string(&hooks_path, config::MAX_CONFIG_BYTES, Links::Follow)
    else {
        return Ok(None);
    };
    if !config::has_agent_entries(&hooks_text, &agent.name) {
        return Ok(None);
    }
    // The CLIs see the workdir through getcwd(): symlinks resolved.
    let workdir = fs::canonicalize(&agent.workdir).unwrap_or_else(|_| agent.workdir.clone());
    match agent.cli {
        Cli::Codex => {
            let home = lookup("CODEX_HOME")
                .map(PathBuf::from)
                .or_else(|| lookup("HOME").map(|h| Path::new(&h).join(".codex")))
                .ok_or("neither CODEX_HOME nor HOME is set: cannot find Codex's config.toml")?;
            let file = home.join("config.toml");
            let hooks_json = workdir.join(".codex/hooks.json");
            let hashes = codex_hook_trust(&hooks_json, &hooks_text, &agent.name);
            let existing = read_optional(&file)?;
            let planned =
                plan_codex_config(existing.as_deref(), &workdir.to_string_lossy(), &hashes)
                    .map_err(|e| format!("`{}`: {e}", file.display()))?;
            write_planned(&file, planned)
        }
        Cli::Gemini => {
            let file = lookup("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
                .map(PathBuf::from)
                .or_else(|| {
                    lookup("GEMINI_CLI_HOME")
                        .or_else(|| lookup("HOME"))
                        .map(|h| Path::new(&h).join(".gemini/trustedFolders.json"))
                })
                .ok_or(
                    "neither GEMINI_CLI_HOME nor HOME is set: cannot find trustedFolders.json",
                )?;
            let existing = read_optional(&file)?;
            let planned = plan_gemini_folders(existing.as_deref(), &workdir)
                .map_err(|e| format!("`{}`: {e}", file.display()))?;
            write_planned(&file, planned)
        }
        Cli::Claude | Cli::Custom => Ok(None),
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, String> {
    match bounded::read_string(path, config::MAX_CONFIG_BYTES, Links::Follow) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The file's new text and what changed in it, or `None`.
type Planned = Option<(String, Vec<String>)>;

fn write_planned(file: &Path, planned: Planned) -> Result<Option<Trusted>, String> {
    let Some((text, entries)) = planned else {
        return Ok(None);
    };
    if let Some(parent) = file.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
    }
    let mode = fs::metadata(file)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    crate::state::atomic_write_mode(file, text.as_bytes(), mode)
        .map_err(|e| format!("cannot write `{}`: {e}", file.display()))?;
    Ok(Some(Trusted {
        file: file.to_path_buf(),
        entries,
    }))
}

/// Codex's name for an event in trust keys: `SessionStart` → `session_start`.
fn codex_event_label(event: &str) -> String {
    let mut label = String::new();
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                label.push('_');
            }
            label.push(c.to_ascii_lowercase());
        } else {
            label.push(c);
        }
    }
    label
}

/// The trust key and hash of every phoenix handler for `agent` in a Codex hooks file, by its
/// position in the file (Codex keys trust by `<file>:<event>:<group>:<handler>`).
pub fn codex_hook_trust(hooks_json: &Path, text: &str, agent: &str) -> Vec<(String, String)> {
    let Ok(root) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let events = root.get("hooks").and_then(Value::as_object);
    for (event, groups) in events.into_iter().flatten() {
        let label = codex_event_label(event);
        for (g, group) in groups.as_array().into_iter().flatten().enumerate() {
            let handlers = group.get("hooks").and_then(Value::as_array);
            for (h, handler) in handlers.into_iter().flatten().enumerate() {
                if !is_phoenix_handler(handler, agent) {
                    continue;
                }
                let matcher = group.get("matcher").and_then(Value::as_str);
                if let Some(hash) = codex_hook_hash(&label, matcher, handler) {
                    out.push((format!("{}:{label}:{g}:{h}", hooks_json.display()), hash));
                }
            }
        }
    }
    out
}

/// Codex's trust hash of one command handler: SHA-256 over the compact JSON, keys sorted, of
/// the normalised `{event_name, matcher?, hooks: [handler]}` — the timeout filled in (600 s;
/// SessionEnd 1 s, at most 3), `async` always present, no matcher for the events that ignore
/// it, and absent fields left out.
pub fn codex_hook_hash(label: &str, matcher: Option<&str>, handler: &Value) -> Option<String> {
    if handler.get("type").and_then(Value::as_str) != Some("command") {
        return None;
    }
    let command = handler.get("command")?.as_str()?;
    let timeout = handler.get("timeout").and_then(Value::as_u64);
    let timeout = if label == "session_end" {
        timeout.unwrap_or(1).clamp(1, 3)
    } else {
        timeout.unwrap_or(600).max(1)
    };
    let mut normalized = BTreeMap::new();
    normalized.insert("type", json!("command"));
    normalized.insert("command", json!(command));
    normalized.insert("timeout", json!(timeout));
    let is_async = handler.get("async").and_then(Value::as_bool);
    normalized.insert("async", json!(is_async.unwrap_or(false)));
    if let Some(status) = handler.get("statusMessage").and_then(Value::as_str) {
        normalized.insert("statusMessage", json!(status));
    }
    let mut identity = BTreeMap::new();
    identity.insert("event_name", json!(label));
    identity.insert("hooks", json!([normalized]));
    if let Some(m) = matcher.filter(|_| !matches!(label, "user_prompt_submit" | "stop")) {
        identity.insert("matcher", json!(m));
    }
    let bytes = serde_json::to_vec(&identity).expect("json serialises");
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("sha256:{hex}"))
}

/// What Codex's config.toml needs so that `project` and the handlers in `hooks` are trusted.
/// Pure. The text is edited, not rewritten: the user's formatting and comments stay, and the
/// result is parsed back and must equal the old config plus exactly these values.
pub fn plan_codex_config(
    existing: Option<&str>,
    project: &str,
    hooks: &[(String, String)],
) -> Result<Planned, String> {
    let text = existing.unwrap_or("");
    let before: toml::Table =
        toml::from_str(text).map_err(|e| format!("is not valid TOML ({})", first_line(&e)))?;
    let table_at = |path: &[&str]| -> Option<&toml::Table> {
        let mut t = &before;
        for key in path {
            t = t.get(*key)?.as_table()?;
        }
        Some(t)
    };
    let mut edits: Vec<(Vec<String>, &str, String)> = Vec::new();
    match table_at(&["projects", project]).and_then(|t| t.get("trust_level")) {
        Some(toml::Value::String(level)) if level == "trusted" => {}
        Some(other) => {
            return Err(format!(
                "marks `{project}` as {other}; phoenix leaves that to you, so Codex will not run \
                 its hooks there until you trust the project"
            ));
        }
        None => edits.push((
            vec!["projects".into(), project.into()],
            "trust_level",
            "trusted".into(),
        )),
    }
    for (key, hash) in hooks {
        let state = table_at(&["hooks", "state", key]);
        if state
            .and_then(|s| s.get("enabled"))
            .and_then(toml::Value::as_bool)
            == Some(false)
        {
            continue;
        }
        if state
            .and_then(|s| s.get("trusted_hash"))
            .and_then(toml::Value::as_str)
            != Some(hash.as_str())
        {
            edits.push((
                vec!["hooks".into(), "state".into(), key.clone()],
                "trusted_hash",
                hash.clone(),
            ));
        }
    }
    if edits.is_empty() {
        return Ok(None);
    }

    let mut after_text = text.to_string();
    let mut expected = before.clone();
    let mut changed = Vec::new();
    for (path, key, value) in &edits {
        after_text = set_in_table(&after_text, path, key, value);
        let mut t = &mut expected;
        for p in path {
            t = t
                .entry(p.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .expect("checked to be a table or missing");
        }
        t.insert((*key).to_string(), toml::Value::String(value.clone()));
        changed.push(format!("[{}] {key} = \"{value}\"", header(path)));
    }
    let after: Result<toml::Table, _> = toml::from_str(&after_text);
    if after.as_ref().ok() != Some(&expected) {
        return Err(format!(
            "phoenix cannot add its trust entries without rewriting the file; add them yourself:\n{}",
            edits
                .iter()
                .map(|(path, key, value)| format!("[{}]\n{key} = \"{value}\"", header(path)))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(Some((after_text, changed)))
}

/// `projects."/w"`: a table header's key path, each part quoted when it has to be.
fn header(path: &[String]) -> String {
    path.iter()
        .map(|p| {
            let bare = !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if bare {
                p.clone()
            } else {
                toml::Value::String(p.clone()).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The key path of a `[table]` header line, understood by the TOML parser itself.
fn header_path(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    if !line.starts_with('[') || line.starts_with("[[") {
        return None;
    }
    let table: toml::Table = toml::from_str(line).ok()?;
    let mut path = Vec::new();
    let mut t = &table;
    loop {
        let mut entries = t.iter();
        let Some((k, v)) = entries.next() else {
            return Some(path);
        };
        if entries.next().is_some() {
            return None;
        }
        path.push(k.clone());
        t = v.as_table()?;
    }
}

/// Set `key = "value"` in the table `[path]`: replace the key's line or add it under the
/// header, or append the table at the end.
fn set_in_table(text: &str, path: &[String], key: &str, value: &str) -> String {
    let assignment = format!("{key} = {}", toml::Value::String(value.to_string()));
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if let Some(at) = lines
        .iter()
        .position(|l| header_path(l).as_deref() == Some(path))
    {
        let end = lines[at + 1..]
            .iter()
            .position(|l| l.trim_start().starts_with('['))
            .map_or(lines.len(), |i| at + 1 + i);
        let existing = lines[at + 1..end].iter().position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        });
        match existing {
            Some(i) => lines[at + 1 + i] = assignment,
            None => lines.insert(at + 1, assignment),
        }
        let mut out = lines.join("\n");
        out.push('\n');
        return out;
    }
    let mut out = text.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!("[{}]\n{assignment}\n", header(path)));
    out
}

/// What Gemini's trustedFolders.json needs so that `workdir` is trusted. Pure. The longest rule
/// containing the folder decides, as in Gemini CLI (`TRUST_PARENT` covers the rule's parent).
pub fn plan_gemini_folders(existing: Option<&str>, workdir: &Path) -> Result<Planned, String> {
    let mut rules: Map<String, Value> = match existing {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text).map_err(|e| {
            format!("is not a JSON object ({e}); fix it and phoenix will add to it")
        })?,
        _ => Map::new(),
    };
    let canonical = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut decided: Option<(usize, &str)> = None;
    for (rule, level) in &rules {
        let level = level.as_str().unwrap_or("");
        let covered = match level {
            "TRUST_PARENT" => Path::new(rule).parent().map(Path::to_path_buf),
            _ => Some(PathBuf::from(rule)),
        };
        if covered.is_some_and(|c| workdir.starts_with(canonical(&c)))
            && decided.is_none_or(|(len, _)| rule.len() > len)
        {
            decided = Some((rule.len(), level));
        }
    }
    match decided {
        Some((_, "TRUST_FOLDER" | "TRUST_PARENT")) => Ok(None),
        Some((_, "DO_NOT_TRUST")) => Err(format!(
            "marks `{}` as DO_NOT_TRUST; phoenix leaves that to you, so Gemini CLI will not run \
             its hooks there until you trust the folder",
            workdir.display()
        )),
        _ => {
            let key = workdir.to_string_lossy().into_owned();
            rules.insert(key.clone(), json!("TRUST_FOLDER"));
            let text = serde_json::to_string_pretty(&Value::Object(rules)).expect("json");
            Ok(Some((text, vec![format!("\"{key}\": \"TRUST_FOLDER\"")])))
        }
    }
}

fn first_line(e: &impl std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes Codex 0.169.0 itself wrote into config.toml when these hooks were trusted in its
    /// TUI ("Trust all and continue").
    #[test]
    fn codex_hashes_match_what_codex_wrote() {
        let cmd = "cat >> /tmp/scratch8/cx/hooks.log; echo >> /tmp/scratch8/cx/hooks.log";
        let text = json!({"hooks": {
            "SessionStart": [{"matcher": "startup|resume|clear|compact",
                              "hooks": [{"type": "command", "command": cmd, "timeout": 10}]}],
            "PostToolUse": [{"hooks": [{"type": "command", "command": cmd, "timeout": 5}]}],
            "Stop": [{"hooks": [{"type": "command", "command": cmd, "timeout": 5}]}],
        }});
        let hash = |event: &str, label: &str| {
            let group = &text["hooks"][event][0];
            codex_hook_hash(label, group["matcher"].as_str(), &group["hooks"][0]).unwrap()
        };
        assert_eq!(
            hash("SessionStart", "session_start"),
            "sha256:1d1b99faf2011a0316cf7942ca4704684ce437b7f7a63c610950c1afd6a2472f"
        );
        assert_eq!(
            hash("PostToolUse", "post_tool_use"),
            "sha256:85af98222ae2b23d0a35961caba890beb3abbfc16c9dd4561fb3a994fae0fc43"
        );
        assert_eq!(
            hash("Stop", "stop"),
            "sha256:be97dbacc7bc3544f187e11e7d68cb3375332ca3097232486e3e75f5d6bc5bf8"
        );
    }

    fn phoenix_hooks(agent: &str) -> String {
        let target = config::Target {
            exe: Path::new("/opt/phoenix"),
            config: Path::new("/srv/phoenix.toml"),
            agent,
            cli: Cli::Codex,
            guard: false,
        };
        config::pretty(&target.desired().unwrap())
    }

    #[test]
    fn only_phoenix_handlers_of_the_agent_are_trusted_at_their_positions() {
        let mut hooks: Value = serde_json::from_str(&phoenix_hooks("a")).unwrap();
        // The user's own group comes first in PostToolUse; another agent's hooks are there too.
        hooks["hooks"]["PostToolUse"]
            .as_array_mut()
            .unwrap()
            .insert(
                0,
                json!({"hooks": [{"type": "command", "command": "echo mine"}]}),
            );
        let other: Value = serde_json::from_str(&phoenix_hooks("b")).unwrap();
        hooks["hooks"]["Stop"]
            .as_array_mut()
            .unwrap()
            .push(other["hooks"]["Stop"][0].clone());
        let trust = codex_hook_trust(Path::new("/w/.codex/hooks.json"), &hooks.to_string(), "a");
        let keys: Vec<&str> = trust.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            keys.contains(&"/w/.codex/hooks.json:post_tool_use:1:0"),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"/w/.codex/hooks.json:session_start:0:0"),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"/w/.codex/hooks.json:session_end:0:0"),
            "{keys:?}"
        );
        assert!(!keys.contains(&"/w/.codex/hooks.json:post_tool_use:0:0"));
        assert!(!keys.contains(&"/w/.codex/hooks.json:stop:1:0"));
        assert_eq!(trust.len(), 7, "one per phoenix hook: {keys:?}");
    }

    const USER_CONFIG: &str = "# my settings\nmodel = \"o3\" # the best\n\n[projects.\"/other\"]\ntrust_level = \"untrusted\"\n";

    #[test]
    fn codex_config_gains_only_the_missing_trust_and_keeps_the_rest() {
        let hooks = vec![(
            "/w/.codex/hooks.json:stop:0:0".to_string(),
            "sha256:ab".to_string(),
        )];
        let (text, changed) = plan_codex_config(Some(USER_CONFIG), "/w", &hooks)
            .unwrap()
            .unwrap();
        assert!(text.starts_with(USER_CONFIG), "{text}");
        assert!(
            text.contains("[projects.\"/w\"]\ntrust_level = \"trusted\"\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "[hooks.state.\"/w/.codex/hooks.json:stop:0:0\"]\ntrusted_hash = \"sha256:ab\"\n"
            ),
            "{text}"
        );
        assert_eq!(changed.len(), 2);
        // Done once, nothing to do the second time.
        assert_eq!(plan_codex_config(Some(&text), "/w", &hooks).unwrap(), None);
        // A changed command (new hash) replaces the old hash in place.
        let newer = vec![(
            "/w/.codex/hooks.json:stop:0:0".to_string(),
            "sha256:cd".to_string(),
        )];
        let (updated, _) = plan_codex_config(Some(&text), "/w", &newer)
            .unwrap()
            .unwrap();
        assert!(
            updated.contains("trusted_hash = \"sha256:cd\""),
            "{updated}"
        );
        assert!(!updated.contains("sha256:ab"), "{updated}");
        assert_eq!(updated.matches("[hooks.state.").count(), 1, "{updated}");
        // No config yet: one is written.
        let (fresh, _) = plan_codex_config(None, "/w", &hooks).unwrap().unwrap();
        assert!(fresh.starts_with("[projects.\"/w\"]"), "{fresh}");
    }

    #[test]
    fn codex_keys_in_existing_tables_are_added_under_their_header() {
        let text = "[projects.'/w']\nnote = \"x\"\n\n[tui]\nalt = true\n";
        let (out, _) = plan_codex_config(Some(text), "/w", &[]).unwrap().unwrap();
        assert_eq!(
            out,
            "[projects.'/w']\ntrust_level = \"trusted\"\nnote = \"x\"\n\n[tui]\nalt = true\n"
        );
    }

    #[test]
    fn codex_untrusted_projects_disabled_hooks_and_odd_files_are_left_alone() {
        let untrusted = "[projects.\"/w\"]\ntrust_level = \"untrusted\"\n";
        let e = plan_codex_config(Some(untrusted), "/w", &[]).unwrap_err();
        assert!(e.contains("untrusted"), "{e}");
        let disabled =
            "[projects.\"/w\"]\ntrust_level = \"trusted\"\n[hooks.state.\"k\"]\nenabled = false\n";
        let hooks = vec![("k".to_string(), "sha256:ab".to_string())];
        assert_eq!(
            plan_codex_config(Some(disabled), "/w", &hooks).unwrap(),
            None
        );
        assert!(plan_codex_config(Some("model = "), "/w", &[]).is_err());
        // Defined inline: phoenix cannot add to it by appending a table, and says what to add.
        let inline = "projects = { \"/x\" = { trust_level = \"trusted\" } }\n";
        let e = plan_codex_config(Some(inline), "/w", &[]).unwrap_err();
        assert!(
            e.contains("[projects.\"/w\"]\ntrust_level = \"trusted\""),
            "{e}"
        );
    }

    #[test]
    fn agents_starting_together_all_keep_their_trust() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let home = root.join("codex-home");
        let mut toml_text = String::new();
        for i in 0..6 {
            let work = root.join(format!("w{i}"));
            fs::create_dir_all(work.join(".codex")).unwrap();
            toml_text.push_str(&format!(
                "[[agent]]\nname = \"a{i}\"\ncli = \"codex\"\nworkdir = \"{}\"\nenv = {{ CODEX_HOME = \"{}\" }}\n",
                work.display(),
                home.display()
            ));
        }
        let spec = crate::spec::parse(
            &toml_text,
            &root.join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        for agent in &spec.agents {
            let target = config::Target::new(Path::new("/opt/phoenix"), &spec.file, agent);
            let hooks = config::pretty(&target.desired().unwrap());
            fs::write(agent.workdir.join(".codex/hooks.json"), hooks).unwrap();
        }
        let lock = root.join(".hooks-trust.lock");
        std::thread::scope(|s| {
            for agent in &spec.agents {
                let lock = &lock;
                s.spawn(move || ensure(agent, lock).unwrap().unwrap());
            }
        });
        let config: toml::Table =
            toml::from_str(&fs::read_to_string(home.join("config.toml")).unwrap()).unwrap();
        assert_eq!(config["projects"].as_table().unwrap().len(), 6);
        assert_eq!(config["hooks"]["state"].as_table().unwrap().len(), 42);
        // Trusted already: nothing to do.
        assert_eq!(ensure(&spec.agents[0], &lock).unwrap(), None);
    }

    #[test]
    fn gemini_folder_trust_follows_the_longest_rule() {
        let w = Path::new("/nonexistent-phoenix/w");
        let (text, _) = plan_gemini_folders(None, w).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["/nonexistent-phoenix/w"], "TRUST_FOLDER");
        let trusted_parent = r#"{"/nonexistent-phoenix/w/x": "TRUST_PARENT"}"#;
        assert_eq!(plan_gemini_folders(Some(trusted_parent), w).unwrap(), None);
        let above = r#"{"/nonexistent-phoenix": "TRUST_FOLDER"}"#;
        assert_eq!(plan_gemini_folders(Some(above), w).unwrap(), None);
        let denied =
            r#"{"/nonexistent-phoenix": "TRUST_FOLDER", "/nonexistent-phoenix/w": "DO_NOT_TRUST"}"#;
        assert!(plan_gemini_folders(Some(denied), w).is_err());
        let other = r#"{"/elsewhere": "TRUST_FOLDER"}"#;
        let (text, _) = plan_gemini_folders(Some(other), w).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["/elsewhere"], "TRUST_FOLDER");
        assert_eq!(v["/nonexistent-phoenix/w"], "TRUST_FOLDER");
        assert!(plan_gemini_folders(Some("[1"), w).is_err());
    }
}
