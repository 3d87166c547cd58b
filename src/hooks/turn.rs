//! The end of a turn: idle, or failed on an API error (which the wrapper heals at once).

use std::path::Path;

use serde_json::{Value, json};

use crate::state::{self, Op, StateError, Status};

use super::output::Reply;
use super::{Ctx, Hook};

impl Hook<'_> {
    pub(super) fn stop(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        // The turn is over: a call that never reported back (denied, say) is not running.
        let _ = std::fs::remove_file(ctx.dir.file(state::IN_FLIGHT));
        let hook = self.payload.event_name().or(self.payload.str("type"));
        // A CLI that ends a turn failed on an API error like any other (Gemini's AfterAgent):
        // only its session file says it failed.
        if let Some(cli) = self.cli
            && let Some(path) = self.transcript()
            && let Some(error) = cli.adapter().last_turn_error(Path::new(&path))
        {
            return self.record_failed_turn(ctx, &error.kind, &error.message, hook);
        }
        let reply = self.end_turn(
            ctx,
            Status::Idle,
            None,
            Op::TurnComplete,
            json!({"hook": hook}),
        )?;
        self.act_on_markers(ctx);
        Ok(reply)
    }

    /// The `->continuity:` markers the model wrote in this turn (a CLI with hooks: never its
    /// pane), acted on now that the turn is over.
    fn act_on_markers(&self, ctx: &Ctx<'_>) {
        use crate::continuity::turn_markers;
        if !ctx.agent.tap || !ctx.agent.cli.adapter().markers_at_turn_end() {
            return;
        }
        let transcript = self.transcript();
        let texts = turn_markers::turn_texts(
            ctx.agent,
            self.payload.turn_text(),
            transcript.as_deref().map(Path::new),
        );
        if !texts.is_empty() {
            turn_markers::act(ctx.spec, ctx.agent, ctx.dir, &texts);
        }
    }

    /// The end of a turn: the status it leaves, the error if it failed, and one op.
    fn end_turn(
        &self,
        ctx: &Ctx<'_>,
        status: Status,
        error: Option<String>,
        op: state::op::Make,
        mut fields: Value,
    ) -> Result<Reply, StateError> {
        let session_id = self.payload.session_id().map(str::to_string);
        let now = state::rfc3339(ctx.now);
        let ended = ctx.dir.update_state(ctx.retention, |s| {
            s.status = status.clone();
            if session_id.is_some() {
                s.session_id = session_id.clone();
            }
            if let Some(error) = &error {
                s.record_error(error.clone(), &now);
            }
            s.last_active = Some(now);
            Ok(super::waiting::clear(s))
        })?;
        super::waiting::record_input_given(ctx, ended, "turn_end");
        fields["session_id"] = json!(session_id);
        let _ = ctx.dir.record_op(op, fields);
        Ok(Reply::Nothing)
    }

    /// The turn ended in an API error and the CLI sits at its prompt: nobody will type the
    /// next one. Recorded as status `failed` with the error, which the wrapper has the watchdog
    /// heal at once (the Clinic decides how: a full context starts fresh with a handoff, an
    /// overload resumes).
    pub(super) fn turn_failed(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let kind = self.payload.str("error").unwrap_or("unknown");
        let details = self
            .payload
            .str("error_details")
            .or(self.payload.str("last_assistant_message"))
            .unwrap_or("");
        let hook = self.payload.event_name();
        self.record_failed_turn(ctx, kind, details, hook)
    }

    /// Status `failed` with the error (bounded), and one `turn_failed` op.
    fn record_failed_turn(
        &self,
        ctx: &Ctx<'_>,
        kind: &str,
        details: &str,
        hook: Option<&str>,
    ) -> Result<Reply, StateError> {
        let error: String = format!("{kind}: {details}").chars().take(500).collect();
        let reply = self.end_turn(
            ctx,
            Status::Failed,
            Some(error.clone()),
            Op::TurnFailed,
            json!({"error": kind, "details": error, "hook": hook}),
        )?;
        // Only a signal: the wrapper (always there, daemon or not) sees it within a second and
        // runs the decision itself, so this hook never waits for a recovery.
        if let Err(e) = ctx.dir.set_marker(state::TURN_FAILED) {
            self.problem(&format!("cannot tell the wrapper the turn failed: {e}"));
        }
        Ok(reply)
    }
}
