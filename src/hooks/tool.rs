//! Tool calls: the call about to run (named if the session dies during it, and the
//! structured files it may break snapshotted), and how each one ended, in tool_use.jsonl and,
//! when something changed, in state.json.

use std::path::Path;

use serde_json::{Value, json};

use crate::state::{self, AgentDir, AgentState, StateError, Status};

use super::output::Reply;
use super::payload::{self, Outcome};
use super::{Ctx, HEARTBEAT_WRITE_INTERVAL, Hook, guard};

/// How much of an in-flight call's input is kept to name it.
const IN_FLIGHT_INPUT_CHARS: usize = 500;

impl Hook<'_> {
    pub(super) fn pre_tool(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        self.note_in_flight(ctx.dir);
        self.guard_snapshot(ctx)
    }

    /// Snapshot the structured files the call is about to edit, for the guard.
    pub(super) fn guard_snapshot(&self, ctx: &Ctx<'_>) -> Result<Reply, StateError> {
        if ctx.agent.guard_structured_files {
            guard::snapshot(ctx.dir, &self.cwd(ctx), &self.payload.edited_files())?;
        }
        Ok(Reply::Nothing)
    }

    /// The call about to run, so that an exit while it runs can be named to the next session.
    /// One small unsynced write: a lost one only costs that note.
    fn note_in_flight(&self, dir: &AgentDir) {
        let tool = self.payload.tool_name();
        if tool.is_empty() {
            return;
        }
        let input = self
            .payload
            .get("tool_input")
            .or(self.payload.get("tool_args"));
        // A shell call is named by its command; anything else by its input, cut short.
        let text = match input.and_then(|i| i.get("command")) {
            Some(Value::String(c)) => c.clone(),
            Some(other) => other.to_string(),
            None => input.map(Value::to_string).unwrap_or_default(),
        };
        let text: String = text.chars().take(IN_FLIGHT_INPUT_CHARS).collect();
        let line = json!({
            "ts": state::now_rfc3339(), "tool": tool, "input": text,
            "session_id": self.payload.session_id(),
        });
        let _ = state::file::write_atomic(
            &dir.file(state::IN_FLIGHT),
            line.to_string().as_bytes(),
            0o600,
            false,
        );
    }

    /// How the tool call ended. Some CLIs' payloads have no failure flag (Codex): for a call
    /// that looks fine, the exit code comes from the session file the CLI wrote before running
    /// the hook.
    pub(super) fn tool_outcome(&self) -> Outcome {
        let outcome = self.payload.outcome();
        let Some(cli) = self.cli.filter(|_| outcome == Outcome::Ok) else {
            return outcome;
        };
        let (Some(rollout), Some(call)) = (
            self.payload.transcript_path(),
            self.payload.str("tool_use_id"),
        ) else {
            return outcome;
        };
        match cli.adapter().shell_exit_code(Path::new(rollout), call) {
            Some(code) if code != 0 => {
                let output = self
                    .payload
                    .get("tool_response")
                    .and_then(Value::as_str)
                    .map(payload::short)
                    .filter(|l| !l.is_empty());
                Outcome::Failed(match output {
                    Some(line) => format!("exit code {code}: {line}"),
                    None => format!("exit code {code}"),
                })
            }
            _ => outcome,
        }
    }

    /// After a tool call: one line in tool_use.jsonl, and state.json only when it changes.
    pub(super) fn tool_done(&self, ctx: &Ctx<'_>, outcome: Outcome) -> Result<Reply, StateError> {
        let dir = ctx.dir;
        // The call finished: nothing is in flight (a missing file is the common case).
        let _ = std::fs::remove_file(dir.file(state::IN_FLIGHT));
        let session_id = self.payload.session_id().map(str::to_string);
        let now = state::rfc3339(ctx.now);
        let mut line = json!({"ts": state::now_rfc3339(), "tool": self.payload.tool_name(), "ok": outcome == Outcome::Ok});
        if let Some(digest) = self.payload.tool_input_digest() {
            line["input_digest"] = json!(digest);
        }
        if let Some(id) = &session_id {
            line["session_id"] = json!(id);
        }
        let mut result = Ok(());
        match &outcome {
            Outcome::Ok => {
                let needs_write = match dir.read_state() {
                    Ok(current) => heartbeat_needs_write(&current, session_id.as_deref(), ctx.now),
                    Err(e) => {
                        result = Err(e);
                        false
                    }
                };
                if needs_write {
                    let ended = dir.update_state(ctx.retention, |s| {
                        s.status = Status::Working;
                        s.consecutive_errors = 0;
                        s.last_active = Some(now);
                        if session_id.is_some() {
                            s.session_id = session_id.clone();
                        }
                        // A tool ran: a permission asked for was given.
                        Ok(super::waiting::clear(s))
                    });
                    result = ended.map(|e| super::waiting::record_input_given(ctx, e, "tool_call"));
                }
            }
            Outcome::Failed(error) => {
                line["error"] = json!(error);
                let count = dir.update_state(ctx.retention, |s| {
                    s.status = Status::Working;
                    s.consecutive_errors += 1;
                    if session_id.is_some() {
                        s.session_id = session_id.clone();
                    }
                    s.record_error(error.clone(), &now);
                    s.last_active = Some(now);
                    Ok((s.consecutive_errors, super::waiting::clear(s)))
                });
                match count {
                    Ok((n, ended)) => {
                        line["consecutive_errors"] = json!(n);
                        super::waiting::record_input_given(ctx, ended, "tool_call");
                    }
                    Err(e) => result = Err(e),
                }
            }
            Outcome::Interrupted => line["interrupted"] = json!(true),
        }
        dir.append_tool_use(&line)?;
        result?;
        Ok(self.guard_feedback(ctx))
    }

    /// What the structured-file guard has to tell the model about the files this call edited
    /// (restored from their snapshot), if anything.
    pub(super) fn guard_feedback(&self, ctx: &Ctx<'_>) -> Reply {
        if !ctx.agent.guard_structured_files {
            return Reply::Nothing;
        }
        let messages = guard::check(ctx.dir, &self.cwd(ctx), &self.payload.edited_files());
        if messages.is_empty() {
            return Reply::Nothing;
        }
        Reply::Feedback {
            event: self
                .payload
                .event_name()
                .unwrap_or("PostToolUse")
                .to_string(),
            reason: messages.join("\n"),
        }
    }
}

