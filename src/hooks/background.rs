//! Hooks that fire inside one of Claude Code's background sessions (`claude --bg`; what they
//! are: `agent_cli/claude/background.rs`). Such a job runs in the folder it was started from,
//! so a job the agent starts loads the agent's `.claude/settings.json` and runs phoenix's
//! hooks for the agent: its session start, prompt, failed turn or end would otherwise become
//! the agent's (its session id recorded as the one to resume, its prompt as the task, its
//! StopFailure as the agent's failed turn, which makes the wrapper restart a healthy agent).
//! None of it touches the agent's state, its markers or its tool log; the job's start is
//! recorded for `status AGENT`, and its start, failure and end as `background_job` ops.
//!
//! | event | from a background job |
//! |---|---|
//! | session-start | the job recorded (`background_jobs.jsonl`) and one op; nothing injected |
//! | turn-failed | one op with the error; the agent's turn is not failed, its wrapper not told |
//! | session-end | one op |
//! | every other | nothing |

use serde_json::json;

use crate::agent_cli::claude::background::{self, JobRef};
use crate::state::Op;

use super::output::Reply;
use super::{Ctx, Event, Hook};

impl Hook<'_> {
    /// `event` fired in background job `job`.
    pub(super) fn in_background_job(&self, ctx: &Ctx<'_>, event: Event, job: &JobRef) -> Reply {
        let session_id = self.payload.session_id();
        let mut fields = json!({"job": job.id, "hook": self.event_name, "session_id": session_id});
        match event {
            Event::SessionStart => {
                if let Err(e) = background::record(ctx.dir, job, session_id) {
                    self.problem(&format!("cannot record background job `{}`: {e}", job.id));
                }
                fields["source"] = json!(self.payload.str("source"));
            }
            Event::TurnFailed => {
                let kind = self.payload.str("error").unwrap_or("unknown");
                let details = self.payload.str("error_details").unwrap_or("");
                fields["error"] = json!(crate::text::shorten(kind, 64));
                fields["details"] = json!(crate::text::shorten(details, 500));
            }
            Event::SessionEnd => {
                fields["reason"] = json!(
                    self.payload
                        .str("reason")
                        .map(|r| crate::text::shorten(r, 64))
                );
            }
            _ => return Reply::Nothing,
        }
        if let Err(e) = ctx.dir.record_op(Op::BackgroundJob, fields) {
            self.problem(&format!("cannot record background job `{}`: {e}", job.id));
        }
        Reply::Nothing
    }
}
