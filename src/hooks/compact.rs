//! Before a compaction: a snapshot of the state and where the transcript is, the context held
//! back for the next prompt when the CLI gives no session start after it, and a handoff
//! written by a detached `phoenix handoff save`.

use std::path::Path;

use serde_json::json;

use crate::state::{self, Op, StateError};

use super::output::Reply;
use super::{Ctx, Hook};

impl Hook<'_> {
    /// Save what the continuity layer turns into a handoff: the state and where the transcript
    /// is. Never blocks the compaction, whatever happens.
    pub(super) fn pre_compact(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        let dir = ctx.dir;
        let trigger = self.payload.str("trigger").unwrap_or("auto").to_string();
        // Gemini CLI asks before every model call; most of the time nothing is compressed.
        if let Some(cli) = self.cli
            && !cli.adapter().compacts_now(
                &trigger,
                self.transcript().as_deref().map(Path::new),
                &self.cwd(ctx),
            )
        {
            return Ok(Reply::Nothing);
        }
        let now = state::rfc3339(ctx.now);
        let snapshot_state = dir.update_state(ctx.retention, |s| {
            s.compactions += 1;
            s.last_compaction = Some(now.clone());
            Ok(s.clone())
        })?;
        let snapshots = dir.file("pre-compact");
        state::create_private_dir(&snapshots).map_err(|source| StateError::Io {
            action: "create",
            path: snapshots.clone(),
            source,
        })?;
        let stamp = ctx.now.strftime("%Y%m%dT%H%M%S%.3fZ").to_string();
        let path = snapshots.join(format!("{stamp}-{trigger}.json"));
        let snapshot = json!({
            "ts": now, "agent": ctx.agent.name, "trigger": trigger,
            "session_id": self.payload.session_id(),
            "transcript_path": self.payload.transcript_path(),
            "custom_instructions": self.payload.get("custom_instructions"),
            "state": snapshot_state,
        });
        let bytes = serde_json::to_vec_pretty(&snapshot).expect("snapshot serialises");
        state::atomic_write(&path, &bytes).map_err(|source| StateError::Io {
            action: "write",
            path: path.clone(),
            source,
        })?;
        // A CLI without a SessionStart after a compression (Gemini): the context phoenix gave at
        // session start went into the summary with the rest. It is given again with the next
        // prompt, rendered then, with this handoff.
        let held_for_prompt = self
            .cli
            .is_some_and(|c| c.adapter().compaction_skips_session_start())
            && {
                let held = json!({"session_id": self.payload.session_id(), "start": "compacted"});
                self.hold_for_prompt(dir, &held)
            };
        let _ = dir.record_op(
            Op::PreCompact,
            json!({"trigger": trigger, "transcript_path": self.payload.transcript_path(),
                   "snapshot": path, "context_for_next_prompt": held_for_prompt}),
        );
        self.spawn_handoff(ctx);
        Ok(Reply::Nothing)
    }

    /// A handoff of what the session knew before its compaction, written by a detached
    /// `phoenix handoff save`: the hook returns at once (it must never hold the compaction
    /// up), and the hook binary stays free of the template engine.
    fn spawn_handoff(&self, ctx: &Ctx<'_>) {
        use std::os::unix::process::CommandExt;
        let Ok(program) = crate::process::main_binary() else {
            return;
        };
        let mut cmd = std::process::Command::new(program);
        cmd.arg("--config")
            .arg(&ctx.spec.file)
            .args([
                "handoff",
                "save",
                &ctx.agent.name,
                "--reason",
                "pre_compact",
                "--no-input",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        if let Err(e) = cmd.spawn() {
            self.problem(&format!("cannot start the pre-compact handoff: {e}"));
        }
    }
}
