//! Hooks that fire inside a subagent (Claude Code's Agent tool workers, which run in the
//! background by default since 2.1.2xx, and the subagent a compaction runs in): the payload
//! carries `agent_id`. A subagent's work is the agent's work and a sign of its life; its end,
//! failed or not, is not the main turn's end, and nothing it does is the main thread's prompt,
//! session start or end, or compaction. One rule per event, here:
//!
//! | event | from a subagent |
//! |---|---|
//! | pre-tool | the guard's snapshot; not the main thread's call in flight |
//! | heartbeat, tool-error | one line in tool_use.jsonl (with `agent_id`); `last_active`; no status, error count or wait changed |
//! | turn-failed | one `subagent_failed` op; the turn is not failed, the wrapper not told |
//! | notification | a wait for a person like any other (a subagent's permission prompt); an `idle_prompt` ends no turn |
//! | stop, prompt, session-start, session-end, pre-compact | `last_active` only |

use serde_json::json;

use crate::state::{self, Op, StateError};

use super::output::Reply;
use super::payload::{Outcome, Subagent};
use super::{Ctx, Event, HEARTBEAT_WRITE_INTERVAL, Hook};

impl Hook<'_> {
    /// `event` fired in subagent `sub`.
    pub(super) fn in_subagent(
        &self,
        ctx: &Ctx<'_>,
        event: Event,
        sub: Subagent<'_>,
    ) -> Result<Reply, StateError> {
        match event {
            Event::PreTool => self.guard_snapshot(ctx),
            Event::Heartbeat => self.subagent_tool_done(ctx, sub, self.tool_outcome()),
            Event::ToolError => {
                let outcome = match self.payload.outcome() {
                    Outcome::Ok => Outcome::Failed("tool failed".into()),
                    other => other,
                };
                self.subagent_tool_done(ctx, sub, outcome)
            }
            Event::TurnFailed => self.subagent_failed(ctx, sub),
            Event::Notification => self.notification(ctx),
            Event::Stop
            | Event::TurnComplete
            | Event::Prompt
            | Event::SessionStart
            | Event::SessionEnd
            | Event::PreCompact => {
                self.subagent_alive(ctx)?;
                Ok(Reply::Nothing)
            }
        }
    }

    /// A subagent's tool call ended: the agent is at work. Recorded in tool_use.jsonl (the
    /// watchdog sees the call), without touching the main thread's call in flight, its status,
    /// its error count or a wait for a person (the main thread may still be asking).
    pub(super) fn subagent_tool_done(
        &self,
        ctx: &Ctx<'_>,
        sub: Subagent<'_>,
        outcome: Outcome,
    ) -> Result<Reply, StateError> {
        let mut line = json!({
            "ts": state::now_rfc3339(), "tool": self.payload.tool_name(),
            "ok": outcome == Outcome::Ok, "agent_id": sub.id, "agent_type": sub.kind,
        });
        if let Some(digest) = self.payload.tool_input_digest() {
            line["input_digest"] = json!(digest);
        }
        if let Some(id) = self.payload.session_id() {
            line["session_id"] = json!(id);
        }
        match &outcome {
            Outcome::Failed(error) => line["error"] = json!(error),
            Outcome::Interrupted => line["interrupted"] = json!(true),
            Outcome::Ok => {}
        }
        ctx.dir.append_tool_use(&line)?;
        self.subagent_alive(ctx)?;
        Ok(self.guard_feedback(ctx))
    }

    /// A subagent's request failed (prompt too long, overloaded…): Claude Code ends that
    /// subagent and tells the main thread in the tool's result; the main turn goes on.
    fn subagent_failed(&self, ctx: &Ctx<'_>, sub: Subagent<'_>) -> Result<Reply, StateError> {
        let kind = self.payload.str("error").unwrap_or("unknown");
        let details = self
            .payload
            .str("error_details")
            .or(self.payload.str("last_assistant_message"))
            .unwrap_or("");
        let details: String = format!("{kind}: {details}").chars().take(500).collect();
        self.subagent_alive(ctx)?;
        let _ = ctx.dir.record_op(
            Op::SubagentFailed,
            json!({"agent_id": sub.id, "agent_type": sub.kind, "error": kind,
                   "details": details, "session_id": self.payload.session_id()}),
        );
        Ok(Reply::Nothing)
    }

    /// The CLI runs: `last_active` refreshed (at most every `HEARTBEAT_WRITE_INTERVAL`),
    /// nothing else about the main thread changed.
    pub(super) fn subagent_alive(&self, ctx: &Ctx<'_>) -> Result<(), StateError> {
        let fresh = ctx.dir.read_state().ok().is_some_and(|s| {
            s.last_active_at().is_some_and(|t| {
                let age = ctx.now.as_second() - t.as_second();
                (0..HEARTBEAT_WRITE_INTERVAL.as_secs() as i64).contains(&age)
            })
        });
        if fresh {
            return Ok(());
        }
        let now = state::rfc3339(ctx.now);
        ctx.dir.update_state(ctx.retention, |s| {
            s.last_active = Some(now);
            Ok(())
        })
    }
}
