//! Codex CLI (openai/codex): hooks in `<workdir>/.codex/hooks.json` (on by default since 0.124,
//! timeouts in seconds), trusted per project and per hook in `$CODEX_HOME/config.toml`,
//! resumed with `codex resume <id>`.
//!
//! Notes on its versions and quirks (see the reference `cli-hooks.md`):
//! - Its TUI hands its session to a shared background server (one per `CODEX_HOME`, in a
//!   session of its own) unless told `--no-daemon`: the turn would then go on after the process
//!   phoenix supervises was stopped or killed, and a resumed TUI would attach to the old turn
//!   still running. phoenix adds the flag unless the command has it or connects to a `--remote`
//!   server on purpose.
//! - It runs its SessionStart hook with the first prompt of a session, not at launch: a started
//!   Codex may show life only in its pane, and nobody waits for the hook before typing.
//! - It caps SessionEnd at 3 s and warns on every start if more is declared.
//! - It loads `<workdir>/.codex/hooks.json` only in a trusted project, and runs a hook from it
//!   only once that hook is trusted: `[projects."<dir>"] trust_level = "trusted"` and
//!   `[hooks.state."<hooks.json>:<event>:<group>:<handler>"] trusted_hash = "sha256:…"` in
//!   `$CODEX_HOME/config.toml`. Without these the TUI stops at a dialog and phoenix's hooks never
//!   run (`codex exec` even skips untrusted hooks without a word). phoenix trusts the agent's
//!   workdir and its own handlers for that agent, recognised by command and hashed the way Codex
//!   does — never the user's hooks — and leaves alone a directory the user marked untrusted.
//! - Its SessionStart output parser rejects unknown keys: only `hookSpecificOutput` is printed.
//! - It reads `[mcp_servers.NAME]` from the project's `<workdir>/.codex/config.toml` as well as
//!   from `$CODEX_HOME/config.toml`, the project's only in a trusted project (0.171: `codex mcp
//!   list` in an untrusted one lists none of them). phoenix's server goes into the project file,
//!   beside the user's servers; it starts MCP servers with a short list of variables (no
//!   `PHOENIX_AGENT`): `phoenix mcp` knows the agent from its wrapper.
//! - 0.169 fires no hook at all for a turn that failed on an API error (no Stop): it shows
//!   "Codex ran out of room in the model's context window…" and waits at its prompt. Its rollout
//!   ends the turn with a `task_complete` whose `error` says why (`failed_turn`).
//! - Its PostToolUse payload carries no failure signal: for a shell call `tool_response`
//!   is the command's output alone (0.169; some builds sent the model-facing text with `Process
//!   exited with code N`, which the payload parser reads). The rollout Codex has written by the
//!   time the hook runs has the exit code: an `item_completed` event for the call
//!   (`CommandExecution` with `exit_code`), or `exec_command_end` in older builds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::version::{Proven, Version};
use super::{
    AgentCli, HookEntry, Planned, SESSION_STARTS, ShellExit, TrustRequest, Trusted, TurnError,
    entry as e, first_line, is_phoenix_handler, read_optional, usage, write_planned,
};
use crate::state::bounded::{self, Links};

/// Codex CLI's hook events (0.169.0 and 0.171.0 alike: its hooks config, read from the
/// binary).
const CODEX_EVENTS: &[&str] = &[
    "PreModelRequest",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "SessionStart",
    "SessionEnd",
    "SubagentStart",
    "SubagentStop",
    "UserPromptSubmit",
    "Stop",
];

/// The versions phoenix was proven with, and what each knows.
pub const PROVEN: &[Proven] = &[
    Proven {
        version: Version(0, 169, 0),
        events: CODEX_EVENTS,
        matcher_values: &[],
        changes: "hooks need trust hashes in `config.toml`; SessionEnd capped at 3 s",
    },
    Proven {
        version: Version(0, 171, 0),
        events: CODEX_EVENTS,
        matcher_values: &[],
        changes: "no change in the hook events, payloads or `resume` phoenix uses",
    },
];

