//! Hook payloads of Claude Code, Codex CLI and Gemini CLI, normalised. Every field is optional
//! and unknown fields are ignored: a payload phoenix does not understand is an empty one.

use serde_json::Value;

use crate::spec::Cli;

/// Longest error text kept per tool call in tool_use.jsonl and state.json.
const ERROR_TEXT_MAX: usize = 200;

#[derive(Debug, Clone, Default)]
pub struct Payload {
    value: Value,
    /// Why the payload could not be used, if it could not (garbage, not an object).
    pub problem: Option<String>,
}

/// A subagent a hook fired in: its id and type (`general-purpose`, …) as the CLI said them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subagent<'a> {
    pub id: &'a str,
    pub kind: Option<&'a str>,
}

/// How a tool call ended, as far as the payload tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Failed; a short error text.
    Failed(String),
    /// The user interrupted it: neither a success nor an error.
    Interrupted,
}

impl Payload {
    pub fn parse(text: &str) -> Payload {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Payload::default();
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(value @ Value::Object(_)) => Payload {
                value,
                problem: None,
            },
            Ok(other) => Payload {
                value: Value::Null,
                problem: Some(format!(
                    "payload is JSON but not an object ({})",
                    crate::text::json_kind(&other)
                )),
            },
            Err(e) => Payload {
                value: Value::Null,
                problem: Some(format!("payload is not JSON: {e}")),
            },
        }
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.value.get(key)
    }

    pub fn session_id(&self) -> Option<&str> {
        // Codex's `notify` payload calls it `thread-id`.
        self.str("session_id")
            .or_else(|| self.str("thread-id"))
            .filter(|s| !s.is_empty())
    }

    /// The subagent this hook fired in, if it did not fire in the main thread: Claude Code
    /// sends `agent_id` (with `agent_type`) from an Agent tool worker's or a compaction's
    /// subagent, and never from the main thread (not even in an `--agent` session, which has
    /// `agent_type` alone).
    pub fn subagent(&self) -> Option<Subagent<'_>> {
        let id = self.str("agent_id").filter(|s| !s.trim().is_empty())?;
        Some(Subagent {
            id,
            kind: self.str("agent_type").filter(|s| !s.is_empty()),
        })
    }

    pub fn event_name(&self) -> Option<&str> {
        self.str("hook_event_name")
    }

    pub fn tool_name(&self) -> &str {
        self.str("tool_name").unwrap_or("")
    }

    /// A short stable digest of the tool call's input (FNV-1a over its JSON), so the watchdog
    /// can see the same call repeated without phoenix storing what the agent typed.
    pub fn tool_input_digest(&self) -> Option<String> {
        let input = self.get("tool_input").or_else(|| self.get("tool_args"))?;
        Some(crate::state::digest(input.to_string().as_bytes()))
    }

    pub fn transcript_path(&self) -> Option<&str> {
        self.str("transcript_path").filter(|s| !s.is_empty())
    }

    /// The model's last message of the turn, as the turn-end payload carries it: Claude's and
    /// Codex's Stop `last_assistant_message`, Codex notify's `last-assistant-message`, Gemini
    /// AfterAgent's `prompt_response`.
    pub fn turn_text(&self) -> Option<&str> {
        [
            "last_assistant_message",
            "last-assistant-message",
            "prompt_response",
        ]
        .into_iter()
        .find_map(|key| self.str(key))
        .filter(|s| !s.trim().is_empty())
    }

    /// The user's prompt: `prompt` (Claude, Codex, Gemini BeforeAgent) or the last of Codex
    /// notify's `input-messages`.
    pub fn prompt(&self) -> Option<&str> {
        self.str("prompt")
            .or_else(|| {
                self.get("input-messages")
                    .and_then(Value::as_array)
                    .and_then(|m| m.last())
                    .and_then(Value::as_str)
            })
            .filter(|s| !s.trim().is_empty())
    }

    /// Which CLI sent this, judged by what only that CLI sends (`AgentCli::claims_payload`).
    pub fn guess_cli(&self) -> Option<Cli> {
        let event = self.event_name()?;
        crate::agent_cli::guess_from_payload(event, &|field| self.get(field).is_some())
    }

    /// Success, failure or interruption of the tool call this payload reports.
    ///
    /// Claude reports failures as `PostToolUseFailure` with an `error` string. Gemini sets
    /// `tool_response.error` when the tool itself failed but not for a failing shell command,
    /// whose exit code is in the text it gives the model; so are some Codex builds'
    /// (`AgentCli::shell_exit_in_response`). Codex 0.169 has no failure signal at all: the hook
    /// reads the exit code from the rollout (`AgentCli::shell_exit_code`).
    pub fn outcome(&self) -> Outcome {
        if self.get("is_interrupt").and_then(Value::as_bool) == Some(true) {
            return Outcome::Interrupted;
        }
        if let Some(error) = self.get("error").filter(|e| !e.is_null()) {
            return Outcome::Failed(short(&text_of(error)));
        }
        if self.event_name() == Some("PostToolUseFailure") {
            return Outcome::Failed("tool failed".into());
        }
        // Copilot CLI calls it `tool_result`.
        let Some(response) = self
            .get("tool_response")
            .or_else(|| self.get("tool_result"))
        else {
            return Outcome::Ok;
        };
        if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .map(text_of)
                .unwrap_or_else(|| text_of(error));
            return Outcome::Failed(short(&message));
        }
        if response.get("interrupted").and_then(Value::as_bool) == Some(true) {
            return Outcome::Interrupted;
        }
        for key in ["exit_code", "exitCode"] {
            if let Some(code) = response.get(key).and_then(Value::as_i64)
                && code != 0
            {
                return Outcome::Failed(format!("exit code {code}"));
            }
        }
        // A shell call's exit code in the text a CLI gives the model (Codex, Gemini).
        match crate::agent_cli::shell_exit_in_response(response) {
            Some(exit) => Outcome::Failed(match exit.first_line {
                Some(line) => format!("exit code {}: {}", exit.code, short(line)),
                None => format!("exit code {}", exit.code),
            }),
            None => Outcome::Ok,
        }
    }

    /// Paths of files the tool is about to change or changed (for the structured-file guard):
    /// `file_path` (Claude Edit/Write/MultiEdit, Gemini write_file/replace), `path`, and the
    /// `*** Update File:` / `*** Add File:` lines of a Codex `apply_patch`.
    pub fn edited_files(&self) -> Vec<String> {
        let mut files = Vec::new();
        let Some(input) = self.get("tool_input") else {
            return files;
        };
        for key in ["file_path", "path", "absolute_path"] {
            if let Some(p) = input.get(key).and_then(Value::as_str) {
                files.push(p.to_string());
            }
        }
        let patch = input
            .get("command")
            .or_else(|| input.get("patch"))
            .or_else(|| input.get("input"))
            .map(|c| match c {
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n"),
                other => other.as_str().unwrap_or("").to_string(),
            })
            .unwrap_or_default();
        if let Some(input) = input.as_str() {
            collect_patch_files(input, &mut files);
        }
        collect_patch_files(&patch, &mut files);
        files.sort();
        files.dedup();
        files
    }
}

