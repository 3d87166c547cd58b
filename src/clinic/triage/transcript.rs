//! What a CLI's transcript says (Claude Code, Codex and Gemini JSONL): the last prompt, the
//! errors, the tool calls and the assistant's words, and whether it holds a turn at all.

use std::path::Path;

use serde_json::Value;

use super::{flag, str_of};
use crate::policy::ToolCall;
use crate::state::bounded::{self, Links};
use crate::state::jsonl::{TAIL_BYTES, objects as jsonl};
use crate::text::shorten;

/// What a transcript says, whatever the CLI.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TranscriptFacts {
    /// The last prompt a person (or phoenix) gave.
    pub last_prompt: Option<String>,
    /// API errors and failed tool results, oldest first.
    pub errors: Vec<(String, String)>,
    pub tool_calls: Vec<ToolCall>,
    /// The assistant's last words, oldest first.
    pub assistant: Vec<String>,
    /// Why the transcript could not be read, when it exists but is refused (not a regular
    /// file, unreadable): for the caller to pass on.
    pub note: Option<String>,
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                _ => str_of(p, "text").map(str::to_string),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl TranscriptFacts {
    /// The facts of the transcript at `path` (its tail), whatever the CLI.
    pub fn read(path: &Path) -> TranscriptFacts {
        match bounded::read_tail(path, TAIL_BYTES, Links::Follow) {
            Ok(tail) => transcript_facts(&jsonl(&tail.lines_text())),
            Err(e) if e.is_not_found() => TranscriptFacts::default(),
            Err(e) => TranscriptFacts {
                note: Some(format!("transcript: {e}")),
                ..TranscriptFacts::default()
            },
        }
    }

    /// The assistant's last `n` non-empty messages, oldest first, each cut to `max` chars.
    pub fn last_words(&self, n: usize, max: usize) -> Vec<String> {
        let mut words: Vec<String> = self
            .assistant
            .iter()
            .rev()
            .filter(|t| !t.trim().is_empty())
            .take(n)
            .map(|t| shorten(t, max))
            .collect();
        words.reverse();
        words
    }
}

/// Records of a transcript that are no turn of the conversation: what a CLI may write at
/// startup, before its first prompt (Claude Code's snapshots and summaries, Codex's session
/// header).
const NOT_A_TURN: &[&str] = &[
    "mode",
    "permission-mode",
    "custom-title",
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "system",
    "session_meta",
    "turn_context",
];

/// Does the transcript at `path` hold at least one turn (a prompt, an answer, a tool call),
/// so that resuming its session brings a conversation back? `false` for a transcript the CLI
/// never wrote (a session that got no prompt) or one with only startup records; `true` when
/// it cannot tell (a format it does not know, a file it may not read): a session that may hold
/// work is never thrown away on a guess.
pub fn transcript_has_turn(path: &Path) -> bool {
    let tail = match bounded::read_tail(path, TAIL_BYTES, Links::Follow) {
        Ok(tail) => tail.lines_text(),
        Err(e) => return !e.is_not_found(),
    };
    if tail.trim().is_empty() {
        return false;
    }
    let records = jsonl(&tail);
    let facts = transcript_facts(&records);
    if facts.last_prompt.is_some() || !facts.assistant.is_empty() || !facts.tool_calls.is_empty() {
        return true;
    }
    let startup_only = !records.is_empty()
        && records.iter().all(|r| {
            str_of(r, "type").is_some_and(|t| NOT_A_TURN.contains(&t))
                || (str_of(r, "type") == Some("user") && flag(r, "isMeta"))
        });
    !startup_only
}

