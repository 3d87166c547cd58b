//! opencode (sst/opencode, npm `opencode-ai`): no shell hooks, but JS/TS plugins loaded from
//! `.opencode/plugins/` with events (`tool.execute.before/after`, `chat.message`, the bus's
//! `session.created`, `session.idle`, `session.error`, `message.updated` …). phoenix installs
//! its hooks as usual, in `<workdir>/.opencode/phoenix-hooks.json` (a file opencode itself
//! does not read), and before each start writes the plugin that runs them
//! (`.opencode/plugins/phoenix.js`, `opencode_plugin.js` in this directory): each handler as
//! the argv its command line stands for (the phoenix binary, never a shell), while the hook
//! file still holds it, with the event as JSON on stdin, in Claude Code's payload shape.
//! Resumed with `--session <id>`.
//!
//! Notes on its versions and quirks (read from the 1.18.33 binary, proven against a scripted
//! Anthropic server):
//! - It keeps its sessions in SQLite (`~/.local/share/opencode/opencode.db`, WAL). The plugin
//!   keeps a record of its own beside it, `~/.local/share/opencode/phoenix/<session>.jsonl`:
//!   each finished assistant message (its `tokens` and `cost`, its `error`) and each
//!   `session.error`, one JSON line each. That record is the `transcript_path` the hooks get.
//! - The TUI creates a session with the first prompt, and a resumed one (`--session`) fires
//!   nothing before it either: the plugin runs `session.start` with the first prompt of each
//!   session (`source` `startup` for a session this process created, else `resume`).
//! - A prompt too long for the model (`ContextOverflowError`) fires `session.error`, then
//!   opencode compacts the session itself (`experimental.session.compacting`, phoenix's
//!   pre-compact) and goes on: such a turn does not end in an error. Errors it does not
//!   recover from end the turn with `session.error` and `session.idle`; the stop hook reads
//!   the record's last line (`last_turn_error`).
//! - A shell call's exit code is `metadata.exit` of the tool's output (`tool.execute.after`).
//! - With a `.opencode/` directory it installs `@opencode-ai/plugin` there (npm, first start;
//!   `.opencode/node_modules`, its own `.gitignore`).

use std::path::Path;

use serde_json::Value;

use super::version::{Proven, Version};
use super::{AgentCli, HookEntry, ShellExit, TrustRequest, Trusted, TurnError, entry as e};
use crate::state::bounded::{self, Links};

/// opencode's adapter.
pub struct Opencode;

/// The plugin that runs phoenix's hooks, with `__PHOENIX_HOOKS__` for the table of handlers
/// (`plugin`), as written to `.opencode/plugins/phoenix.js`.
const PLUGIN: &str = include_str!("opencode_plugin.js");
/// Where the plugin goes, relative to the workdir.
pub const PLUGIN_FILE: &str = ".opencode/plugins/phoenix.js";

/// The versions phoenix was proven with (its real-CLI suite passed against it). `events`:
/// the events of the plugin phoenix writes (named after opencode's own).
pub const PROVEN: &[Proven] = &[Proven {
    version: Version(1, 18, 33),
    events: &[
        "session.start",
        "chat.message",
        "tool.execute.before",
        "tool.execute.after",
        "session.compacting",
        "session.idle",
        "session.end",
    ],
    matcher_values: &[],
    changes: "the first version proven",
}];

impl AgentCli for Opencode {
    /// It has no sandbox of its own to coordinate.
    fn own_sandbox(&self, cmd: super::own_sandbox::Command<'_>) -> super::own_sandbox::OwnSandbox {
        super::own_sandbox::none_of_its_own(self, "opencode 1.18.33", cmd.argv)
    }

