//! Gemini CLI (google-gemini/gemini-cli): hooks in `<workdir>/.gemini/settings.json` (on by
//! default; timeouts in milliseconds; handlers fingerprinted by `name` and `command`), run only
//! in a trusted folder (`~/.gemini/trustedFolders.json`), resumed with `--resume <id>`.
//!
//! Notes on its versions and quirks (see the reference `cli-hooks.md`):
//! - Plain text on a hook's stdout becomes a user-only message, and an empty stdout makes it
//!   parse stderr instead (`stdout.trim() || stderr.trim()` in hookRunner.ts): every reply is
//!   JSON, `{}` when there is nothing to say. Its `decision` would replace the tool's result,
//!   so feedback goes in as `additionalContext`, appended to it.
//! - Some builds fire no SessionStart at all (gemini-cli#28160): a started Gemini may show
//!   life only in its pane.
//! - 0.61 adds SessionStart context to its chat and then, on `--resume`, replaces the chat with
//!   the resumed history (its resume effect runs `resumeChat` after the hook), so the context
//!   never reaches the model: it is held back for the first prompt (BeforeAgent), whose
//!   context is appended to the prompt itself.
//! - It has no SessionStart after a compression (Claude and Codex say `compact`): the context
//!   phoenix gave at session start went into the summary with the rest, and is given again
//!   with the next prompt.
//! - 0.61 records an API error as an `error` message in its chat file (`[API Error: {…}]`), then
//!   fires AfterAgent as for any turn and waits at its prompt: the stop hook reads the chat
//!   file (`failed_turn`).
//! - Its SessionEnd `exit` is fired from its exit cleanup whatever ended it (SIGTERM too), so
//!   it is not taken for a user's choice to leave.
//! - It fires PreCompress (`auto`) before every model call and only then decides whether
//!   to compress: the history is compressed once the last prompt reached `compressionThreshold`
//!   (setting `model.compressionThreshold`, default 0.5) of the model's context window (256k
//!   tokens for Gemma 4 models, 1,048,576 for the others; Gemini CLI 0.61). Taken at its word,
//!   every turn would count as a compaction and leave a snapshot and a handoff behind. The last
//!   prompt's size is in the session's chat file, so phoenix applies the same rule.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::version::{Proven, Version};
use super::{
    AgentCli, HookEntry, Planned, Reply, ShellExit, TrustRequest, Trusted, TurnError, entry as e,
    read_optional, write_planned,
};
use crate::state::bounded::{self, Links};

/// Gemini CLI 0.61.0's hook events (its `HookEventName` enum, read from its bundle).
const GEMINI_EVENTS: &[&str] = &[
    "BeforeTool",
    "AfterTool",
    "BeforeAgent",
    "Notification",
    "AfterAgent",
    "SessionStart",
    "SessionEnd",
    "PreCompress",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
];

/// The versions phoenix was proven with, and what each knows.
pub const PROVEN: &[Proven] = &[Proven {
    version: Version(0, 61, 0),
    events: GEMINI_EVENTS,
    matcher_values: &[],
    changes: "hooks run only in a trusted folder; a resumed session reports a new chat file",
}];

/// Gemini CLI's adapter.
pub struct Gemini;

