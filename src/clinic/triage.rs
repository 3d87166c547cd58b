//! Triage: build the TraumaContext from what phoenix has — the wrapper's exit, tool_use.jsonl,
//! ops.jsonl, state.json, brief.md and the tail of the CLI's transcript (Claude Code, Codex
//! and Gemini JSONL). Every source may be missing or corrupt: triage takes what it can read.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::policy::{AgentInfo, ExitInfo, ToolCall, Trauma};
use crate::state::bounded::{self, Links};
use crate::state::jsonl::{TAIL_BYTES, objects as jsonl, tail_jsonl};
use crate::state::{AgentDir, OPS_LOG, Op, op};
use crate::text::{keep_end, shorten};

/// Tool calls kept in the TraumaContext.
const TOOL_CALLS: usize = 12;
/// Length limits: the context goes into a Lua state with a memory limit and into a prompt.
const TEXT_CHARS: usize = 2000;
const TRACE_CHARS: usize = 4000;
const SUMMARY_CHARS: usize = 4000;

/// What triage starts from.
#[derive(Debug, Clone)]
pub struct TriageInput<'a> {
    pub agent: AgentInfo,
    pub dir: &'a AgentDir,
    /// The exit as the wrapper saw it; read from ops.jsonl (`agent_exit`) when `None`.
    pub exit: Option<ExitInfo>,
    /// The CLI's transcript; found through ops.jsonl (`transcript_path`) when `None`.
    pub transcript: Option<PathBuf>,
    /// The tail of what the CLI printed, if the caller has it.
    pub output: Option<String>,
    /// Which session the evidence is about: transcript records and tool calls from before
    /// its start are an earlier session's.
    pub session: Session,
}

/// The session being diagnosed, for the evidence window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// The one started last (the wrapper right after its exit, the watchdog while it runs).
    Latest,
    /// The one of the last recorded exit (`phoenix clinic` after the wrapper has moved on).
    LastExited,
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool) == Some(true)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The latest `agent_exit` in ops.jsonl, with the crashes counted within the crash window.
pub fn exit_from_ops(ops: &[op::Line], agent: &AgentInfo) -> Option<ExitInfo> {
    let exits: Vec<&op::Line> = ops
        .iter()
        .filter(|o| matches!(o.op, Op::AgentExit(_)))
        .collect();
    let last = exits.last()?;
    let code = last
        .get("code")
        .as_i64()
        .and_then(|c| i32::try_from(c).ok());
    let signal = last
        .get("signal")
        .as_i64()
        .and_then(|c| i32::try_from(c).ok());
    let window_start = jiff::Timestamp::now()
        .as_second()
        .saturating_sub(agent.restart.crash_window.as_secs() as i64);
    let crashes = exits
        .iter()
        .filter(|e| e.get("code").as_i64() != Some(0))
        .filter(|e| e.time().is_none_or(|t| t.as_second() >= window_start))
        .count() as u32;
    Some(ExitInfo {
        code,
        signal,
        runtime_ms: last.get("runtime_ms").as_u64().unwrap_or(0),
        resumed: last.get("resumed").as_bool().unwrap_or(false)
            || last.str("mode") == Some("resume"),
        showed_life: last.get("showed_life").as_bool().unwrap_or(true),
        crashes_in_window: crashes.max(u32::from(code != Some(0))),
        fresh_requested: false,
        session_id: last.str("session_id").map(str::to_string),
    })
}

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