/// The project config phoenix's MCP server entry goes into (`[mcp_servers.phoenix]`).
pub const MCP_FILE: &str = ".codex/config.toml";

/// Codex CLI's adapter.
pub struct Codex;

impl AgentCli for Codex {
    fn model_flags(&self) -> &'static [&'static str] {
        &["--model", "-m"]
    }

    fn model_settings(&self) -> Option<&'static str> {
        Some("Codex's config (`model` in ~/.codex/config.toml, or in its profile)")
    }

    fn display_name(&self) -> &'static str {
        "Codex CLI"
    }

    fn proven(&self) -> &'static [Proven] {
        PROVEN
    }

    fn program_names(&self) -> &'static [&'static str] {
        &["codex", "codex.js"]
    }

    /// Codex's own sandbox (`sandbox_mode`, `-s`/`--sandbox`; `workspace-write` for a trusted
    /// project) runs each shell call in its bundled bwrap. Inside phoenix's it works only while
    /// the outer sandbox lets it create a user namespace (0.169 and 0.171: `Creating new
    /// namespace failed … (ENOSPC)` otherwise) and `CODEX_HOME` is writable (its
    /// `codex-linux-sandbox` alias lives there). So it is off (`--sandbox danger-full-access`:
    /// what its help calls "environments that are externally sandboxed"), unless the agent's
    /// command chooses Codex's sandbox itself.
    fn own_sandbox(&self, cmd: super::own_sandbox::Command<'_>) -> super::own_sandbox::OwnSandbox {
        own_sandbox_off(self, cmd.argv)
    }

    fn npm_package(&self) -> Option<&'static str> {
        Some("@openai/codex")
    }

    /// `codex-cli 0.171.0`.
    fn version_in(&self, output: &str) -> Option<Version> {
        let rest = output.trim_start().strip_prefix("codex-cli ")?;
        Version::find_in(rest)
    }

    /// Its turn-end hook carries the model's last message (`last_assistant_message`, or `last-assistant-message` of the legacy `notify`).
    fn markers_at_turn_end(&self) -> bool {
        true
    }

    fn base_argv(&self, mut argv: Vec<String>) -> Vec<String> {
        let codex = argv
            .first()
            .is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == "codex"));
        let chosen = argv
            .iter()
            .any(|a| a == "--no-daemon" || a == "--remote" || a.starts_with("--remote="));
        if codex && !chosen {
            argv.insert(1, "--no-daemon".to_string());
        }
        argv
    }

    fn resume_argv(&self, mut base: Vec<String>, id: &str) -> Option<Vec<String>> {
        base.splice(1..1, ["resume".to_string(), id.to_string()]);
        Some(base)
    }

    /// Codex CLI 0.169 and 0.171: `No saved session found with ID <id>. Run `codex resume`
    /// without an ID to choose from existing sessions.`
    fn resume_refusals(&self) -> &'static [&'static str] {
        &["no saved session found with id"]
    }

    fn hook_file(&self) -> Option<&'static str> {
        Some(".codex/hooks.json")
    }

    /// Project MCP servers are `[mcp_servers.NAME]` in `.codex/config.toml`, read (0.171) only
    /// in a trusted project: the wrapper trusts the workdir before each start (`trust`).
    fn mcp_file(&self) -> Option<&'static str> {
        Some(MCP_FILE)
    }

    /// Its hooks, and `.codex/config.toml` with phoenix's MCP server (`hooks::config`).
    fn own_files(&self) -> Vec<&'static str> {
        vec![".codex/hooks.json", MCP_FILE]
    }

    fn sandbox_home(
        &self,
        home: &std::path::Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
        let dir = env("CODEX_HOME")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| home.join(".codex"));
        (
            vec![dir.clone()],
            vec![dir.join("config.toml"), dir.join("hooks.json")],
        )
    }

    fn sandbox_project_settings(&self) -> &'static [&'static str] {
        &[".codex"]
    }

    fn approval_prompts(&self) -> &'static [super::ApprovalPrompt] {
        &[super::CODEX_APPROVAL]
    }

    /// Codex CLI's composer line begins `› `; its approval overlay replaces it, with the
    /// same glyph before the selected answer (`› 1. Yes, just this once`).
    fn input_prompts(&self) -> &'static [&'static str] {
        &["›"]
    }

    fn hook_entries(&self) -> Vec<HookEntry> {
        vec![
            e("SessionStart", SESSION_STARTS, "session-start", 10, ""),
            e("UserPromptSubmit", None, "prompt", 5, ""),
            e("PostToolUse", None, "heartbeat", 5, ""),
            e("PreCompact", Some("manual|auto"), "pre-compact", 30, ""),
            e("Stop", None, "stop", 5, ""),
            // Codex caps SessionEnd at 3 s and warns on every start if more is declared.
            e("SessionEnd", None, "session-end", 3, ""),
            e("PreToolUse", None, "pre-tool", 5, ""),
        ]
    }

    fn needs_trust(&self) -> bool {
        true
    }

    fn trust(&self, r: &TrustRequest<'_>) -> Result<Option<Trusted>, String> {
        let home = (r.lookup)("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| (r.lookup)("HOME").map(|h| Path::new(&h).join(".codex")))
            .ok_or("neither CODEX_HOME nor HOME is set: cannot find Codex's config.toml")?;
        let file = home.join("config.toml");
        let hooks_json = r
            .workdir
            .join(self.hook_file().expect("codex has a hook file"));
        let hashes = codex_hook_trust(&hooks_json, r.hooks_text, &r.agent.name);
        let existing = read_optional(&file)?;
        let planned = plan_codex_config(existing.as_deref(), &r.workdir.to_string_lossy(), &hashes)
            .map_err(|e| format!("`{}`: {e}", file.display()))?;
        write_planned(&file, planned)
    }

    fn trust_note(&self) -> Option<&'static str> {
        Some(
            "Before each start the wrapper has Codex trust this workdir and these hooks (and only\n\
             these): [projects] and [hooks.state] trust hashes in $CODEX_HOME/config.toml.",
        )
    }

    fn notify_config(&self) -> Option<&'static str> {
        Some(MCP_FILE)
    }

    fn claims_payload(&self, _event: &str, has_field: &dyn Fn(&str) -> bool) -> bool {
        has_field("turn_id")
    }

    /// Some builds' Bash `tool_response` is the model-facing text, which says `Process exited
    /// with code N`.
    fn shell_exit_in_response<'a>(&self, response: &'a Value) -> Option<ShellExit<'a>> {
        let text = response.as_str()?;
        Some(ShellExit {
            code: codex_exit_code(text)?,
            first_line: first_output_line(text),
        })
    }

    fn shell_exit_code(&self, transcript: &Path, call_id: &str) -> Option<i64> {
        exit_code(transcript, call_id)
    }

    /// Codex fires no Stop for a turn that failed on an API error, but its rollout says so;
    /// the stop hook checks too, which costs nothing should a build fire one.
    fn last_turn_error(&self, transcript: &Path) -> Option<TurnError> {
        super::failed_turn::last_turn_error(transcript)
    }

    fn session_start_at_launch(&self) -> bool {
        false
    }

    /// The rollout's running total (`event_msg` `token_count`: `info.total_token_usage` with
    /// `input_tokens` counting `cached_input_tokens` in, and `output_tokens` the reasoning
    /// tokens), and the model of each turn (`turn_context`). A total is used rather than each
    /// `last_token_usage`, as Codex may send the same count twice.
    fn usage_record(&self, record: &Value) -> Option<usage::Record> {
        match record.get("type").and_then(Value::as_str)? {
            "turn_context" => usage::text(record, "/payload/model").map(usage::Record::Model),
            "event_msg" if record.pointer("/payload/type")? == "token_count" => {
                let u = record.pointer("/payload/info/total_token_usage")?;
                let output = usage::count(u, "output_tokens");
                let all_input = u
                    .get("input_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or_else(|| usage::count(u, "total_tokens").saturating_sub(output));
                let cache_read = usage::count(u, "cached_input_tokens");
                let cache_write = usage::count(u, "cache_write_input_tokens");
                Some(usage::Record::Total {
                    at: usage::text(record, "/timestamp"),
                    tokens: usage::Tokens {
                        input: all_input.saturating_sub(cache_read + cache_write),
                        output,
                        cache_write,
                        cache_read,
                    },
                })
            }
            _ => None,
        }
    }
}

