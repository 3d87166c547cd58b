//! Waiting for a person: Claude Code's `Notification` hook says its CLI shows a permission
//! prompt, an elicitation dialog, or has sat at its prompt for a while (a wait only with open
//! loops: idle without them is finished work). The wait is recorded
//! in state.json (`needs_input`) with one `needs_input` op, and the wrapper is told to send
//! the notification (this hook never waits for a network); the next prompt, tool call, turn
//! end or session clears it again.

use serde_json::json;

use crate::state::{self, AgentState, NeedsInput, Op, StateError};

use super::output::Reply;
use super::{Ctx, Hook};

/// The notification types that mean the CLI waits for a person (Claude Code's, with the
/// versions that send each: `agent_cli::claude::WAITING_NOTIFICATIONS`, also the hook's
/// matcher).
pub const WAITING_TYPES: [&str; 6] = crate::agent_cli::claude::WAITING_NOTIFICATIONS;

/// How much of the CLI's message is kept.
const MESSAGE_CHARS: usize = 300;

/// An `idle_prompt` comes after a minute at the prompt (Claude Code 2.1): a hook that wrote
/// state less than this long before it belongs to a turn begun since (a prompt typed just
/// then), which the notification must not end.
const IDLE_PROMPT_QUIET: std::time::Duration = std::time::Duration::from_secs(10);

/// Does an `idle_prompt` at `now` end the turn recorded in `s`? Only a `working` one whose
/// latest hook is older than [`IDLE_PROMPT_QUIET`]: the CLI sits at its prompt, a turn ended
/// without a Stop (Claude Code runs no Stop hook for a turn a person interrupts).
pub fn idle_prompt_ends_turn(s: &AgentState, now: jiff::Timestamp) -> bool {
    s.status == state::Status::Working
        && s.last_active_at()
            .is_none_or(|t| now.as_second() - t.as_second() >= IDLE_PROMPT_QUIET.as_secs() as i64)
}

/// Why the CLI waits, from a notification's type and message; `None` for a notification that
/// asks nothing of anyone (a login that worked, an answered dialog). Builds without a type
/// are read from their message.
pub fn waiting_reason(kind: Option<&str>, message: &str) -> Option<&'static str> {
    if let Some(kind) = kind.filter(|k| !k.is_empty()) {
        // Gemini CLI's one type: a tool waits for confirmation.
        if kind == "ToolPermission" {
            return Some("permission_prompt");
        }
        return WAITING_TYPES.into_iter().find(|t| *t == kind);
    }
    let m = message.to_lowercase();
    if m.contains("needs your permission") || m.contains("needs your approval") {
        Some("permission_prompt")
    } else if m.contains("waiting for your input") {
        Some("idle_prompt")
    } else {
        None
    }
}

impl Hook<'_> {
    pub(super) fn notification(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let message = self.payload.str("message").unwrap_or("");
        let kind = self.payload.str("notification_type");
        let Some(reason) = waiting_reason(kind, message) else {
            return Ok(Reply::Nothing);
        };
        let message: String = message
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(MESSAGE_CHARS)
            .collect();
        // Only the main thread's prompt ends its turn.
        if reason == "idle_prompt" && self.payload.subagent().is_none() {
            self.idle_at_prompt(ctx)?;
        }
        let now = state::rfc3339(ctx.now);
        let started = ctx.dir.update_state(ctx.retention, |s| {
            // The same wait told again (an idle reminder) keeps its start.
            if s.needs_input.as_ref().is_some_and(|n| n.reason == reason) {
                return Ok(false);
            }
            // Idle at its prompt without open loops is finished work, not a wait: as for
            // every CLI (`thresholds.waiting`), only unfinished work needs a person.
            if reason == "idle_prompt" && s.open_loops.is_empty() {
                return Ok(false);
            }
            s.needs_input = Some(NeedsInput {
                reason: reason.to_string(),
                message: message.clone(),
                since: now.clone(),
                source: "hook".into(),
            });
            Ok(true)
        })?;
        if started {
            let _ = ctx.dir.record_op(
                Op::NeedsInput,
                json!({"reason": reason, "message": message, "source": "hook",
                       "session_id": self.payload.session_id()}),
            );
            // Only a signal: the wrapper (there, daemon or not) notifies within a second.
            if let Err(e) = ctx.dir.set_marker(state::NEEDS_INPUT) {
                self.problem(&format!("cannot tell the wrapper the agent waits: {e}"));
            }
        }
        Ok(Reply::Nothing)
    }
}