fn collect_patch_files(patch: &str, files: &mut Vec<String>) {
    for line in patch.lines() {
        for prefix in ["*** Update File: ", "*** Add File: "] {
            if let Some(path) = line.strip_prefix(prefix) {
                files.push(path.trim().to_string());
            }
        }
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// First non-empty line, at most `ERROR_TEXT_MAX` characters.
pub fn short(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let rest: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .skip(1)
        .take(1)
        .collect();
    let mut out = if rest.is_empty() || line.len() > ERROR_TEXT_MAX / 2 {
        line.to_string()
    } else {
        format!("{line}: {rest}")
    };
    if out.chars().count() > ERROR_TEXT_MAX {
        out = out.chars().take(ERROR_TEXT_MAX - 1).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real payloads captured from the three CLIs (tests/fixtures/payloads).
    fn fixtures(cli: &str) -> Vec<(String, Payload)> {
        let path = format!(
            "{}/tests/fixtures/payloads/{cli}.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["hook"].as_str().unwrap().to_string(),
                    Payload::parse(&v["payload"].to_string()),
                )
            })
            .collect()
    }

    #[test]
    fn captured_payloads_parse_and_report_the_right_outcome() {
        for cli in ["claude", "codex", "gemini"] {
            for (hook, p) in fixtures(cli) {
                assert!(p.problem.is_none(), "{cli} {hook}");
                assert!(p.session_id().is_some(), "{cli} {hook}");
                let outcome = p.outcome();
                match hook.as_str() {
                    "PostToolUseFailure" => assert!(
                        matches!(&outcome, Outcome::Failed(e) if e.starts_with("Exit code 2")),
                        "{outcome:?}"
                    ),
                    "StopFailure" => {}
                    _ => assert_eq!(outcome, Outcome::Ok, "{cli} {hook}"),
                }
            }
        }
    }

    #[test]
    fn gemini_events_identify_the_cli() {
        for (hook, p) in fixtures("gemini") {
            assert_eq!(p.guess_cli(), Some(Cli::Gemini), "{hook}");
        }
        for (_, p) in fixtures("claude") {
            assert_eq!(p.guess_cli(), None);
        }
    }

    #[test]
    fn claude_failure_text_is_short() {
        let p = Payload::parse(
            r#"{"hook_event_name":"PostToolUseFailure","tool_name":"Bash","error":"Exit code 2\nls: cannot access '/x': No such file or directory","is_interrupt":false}"#,
        );
        assert_eq!(
            p.outcome(),
            Outcome::Failed(
                "Exit code 2: ls: cannot access '/x': No such file or directory".into()
            )
        );
    }

    #[test]
    fn claude_interrupt_is_not_an_error() {
        let p = Payload::parse(
            r#"{"hook_event_name":"PostToolUseFailure","error":"interrupted","is_interrupt":true}"#,
        );
        assert_eq!(p.outcome(), Outcome::Interrupted);
    }

    #[test]
    fn codex_exit_code_from_the_header_only() {
        let failed = Payload::parse(
            r#"{"tool_name":"Bash","tool_response":"Chunk ID: 1\nWall time: 0.1s\nProcess exited with code 7\nOriginal token count: 3\nOutput:\nboom\n"}"#,
        );
        assert_eq!(
            failed.outcome(),
            Outcome::Failed("exit code 7: boom".into())
        );
        let ok = Payload::parse(
            r#"{"tool_name":"Bash","tool_response":"Chunk ID: 1\nProcess exited with code 0\nOutput:\nProcess exited with code 9\n"}"#,
        );
        assert_eq!(ok.outcome(), Outcome::Ok);
    }

    #[test]
    fn gemini_shell_exit_code_and_tool_error() {
        let failed = Payload::parse(
            r#"{"tool_name":"run_shell_command","tool_response":{"llmContent":"<untrusted_context>\nCommand: cargo test\nOutput: failed\nExit Code: 101\nProcess Group PGID: 42\n</untrusted_context>","returnDisplay":""}}"#,
        );
        assert_eq!(failed.outcome(), Outcome::Failed("exit code 101".into()));
        let parts = Payload::parse(
            r#"{"tool_response":{"llmContent":[{"text":"Output: x"},{"text":"Exit Code: 2"}]}}"#,
        );
        assert_eq!(parts.outcome(), Outcome::Failed("exit code 2".into()));
        let mentioned = Payload::parse(
            r#"{"tool_response":{"llmContent":"Output: grep says Exit Code: 1\nmore output\nProcess Group PGID: 1"}}"#,
        );
        assert_eq!(mentioned.outcome(), Outcome::Ok);
        let tool_error = Payload::parse(
            r#"{"tool_name":"read_file","tool_response":{"llmContent":"","error":{"message":"File not found","type":"FILE_NOT_FOUND"}}}"#,
        );
        assert_eq!(
            tool_error.outcome(),
            Outcome::Failed("File not found".into())
        );
    }

    #[test]
    fn only_a_payload_with_agent_id_comes_from_a_subagent() {
        let sub = Payload::parse(
            r#"{"hook_event_name":"StopFailure","agent_id":"a1","agent_type":"general-purpose"}"#,
        );
        assert_eq!(
            sub.subagent(),
            Some(Subagent {
                id: "a1",
                kind: Some("general-purpose")
            })
        );
        // An `--agent` session's main thread has `agent_type` alone.
        let main = Payload::parse(r#"{"hook_event_name":"StopFailure","agent_type":"reviewer"}"#);
        assert_eq!(main.subagent(), None);
        assert_eq!(Payload::parse(r#"{"agent_id":""}"#).subagent(), None);
        assert_eq!(Payload::parse(r#"{"agent_id":7}"#).subagent(), None);
    }

    #[test]
    fn garbage_is_an_empty_payload_with_a_problem() {
        for text in ["not json", "[1,2]", "{\"a\":", "\u{0}\u{1}"] {
            let p = Payload::parse(text);
            assert!(p.problem.is_some(), "{text}");
            assert_eq!(p.outcome(), Outcome::Ok);
            assert_eq!(p.session_id(), None);
        }
        assert!(Payload::parse("").problem.is_none());
    }

    #[test]
    fn wrong_types_are_ignored() {
        let p = Payload::parse(r#"{"session_id": 5, "tool_name": [], "tool_response": 3}"#);
        assert_eq!(p.session_id(), None);
        assert_eq!(p.tool_name(), "");
        assert_eq!(p.outcome(), Outcome::Ok);
    }

    #[test]
    fn edited_files_from_each_cli() {
        let claude = Payload::parse(r#"{"tool_input":{"file_path":"/r/a.json","old_string":"x"}}"#);
        assert_eq!(claude.edited_files(), ["/r/a.json"]);
        let codex = Payload::parse(
            r#"{"tool_name":"apply_patch","tool_input":{"command":"*** Begin Patch\n*** Update File: conf/b.toml\n@@\n-a\n+b\n*** Add File: c.yaml\n*** End Patch"}}"#,
        );
        assert_eq!(codex.edited_files(), ["c.yaml", "conf/b.toml"]);
    }

    #[test]
    fn short_keeps_error_lines_bounded() {
        assert_eq!(short("\n  boom  \n"), "boom");
        assert_eq!(short(&"x".repeat(500)).chars().count(), ERROR_TEXT_MAX);
    }
}