impl AgentCli for Gemini {
    fn model_flags(&self) -> &'static [&'static str] {
        &["--model", "-m"]
    }

    fn model_settings(&self) -> Option<&'static str> {
        Some(
            "Gemini CLI's settings (`model.name` in .gemini/settings.json of the workdir or ~/.gemini/settings.json; or GEMINI_MODEL)",
        )
    }

    fn display_name(&self) -> &'static str {
        "Gemini CLI"
    }

    fn proven(&self) -> &'static [Proven] {
        PROVEN
    }

    fn program_names(&self) -> &'static [&'static str] {
        &["gemini", "gemini.js"]
    }

    /// Gemini CLI's own sandbox (`--sandbox`/`-s`, `tools.sandbox` in its settings,
    /// `GEMINI_SANDBOX`) relaunches it in a docker, podman, gVisor or LXC container, which
    /// cannot start inside phoenix's sandbox (no container daemon or registry in reach: 0.61.0
    /// stops at once with a `FatalSandboxError`, "Sandbox image … could not be pulled", or
    /// "failed to determine command for sandbox" where no docker or podman is installed).
    /// `GEMINI_SANDBOX` outranks the flag and the settings, so `false` there turns it off
    /// whatever they say.
    fn own_sandbox(&self, cmd: super::own_sandbox::Command<'_>) -> super::own_sandbox::OwnSandbox {
        own_sandbox_off(cmd)
    }

    fn npm_package(&self) -> Option<&'static str> {
        Some("@google/gemini-cli")
    }

    /// `0.61.0`, alone on its line.
    fn version_in(&self, output: &str) -> Option<Version> {
        Version::parse(output.trim())
    }

    /// Its turn-end hook carries the model's last message (`last_assistant_message`: AfterAgent's `prompt_response`).
    fn markers_at_turn_end(&self) -> bool {
        true
    }

    fn resume_argv(&self, mut base: Vec<String>, id: &str) -> Option<Vec<String>> {
        base.extend(["--resume".to_string(), id.to_string()]);
        Some(base)
    }

    /// Gemini CLI 0.61: `Error resuming session: Invalid session identifier "<id>".` (then
    /// where it searched), and its SessionEnd hook from its exit cleanup.
    fn resume_refusals(&self) -> &'static [&'static str] {
        &["invalid session identifier", "error resuming session"]
    }

    /// Its settings file holds `mcpServers` beside `hooks`.
    fn mcp_file(&self) -> Option<&'static str> {
        self.hook_file()
    }

    fn hook_file(&self) -> Option<&'static str> {
        Some(".gemini/settings.json")
    }

    fn sandbox_home(
        &self,
        home: &std::path::Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
        let _ = env;
        let dir = home.join(".gemini");
        (vec![dir.clone()], vec![dir.join("settings.json")])
    }

    fn sandbox_project_settings(&self) -> &'static [&'static str] {
        &[".gemini"]
    }

    fn approval_prompts(&self) -> &'static [super::ApprovalPrompt] {
        &[super::GEMINI_APPROVAL]
    }

    /// Gemini CLI's input box reads `│ > Type your message…│`, and its history echoes each
    /// prompt as ` > …`; its confirmations and choices are drawn below, in place of the box.
    fn input_prompts(&self) -> &'static [&'static str] {
        &[">"]
    }

    fn hook_entries(&self) -> Vec<HookEntry> {
        vec![
            e(
                "SessionStart",
                None,
                "session-start",
                10_000,
                "phoenix-start",
            ),
            e("BeforeAgent", None, "prompt", 5_000, "phoenix-prompt"),
            e(
                "AfterTool",
                Some(".*"),
                "heartbeat",
                5_000,
                "phoenix-heartbeat",
            ),
            e(
                "PreCompress",
                None,
                "pre-compact",
                30_000,
                "phoenix-precompress",
            ),
            e("AfterAgent", None, "stop", 5_000, "phoenix-stop"),
            e("SessionEnd", None, "session-end", 5_000, "phoenix-end"),
            e(
                "BeforeTool",
                Some(".*"),
                "pre-tool",
                5_000,
                "phoenix-pre-tool",
            ),
        ]
    }

    fn needs_trust(&self) -> bool {
        true
    }

    fn trust(&self, r: &TrustRequest<'_>) -> Result<Option<Trusted>, String> {
        let file = (r.lookup)("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
            .map(PathBuf::from)
            .or_else(|| {
                (r.lookup)("GEMINI_CLI_HOME")
                    .or_else(|| (r.lookup)("HOME"))
                    .map(|h| Path::new(&h).join(".gemini/trustedFolders.json"))
            })
            .ok_or("neither GEMINI_CLI_HOME nor HOME is set: cannot find trustedFolders.json")?;
        let existing = read_optional(&file)?;
        let planned = plan_gemini_folders(existing.as_deref(), r.workdir)
            .map_err(|e| format!("`{}`: {e}", file.display()))?;
        write_planned(&file, planned)
    }

    fn trust_note(&self) -> Option<&'static str> {
        Some(
            "Before each start the wrapper has Gemini CLI trust this workdir\n\
             (~/.gemini/trustedFolders.json): it runs project hooks only in trusted folders.",
        )
    }

    fn render(&self, reply: &Reply) -> String {
        let value = match reply {
            Reply::Nothing => json!({}),
            Reply::Context { event, text } => {
                json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})
            }
            // Gemini's `decision` would replace the tool's result; the context is appended instead.
            Reply::Feedback { event, reason } => {
                json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": reason}})
            }
        };
        format!("{value}\n")
    }

    fn claims_payload(&self, event: &str, has_field: &dyn Fn(&str) -> bool) -> bool {
        matches!(
            event,
            "AfterTool"
                | "BeforeTool"
                | "PreCompress"
                | "BeforeAgent"
                | "AfterAgent"
                | "BeforeModel"
                | "AfterModel"
                | "BeforeToolSelection"
        ) || has_field("timestamp") // Only Gemini stamps every payload with `timestamp`.
    }

    /// A failing shell command does not set `tool_response.error`: its `llmContent` ends with
    /// `Exit Code: N`.
    fn shell_exit_in_response<'a>(&self, response: &'a Value) -> Option<ShellExit<'a>> {
        let content = response.get("llmContent")?;
        Some(ShellExit {
            code: gemini_exit_code(&parts_text(content))?,
            first_line: None,
        })
    }

    fn last_turn_error(&self, transcript: &Path) -> Option<TurnError> {
        super::failed_turn::last_turn_error(transcript)
    }

    /// A response's `tokens`, its usageMetadata as `recordMessageTokens` writes it: `input`
    /// (promptTokenCount, the cached part included), `cached`, `output` (candidates),
    /// `thoughts` and `tool` (the tool-use prompt). The message is appended again on each
    /// update with the same `id`.
    fn usage_record(&self, record: &Value) -> Option<super::usage::Record> {
        use super::usage::{Record, Tokens, count, text};
        if record.get("type").and_then(Value::as_str) != Some("gemini") {
            return None;
        }
        let t = record.get("tokens").filter(|t| t.is_object())?;
        let cached = count(t, "cached");
        let mut tokens = Tokens {
            input: count(t, "input").saturating_sub(cached) + count(t, "tool"),
            output: count(t, "output") + count(t, "thoughts"),
            cache_write: 0,
            cache_read: cached,
        };
        if tokens.is_zero() {
            // A record giving only the total: all of it is priced as input.
            tokens.input = count(t, "total");
        }
        (!tokens.is_zero()).then(|| Record::Response {
            id: text(record, "/id"),
            model: text(record, "/model"),
            at: text(record, "/timestamp"),
            tokens,
        })
    }

    fn session_file(&self, reported: &Path) -> PathBuf {
        session_chat(reported)
    }

    /// PreCompress `auto` comes before every model call; most of the time nothing is
    /// compressed. The settings that may change the threshold: the user's, then the project's.
    fn compacts_now(&self, trigger: &str, transcript: Option<&Path>, cwd: &Path) -> bool {
        if trigger != "auto" {
            return true;
        }
        let home = std::env::var_os("GEMINI_CLI_HOME").or_else(|| std::env::var_os("HOME"));
        let settings: Vec<PathBuf> = home
            .map(|h| Path::new(&h).join(".gemini/settings.json"))
            .into_iter()
            .chain([cwd.join(".gemini/settings.json")])
            .collect();
        will_compress(transcript, &settings)
    }

    fn compaction_skips_session_start(&self) -> bool {
        true
    }

    fn resume_drops_session_start_context(&self) -> bool {
        true
    }
}