impl Hook<'_> {
    /// The CLI says it sits idle at its prompt: a turn still recorded as running is over (its
    /// Stop never came), so nothing its screen shows is held against it, and it is not silent.
    fn idle_at_prompt(&self, ctx: &Ctx<'_>) -> Result<(), StateError> {
        let ended = ctx.dir.update_state(ctx.retention, |s| {
            if !idle_prompt_ends_turn(s, ctx.now) {
                return Ok(false);
            }
            s.status = state::Status::Idle;
            Ok(true)
        })?;
        if ended {
            let _ = ctx.dir.record_op(
                Op::TurnComplete,
                json!({"hook": "Notification", "by": "idle_prompt",
                       "session_id": self.payload.session_id()}),
            );
        }
        Ok(())
    }
}

/// End a wait recorded in `s` (inside an `update_state`): the agent got input or went on.
/// Answers the wait that ended, for `record_input_given`.
pub(super) fn clear(s: &mut AgentState) -> Option<NeedsInput> {
    s.needs_input.take()
}

/// One `input_given` op for a wait that ended, saying what ended it.
pub(super) fn record_input_given(ctx: &Ctx<'_>, ended: Option<NeedsInput>, by: &str) {
    if let Some(wait) = ended {
        let _ = ctx.dir.record_op(
            Op::InputGiven,
            json!({"reason": wait.reason, "since": wait.since, "by": by}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_at_the_prompt_ends_a_turn_no_hook_ended() {
        let now: jiff::Timestamp = "2026-02-17T02:13:00Z".parse().unwrap();
        let mut s = AgentState::new("a");
        s.status = state::Status::Working;
        s.last_active = Some("2026-02-17T02:12:00Z".into());
        assert!(idle_prompt_ends_turn(&s, now));
        // A prompt typed just before the notification ran: that turn goes on.
        s.last_active = Some("2026-02-17T02:12:55Z".into());
        assert!(!idle_prompt_ends_turn(&s, now));
        // Nothing to end.
        s.last_active = Some("2026-02-17T02:12:00Z".into());
        s.status = state::Status::Idle;
        assert!(!idle_prompt_ends_turn(&s, now));
    }

    #[test]
    fn only_notifications_that_wait_for_a_person_count() {
        let msg = "Claude needs your permission to use Bash";
        assert_eq!(
            waiting_reason(Some("permission_prompt"), msg),
            Some("permission_prompt")
        );
        assert_eq!(
            waiting_reason(Some("idle_prompt"), "Claude is waiting for your input"),
            Some("idle_prompt")
        );
        assert_eq!(waiting_reason(Some("auth_success"), "Logged in"), None);
        assert_eq!(
            waiting_reason(Some("ToolPermission"), "Tool requires confirmation"),
            Some("permission_prompt")
        );
        assert_eq!(waiting_reason(Some("elicitation_complete"), ""), None);
        // Claude Code 2.1.332's new waits, and a notice that asks nothing.
        for kind in [
            "elicitation_url_dialog",
            "worker_permission_prompt",
            "agent_needs_input",
        ] {
            assert_eq!(waiting_reason(Some(kind), "x"), Some(kind));
        }
        assert_eq!(waiting_reason(Some("agent_completed"), "done"), None);
        // Builds that send no type.
        assert_eq!(waiting_reason(None, msg), Some("permission_prompt"));
        assert_eq!(
            waiting_reason(Some(""), "Claude is waiting for your input"),
            Some("idle_prompt")
        );
        assert_eq!(waiting_reason(None, "Task finished"), None);
    }
}
