//! A turn that ended in an API error, read from the end of the CLI's session file. Claude Code
//! says so with its StopFailure hook; Codex CLI and Gemini CLI have no such hook:
//!
//! - Codex CLI 0.169 fires no hook at all (no Stop), shows "Codex ran out of room in the model's
//!   context window…" and waits at its prompt. Its rollout ends the turn with a `task_complete`
//!   event whose `error` says why (`codex_error_info: "context_window_exceeded"`).
//! - Gemini CLI 0.61 records an `error` message in its chat file (`[API Error: {…}]`), then
//!   fires AfterAgent as for any turn and waits at its prompt.
//!
//! One reader for both formats (their records cannot be mistaken for each other), used by the
//! Codex and Gemini adapters' `last_turn_error`; the Clinic reads Codex's `task_complete`
//! errors with `codex_error` too. Only the end of the file is read: the record that decides
//! is the last one of the turn.

use std::path::Path;

use serde_json::Value;

use crate::state::bounded::{self, Links};

/// How much of the session file's end is read.
const TAIL: u64 = 64 * 1024;

/// The error a turn ended in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnError {
    /// What kind of error, e.g. Codex's `context_window_exceeded`, or `api_error`.
    pub kind: String,
    pub message: String,
    /// When the CLI recorded it (RFC 3339), if it said.
    pub ts: Option<String>,
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// The error the last turn in the session file at `path` ended in, if it ended in one.
pub fn last_turn_error(path: &Path) -> Option<TurnError> {
    // A tail that starts mid-file starts mid-line: `lines_text` drops that line.
    let tail = bounded::read_tail(path, TAIL, Links::Follow).ok()?;
    last_turn_error_in(&tail.lines_text())
}