/// What phoenix adds to a Codex command line to turn its own sandbox off.
pub const OWN_SANDBOX_OFF: [&str; 2] = ["--sandbox", "danger-full-access"];

/// `argv` with Codex's own sandbox off, unless it already chooses a sandbox: a mode
/// (`-s`/`--sandbox`, `-c sandbox_mode=…`), a permissions profile (`-c default_permissions=…`,
/// which a mode may not be set beside) or no sandbox (`--dangerously-bypass-approvals-and-sandbox`,
/// `--yolo`, `--full-auto` of older versions).
fn own_sandbox_off(codex: &Codex, argv: Vec<String>) -> super::own_sandbox::OwnSandbox {
    use super::own_sandbox::{self as own, OwnSandbox};
    let said = |argv: Vec<String>, note: String| OwnSandbox {
        argv,
        env: Vec::new(),
        note: Some(note),
    };
    if own::has_flag(
        &argv,
        &["--dangerously-bypass-approvals-and-sandbox", "--yolo"],
    ) {
        return said(
            argv,
            "Codex's own sandbox: off, as the agent's command says (`--dangerously-bypass-approvals-and-sandbox`); phoenix's sandbox is the boundary".into(),
        );
    }
    let chosen = own::flag_value(&argv, &["-s", "--sandbox"])
        .map(|(_, v)| format!("--sandbox {v}"))
        .or_else(|| own::has_flag(&argv, &["--full-auto"]).then(|| "--full-auto".to_string()))
        .or_else(|| {
            own::config_override(
                &argv,
                &["sandbox_mode", "default_permissions", "permission_profile"],
            )
            .map(|v| format!("-c {v}"))
        });
    if let Some(chosen) = chosen {
        let off = chosen.contains("danger-full-access");
        return said(
            argv,
            if off {
                format!(
                    "Codex's own sandbox: off, as the agent's command says (`{chosen}`); phoenix's sandbox is the boundary"
                )
            } else {
                format!(
                    "Codex's own sandbox: kept as the agent's command chooses it (`{chosen}`); nested in phoenix's it works only while phoenix's sandbox allows nested user namespaces and CODEX_HOME is writable"
                )
            },
        );
    }
    if !own::starts_the_cli(codex, &argv) {
        return said(
            argv,
            "Codex's own sandbox: left as its config says: the agent's command does not start `codex` itself, so phoenix cannot add `--sandbox danger-full-access`".into(),
        );
    }
    said(
        own::with_after_program(argv, &OWN_SANDBOX_OFF),
        "Codex's own sandbox: off (`--sandbox danger-full-access`): nested in phoenix's it works only while phoenix's sandbox allows nested user namespaces; phoenix's sandbox is the boundary".into(),
    )
}