    fn display_name(&self) -> &'static str {
        "opencode"
    }

    fn proven(&self) -> &'static [Proven] {
        PROVEN
    }

    fn program_names(&self) -> &'static [&'static str] {
        &["opencode"]
    }

    fn npm_package(&self) -> Option<&'static str> {
        Some("opencode-ai")
    }

    fn version_in(&self, output: &str) -> Option<Version> {
        Version::find_in(output)
    }

    /// The plugin hands the model's text of the turn to the stop hook (`last_assistant_message`).
    fn markers_at_turn_end(&self) -> bool {
        true
    }

    fn resume_argv(&self, mut base: Vec<String>, id: &str) -> Option<Vec<String>> {
        base.extend(["--session".to_string(), id.to_string()]);
        Some(base)
    }

    fn hook_file(&self) -> Option<&'static str> {
        Some(".opencode/phoenix-hooks.json")
    }

    fn sandbox_home(
        &self,
        home: &std::path::Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
        let _ = env;
        (
            vec![
                home.join(".local/share/opencode"),
                home.join(".cache/opencode"),
                home.join(".local/state/opencode"),
            ],
            vec![home.join(".config/opencode")],
        )
    }

    fn sandbox_project_settings(&self) -> &'static [&'static str] {
        &[".opencode/plugins", "opencode.json", "opencode.jsonc"]
    }

    /// The plugin's event names: opencode's own, and `session.start` / `session.end` /
    /// `session.compacting`, which it derives (see the module notes). Timeouts in milliseconds.
    fn hook_entries(&self) -> Vec<HookEntry> {
        vec![
            e("session.start", None, "session-start", 10_000, ""),
            e("chat.message", None, "prompt", 5_000, ""),
            e("tool.execute.after", None, "heartbeat", 5_000, ""),
            e("session.compacting", None, "pre-compact", 30_000, ""),
            e("session.idle", None, "stop", 5_000, ""),
            e("session.end", None, "session-end", 5_000, ""),
            e("tool.execute.before", None, "pre-tool", 5_000, ""),
        ]
    }

    /// Not trust as such: opencode runs no hook file, so the plugin that runs phoenix's hooks
    /// must be in place before it starts.
    fn needs_trust(&self) -> bool {
        true
    }

    fn trust(&self, r: &TrustRequest<'_>) -> Result<Option<Trusted>, String> {
        let file = r.workdir.join(PLUGIN_FILE);
        let text = plugin(r.hooks_text, &r.agent.name)?;
        if super::read_optional(&file)?.as_deref() == Some(text.as_str()) {
            return Ok(None);
        }
        let planned = Some((text, vec![format!("{PLUGIN_FILE} (phoenix's plugin)")]));
        super::write_planned(&file, planned)
    }

    fn trust_note(&self) -> Option<&'static str> {
        Some(
            "Before each start the wrapper writes .opencode/plugins/phoenix.js, the plugin\n\
             that runs these hooks on opencode's events (opencode has no hook files).",
        )
    }

    fn claims_payload(&self, event: &str, _has_field: &dyn Fn(&str) -> bool) -> bool {
        event.starts_with("session.")
            || event.starts_with("tool.execute.")
            || event == "chat.message"
    }

    /// The bash tool's output carries its exit code in `metadata.exit`.
    fn shell_exit_in_response<'a>(&self, response: &'a Value) -> Option<ShellExit<'a>> {
        let code = response.pointer("/metadata/exit")?.as_i64()?;
        (code != 0).then(|| ShellExit {
            code,
            first_line: response
                .get("output")
                .and_then(Value::as_str)
                .and_then(|o| o.lines().map(str::trim).find(|l| !l.is_empty())),
        })
    }

    fn last_turn_error(&self, transcript: &Path) -> Option<TurnError> {
        let tail = bounded::read_tail(transcript, 64 * 1024, Links::Follow).ok()?;
        last_turn_error_in(&tail.lines_text())
    }

    /// A finished assistant message as the plugin records it (opencode's `message.updated`
    /// info): `tokens.input` (not read from the cache), `output`, `reasoning` and
    /// `cache.read` / `cache.write`; the same message may be recorded again.
    fn usage_record(&self, record: &Value) -> Option<super::usage::Record> {
        use super::usage::{Record, Tokens, count, text};
        if record.get("role").and_then(Value::as_str) != Some("assistant")
            || record.get("providerID").is_none()
        {
            return None;
        }
        let t = record.get("tokens").filter(|t| t.is_object())?;
        let cache = t.get("cache").cloned().unwrap_or(Value::Null);
        let tokens = Tokens {
            input: count(t, "input"),
            output: count(t, "output") + count(t, "reasoning"),
            cache_write: count(&cache, "write"),
            cache_read: count(&cache, "read"),
        };
        let at = record
            .pointer("/time/completed")
            .or_else(|| record.pointer("/time/created"))
            .and_then(Value::as_i64)
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map(|t| t.to_string());
        (!tokens.is_zero()).then(|| Record::Response {
            id: text(record, "/id"),
            model: text(record, "/modelID"),
            at,
            tokens,
        })
    }

    /// Its TUI takes input once it is drawn; the session-start hook runs with the first prompt.
    fn session_start_at_launch(&self) -> bool {
        false
    }

    /// Its footer reads `tab agents  ctrl+p commands` once its input box is drawn, fresh or
    /// resumed (1.18.33); before, a resumed session shows nothing for seconds (its binary
    /// loads), and a paste then is echoed raw by the terminal, not taken.
    fn ready_text(&self) -> Option<&'static str> {
        Some("ctrl+p commands")
    }
}

/// The plugin's text for `agent`: phoenix's handlers for it in the hook file, each as the argv
/// its command line splits into (run without a shell), by the plugin's event.
pub fn plugin(hooks_text: &str, agent: &str) -> Result<String, String> {
    let table = super::handler_argv_table(hooks_text, agent, ".opencode/phoenix-hooks.json")?;
    Ok(PLUGIN.replace("__PHOENIX_HOOKS__", &table))
}