/// The variable, and its value, that turn Gemini CLI's own sandbox off.
pub const OWN_SANDBOX_OFF: (&str, &str) = ("GEMINI_SANDBOX", "false");

/// Gemini CLI with its own sandbox off. Its container cannot run inside phoenix's sandbox at
/// all, so an agent's own choice of one is overridden too, and the note says so.
fn own_sandbox_off(cmd: super::own_sandbox::Command<'_>) -> super::own_sandbox::OwnSandbox {
    use super::own_sandbox::{self as own, OwnSandbox};
    let (var, off) = OWN_SANDBOX_OFF;
    let own_value = (cmd.env)(var);
    let already_off = own_value
        .as_deref()
        .is_some_and(|v| matches!(v.trim().to_lowercase().as_str(), "false" | "0"));
    let flag = own::has_flag(&cmd.argv, &["--sandbox", "-s"])
        || own::flag_value(&cmd.argv, &["--sandbox"]).is_some();
    let why =
        "its container sandbox cannot start inside phoenix's; phoenix's sandbox is the boundary";
    let note = match (&own_value, already_off) {
        (Some(v), true) => {
            format!(
                "Gemini CLI's own sandbox: off, as the agent's environment says (`{var}={v}`); {why}"
            )
        }
        (Some(v), false) => format!(
            "Gemini CLI's own sandbox: off (`{var}={off}`, in place of the agent's own `{var}={v}`): {why}"
        ),
        (None, _) if flag => format!(
            "Gemini CLI's own sandbox: off (`{var}={off}`, which outranks the agent's own `--sandbox`): {why}"
        ),
        (None, _) => format!("Gemini CLI's own sandbox: off (`{var}={off}`): {why}"),
    };
    OwnSandbox {
        argv: cmd.argv,
        env: if already_off {
            Vec::new()
        } else {
            vec![(var.to_string(), off.to_string())]
        },
        note: Some(note),
    }
}

