//! The session's start and end: the startup context a new session is given (recovery,
//! compaction, resume, the Clinic's pending context), the state it starts from, and whether its
//! end was a clean exit.

use std::path::Path;

use serde_json::json;

use crate::state::bounded::{self, Links};
use crate::state::{self, AgentDir, AgentState, Op, StateError, Status};

use super::output::Reply;
use super::{Ctx, Hook};

/// How many recent tool calls a recovery block lists.
const RECENT_TOOLS: usize = 5;

/// Session-end reasons that mean the user chose to leave: a clean exit, not a crash. Gemini
/// CLI's `exit` is not one: it fires it from its exit cleanup whatever ended it (`/quit`, but
/// also SIGTERM or a hangup, as when its relaunched process outlives a killed parent). A
/// Gemini `/quit` still ends in safe mode: the wrapper sees its exit code 0.
const USER_EXITS: [&str; 2] = ["prompt_input_exit", "logout"];

impl Hook<'_> {
    pub(super) fn session_start(&self, ctx: &Ctx<'_>) -> Reply {
        use crate::continuity::startup::{self, Start};
        let dir = ctx.dir;
        let source = self.payload.str("source").unwrap_or("startup").to_string();
        // Whatever an earlier session held back for its first prompt is not for this one, and
        // the messages an earlier session was handed but never confirmed are for this one.
        super::prompt::drop_held_context(dir);
        crate::continuity::messages::reopen_unconfirmed(dir, self.payload.session_id());
        let state = self.state_or_new(ctx);
        let interrupted = source != "compact" && startup::was_interrupted(dir, &state);
        let start = match (interrupted, source.as_str()) {
            (true, _) => Start::Recovery,
            (false, "compact") => Start::Compacted,
            // A fork (`--fork-session`, Claude Code 2.1.332) is a new session id holding the
            // conversation it was forked from: like a resume, it has everything already.
            (false, "resume" | "fork") => Start::Resumed,
            (false, _) => Start::Fresh,
        };
        let text = self.startup_context(ctx, start, &state);
        // What the Clinic left is for the next session phoenix starts, never for the process
        // it replaces: Claude Code auto-compacting when its prompt is too long runs this hook
        // (`compact`) while the wrapper already stops it for a fresh session, which must get
        // the recovery context.
        let text = with_pending_clinic_context(dir, text);
        let session_id = self.payload.session_id().map(str::to_string);
        let transcript = self.regular_transcript();
        self.record_session_start(ctx, &source, interrupted, transcript.clone());
        let deferred = self
            .cli
            .is_some_and(|c| c.adapter().resume_drops_session_start_context())
            && source == "resume"
            && text.as_ref().is_some_and(|t| {
                self.hold_for_prompt(dir, &json!({"session_id": session_id, "text": t}))
            });
        let _ = dir.record_op(
            Op::SessionStart,
            json!({"source": source, "session_id": session_id, "interrupted": interrupted,
                   "transcript_path": transcript, "injected": text.is_some(),
                   "deferred_to_prompt": deferred}),
        );
        match text {
            Some(text) if !deferred => Reply::Context {
                event: "SessionStart".into(),
                text,
            },
            _ => Reply::Nothing,
        }
    }

    /// The transcript the payload names, unless it exists but is not a regular file (a FIFO,
    /// `/dev/zero`): brief generation, handoffs and the watchdog would refuse it anyway.
    fn regular_transcript(&self) -> Option<String> {
        let transcript = self.transcript()?;
        match bounded::open_regular(Path::new(&transcript), Links::Follow) {
            Err(e @ bounded::ReadError::NotRegular { .. }) => {
                self.problem(&format!("transcript_path {e}"));
                None
            }
            _ => Some(transcript),
        }
    }

    /// The new session in state.json: its id, cwd and transcript, where it came from, and
    /// `idle` unless it recovers an interrupted task or continues after a compaction.
    fn record_session_start(
        &self,
        ctx: &Ctx<'_>,
        source: &str,
        interrupted: bool,
        transcript: Option<String>,
    ) {
        let session_id = self.payload.session_id().map(str::to_string);
        let session_cwd = self.payload.str("cwd").map(str::to_string);
        let now = state::rfc3339(ctx.now);
        let update = ctx.dir.update_state(ctx.retention, |s| {
            if session_id.is_some() {
                s.session_id = session_id.clone();
                s.session_cwd = session_cwd.clone();
                s.transcript_path = transcript.clone();
            }
            s.session_source = Some(source.to_string());
            s.last_active = Some(now.clone());
            // An interrupted task stays `working` until a turn finishes, so that a crash
            // before the agent got going is still detected next time.
            if !interrupted && source != "compact" {
                s.status = Status::Idle;
            }
            Ok(super::waiting::clear(s))
        });
        match update {
            Ok(ended) => super::waiting::record_input_given(ctx, ended, "session_start"),
            Err(e) => self.problem(&e.to_string()),
        }
    }

    /// The startup context for `start`, from the agent's state, ledger, latest handoff, related
    /// decisions and brief (`None` when there is nothing worth giving).
    pub(super) fn startup_context(
        &self,
        ctx: &Ctx<'_>,
        start: crate::continuity::startup::Start,
        state: &AgentState,
    ) -> Option<String> {
        use crate::continuity::startup::{self, Start};
        let dir = ctx.dir;
        let recent = if start == Start::Recovery {
            state::jsonl::last(&dir.file(state::TOOL_USE), RECENT_TOOLS)
        } else {
            Vec::new()
        };
        let resolve_command = crate::continuity::resolve_command(ctx.spec, &ctx.agent.name);
        let mut shown = state.clone();
        shown.normalize(ctx.now, ctx.retention);
        let fleet = crate::state::FleetDir::new(&ctx.spec.fleet.state_dir);
        // A resumed transcript has it all already; a new context gets the latest handoff and
        // the earlier decisions that match its task.
        let gathered = startup::Gathered::read(&fleet, dir, shown, start);
        // Messages no session has had yet come with a new context (a resumed transcript
        // gets them at its first turn boundary instead).
        let messages = (start != Start::Resumed)
            .then(|| crate::continuity::messages::ForContext::take(dir))
            .flatten();
        // A custom CLI that calls the hooks itself still speaks through its pane: the key.
        let key = crate::continuity::pane_marker_key(ctx.spec, dir);
        let (text, template_problem) = startup::render(
            &crate::render::Templates::for_spec(ctx.spec),
            start,
            &startup::Inputs {
                marker_key: key.as_deref(),
                work_item: ctx.agent.origin.as_ref().map(|o| o.context.as_str()),
                ..gathered.inputs(&recent, &resolve_command, messages.as_ref())
            },
        );
        if let Some(problem) = template_problem {
            self.problem(&problem);
        }
        if let Some(messages) = messages
            && text.is_some()
        {
            messages.handed(dir, "session start", self.payload.session_id());
        }
        if text.is_some() && gathered.interrupted_tool.is_some() && start != Start::Compacted {
            // Named once, to the session that follows the interruption.
            let _ = std::fs::remove_file(dir.file(state::INTERRUPTED_TOOL));
        }
        text
    }

    pub(super) fn session_end(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let dir = ctx.dir;
        let reason = self.payload.str("reason").unwrap_or("other").to_string();
        let clean = USER_EXITS.contains(&reason.as_str());
        let now = state::rfc3339(ctx.now);
        let ended = dir.update_state(ctx.retention, |s| {
            s.last_session_end = Some(state::agent::SessionEnd {
                ts: now.clone(),
                reason: reason.clone(),
                clean,
            });
            // Ending mid-turn (no Stop since the last prompt or tool call) is an interruption:
            // `working` stays so that the next session start recovers.
            if clean || s.status != Status::Working {
                s.status = Status::Stopped;
            }
            Ok(super::waiting::clear(s))
        })?;
        super::waiting::record_input_given(ctx, ended, "session_end");
        if clean {
            dir.set_marker(state::CLEAN_EXIT)
                .map_err(|source| StateError::Io {
                    action: "write",
                    path: dir.file(state::CLEAN_EXIT),
                    source,
                })?;
        }
        let _ = dir.record_op(
            Op::SessionEnd,
            json!({"reason": reason, "clean": clean, "session_id": self.payload.session_id()}),
        );
        Ok(Reply::Nothing)
    }
}