/// Whether a successful call must rewrite state.json: anything but a fresh heartbeat of the
/// same working session with no errors to reset.
fn heartbeat_needs_write(
    state: &AgentState,
    session_id: Option<&str>,
    now: jiff::Timestamp,
) -> bool {
    let fresh = state.last_active_at().is_some_and(|t| {
        let age = now.as_second() - t.as_second();
        (0..HEARTBEAT_WRITE_INTERVAL.as_secs() as i64).contains(&age)
    });
    state.status != Status::Working
        || state.consecutive_errors != 0
        || state.needs_input.is_some()
        || !fresh
        || session_id.is_some_and(|id| state.session_id.as_deref() != Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_skips_the_write_when_nothing_changed() {
        let now: jiff::Timestamp = "2026-02-17T02:12:53Z".parse().unwrap();
        let mut s = AgentState::new("a");
        s.status = Status::Working;
        s.session_id = Some("s1".into());
        s.last_active = Some("2026-02-17T02:12:50Z".into());
        assert!(!heartbeat_needs_write(&s, Some("s1"), now));
        assert!(heartbeat_needs_write(&s, Some("s2"), now));
        s.last_active = Some("2026-02-17T02:12:00Z".into());
        assert!(heartbeat_needs_write(&s, Some("s1"), now));
        s.last_active = Some("2026-02-17T02:12:50Z".into());
        s.consecutive_errors = 1;
        assert!(heartbeat_needs_write(&s, None, now));
    }
}