/// Read the facts out of Claude Code, Codex or Gemini transcript records.
pub fn transcript_facts(records: &[Value]) -> TranscriptFacts {
    let mut facts = TranscriptFacts::default();
    let mut pending: Vec<(String, String)> = Vec::new();
    for r in records {
        let kind = str_of(r, "type").unwrap_or("");
        match kind {
            // Claude Code: {type, message: {role, content: string | [blocks]}}.
            "user" | "assistant" if r.get("message").is_some() => {
                let message = &r["message"];
                let api_error = r.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true);
                match &message["content"] {
                    // Meta records and compaction summaries are not prompts.
                    Value::String(s)
                        if kind == "user" && !flag(r, "isMeta") && !flag(r, "isCompactSummary") =>
                    {
                        facts.last_prompt = Some(s.clone());
                    }
                    Value::String(_) if kind == "user" => {}
                    Value::String(s) => facts.assistant.push(s.clone()),
                    Value::Array(blocks) => {
                        for b in blocks {
                            match str_of(b, "type").unwrap_or("") {
                                "text" if kind == "assistant" => {
                                    let text = str_of(b, "text").unwrap_or("").to_string();
                                    if api_error {
                                        facts.errors.push(("api_error".into(), text));
                                    } else {
                                        facts.assistant.push(text);
                                    }
                                }
                                "text" if !flag(r, "isMeta") => {
                                    facts.last_prompt =
                                        Some(str_of(b, "text").unwrap_or("").to_string());
                                }
                                "tool_use" => pending.push((
                                    str_of(b, "id").unwrap_or("").to_string(),
                                    str_of(b, "name").unwrap_or("?").to_string(),
                                )),
                                "tool_result" => {
                                    let id = str_of(b, "tool_use_id").unwrap_or("");
                                    let ok =
                                        b.get("is_error").and_then(Value::as_bool) != Some(true);
                                    let text = content_text(&b["content"]);
                                    let tool = pending
                                        .iter()
                                        .position(|(pid, _)| pid == id)
                                        .map(|i| pending.remove(i).1)
                                        .unwrap_or_else(|| "?".into());
                                    if !ok {
                                        facts.errors.push(("tool_error".into(), text.clone()));
                                    }
                                    facts.tool_calls.push(ToolCall {
                                        tool,
                                        ok,
                                        ts: str_of(r, "timestamp").map(str::to_string),
                                        input: None,
                                        error: (!ok).then(|| shorten(&text, 300)),
                                    });
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            // Gemini: {type: user|gemini|error|…, content, toolCalls: [{name, status}]}.
            "user" => {
                if let Some(s) = r.get("content").map(content_text).filter(|s| !s.is_empty()) {
                    facts.last_prompt = Some(s);
                }
            }
            "gemini" => {
                let text = r.get("content").map(content_text).unwrap_or_default();
                if !text.is_empty() {
                    facts.assistant.push(text);
                }
                for call in r
                    .get("toolCalls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let ok = str_of(call, "status") != Some("error");
                    let result = call
                        .get("result")
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    if !ok {
                        facts.errors.push(("tool_error".into(), result.clone()));
                    }
                    facts.tool_calls.push(ToolCall {
                        tool: str_of(call, "name").unwrap_or("?").to_string(),
                        ok,
                        ts: str_of(r, "timestamp").map(str::to_string),
                        input: None,
                        error: (!ok).then(|| shorten(&result, 300)),
                    });
                }
            }
            "error" => {
                let text = r.get("content").map(content_text).unwrap_or_default();
                facts.errors.push(("api_error".into(), text));
            }
            // Codex: {type: response_item | event_msg, payload: {type, …}}.
            "response_item" | "event_msg" => {
                let p = &r["payload"];
                match str_of(p, "type").unwrap_or("") {
                    "message" => {
                        let text = content_text(&p["content"]);
                        match str_of(p, "role") {
                            Some("user") => facts.last_prompt = Some(text),
                            Some("assistant") => facts.assistant.push(text),
                            _ => {}
                        }
                    }
                    "user_message" => {
                        facts.last_prompt = str_of(p, "message").map(str::to_string);
                    }
                    "function_call" | "custom_tool_call" => pending.push((
                        str_of(p, "call_id").unwrap_or("").to_string(),
                        str_of(p, "name").unwrap_or("?").to_string(),
                    )),
                    "function_call_output" | "custom_tool_call_output" => {
                        let id = str_of(p, "call_id").unwrap_or("");
                        let tool = pending
                            .iter()
                            .position(|(pid, _)| pid == id)
                            .map(|i| pending.remove(i).1)
                            .unwrap_or_else(|| "?".into());
                        facts.tool_calls.push(ToolCall {
                            tool,
                            ok: true,
                            ts: str_of(r, "timestamp").map(str::to_string),
                            input: None,
                            error: None,
                        });
                    }
                    "error" | "stream_error" => facts.errors.push((
                        "api_error".into(),
                        str_of(p, "message").unwrap_or("").to_string(),
                    )),
                    // Codex 0.169 ends a failed turn with the error, e.g. a full context.
                    "task_complete" | "turn_complete" => {
                        if let Some((kind, message)) = crate::agent_cli::failed_turn::codex_error(p)
                        {
                            facts
                                .errors
                                .push(("api_error".into(), format!("{kind}: {message}")));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    facts
}

/// How the line the wrapper prints just before it starts `agent`'s CLI begins (`[phoenix]
/// starting `NAME`, resuming session …` or `… (fresh session)`).
pub fn start_banner(agent: &str) -> String {
    format!("[phoenix] starting `{agent}`")
}

/// The part of a captured pane that `agent`'s current session wrote: the lines after the
/// last start banner ([`start_banner`]). Scrollback from earlier sessions (an old "529
/// overloaded", an old retry banner) is no evidence about this one. Without a banner in the
/// capture every captured line came after it (it scrolled out of the capture, or the history
/// was cleared): all of it is this session's. A line that only contains the banner, further
/// in, is the agent's own text.
pub fn this_session<'a>(screen: &'a str, agent: &str) -> &'a str {
    let banner = start_banner(agent);
    let mut start = 0;
    let mut at = 0;
    for line in screen.split_inclusive('\n') {
        at += line.len();
        if said_by_phoenix(line, &banner) {
            start = at;
        }
    }
    &screen[start..]
}

/// Does `line` carry `text` as phoenix printed it: at its start, or after what a CLI killed
/// mid-screen left on the line (its prompt `❯ `, a box edge), but not inside the agent's own
/// words (`echo '[phoenix] …'`)?
pub fn said_by_phoenix(line: &str, text: &str) -> bool {
    line.find(text)
        .is_some_and(|i| !line[..i].chars().any(char::is_alphanumeric))
}

/// When `session` ran, as far as ops.jsonl tells: from its `agent_start` to its
/// `agent_exit` (open-ended for the latest, which may still run). `None` where unknown.
pub type Window = (Option<jiff::Timestamp>, Option<jiff::Timestamp>);

/// The window of `session` (see [`Window`]).
pub fn session_window(ops: &[op::Line], session: Session) -> Window {
    let (upto, end) = match session {
        Session::Latest => (ops.len(), None),
        Session::LastExited => match ops.iter().rposition(|o| matches!(o.op, Op::AgentExit(_))) {
            Some(i) => (i, ops[i].time()),
            None => return (None, None),
        },
    };
    // `spawned`: when the wrapper started the CLI, a moment before it recorded the start.
    let start = ops[..upto]
        .iter()
        .rev()
        .find(|o| matches!(o.op, Op::AgentStart(_)))
        .and_then(|o| {
            o.str("spawned")
                .and_then(|t| t.parse().ok())
                .or_else(|| o.time())
        });
    (start, end)
}

/// Was a record stamped `ts` written by the session that ran in `window`? A resumed session
/// appends to the transcript of the one before it, and an old "529" in there is no evidence
/// about this one. Without a readable stamp nothing can be told apart, and the record is kept.
pub fn in_session(ts: Option<&str>, window: Window) -> bool {
    let Some(ts) = ts.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return true;
    };
    within(ts, window)
}

fn within(ts: jiff::Timestamp, window: Window) -> bool {
    window.0.is_none_or(|start| ts >= start) && window.1.is_none_or(|end| ts <= end)
}

/// The records of a transcript written in `window` (see [`in_session`]).
pub fn records_in(records: Vec<Value>, window: Window) -> Vec<Value> {
    records
        .into_iter()
        .filter(|r| in_session(str_of(r, "timestamp"), window))
        .collect()
}

/// Every text in `records` (string values at any depth), one per line.
fn texts<'a>(records: impl Iterator<Item = &'a Value>) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    records.for_each(|r| walk(r, &mut out));
    out
}

/// `output` without the lines a resumed CLI printed again from `earlier` (the texts of its
/// earlier sessions' transcript records). A line is compared without the marks the CLI
/// puts before it (`● `, `⎿ `); short lines (`ok`) are kept, they could be anyone's.
pub fn without_replay(output: &str, earlier: &str) -> String {
    if earlier.is_empty() {
        return output.to_string();
    }
    output
        .lines()
        .filter(|line| {
            let words = line
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .trim_end();
            words.chars().count() < 12 || !earlier.contains(words)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last lines of the CLI's output that look like an error.
fn error_in_output(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    lines
        .iter()
        .rev()
        .find(|l| {
            let lower = l.to_lowercase();
            [
                "error",
                "too long",
                "failed",
                "exception",
                "panicked",
                "denied",
                // Gemini CLI's dialog after a 404 for its model says only "It seems like you
                // don't have access to gemini-x" (no "error" on screen).
                "have access to",
            ]
            .iter()
            .any(|w| lower.contains(w))
        })
        .map(|l| l.to_string())
}

/// Build the TraumaContext.
pub fn triage(input: &TriageInput<'_>) -> Trauma {
    let dir = input.dir;
    let ops = op::tail(&dir.file(OPS_LOG));
    let exit = input
        .exit
        .clone()
        .or_else(|| exit_from_ops(&ops, &input.agent));

    let transcript = input.transcript.clone().or_else(|| {
        ops.iter()
            .rev()
            .find_map(|o| o.str("transcript_path").map(PathBuf::from))
    });
    // The evidence is what the session being diagnosed wrote: the transcript and phoenix's
    // tool log since it started (its successor's pane output is cut by the wrapper).
    let window = session_window(&ops, input.session);
    let records = transcript.as_deref().map(tail_jsonl).unwrap_or_default();
    // A resumed CLI prints its conversation again (Claude Code does): on its screen, the
    // earlier sessions' words are a replay, not what this one wrote.
    let earlier = texts(records.iter().filter(|r| {
        let ts = str_of(r, "timestamp").and_then(|t| t.parse::<jiff::Timestamp>().ok());
        matches!((ts, window.0), (Some(ts), Some(start)) if ts < start)
    }));
    let facts = transcript_facts(&records_in(records, window));
    let output = input.output.as_deref().map(|o| without_replay(o, &earlier));

    // tool_use.jsonl is phoenix's own record; the transcript fills in when it is missing.
    let logged: Vec<ToolCall> = tail_jsonl(&dir.file("tool_use.jsonl"))
        .iter()
        .map(|t| ToolCall {
            tool: str_of(t, "tool").unwrap_or("?").to_string(),
            ok: t.get("ok").and_then(Value::as_bool).unwrap_or(true),
            ts: str_of(t, "ts").map(str::to_string),
            input: str_of(t, "input").map(|s| shorten(s, 200)),
            error: str_of(t, "error").map(|s| shorten(s, 300)),
        })
        .collect();
    let all_calls = if logged.is_empty() {
        facts.tool_calls.clone()
    } else {
        logged
    };
    let mut available_tools: Vec<String> = Vec::new();
    for c in all_calls.iter().filter(|c| c.ok && c.tool != "?") {
        if !available_tools.contains(&c.tool) {
            available_tools.push(c.tool.clone());
        }
    }
    let tool_calls: Vec<ToolCall> = all_calls
        .iter()
        .skip(all_calls.len().saturating_sub(TOOL_CALLS))
        .cloned()
        .collect();

    let state = dir.peek_state().unwrap_or_default();
    let original_prompt = (state.current_task.clone())
        .filter(|t| !t.is_empty())
        .or(facts.last_prompt.clone())
        .map(|p| shorten(&p, TEXT_CHARS));

    let output_error = output.as_deref().and_then(error_in_output);
    let failed_call = tool_calls
        .iter()
        .rev()
        .find(|c| !c.ok && in_session(c.ts.as_deref(), window));
    let (error_type, error_message) = if let Some((kind, text)) = facts.errors.last() {
        (kind.clone(), text.clone())
    } else if let Some(line) = output_error {
        ("output".to_string(), line)
    } else if let Some(call) = failed_call {
        (
            "tool_error".to_string(),
            format!(
                "`{}` failed: {}",
                call.tool,
                call.error.as_deref().unwrap_or("no error text")
            ),
        )
    } else if let Some((e, at)) = crate::state::agent::session_error(&state)
        // Only the diagnosed session's: a resumed one keeps the session id, and the error
        // must come from after its start (an undated error cannot be placed, and is left out).
        && at.is_some_and(|at| within(at, window))
    {
        ("tool_error".to_string(), e.to_string())
    } else {
        match &exit {
            Some(e) if e.signal.is_some() => ("signal".to_string(), e.describe()),
            Some(e) => ("crash".to_string(), e.describe()),
            None => ("unknown".to_string(), "no exit recorded".to_string()),
        }
    };

    let stack_trace = match &output {
        Some(out) if !out.trim().is_empty() => keep_end(out, TRACE_CHARS),
        _ => keep_end(
            &facts
                .errors
                .iter()
                .rev()
                .take(3)
                .rev()
                .map(|(kind, text)| format!("[{kind}] {}", shorten(text, 1000)))
                .collect::<Vec<_>>()
                .join("\n"),
            TRACE_CHARS,
        ),
    };

    let mut summary = String::new();
    if let Some(brief) = dir.brief()
        && !brief.trim().is_empty()
    {
        summary.push_str("Brief:\n");
        summary.push_str(&shorten(&brief, SUMMARY_CHARS / 2));
        summary.push_str("\n\n");
    }
    let said: Vec<&String> = facts
        .assistant
        .iter()
        .filter(|t| !t.trim().is_empty())
        .collect();
    let said: Vec<String> = said[said.len().saturating_sub(8)..]
        .iter()
        .map(|t| format!("- {}", shorten(t.lines().next().unwrap_or(""), 240)))
        .collect();
    if !said.is_empty() {
        summary.push_str("The agent's last messages (oldest first):\n");
        summary.push_str(&said.join("\n"));
    }
    let history_summary = (!summary.trim().is_empty()).then(|| shorten(&summary, SUMMARY_CHARS));

    Trauma {
        agent: input.agent.clone(),
        original_prompt,
        error_type,
        error_message: shorten(&error_message, TEXT_CHARS),
        stack_trace,
        tool_calls,
        history_summary,
        available_tools,
        exit,
        recoveries: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops as ops.jsonl would hold them.
    fn lines(ops: &[Value]) -> Vec<op::Line> {
        op::parse(&ops.iter().map(|o| format!("{o}\n")).collect::<String>())
    }
    use serde_json::json;

    #[test]
    fn claude_transcript_gives_prompt_errors_and_tools() {
        let records = vec![
            json!({"type": "user", "message": {"role": "user", "content": "Refactor the parser"}}),
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "text", "text": "Reading the parser first."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {}},
            ]}}),
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "fn parse() {}"},
            ]}}),
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t2", "name": "WebBrowse", "input": {}},
            ]}}),
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                 "content": "<tool_use_error>Error: No such tool available: WebBrowse</tool_use_error>"},
            ]}}),
            json!({"type": "assistant", "isApiErrorMessage": true, "message": {"role": "assistant",
                "content": [{"type": "text", "text": "Prompt is too long"}]}}),
        ];
        let facts = transcript_facts(&records);
        assert_eq!(facts.last_prompt.as_deref(), Some("Refactor the parser"));
        assert_eq!(facts.tool_calls.len(), 2);
        assert_eq!(facts.tool_calls[1].tool, "WebBrowse");
        assert!(!facts.tool_calls[1].ok);
        assert_eq!(
            facts.errors.last().unwrap(),
            &("api_error".to_string(), "Prompt is too long".to_string())
        );
    }

    #[test]
    fn codex_and_gemini_errors_are_found() {
        let codex = vec![
            json!({"type": "event_msg", "payload": {"type": "user_message", "message": "fix it"}}),
            json!({"type": "event_msg", "payload": {"type": "error", "message": "stream disconnected: 503"}}),
        ];
        let facts = transcript_facts(&codex);
        assert_eq!(facts.last_prompt.as_deref(), Some("fix it"));
        assert_eq!(facts.errors[0].1, "stream disconnected: 503");
        let full = vec![
            json!({"type": "event_msg", "payload": {"type": "task_complete", "error": {
                "message": "Codex ran out of room in the model's context window.",
                "codex_error_info": "context_window_exceeded"}}}),
            json!({"type": "event_msg", "payload": {"type": "task_complete", "error": null}}),
        ];
        assert_eq!(
            transcript_facts(&full).errors,
            [(
                "api_error".to_string(),
                "context_window_exceeded: Codex ran out of room in the model's context window."
                    .to_string()
            )]
        );
        let gemini = vec![json!({"type": "error", "content": "[API Error: 429 quota]"})];
        assert_eq!(transcript_facts(&gemini).errors.len(), 1);
    }

    #[test]
    fn triage_without_any_file_still_says_something() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
        let trauma = triage(&TriageInput {
            agent: AgentInfo::default(),
            dir: &dir,
            exit: None,
            transcript: Some(tmp.path().join("missing.jsonl")),
            output: None,
            session: Session::Latest,
        });
        assert_eq!(trauma.error_type, "unknown");
        assert!(trauma.tool_calls.is_empty());
    }

    #[test]
    fn exits_are_read_from_ops_and_crashes_counted() {
        let now = crate::state::now_rfc3339();
        let ops = vec![
            json!({"event": "agent_exit", "ts": now, "code": 1, "runtime_ms": 5}),
            json!({"event": "agent_start", "ts": now}),
            json!({"event": "agent_exit", "ts": now, "code": 2, "runtime_ms": 7}),
        ];
        let exit = exit_from_ops(&lines(&ops), &AgentInfo::default()).unwrap();
        assert_eq!(exit.code, Some(2));
        assert_eq!(exit.crashes_in_window, 2);
        assert_eq!(exit.runtime_ms, 7);
    }

    #[test]
    fn pane_evidence_is_only_what_the_current_session_wrote() {
        let fresh = "[phoenix] starting `a` (fresh session)";
        let resumed = "[phoenix] starting `a`, resuming session s1";
        // An old overload from an earlier session, then a new start: the second session
        // printed nothing yet.
        let screen =
            format!("{fresh}\nAPI Error: 529 overloaded\n[phoenix] `a` ended (crash)\n{resumed}\n");
        assert_eq!(this_session(&screen, "a"), "");
        let screen = format!("old 429\n{resumed}\nSegmentation fault\n");
        assert_eq!(this_session(&screen, "a"), "Segmentation fault\n");
        // The banner scrolled out of the capture: every captured line is this session's.
        assert_eq!(this_session("line 1\nline 2", "a"), "line 1\nline 2");
        // Padding tmux may add does not hide the banner.
        let screen = format!("old 529\n  {fresh}   \nnew");
        assert_eq!(this_session(&screen, "a"), "new");
        // A CLI killed mid-screen leaves its prompt on the line the wrapper prints on.
        let screen = format!("old 529\n❯ {resumed}\nnew");
        assert_eq!(this_session(&screen, "a"), "new");
        // Another agent's banner, or text that merely quotes one, is no start of this one.
        let screen = "[phoenix] starting `ab` (fresh session)\nout";
        assert_eq!(this_session(screen, "a"), screen);
        let screen = format!("echo '{fresh}'\nout");
        assert_eq!(this_session(&screen, "a"), screen);
    }

    #[test]
    fn the_session_diagnosed_is_the_latest_or_the_last_exited() {
        let at = |m: u8| format!("2026-01-01T10:{m:02}:00Z");
        let ops = vec![
            json!({"event": "agent_start", "ts": at(1), "spawned": "2026-01-01T10:00:59Z"}),
            json!({"event": "agent_exit", "ts": at(2)}),
            json!({"event": "agent_start", "ts": at(3)}),
            json!({"event": "prompt", "ts": at(4)}),
        ];
        let ops = lines(&ops);
        let ts = |s: Option<jiff::Timestamp>| s.map(|t| t.to_string());
        let (start, end) = session_window(&ops, Session::Latest);
        assert_eq!((ts(start), ts(end)), (Some(at(3)), None));
        let (start, end) = session_window(&ops, Session::LastExited);
        assert_eq!(
            (ts(start), ts(end)),
            (Some("2026-01-01T10:00:59Z".into()), Some(at(2)))
        );
        assert_eq!(session_window(&ops[..1], Session::LastExited), (None, None));
        assert_eq!(session_window(&[], Session::Latest), (None, None));
        // The last exited session's records: neither before its start nor after its end.
        let window = session_window(&ops, Session::LastExited);
        assert!(!in_session(Some("2026-01-01T10:00:30Z"), window));
        assert!(in_session(Some("2026-01-01T10:01:30Z"), window));
        assert!(!in_session(Some("2026-01-01T10:03:30Z"), window));
        assert!(in_session(None, window));
        assert!(in_session(Some("not a time"), window));
    }

    #[test]
    fn a_resumed_clis_replay_of_its_conversation_is_not_its_output() {
        let earlier = texts(
            [
                json!({"type": "assistant", "message": {"content": [{"type": "text",
                "text": "API Error: 529 {\"type\":\"overloaded_error\"}"}]}}),
            ]
            .iter(),
        );
        let screen = "● API Error: 529 {\"type\":\"overloaded_error\"}\n  ⎿  ok\nSegmentation fault (core dumped)";
        assert_eq!(
            without_replay(screen, &earlier),
            "  ⎿  ok\nSegmentation fault (core dumped)"
        );
        assert_eq!(without_replay(screen, ""), screen);
    }

    #[test]
    fn evidence_from_before_the_session_started_is_not_its_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        let old = "2026-01-01T10:00:00.000Z";
        let new = "2026-01-01T10:05:00.000Z";
        // The resumed session appended to the transcript of the one that was overloaded.
        let transcript = tmp.path().join("t.jsonl");
        let lines = [
            json!({"type": "assistant", "timestamp": old, "isApiErrorMessage": true,
                   "message": {"role": "assistant", "content": [{"type": "text",
                   "text": "API Error: 529 {\"type\":\"overloaded_error\"}"}]}}),
            json!({"type": "user", "timestamp": new,
                   "message": {"role": "user", "content": "go on"}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&transcript, text).unwrap();
        std::fs::write(
            dir.file("tool_use.jsonl"),
            format!(
                "{}\n",
                json!({"tool": "Bash", "ok": false, "ts": old, "error": "429"})
            ),
        )
        .unwrap();
        let input = |start: &str| {
            std::fs::write(
                dir.file(OPS_LOG),
                format!(
                    "{}\n{}\n",
                    json!({"event": "agent_start", "ts": start}),
                    json!({"event": "agent_exit", "ts": new, "code": 1}),
                ),
            )
            .unwrap();
            triage(&TriageInput {
                agent: AgentInfo::default(),
                dir: &dir,
                exit: None,
                transcript: Some(transcript.clone()),
                output: None,
                session: Session::Latest,
            })
        };
        let trauma = input("2026-01-01T10:04:00.000Z");
        assert_eq!(trauma.error_type, "crash", "{trauma:?}");
        assert!(!trauma.error_message.contains("529"), "{trauma:?}");
        // The same files, read for the session that did write them, still show the error.
        let trauma = input("2026-01-01T09:59:00.000Z");
        assert_eq!(trauma.error_type, "api_error");
        assert!(trauma.error_message.contains("529"));
    }

    #[test]
    fn a_failed_turn_of_another_session_is_not_the_crashs_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        let failed = "2026-01-01T10:00:00.000Z";
        std::fs::write(
            dir.file(OPS_LOG),
            format!(
                "{}\n{}\n",
                json!({"event": "agent_start", "ts": "2026-01-01T10:04:00.000Z"}),
                json!({"event": "agent_exit", "ts": "2026-01-01T10:05:00.000Z", "code": 1}),
            ),
        )
        .unwrap();
        let diagnose = |state: Value| {
            std::fs::write(dir.file(crate::state::STATE), state.to_string()).unwrap();
            triage(&TriageInput {
                agent: AgentInfo::default(),
                dir: &dir,
                exit: None,
                transcript: None,
                output: None,
                session: Session::Latest,
            })
        };
        let error = "invalid_request: prompt is too long";
        // The fresh session `s2` crashed; `s1` had run out of context before it.
        let t = diagnose(json!({"session_id": "s2", "last_error": error,
            "last_error_session": "s1", "last_error_at": failed}));
        assert_eq!(t.error_type, "crash", "{t:?}");
        // The same session resumed (same id), crashing after the error was recorded.
        let t = diagnose(json!({"session_id": "s1", "last_error": error,
            "last_error_session": "s1", "last_error_at": failed}));
        assert_eq!(t.error_type, "crash", "{t:?}");
        // Written before errors carried their session: nothing tells whose it was.
        let t = diagnose(json!({"session_id": "s1", "last_error": error}));
        assert_eq!(t.error_type, "crash", "{t:?}");
        // The session that failed is the one diagnosed: its error is the evidence.
        let t = diagnose(json!({"session_id": "s1", "last_error": error,
            "last_error_session": "s1", "last_error_at": "2026-01-01T10:04:30.000Z"}));
        assert_eq!(t.error_type, "tool_error", "{t:?}");
        assert!(t.error_message.contains("prompt is too long"), "{t:?}");
    }

    #[test]
    fn gemini_model_not_found_dialog_on_screen_is_the_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        let screen = " > migrate the billing tables\n\
            │ It seems like you don't have access to gemini-3.8-flash.                 │\n\
            │ Your admin might have disabled the access. Contact them to enable the    │\n\
            │ ● 1. Keep trying                                                         │\n\
            │   2. Stop                                                                │\n";
        let t = triage(&TriageInput {
            agent: AgentInfo::default(),
            dir: &dir,
            exit: None,
            transcript: None,
            output: Some(screen.into()),
            session: Session::Latest,
        });
        assert!(
            t.error_message.contains("have access to gemini-3.8-flash"),
            "{t:?}"
        );
        let d = crate::policy::builtin::diagnose(&t);
        assert_eq!(d.root_cause, crate::policy::RootCause::ModelUnavailable);
        assert!(d.explanation.contains("`gemini-3.8-flash`"), "{d:?}");
    }
}
