//! The executor: carries a [`Recovery`] out. It is the only writer of what a recovery leaves
//! on disk: the fresh-start intent (the `.fresh` marker, the one way it travels), the recovery
//! context (`clinic_context.md`), the stop request, quarantine, the crash evidence and the
//! restart ledger's counts, and the recovery's critical events (`crash_loop`,
//! `session_unhealthy`; the Clinic records its own steps). The detectors call it; nothing
//! else writes these.

use std::io;

use serde_json::json;

use super::decide::{EndReason, Inject, Recovery, Start, StopRequest};
use super::record::{self, CrashEntry, CrashRecord, Quarantine};
use crate::clinic::PENDING_CONTEXT;
use crate::spec::AgentSpec;
use crate::state::{self, AgentDir, FleetDir, Op};

/// The next start of this agent is fresh, whoever starts it (this wrapper, a new one after a
/// reboot, the daemon). Consumed by the wrapper when it honours it.
pub fn intend_fresh(dir: &AgentDir) -> io::Result<()> {
    dir.ensure()?;
    dir.set_marker(state::FRESH)
}

/// Leave `text` for the agent's next session (its session-start hook takes it once).
pub fn give_context(dir: &AgentDir, text: &str) -> io::Result<()> {
    dir.ensure()?;
    state::atomic_write(&dir.file(PENDING_CONTEXT), text.as_bytes())
}

/// Keep the agent stopped for a person: its wrapper shows safe mode with `why`, and a new
/// wrapper, a daemon restart or a reboot keep it there until `phoenix restart`.
pub fn quarantine(dir: &AgentDir, why: &str) -> io::Result<()> {
    let since = state::now_rfc3339();
    record::update(dir, |r| {
        r.safe_mode = Some(Quarantine {
            since: since.clone(),
            reason: why.to_string(),
        })
    })
}

/// Announce an intentional stop before the agent is killed, so its wrapper records the right
/// reason and counts no crash. `fresh`: the next start is fresh (through [`intend_fresh`]).
pub fn request_stop(dir: &AgentDir, reason: EndReason, fresh: bool) -> io::Result<()> {
    request_stop_after(dir, reason, fresh, std::time::Duration::ZERO)
}

/// [`request_stop`], the next start waiting `delay` (a revival's backoff).
pub fn request_stop_after(
    dir: &AgentDir,
    reason: EndReason,
    fresh: bool,
    delay: std::time::Duration,
) -> io::Result<()> {
    if fresh {
        intend_fresh(dir)?;
    }
    let req = StopRequest {
        reason,
        ts: jiff::Timestamp::now().as_second(),
        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
    };
    record::stop_file(dir)
        .update(|slot| *slot = Some(req))
        .map_err(io::Error::other)
}

/// What the Clinic's recovery leaves for the next start (`phoenix clinic AGENT`), and the
/// recovery it spent.
pub fn rehabilitate(dir: &AgentDir, treated: &crate::clinic::Recovery) -> io::Result<()> {
    spend_recovery(dir, treated.spent.as_ref())?;
    let rehab = &treated.rehab;
    if rehab.start == Start::Fresh {
        intend_fresh(dir)?;
    }
    if let Some(text) = &rehab.inject {
        give_context(dir, text)?;
    }
    Ok(())
}

/// The Clinic spent a recovery on the task: the ledger says so.
fn spend_recovery(dir: &AgentDir, spent: Option<&crate::clinic::Counter>) -> io::Result<()> {
    match spent {
        Some(counter) => record::update(dir, |l| l.recoveries = counter.clone()),
        None => Ok(()),
    }
}

/// One watchdog revival is spent on `task`.
pub fn spend_revival(dir: &AgentDir, task: Option<&str>) -> io::Result<()> {
    record::update(dir, |l| l.revivals.spend(task))
}

/// Write what a recovery leaves for the next start: the context to give it (the revival
/// context rendered by the caller as `revival_text`) and the fresh-start intent.
pub fn prepare_start(dir: &AgentDir, r: &Recovery, revival_text: Option<&str>) -> io::Result<()> {
    spend_recovery(dir, r.recoveries.as_ref())?;
    match (&r.inject, revival_text) {
        (Inject::Text(text), _) => give_context(dir, text)?,
        (Inject::RevivalContext, Some(text)) => give_context(dir, text)?,
        _ => {}
    }
    if r.start == Some(Start::Fresh) {
        intend_fresh(dir)?;
    }
    Ok(())
}

/// A crash's evidence, kept before anything else: its record (`crashes/<time>.json`, with
/// the pane's last lines) and its entry in the ledger's crash window of `window_secs`.
pub fn keep_evidence(dir: &AgentDir, crash: &CrashRecord, entry: CrashEntry, window_secs: i64) {
    let _ = record::write_crash_record(dir, crash);
    let _ = record::update(dir, |l| l.push_crash(entry, window_secs));
}

/// Carry out the recovery after an exit, as far as the state dir goes: the sessions a fresh
/// start leaves (`sessions`, never resumed again), the next start's context and intent,
/// `.clean-exit`, quarantine and the crash-loop event. `last_exit`: the exit's code and
/// signal, for the event. Returns what could not be written.
pub fn after_exit(
    fleet: &FleetDir,
    dir: &AgentDir,
    agent: &AgentSpec,
    r: &Recovery,
    last_exit: (Option<i32>, Option<i32>),
    sessions: &[String],
) -> Vec<String> {
    let mut problems = Vec::new();
    if r.clear_session {
        for id in sessions {
            let _ = record::clear_session(dir, id);
        }
    }
    if let Err(e) = prepare_start(dir, r, None) {
        problems.push(format!("cannot write the next start's context: {e}"));
    }
    if r.clean_exit_marker {
        let _ = dir.set_marker(state::CLEAN_EXIT);
    }
    if let Some(why) = &r.quarantine
        && let Err(e) = quarantine(dir, why)
    {
        problems.push(format!("cannot quarantine: {e}"));
    }
    if let Some(message) = &r.critical {
        let _ = fleet.record_critical(
            "crash_loop",
            &agent.name,
            message,
            "safe_mode",
            json!({
                "max_crashes": agent.restart.max_crashes,
                "crash_window": crate::spec::duration::format(agent.restart.crash_window),
                "last_exit": {"code": last_exit.0, "signal": last_exit.1},
            }),
        );
        let _ = dir.record_op(Op::CrashLoop, json!({"reason": message}));
    }
    problems
}

/// The watchdog's `session_unhealthy` critical event: what it found and what was done.
pub fn record_unhealthy(fleet: &FleetDir, event: &serde_json::Value) -> io::Result<()> {
    fleet.append_event(event)
}