/// Gemini's `llmContent` is a string or a list of parts (`{"text": …}` or strings).
fn parts_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                other => other
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    }
}

/// Gemini's shell tool ends its `llmContent` with trailer lines (`Exit Code: N`, `Signal:`,
/// `Process Group PGID:` …) after the output. The last `Exit Code:` counts only if nothing but
/// trailer lines follows it, so output that merely contains the phrase is not a failure.
fn gemini_exit_code(text: &str) -> Option<i64> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .rposition(|l| l.trim_start().starts_with("Exit Code:"))?;
    let trailer = |l: &&str| {
        let l = l.trim();
        l.is_empty()
            || l.starts_with('<')
            || [
                "Signal:",
                "Background PIDs:",
                "Process Group PGID:",
                "Error:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
    };
    if !lines[at + 1..].iter().all(trailer) {
        return None;
    }
    let code: i64 = lines[at].trim_start()["Exit Code:".len()..]
        .trim()
        .parse()
        .ok()?;
    (code != 0).then_some(code)
}

/// Gemini CLI's default share of the context window at which it compresses.
const DEFAULT_THRESHOLD: f64 = 0.5;
/// A settings file larger than this is not read.
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// What a chat file says about the last prompt.
#[derive(Debug, PartialEq, Eq)]
enum LastPrompt {
    /// `tokens.input` and the model of the last response.
    Sized(u64, String),
    /// The whole file was read and no response is in it yet: nothing to compress.
    NoResponseYet,
    /// No file, or its end says nothing.
    Unknown,
}

/// Will Gemini CLI compress before this model call? `transcript` is the payload's chat file,
/// `settings` the settings files in increasing precedence (user, then project). When the chat
/// file cannot tell, the answer is yes: better a handoff too many than a compaction without one.
pub fn will_compress(transcript: Option<&Path>, settings: &[PathBuf]) -> bool {
    let (tokens, model) = match transcript.map_or(LastPrompt::Unknown, last_prompt) {
        LastPrompt::Sized(tokens, model) => (tokens, model),
        LastPrompt::NoResponseYet => return false,
        LastPrompt::Unknown => return true,
    };
    let threshold = settings
        .iter()
        .rev()
        .filter_map(|p| bounded::read_whole(p, MAX_SETTINGS_BYTES, Links::Follow).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v.pointer("/model/compressionThreshold")?.as_f64())
        .find(|t| *t > 0.0)
        .unwrap_or(DEFAULT_THRESHOLD);
    tokens as f64 >= threshold * context_window(&model) as f64
}

fn context_window(model: &str) -> u64 {
    if model.starts_with("gemma-4") {
        256_000
    } else {
        1_048_576
    }
}

/// The prompt size (`tokens.input`) and model of the last model response in a chat file,
/// reading only its end.
fn last_prompt(path: &Path) -> LastPrompt {
    const TAIL: u64 = 64 * 1024;
    match bounded::read_tail(path, TAIL, Links::Follow) {
        Err(_) => LastPrompt::Unknown,
        Ok(tail) => match last_prompt_in(&String::from_utf8_lossy(&tail.bytes)) {
            Some((tokens, model)) => LastPrompt::Sized(tokens, model),
            None if !tail.truncated() => LastPrompt::NoResponseYet,
            None => LastPrompt::Unknown,
        },
    }
}

fn last_prompt_in(text: &str) -> Option<(u64, String)> {
    text.lines().rev().find_map(|line| {
        let v: Value = serde_json::from_str(line).ok()?;
        let tokens = v.pointer("/tokens/input")?.as_u64()?;
        Some((tokens, v["model"].as_str().unwrap_or("").to_string()))
    })
}

/// Chat files looked at in one directory at most.
const MAX_CHATS: usize = 10_000;

