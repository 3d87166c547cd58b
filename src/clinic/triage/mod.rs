//! Triage: build the TraumaContext from what phoenix has — the wrapper's exit, tool_use.jsonl,
//! ops.jsonl, state.json, brief.md and the tail of the CLI's transcript (Claude Code, Codex
//! and Gemini JSONL). Every source may be missing or corrupt: triage takes what it can read.

mod session;
mod transcript;

use std::path::PathBuf;

use serde_json::Value;

use crate::policy::{AgentInfo, ExitInfo, ToolCall, Trauma};
use crate::state::jsonl::tail_jsonl;
use crate::state::{AgentDir, AgentState, OPS_LOG, Op, op};
use crate::text::{keep_end, shorten};
pub use session::{
    Window, in_session, records_in, said_by_phoenix, session_window, start_banner, this_session,
    without_replay,
};
use session::{texts, within};
pub use transcript::{TranscriptFacts, transcript_facts, transcript_has_turn};

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
        crashes_since_work: 0,
        fresh_requested: false,
        session_id: last.str("session_id").map(str::to_string),
        resume_refused: last.get("resume_refused").as_bool().unwrap_or(false),
    })
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

/// What the diagnosed session left behind: its exit, when it ran, what its transcript says
/// and what it printed (without a resumed CLI's replay of earlier sessions).
struct Evidence {
    exit: Option<ExitInfo>,
    window: Window,
    facts: TranscriptFacts,
    output: Option<String>,
}

impl Evidence {
    fn gather(input: &TriageInput<'_>) -> Evidence {
        let ops = op::tail(&input.dir.file(OPS_LOG));
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
        // The transcript holds the model's and the tools' words, of this session and of the
        // earlier ones a resumed CLI prints again (Claude Code does): on the screen they are
        // no error the CLI reported ("the build failed", "prompt is too long" in an answer).
        // The errors the transcript records are read from it (`facts`), not from the screen.
        let said = texts(records.iter());
        let facts = transcript_facts(&records_in(records, window));
        let output = input.output.as_deref().map(|o| without_replay(o, &said));
        Evidence {
            exit,
            window,
            facts,
            output,
        }
    }

    /// The kind and text of the error that ended the session, from the best evidence there
    /// is: the transcript's last error, an error line of the output, a failed tool call of
    /// this session, the error state.json recorded for it, and at last the exit itself.
    fn error(&self, tool_calls: &[ToolCall], state: &AgentState) -> (String, String) {
        let failed_call = tool_calls
            .iter()
            .rev()
            .find(|c| !c.ok && in_session(c.ts.as_deref(), self.window));
        if let Some((kind, text)) = self.facts.errors.last() {
            (kind.clone(), text.clone())
        } else if let Some(line) = self.output.as_deref().and_then(error_in_output) {
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
        } else if let Some((e, at)) = crate::state::agent::session_error(state)
            // Only the diagnosed session's: a resumed one keeps the session id, and the error
            // must come from after its start (an undated error cannot be placed, and is left
            // out).
            && at.is_some_and(|at| within(at, self.window))
        {
            ("tool_error".to_string(), e.to_string())
        } else {
            match &self.exit {
                Some(e) if e.signal.is_some() => ("signal".to_string(), e.describe()),
                Some(e) => ("crash".to_string(), e.describe()),
                None => ("unknown".to_string(), "no exit recorded".to_string()),
            }
        }
    }

    /// The output's tail, or else the transcript's last errors.
    fn stack_trace(&self) -> String {
        match &self.output {
            Some(out) if !out.trim().is_empty() => keep_end(out, TRACE_CHARS),
            _ => keep_end(
                &self
                    .facts
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
        }
    }
}

/// The last tool calls, and the tools seen to work, in order of first use. tool_use.jsonl is
/// phoenix's own record; the transcript fills in when it is missing.
fn tool_calls(dir: &AgentDir, facts: &TranscriptFacts) -> (Vec<ToolCall>, Vec<String>) {
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
    let recent = all_calls
        .iter()
        .skip(all_calls.len().saturating_sub(TOOL_CALLS))
        .cloned()
        .collect();
    (recent, available_tools)
}

/// The brief and the agent's last messages, for the diagnosis to know what it was doing.
fn history_summary(dir: &AgentDir, facts: &TranscriptFacts) -> Option<String> {
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
    (!summary.trim().is_empty()).then(|| shorten(&summary, SUMMARY_CHARS))
}

/// Build the TraumaContext.
pub fn triage(input: &TriageInput<'_>) -> Trauma {
    let evidence = Evidence::gather(input);
    let (tool_calls, available_tools) = tool_calls(input.dir, &evidence.facts);
    let state = input.dir.peek_state().unwrap_or_default();
    let original_prompt = (state.current_task.clone())
        .filter(|t| !t.is_empty())
        .or(evidence.facts.last_prompt.clone())
        .map(|p| shorten(&p, TEXT_CHARS));
    let (error_type, error_message) = evidence.error(&tool_calls, &state);
    Trauma {
        agent: input.agent.clone(),
        original_prompt,
        error_type,
        error_message: shorten(&error_message, TEXT_CHARS),
        stack_trace: evidence.stack_trace(),
        tool_calls,
        history_summary: history_summary(input.dir, &evidence.facts),
        available_tools,
        exit: evidence.exit,
        recoveries: 0,
    }
}

#[cfg(test)]
mod tests;