/// Codex puts `Process exited with code N` in the header, before the command's output; only
/// the header is searched so that output mentioning the phrase is not mistaken for a failure.
fn codex_exit_code(text: &str) -> Option<i64> {
    for line in text.lines().take(8) {
        if line.starts_with("Output:") || line.starts_with("Final output:") {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("Process exited with code ") {
            let code: i64 = rest.trim().parse().ok()?;
            return (code != 0).then_some(code);
        }
    }
    None
}

/// The first non-empty line after the header, where the command's output begins.
fn first_output_line(text: &str) -> Option<&str> {
    let mut lines = text.lines();
    for line in lines.by_ref() {
        if line.starts_with("Output:") || line.starts_with("Final output:") {
            break;
        }
    }
    lines.find(|l| !l.trim().is_empty())
}

/// How much of the rollout's end is read: the call just finished, its events are the last ones.
const TAIL: u64 = 256 * 1024;

/// The exit code of shell call `call_id`, from the end of the rollout at `transcript`.
pub fn exit_code(transcript: &Path, call_id: &str) -> Option<i64> {
    let tail = bounded::read_tail(transcript, TAIL, Links::Follow).ok()?;
    exit_code_in(&tail.lines_text(), call_id)
}

fn exit_code_in(rollout: &str, call_id: &str) -> Option<i64> {
    rollout
        .lines()
        .rev()
        .filter(|l| l.contains(call_id))
        .find_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            let event = v.get("payload")?;
            let item = match event["type"].as_str()? {
                "item_completed" => event.get("item")?,
                "exec_command_end" => event,
                _ => return None,
            };
            let id = item
                .get("id")
                .or_else(|| item.get("call_id"))
                .and_then(Value::as_str)?;
            (id == call_id).then(|| item.get("exit_code")?.as_i64())?
        })
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

    // Edited as a document: comments, key order, quoting and blank lines stay as they were.
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| format!("is not valid TOML ({})", first_line(&e)))?;
    let mut expected = before.clone();
    let mut changed = Vec::new();
    let mut refused = false;
    for (path, key, value) in &edits {
        if set_in_document(&mut doc, path, key, value).is_none() {
            // Something on the path is not a table (`projects = 5`): the user's to fix.
            refused = true;
            continue;
        }
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
    let after_text = doc.to_string();
    let after: Result<toml::Table, _> = toml::from_str(&after_text);
    if refused || after.as_ref().ok() != Some(&expected) {
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

/// Set `key = "value"` in the table at `path`, creating the tables that are missing (as
/// `[a."b"]` headers, without empty parents). An existing value is replaced in place with its
/// comments. `None` when something on the path is not a table (phoenix then asks the user).
fn set_in_document(
    doc: &mut toml_edit::DocumentMut,
    path: &[String],
    key: &str,
    value: &str,
) -> Option<()> {
    let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
    for p in path {
        if !table.contains_key(p) {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            table.insert(p, toml_edit::Item::Table(t));
        }
        table = table.get_mut(p)?.as_table_like_mut()?;
    }
    match table.get_mut(key).and_then(toml_edit::Item::as_value_mut) {
        Some(old) => {
            let decor = old.decor().clone();
            *old = toml_edit::Value::from(value);
            *old.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::value(value));
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Cli;

    /// Lines as Codex 0.169.0 wrote them (shortened) for `ls` on a missing directory.
    const ROLLOUT: &str = r#"{"timestamp":"t","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\": \"ls /nope\"}","call_id":"call_1"}}
{"timestamp":"t","type":"event_msg","payload":{"type":"item_completed","thread_id":"x","item":{"type":"CommandExecution","id":"call_1","command":["/bin/bash","-lc","ls /nope"],"status":"failed","aggregated_output":"ls: cannot access '/nope'\n","exit_code":2}}}
{"timestamp":"t","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"Chunk ID: 1\nProcess exited with code 2\nOutput:\nls: cannot access '/nope'\n"}}
{"timestamp":"t","type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_2","status":"completed","exit_code":0}}}
"#;

    #[test]
    fn exit_codes_come_from_the_completed_call() {
        assert_eq!(exit_code_in(ROLLOUT, "call_1"), Some(2));
        assert_eq!(exit_code_in(ROLLOUT, "call_2"), Some(0));
        assert_eq!(exit_code_in(ROLLOUT, "call_3"), None);
        let older = r#"{"type":"event_msg","payload":{"type":"exec_command_end","call_id":"c9","exit_code":127}}"#;
        assert_eq!(exit_code_in(older, "c9"), Some(127));
        assert_eq!(exit_code_in("not json call_1\n", "call_1"), None);
    }

    #[test]
    fn a_missing_rollout_says_nothing() {
        assert_eq!(
            exit_code(Path::new("/nonexistent/rollout.jsonl"), "call_1"),
            None
        );
    }

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
        let target = crate::hooks::config::Target {
            exe: Path::new("/opt/phoenix"),
            config: Path::new("/srv/phoenix.toml"),
            agent,
            cli: Cli::Codex,
            guard: false,
            version: None,
        };
        crate::hooks::config::pretty(&target.desired().unwrap())
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
            "[projects.'/w']\nnote = \"x\"\ntrust_level = \"trusted\"\n\n[tui]\nalt = true\n"
        );
    }

    /// The user's comments, spacing and quoting survive phoenix's edit, in the tables it edits
    /// too, and a replaced hash keeps its trailing comment (it was once patched line by line).
    #[test]
    fn codex_config_comments_and_layout_survive_the_edit() {
        let text = "# Codex, set up by hand\nmodel = \"o3\"   # the best\n\n\
                    [projects.'/w'] # my work\n# reviewed on Monday\nnote = \"x\"\n\n\
                    [hooks.state.\"k\"]\n# the hash Codex showed me\ntrusted_hash = \"sha256:old\" # keep\n\n\
                    [tui] # looks\nalt = true\n";
        let hooks = vec![("k".to_string(), "sha256:new".to_string())];
        let (out, changed) = plan_codex_config(Some(text), "/w", &hooks)
            .unwrap()
            .unwrap();
        assert_eq!(changed.len(), 2, "{changed:?}");
        for kept in [
            "# Codex, set up by hand\nmodel = \"o3\"   # the best\n",
            "[projects.'/w'] # my work\n# reviewed on Monday\nnote = \"x\"\n",
            "# the hash Codex showed me\ntrusted_hash = \"sha256:new\" # keep\n",
            "[tui] # looks\nalt = true\n",
        ] {
            assert!(out.contains(kept), "lost {kept:?}:\n{out}");
        }
        assert!(out.contains("trust_level = \"trusted\""), "{out}");
        assert!(!out.contains("sha256:old"), "{out}");
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
        // Defined inline: the entry goes into the inline table (a document edit, not lines).
        let inline = "projects = { \"/x\" = { trust_level = \"trusted\" } }\n";
        let (out, _) = plan_codex_config(Some(inline), "/w", &[]).unwrap().unwrap();
        let read: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(
            read["projects"]["/w"]["trust_level"].as_str(),
            Some("trusted"),
            "{out}"
        );
        assert_eq!(
            read["projects"]["/x"]["trust_level"].as_str(),
            Some("trusted"),
            "{out}"
        );
        // Not a table where one must be: phoenix says what to add instead of guessing.
        let e = plan_codex_config(Some("projects = 5\n"), "/w", &[]).unwrap_err();
        assert!(
            e.contains("[projects.\"/w\"]\ntrust_level = \"trusted\""),
            "{e}"
        );
    }

    #[test]
    fn no_daemon_is_added_unless_chosen() {
        let argv = |a: &[&str]| Codex.base_argv(a.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            argv(&["codex", "-m", "o3"]),
            ["codex", "--no-daemon", "-m", "o3"]
        );
        assert_eq!(argv(&["codex", "--no-daemon"]), ["codex", "--no-daemon"]);
        assert_eq!(
            argv(&["codex", "--remote=ws://h"]),
            ["codex", "--remote=ws://h"]
        );
        assert_eq!(argv(&["/opt/my-codex"]), ["/opt/my-codex"]);
    }
}