/// Context the Clinic left for this session (a reminder, or what a session that ran out of
/// context knew) comes first: it says why this session exists.
fn with_pending_clinic_context(dir: &AgentDir, text: Option<String>) -> Option<String> {
    let run_started = std::env::var(crate::clinic::RUN_STARTED_ENV)
        .ok()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let Some(pending) = crate::clinic::take_pending_context(dir, run_started) else {
        return text;
    };
    let _ = dir.record_op(Op::ClinicContextInjected, json!({"chars": pending.len()}));
    Some(match text {
        Some(rest) => format!("{pending}\n\n{rest}"),
        None => pending,
    })
}

#[cfg(test)]
mod tests {
    use crate::state::{self, AgentState, FleetDir, Status};

    #[test]
    fn interrupted_unless_a_clean_exit_came_after_the_last_activity() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        let mut s = AgentState::new("a");
        s.status = Status::Working;
        s.last_active = Some("2026-02-17T02:12:50Z".into());
        assert!(crate::continuity::startup::was_interrupted(&dir, &s));
        std::fs::write(dir.file(state::CLEAN_EXIT), "2026-02-17T02:13:00Z").unwrap();
        assert!(!crate::continuity::startup::was_interrupted(&dir, &s));
        std::fs::write(dir.file(state::CLEAN_EXIT), "2026-02-16T00:00:00Z").unwrap();
        assert!(
            crate::continuity::startup::was_interrupted(&dir, &s),
            "an old marker does not count"
        );
        s.status = Status::Idle;
        assert!(!crate::continuity::startup::was_interrupted(&dir, &s));
        // A call set aside at the agent's exit outweighs a turn reported finished on the
        // way out (a relaunched Gemini CLI whose launcher was killed does that).
        std::fs::write(dir.file(state::INTERRUPTED_TOOL), r#"{"tool":"Bash"}"#).unwrap();
        assert!(crate::continuity::startup::was_interrupted(&dir, &s));
    }
}