/// The error the last turn ended in, from the end of the plugin's record: the last line
/// decides (a finished assistant message without an `error`: none).
pub fn last_turn_error_in(text: &str) -> Option<TurnError> {
    for line in text.lines().rev() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let ts = record
            .get("time")
            .and_then(|t| t.get("completed").or_else(|| t.get("created")).or(Some(t)))
            .and_then(Value::as_i64)
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map(|t| t.to_string());
        let error = if record.get("type").and_then(Value::as_str) == Some("session.error") {
            record.get("error")
        } else if record.get("role").and_then(Value::as_str) == Some("assistant") {
            match record.get("error").filter(|e| !e.is_null()) {
                Some(error) => Some(error),
                None => return None,
            }
        } else {
            continue;
        };
        let error = error?;
        let message = error
            .pointer("/data/message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string());
        let kind = match error.get("name").and_then(Value::as_str) {
            Some("ContextOverflowError") => "context_length_exceeded".to_string(),
            _ => "api_error".to_string(),
        };
        return Some(TurnError { kind, message, ts });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = r#"{"id":"msg_1","role":"assistant","tokens":{"total":15,"input":10,"output":5,"reasoning":0,"cache":{"write":0,"read":0}},"modelID":"claude-scripted","providerID":"scripted","time":{"created":1796171572758,"completed":1796171576154},"sessionID":"ses_1","finish":"stop"}
"#;

    #[test]
    fn a_finished_message_is_counted_under_its_model() {
        let record: Value = serde_json::from_str(RECORD.trim()).unwrap();
        match super::super::usage::record_in(&record) {
            Some(super::super::usage::Record::Response {
                id,
                model,
                tokens,
                at,
            }) => {
                assert_eq!(id.as_deref(), Some("msg_1"));
                assert_eq!(model.as_deref(), Some("claude-scripted"));
                assert_eq!((tokens.input, tokens.output), (10, 5));
                assert!(at.unwrap().starts_with("2026-12-02"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_last_record_says_how_the_turn_ended() {
        let failed = r#"{"type":"session.error","error":{"name":"APIError","data":{"message":"invalid x-api-key","statusCode":401}},"time":1796171576154}"#;
        let e = last_turn_error_in(&format!("{RECORD}{failed}\n")).unwrap();
        assert_eq!(e.kind, "api_error");
        assert_eq!(e.message, "invalid x-api-key");
        // A prompt too long, then the answer after opencode compacted: the turn went on.
        let overflow = failed.replace("APIError", "ContextOverflowError");
        assert_eq!(
            last_turn_error_in(&overflow).unwrap().kind,
            "context_length_exceeded"
        );
        assert_eq!(last_turn_error_in(&format!("{overflow}\n{RECORD}")), None);
        assert_eq!(last_turn_error_in(""), None);
    }

    /// Issue 32: the plugin runs phoenix's binary with an argv, never `/bin/sh -c`: a workdir
    /// or config path with quotes and `$(…)` in it stays one word, and other agents' and the
    /// user's handlers are not in it.
    #[test]
    fn the_plugin_runs_only_this_agent_s_handlers_as_argv_without_a_shell() {
        let mine = r"'/opt/my $(touch x) dir/phoenix' --config '/c/it'\''s.toml' hook stop --agent oc --cli opencode";
        let hooks = serde_json::json!({"hooks": {
            "session.idle": [
                {"hooks": [{"type": "command", "command": mine, "timeout": 5000}]},
                {"hooks": [{"type": "command", "command": "/bin/phoenix hook stop --agent other --cli opencode", "timeout": 5000}]},
                {"hooks": [{"type": "command", "command": "notify-send done"}]},
            ]
        }});
        let text = plugin(&hooks.to_string(), "oc").unwrap();
        let table_start = text.find("const HOOKS = ").unwrap() + "const HOOKS = ".len();
        let table_end = table_start + text[table_start..].find(";\n").unwrap();
        let table: Value = serde_json::from_str(&text[table_start..table_end]).unwrap();
        let handlers = table["session.idle"].as_array().unwrap();
        assert_eq!(handlers.len(), 1, "{table}");
        assert_eq!(
            handlers[0]["argv"],
            serde_json::json!([
                "/opt/my $(touch x) dir/phoenix",
                "--config",
                "/c/it's.toml",
                "hook",
                "stop",
                "--agent",
                "oc",
                "--cli",
                "opencode"
            ])
        );
        assert_eq!(handlers[0]["command"], mine);
        assert!(
            !text.contains("/bin/sh") && !text.contains("\"-c\""),
            "{text}"
        );
        assert!(!text.contains("__PHOENIX_HOOKS__"));
        assert!(plugin("not json", "oc").is_err());
    }

    #[test]
    fn a_failed_shell_call_is_read_from_its_exit_code() {
        let response: Value = serde_json::from_str(
            r#"{"metadata":{"exit":2,"output":"ls: nope\n"},"output":"ls: nope\n","title":"ls"}"#,
        )
        .unwrap();
        let exit = super::super::shell_exit_in_response(&response).unwrap();
        assert_eq!((exit.code, exit.first_line), (2, Some("ls: nope")));
        let fine: Value = serde_json::from_str(r#"{"metadata":{"exit":0},"output":""}"#).unwrap();
        assert_eq!(super::super::shell_exit_in_response(&fine), None);
    }
}
