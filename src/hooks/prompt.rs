//! The prompt: the task it sets, and the context held back for it (by a session start whose
//! CLI drops it on resume, or by a compaction without a session start after it).

use serde_json::{Value, json};

use crate::state::{self, AgentDir, Op, StateError, Status};

use super::output::Reply;
use super::{Ctx, Hook};

/// Startup context held back for the first prompt, for a CLI that drops it on resume or has no
/// SessionStart after a compaction (`AgentCli::resume_drops_session_start_context`,
/// `compaction_skips_session_start`): `{"session_id": …, "text": …}` or
/// `{"session_id": …, "start": "compacted"}`. Context a prompt hook returns is appended to
/// the prompt itself.
const PROMPT_CONTEXT: &str = "prompt_context.json";

/// The context held back for the next prompt, as a `JsonFile` (never through a link).
fn prompt_context(dir: &AgentDir) -> state::JsonFile<Value> {
    state::JsonFile::new(dir, PROMPT_CONTEXT, "prompt_context")
}

/// Drop whatever an earlier session held back for its first prompt.
pub(super) fn drop_held_context(dir: &AgentDir) {
    prompt_context(dir).remove_locked();
}

impl Hook<'_> {
    /// Hold `held` back for the next prompt; `false` (and the problem logged) if it could not be.
    pub(super) fn hold_for_prompt(&self, dir: &AgentDir, held: &Value) -> bool {
        prompt_context(dir)
            .save_locked(held)
            .map_err(|e| self.problem(&format!("cannot hold the context back: {e}")))
            .is_ok()
    }

    pub(super) fn prompt(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let task = self
            .payload
            .prompt()
            .filter(|p| is_task(ctx, p))
            .map(task_line);
        let session_id = self.payload.session_id().map(str::to_string);
        let now = state::rfc3339(ctx.now);
        let ended = ctx.dir.update_state(ctx.retention, |s| {
            if task.is_some() {
                s.current_task = task;
            }
            if session_id.is_some() {
                s.session_id = session_id;
            }
            s.status = Status::Working;
            s.turn_started = Some(now.clone());
            s.last_active = Some(now);
            Ok(super::waiting::clear(s))
        })?;
        super::waiting::record_input_given(ctx, ended, "prompt");
        if let Some(session) = self.payload.session_id() {
            crate::continuity::messages::confirm_handed(ctx.dir, session);
        }
        let held = self.take_prompt_context(ctx);
        let held = self.with_messages(ctx, held);
        // Once per prompt: confirms that text phoenix injected was submitted.
        let _ = ctx.dir.record_op(
            Op::Prompt,
            json!({"chars": self.payload.prompt().map_or(0, str::len),
                   "context_chars": held.as_ref().map(String::len)}),
        );
        Ok(match held {
            Some(text) => Reply::Context {
                event: self
                    .payload
                    .event_name()
                    .unwrap_or("BeforeAgent")
                    .to_string(),
                text,
            },
            None => Reply::Nothing,
        })
    }

    /// `held` with the inbox's pending messages after it, for a prompt somebody typed: it
    /// starts a turn, and what was sent meanwhile goes along. Not for text phoenix typed (a
    /// pasted block of these very messages is confirmed by this hook, not given again). An
    /// empty inbox costs one `stat`.
    fn with_messages(&self, ctx: &Ctx<'_>, held: Option<String>) -> Option<String> {
        if self.payload.prompt().is_none_or(is_phoenix_text) {
            return held;
        }
        let Some(messages) = crate::continuity::messages::ForContext::take(ctx.dir) else {
            return held;
        };
        let block = messages.text(ctx.spec, &ctx.agent.name);
        messages.delivered(ctx.dir, "prompt hook");
        Some(match held {
            Some(held) => format!("{held}\n\n{block}"),
            None => block,
        })
    }

    /// The context held back for this session's first prompt, taken once: text a session start
    /// held back, or, after a Gemini compression, the compacted context rendered now (the
    /// handoff saved before the compression is there by then).
    fn take_prompt_context(&self, ctx: &Ctx<'_>) -> Option<String> {
        let file = prompt_context(ctx.dir);
        if !file.exists() {
            return None;
        }
        let held: Value = file.update(Option::take).ok()??;
        let same_session = match (held["session_id"].as_str(), self.payload.session_id()) {
            (Some(held), Some(now)) => held == now,
            _ => true,
        };
        if !same_session {
            return None;
        }
        if held["start"] == "compacted" {
            let state = self.state_or_new(ctx);
            return self.startup_context(ctx, crate::continuity::startup::Start::Compacted, &state);
        }
        held["text"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    }
}

/// Is this prompt a task, which replaces the current one (and with it the per-task recovery
/// and revival counts)? Not text phoenix typed (a continuation nudge, an injected handoff),
/// nor one the CLI submitted itself (a background agent's result, a reminder): those start a
/// turn of the same task.
fn is_task(ctx: &Ctx<'_>, prompt: &str) -> bool {
    !is_phoenix_text(prompt)
        && prompt.trim() != ctx.agent.restart.continue_prompt
        && !ctx.agent.cli.adapter().machine_prompt(prompt)
}

/// Does a prompt come from phoenix itself? Its texts start with `[phoenix]` or a
/// `=== PHOENIX` banner.
pub fn is_phoenix_text(prompt: &str) -> bool {
    let p = prompt.trim_start();
    p.starts_with("[phoenix]") || p.starts_with("=== PHOENIX")
}

/// The first line of a prompt, bounded, as the current task.
fn task_line(prompt: &str) -> String {
    crate::text::shorten(prompt.trim().lines().next().unwrap_or(""), 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_is_the_first_line_of_the_prompt() {
        assert_eq!(task_line("\n fix the build \nthen more"), "fix the build");
        assert_eq!(task_line(&"x".repeat(300)).chars().count(), 200);
    }
}