/// The chat file that holds the session `reported` names. Gemini CLI 0.61 resumed with
/// `--resume` keeps writing the session's own file, `session-<start minute>-<id8>.jsonl`, yet
/// first creates one named after the current minute (only its metadata in it) and reports that
/// one to the SessionStart hook: once a minute has turned since the session began, the
/// reported file holds none of the conversation. Of the files of that session (same
/// directory, same `-<id8>.jsonl`), the largest is the one with the conversation.
pub fn session_chat(reported: &Path) -> PathBuf {
    let (Some(dir), Some(name)) = (reported.parent(), reported.file_name()) else {
        return reported.to_path_buf();
    };
    let name = name.to_string_lossy();
    let Some(id8) = name
        .strip_prefix("session-")
        .and_then(|n| n.strip_suffix(".jsonl"))
        .and_then(|n| n.rsplit_once('-'))
        .map(|(_, id8)| format!("-{id8}.jsonl"))
    else {
        return reported.to_path_buf();
    };
    let size = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    };
    let mut best = (size(reported).unwrap_or(0), reported.to_path_buf());
    for entry in std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(MAX_CHATS)
    {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file.starts_with("session-") && file.ends_with(&id8) {
            let path = entry.path();
            if let Some(len) = size(&path).filter(|len| *len > best.0) {
                best = (len, path);
            }
        }
    }
    best.1
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

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = r#"{"sessionId":"s","kind":"main"}
{"id":"1","type":"user","content":[{"text":"hi"}]}
{"id":"2","type":"gemini","content":"","tokens":{"input":600000,"output":5,"total":600005},"model":"gemini-3.1-pro-preview"}
{"id":"3","type":"user","content":[{"text":"more"}]}
{"id":"4","type":"gemini","content":"ok","tokens":{"input":1200,"output":5,"total":1205},"model":"gemini-3.1-pro-preview"}
"#;

    #[test]
    fn the_last_response_gives_the_prompt_size() {
        assert_eq!(
            last_prompt_in(CHAT),
            Some((1200, "gemini-3.1-pro-preview".to_string()))
        );
        assert_eq!(last_prompt_in("{\"kind\":\"main\"}\nnot json\n"), None);
    }

    #[test]
    fn compresses_past_the_threshold_of_the_context_window() {
        let tmp = tempfile::tempdir().unwrap();
        let chat = tmp.path().join("chat.jsonl");
        let small = tmp.path().join("small.jsonl");
        std::fs::write(&small, CHAT).unwrap();
        assert!(!will_compress(Some(&small), &[]));
        let big = CHAT.replace("\"input\":1200", "\"input\":530000");
        std::fs::write(&chat, &big).unwrap();
        assert!(will_compress(Some(&chat), &[]));
        let gemma = CHAT
            .replace("\"input\":1200", "\"input\":130000")
            .replace("gemini-3.1-pro-preview", "gemma-4-31b-it");
        std::fs::write(&chat, gemma).unwrap();
        assert!(will_compress(Some(&chat), &[]));
        // A lower threshold from the settings (the project's wins over the user's).
        let user = tmp.path().join("user.json");
        let project = tmp.path().join("project.json");
        std::fs::write(&user, r#"{"model": {"compressionThreshold": 0.9}}"#).unwrap();
        std::fs::write(&project, r#"{"model": {"compressionThreshold": 0.001}}"#).unwrap();
        assert!(will_compress(Some(&small), &[user.clone(), project]));
        assert!(!will_compress(Some(&small), &[user]));
        // Nothing known: assume it compresses.
        assert!(will_compress(None, &[]));
        assert!(will_compress(Some(&tmp.path().join("missing")), &[]));
        // The first call of a session: no response yet, nothing to compress.
        std::fs::write(&chat, "{\"kind\":\"main\"}\n{\"type\":\"user\"}\n").unwrap();
        assert!(!will_compress(Some(&chat), &[]));
        // A long file whose end says nothing: unknown.
        let long = format!(
            "{}\n{{\"type\":\"user\",\"text\":\"{}\"}}\n",
            CHAT,
            "x".repeat(70_000)
        );
        std::fs::write(&chat, long).unwrap();
        assert!(will_compress(Some(&chat), &[]));
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

    #[test]
    fn a_resumed_session_is_in_its_own_chat_file_not_the_one_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let chats = tmp.path();
        let own = chats.join("session-2026-11-25T15-05-c37e69ac.jsonl");
        let stray = chats.join("session-2026-11-25T15-06-c37e69ac.jsonl");
        let other = chats.join("session-2026-11-25T15-07-0badc0de.jsonl");
        std::fs::write(
            &own,
            "{\"sessionId\":\"c37e69ac\"}\n{\"type\":\"user\"}\n{\"type\":\"gemini\"}\n",
        )
        .unwrap();
        std::fs::write(&stray, "{\"sessionId\":\"c37e69ac\"}\n").unwrap();
        std::fs::write(&other, "x".repeat(10_000)).unwrap();
        assert_eq!(session_chat(&stray), own);
        assert_eq!(session_chat(&own), own);
        assert_eq!(session_chat(&other), other);
        // Not a chat file's name, or no file at all: as reported.
        let odd = chats.join("notes.jsonl");
        assert_eq!(session_chat(&odd), odd);
        let gone = chats.join("session-2026-11-25T15-08-12345678.jsonl");
        assert_eq!(session_chat(&gone), gone);
    }
}