/// `last_turn_error` on the text of a session file's end: the last record that says how a turn
/// went decides (Codex: the turn's start or end event; Gemini: a user, model or error message).
pub fn last_turn_error_in(text: &str) -> Option<TurnError> {
    for line in text.lines().rev() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let ts = record
            .get("timestamp")
            .and_then(Value::as_str)
            .map(str::to_string);
        match record.get("type").and_then(Value::as_str) {
            // Codex: {type: event_msg, payload: {type: task_started | task_complete, …}}.
            Some("event_msg") => {
                let payload = &record["payload"];
                match payload.get("type").and_then(Value::as_str) {
                    Some("task_complete" | "turn_complete") => {
                        return codex_error(payload).map(|(kind, message)| TurnError {
                            kind,
                            message,
                            ts,
                        });
                    }
                    Some("task_started" | "turn_started" | "user_message") => return None,
                    _ => {}
                }
            }
            // Gemini: {type: user | gemini | error | info | warning, content, …}.
            Some("user" | "gemini") => return None,
            Some("error") => {
                let message = match record.get("content") {
                    Some(Value::String(s)) => s.trim().to_string(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                return Some(TurnError {
                    kind: "api_error".into(),
                    message,
                    ts,
                });
            }
            _ => {}
        }
    }
    None
}

/// The error of a Codex `task_complete` event, as `(kind, message)`: `codex_error_info` is a
/// name (`context_window_exceeded`) or an object keyed by one.
pub fn codex_error(payload: &Value) -> Option<(String, String)> {
    let error = payload.get("error").filter(|e| !e.is_null())?;
    let message = match error.get("message") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None if error.is_string() => error.as_str().unwrap_or("").to_string(),
        None => error.to_string(),
    };
    let kind = match error.get("codex_error_info") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o.keys().next().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    let kind = if kind.is_empty() {
        "api_error".to_string()
    } else {
        kind
    };
    Some((kind, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of a Codex 0.169.0 rollout after a 400 `context_length_exceeded` (shortened).
    const CODEX_FAILED: &str = r#"{"timestamp":"2026-11-23T19:04:15.057Z","type":"event_msg","payload":{"type":"task_started","turn_id":"t1"}}
{"timestamp":"2026-11-23T19:04:15.129Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"migrate the billing tables"}]}}
{"timestamp":"2026-11-23T19:04:15.184Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"total_tokens":258400},"model_context_window":258400}}}
{"timestamp":"2026-11-23T19:04:15.189Z","type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying.","codex_error_info":"context_window_exceeded"}}}
"#;

    /// The end of a Gemini CLI 0.61.0 chat file after a 400 token-limit error (shortened).
    const GEMINI_FAILED: &str = r#"{"id":"u1","timestamp":"2026-11-23T19:04:54.833Z","type":"user","content":[{"text":"migrate the billing tables"}]}
{"$set":{"lastUpdated":"2026-11-23T19:04:54.833Z"}}
{"id":"e1","timestamp":"2026-11-23T19:04:54.933Z","type":"error","content":"[API Error: {\"error\":{\"code\":400,\"status\":\"INVALID_ARGUMENT\",\"message\":\"The input token count (1300000) exceeds the maximum number of tokens allowed (1048576).\"}}]"}
{"$set":{"lastUpdated":"2026-11-23T19:04:54.934Z"}}
{"id":"i1","timestamp":"2026-11-23T19:04:54.934Z","type":"info","content":"This request failed. Press F12 for diagnostics."}
"#;

    #[test]
    fn a_codex_turn_that_ended_in_an_error() {
        let e = last_turn_error_in(CODEX_FAILED).unwrap();
        assert_eq!(e.kind, "context_window_exceeded");
        assert!(e.message.contains("ran out of room"), "{e}");
        assert_eq!(e.ts.as_deref(), Some("2026-11-23T19:04:15.189Z"));
        // The next prompt started a turn: the error is history.
        let next = format!(
            "{CODEX_FAILED}{}\n",
            r#"{"timestamp":"t","type":"event_msg","payload":{"type":"task_started","turn_id":"t2"}}"#
        );
        assert_eq!(last_turn_error_in(&next), None);
        let fine = CODEX_FAILED.replace(r#""error":{"message""#, r#""error":null,"x":{"message""#);
        assert_eq!(last_turn_error_in(&fine), None);
        // A running turn has no end yet.
        let running: String = CODEX_FAILED.lines().take(3).collect::<Vec<_>>().join("\n");
        assert_eq!(last_turn_error_in(&running), None);
    }

    #[test]
    fn a_gemini_turn_that_ended_in_an_error() {
        let e = last_turn_error_in(GEMINI_FAILED).unwrap();
        assert_eq!(e.kind, "api_error");
        assert!(e.message.contains("exceeds the maximum number of tokens"));
        let answered = format!(
            "{GEMINI_FAILED}{}\n",
            r#"{"id":"u2","type":"user","content":[{"text":"try again"}]}"#
        );
        assert_eq!(last_turn_error_in(&answered), None);
        let fine = r#"{"id":"u1","type":"user","content":"hi"}
{"id":"g1","type":"gemini","content":"done","tokens":{"input":10}}
{"id":"i1","type":"info","content":""}
"#;
        assert_eq!(last_turn_error_in(fine), None);
    }

    #[test]
    fn other_files_say_nothing() {
        assert_eq!(last_turn_error_in(""), None);
        assert_eq!(
            last_turn_error_in("not json\n{\"type\":\"assistant\"}\n"),
            None
        );
        assert_eq!(
            last_turn_error(Path::new("/nonexistent/rollout.jsonl")),
            None
        );
    }

    #[test]
    fn only_the_end_of_a_long_file_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("rollout.jsonl");
        let filler = format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"content\":\"{}\"}}}}\n",
            "x".repeat(1000)
        );
        std::fs::write(&path, format!("{}{CODEX_FAILED}", filler.repeat(200))).unwrap();
        assert_eq!(
            last_turn_error(&path).unwrap().kind,
            "context_window_exceeded"
        );
    }

    #[test]
    fn codex_error_info_as_an_object_names_the_kind() {
        let p: Value = serde_json::from_str(
            r#"{"type":"task_complete","error":{"message":"boom","codex_error_info":{"http_connection_failed":{"status":502}}}}"#,
        )
        .unwrap();
        assert_eq!(
            codex_error(&p),
            Some(("http_connection_failed".into(), "boom".into()))
        );
    }
}
