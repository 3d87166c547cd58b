//! Hooks that fire in a teammate of one of Claude Code's agent teams (what they are:
//! `agent_cli/claude/teams.rs`). A teammate in tmux mode is a Claude Code of its own in a pane
//! the lead split off its window, in the agent's workdir: it runs phoenix's hooks for the
//! agent, with a session of its own. Its work is the agent's work (its tool calls are seen,
//! like a subagent's); its session, prompt, turn and end are not the agent's: they would
//! otherwise replace the session id and transcript phoenix resumes, end or fail the agent's
//! turn (a failed turn makes the wrapper restart a healthy agent) or become its task.
//!
//! | event | from a teammate |
//! |---|---|
//! | session-start | one `teammate` op; nothing injected |
//! | turn-failed, session-end | one `teammate` op (the error, the reason); the agent's turn is not failed |
//! | pre-tool | the guard's snapshot; not the agent's call in flight |
//! | heartbeat, tool-error | one line in tool_use.jsonl (`agent_id` the teammate's); `last_active` |
//! | notification | a wait for a person (a dialog in the teammate's pane), except `idle_prompt`: a teammate waits for its lead |
//! | stop, prompt, pre-compact | `last_active` only |

use serde_json::json;

use crate::agent_cli::claude::teams::Teammate;
use crate::state::{Op, StateError};

use super::output::Reply;
use super::payload::{Outcome, Subagent};
use super::{Ctx, Event, Hook};

impl Hook<'_> {
    /// `event` fired in teammate `mate`'s Claude Code.
    pub(super) fn in_teammate(
        &self,
        ctx: &Ctx<'_>,
        event: Event,
        mate: &Teammate,
    ) -> Result<Reply, StateError> {
        let worker = Subagent {
            id: &mate.agent_id,
            kind: self.payload.str("agent_type").filter(|s| !s.is_empty()),
        };
        match event {
            Event::PreTool => self.guard_snapshot(ctx),
            Event::Heartbeat => self.subagent_tool_done(ctx, worker, self.tool_outcome()),
            Event::ToolError => {
                let outcome = match self.payload.outcome() {
                    Outcome::Ok => Outcome::Failed("tool failed".into()),
                    other => other,
                };
                self.subagent_tool_done(ctx, worker, outcome)
            }
            Event::Notification => {
                if self.payload.str("notification_type") == Some("idle_prompt") {
                    return Ok(Reply::Nothing);
                }
                self.notification(ctx)
            }
            Event::SessionStart | Event::SessionEnd | Event::TurnFailed => {
                self.subagent_alive(ctx)?;
                self.record_teammate(ctx, mate);
                Ok(Reply::Nothing)
            }
            Event::Stop | Event::TurnComplete | Event::Prompt | Event::PreCompact => {
                self.subagent_alive(ctx)?;
                Ok(Reply::Nothing)
            }
        }
    }

    /// One `teammate` op: which teammate, which hook, and what it said.
    fn record_teammate(&self, ctx: &Ctx<'_>, mate: &Teammate) {
        let short =
            |key: &str, max: usize| self.payload.str(key).map(|v| crate::text::shorten(v, max));
        let mut fields = json!({
            "hook": self.event_name, "agent_id": mate.agent_id, "name": mate.name,
            "team": mate.team, "lead_session": mate.lead_session, "pid": mate.pid,
            "session_id": self.payload.session_id(),
        });
        for (key, max) in [
            ("source", 64),
            ("reason", 64),
            ("error", 64),
            ("error_details", 500),
        ] {
            if let Some(v) = short(key, max) {
                let name = if key == "error_details" {
                    "details"
                } else {
                    key
                };
                fields[name] = json!(v);
            }
        }
        if let Err(e) = ctx.dir.record_op(Op::Teammate, fields) {
            self.problem(&format!("cannot record teammate `{}`: {e}", mate.agent_id));
        }
    }
}