/// Read the facts out of Claude Code, Codex, Gemini, pi or Copilot CLI transcript records.
pub fn transcript_facts(records: &[Value]) -> TranscriptFacts {
    let mut reader = Reader::default();
    for r in records {
        // Claude Code: a subagent's records (older builds wrote them into the main transcript)
        // are not the main thread's errors, prompt or words.
        if flag(r, "isSidechain") {
            continue;
        }
        match str_of(r, "type").unwrap_or("") {
            // Claude Code: {type, message: {role, content: string | [blocks]}}.
            kind @ ("user" | "assistant") if r.get("message").is_some() => reader.claude(kind, r),
            // Gemini: {type: user|gemini|error|…, content, toolCalls: [{name, status}]}.
            "user" => {
                if let Some(s) = r.get("content").map(content_text).filter(|s| !s.is_empty()) {
                    reader.facts.last_prompt = Some(s);
                }
            }
            "gemini" => reader.gemini(r),
            "error" => reader.api_error(r.get("content").map(content_text).unwrap_or_default()),
            // Copilot CLI: {type: user.message | session.error | …, data: {…}}.
            "user.message" => {
                if let Some(s) = r.pointer("/data/content").and_then(Value::as_str)
                    && !s.trim().is_empty()
                {
                    reader.facts.last_prompt = Some(s.to_string());
                }
            }
            "session.error" => reader.api_error(
                r.pointer("/data/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            // Codex: {type: response_item | event_msg, payload: {type, …}}.
            "response_item" | "event_msg" => reader.codex(r),
            // pi: {type: message, message: {role: user | assistant | toolResult, …}}.
            "message" => reader.pi(r),
            _ => {}
        }
    }
    reader.facts
}

/// The facts read so far, and the tool calls still waiting for their result.
#[derive(Default)]
struct Reader {
    facts: TranscriptFacts,
    /// `(call id, tool name)` of each call whose result has not been read yet.
    pending: Vec<(String, String)>,
}

impl Reader {
    fn api_error(&mut self, text: String) {
        self.facts.errors.push(("api_error".into(), text));
    }

    /// A tool call was made; its result comes in a later record.
    fn called(&mut self, id: Option<&str>, tool: Option<&str>) {
        self.pending.push((
            id.unwrap_or("").to_string(),
            tool.unwrap_or("?").to_string(),
        ));
    }

    /// The tool of call `id`, whose result has come (`?` for a call not seen).
    fn answered(&mut self, id: &str) -> String {
        self.pending
            .iter()
            .position(|(pid, _)| pid == id)
            .map(|i| self.pending.remove(i).1)
            .unwrap_or_else(|| "?".into())
    }

    /// A tool call of record `r` finished, with the error text when it failed.
    fn finished(&mut self, tool: String, r: &Value, failure: Option<String>) {
        if let Some(text) = &failure {
            self.facts.errors.push(("tool_error".into(), text.clone()));
        }
        self.facts.tool_calls.push(ToolCall {
            tool,
            ok: failure.is_none(),
            ts: str_of(r, "timestamp").map(str::to_string),
            input: None,
            error: failure.map(|text| shorten(&text, 300)),
        });
    }

    /// A Claude Code `user` or `assistant` record.
    fn claude(&mut self, kind: &str, r: &Value) {
        match &r["message"]["content"] {
            // Meta records and compaction summaries are not prompts.
            Value::String(s)
                if kind == "user"
                    && !flag(r, "isMeta")
                    && !flag(r, "isCompactSummary")
                    && !crate::agent_cli::claude::is_machine_prompt(s) =>
            {
                self.facts.last_prompt = Some(s.clone());
            }
            Value::String(_) if kind == "user" => {}
            Value::String(s) => self.facts.assistant.push(s.clone()),
            Value::Array(blocks) => {
                for b in blocks {
                    self.claude_block(kind, r, b);
                }
            }
            _ => {}
        }
    }

    /// One content block `b` of Claude Code record `r`.
    fn claude_block(&mut self, kind: &str, r: &Value, b: &Value) {
        match str_of(b, "type").unwrap_or("") {
            "text" if kind == "assistant" => {
                let text = str_of(b, "text").unwrap_or("").to_string();
                if flag(r, "isApiErrorMessage") {
                    self.api_error(text);
                } else {
                    self.facts.assistant.push(text);
                }
            }
            "text" if !flag(r, "isMeta") => {
                let text = str_of(b, "text").unwrap_or("");
                if !crate::agent_cli::claude::is_machine_prompt(text) {
                    self.facts.last_prompt = Some(text.to_string());
                }
            }
            "tool_use" => self.called(str_of(b, "id"), str_of(b, "name")),
            "tool_result" => {
                let tool = self.answered(str_of(b, "tool_use_id").unwrap_or(""));
                let text = content_text(&b["content"]);
                self.finished(tool, r, flag(b, "is_error").then_some(text));
            }
            _ => {}
        }
    }

    /// A Gemini `gemini` record: the answer and the tool calls it made.
    fn gemini(&mut self, r: &Value) {
        let text = r.get("content").map(content_text).unwrap_or_default();
        if !text.is_empty() {
            self.facts.assistant.push(text);
        }
        for call in r
            .get("toolCalls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let failed = str_of(call, "status") == Some("error");
            let result = call
                .get("result")
                .map(|v| v.to_string())
                .unwrap_or_default();
            let tool = str_of(call, "name").unwrap_or("?").to_string();
            self.finished(tool, r, failed.then_some(result));
        }
    }

    /// A pi `message` record: a prompt, an answer (its tool calls; a failed model call has
    /// `stopReason: "error"`), or a tool's result.
    fn pi(&mut self, r: &Value) {
        let m = &r["message"];
        match str_of(m, "role").unwrap_or("") {
            "user" => self.facts.last_prompt = Some(content_text(&m["content"])),
            "assistant" => {
                if str_of(m, "stopReason") == Some("error") {
                    self.api_error(str_of(m, "errorMessage").unwrap_or("").to_string());
                }
                for b in m["content"].as_array().into_iter().flatten() {
                    match str_of(b, "type").unwrap_or("") {
                        "text" => self
                            .facts
                            .assistant
                            .push(str_of(b, "text").unwrap_or("").into()),
                        "toolCall" => self.called(str_of(b, "id"), str_of(b, "name")),
                        _ => {}
                    }
                }
            }
            "toolResult" => {
                let tool = self.answered(str_of(m, "toolCallId").unwrap_or(""));
                let failure = flag(m, "isError").then(|| content_text(&m["content"]));
                self.finished(tool, r, failure);
            }
            _ => {}
        }
    }

    /// A Codex `response_item` or `event_msg` record.
    fn codex(&mut self, r: &Value) {
        let p = &r["payload"];
        match str_of(p, "type").unwrap_or("") {
            "message" => {
                let text = content_text(&p["content"]);
                match str_of(p, "role") {
                    Some("user") => self.facts.last_prompt = Some(text),
                    Some("assistant") => self.facts.assistant.push(text),
                    _ => {}
                }
            }
            "user_message" => {
                self.facts.last_prompt = str_of(p, "message").map(str::to_string);
            }
            "function_call" | "custom_tool_call" => {
                self.called(str_of(p, "call_id"), str_of(p, "name"));
            }
            "function_call_output" | "custom_tool_call_output" => {
                let tool = self.answered(str_of(p, "call_id").unwrap_or(""));
                self.finished(tool, r, None);
            }
            "error" | "stream_error" => {
                self.api_error(str_of(p, "message").unwrap_or("").to_string());
            }
            // Codex 0.169 ends a failed turn with the error, e.g. a full context.
            "task_complete" | "turn_complete" => {
                if let Some((kind, message)) = crate::agent_cli::failed_turn::codex_error(p) {
                    self.api_error(format!("{kind}: {message}"));
                }
            }
            _ => {}
        }
    }
}
