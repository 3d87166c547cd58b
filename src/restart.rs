//! Restarting one agent through the apply path: an operator's restart (`phoenix restart`,
//! carried out by the controller when `phoenix run` runs, see `controller::request`) or the
//! watchdog's revival. It clears `.clean-exit` and the crash quarantine first (the seed's
//! coordination table: "cleared by restart script"), records the intent durably (`.fresh`, a
//! discarded session id) so no reconciler can resume the old session, and then lets the live
//! wrapper restart the agent, or respawns the pane.

use std::time::{Duration, Instant};

use crate::bail;
use crate::error::Context;
use nix::sys::signal::Signal;
use serde_json::json;

use crate::apply::Applier;
use crate::context::FleetContext;
use crate::plan::{Action, Change, Plan};
use crate::recovery::{EndReason, execute, record};
use crate::spec::{AgentSpec, Spec};
use crate::state::Op;
use crate::state::claim::{self, Owner};
use crate::state::lock::{FleetLock, LOCK_WAIT};
use crate::state::{self, FleetDir};
use crate::world::{self, Runtime};

/// How long to wait for the replacement process before reporting anyway.
const WAIT_FOR_NEW: Duration = Duration::from_secs(10);
/// How long the old agent gets to exit on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, serde::Serialize)]
pub struct RestartReport {
    pub agent: String,
    pub fresh: bool,
    /// `wrapper` (the live wrapper restarted it), `respawn` or `start`.
    pub via: String,
    pub pane: Option<String>,
    pub pid: Option<u32>,
}

/// Who restarts the agent: a person (`phoenix restart`, the API, the dashboard) decided, and
/// gives it a clean slate; the watchdog reviving it spends from the same budgets instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Operator,
    Watchdog,
}

/// What [`carry_out`] did: how the agent is being restarted, and the agent process it ended
/// (the replacement is the next one with another pid).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Carried {
    /// `wrapper` (the live wrapper restarts it), `respawn` or `start`.
    pub via: String,
    pub old_pid: Option<u32>,
}

/// An operator's restart in this process, in the fleet `ctx` (no daemon runs, or the daemon
/// did not take the request): carried out, then waited for. `on_wait` hears whom it waits for
/// when another phoenix is changing the fleet.
pub fn in_process(
    ctx: &FleetContext,
    name: &str,
    fresh: bool,
    on_wait: &dyn Fn(&str),
) -> crate::error::Result<RestartReport> {
    let carried = carry_out(&ctx.spec, ctx.runtime(), name, fresh, on_wait, By::Operator)?;
    Ok(wait_for_new(
        &ctx.spec,
        ctx.runtime(),
        name,
        fresh,
        &carried,
    ))
}

/// The watchdog's revival of an agent whose CLI is gone: the pane is restarted (resuming), but
/// no count is reset: neither its crash history, nor the Clinic's recoveries, nor the revivals
/// the watchdog itself spent on the task (else every revival would make room for the next).
/// It does not wait for the new agent process: the watchdog's pass goes on to the other agents,
/// and its next pass sees whether the agent came back.
pub fn revive(
    spec: &Spec,
    runtime: &dyn Runtime,
    name: &str,
) -> crate::error::Result<RestartReport> {
    let carried = carry_out(
        spec,
        runtime,
        name,
        false,
        &|holder| tracing::info!(%holder, "waiting for the fleet lock"),
        By::Watchdog,
    )?;
    Ok(RestartReport {
        agent: name.to_string(),
        fresh: false,
        via: carried.via,
        pane: None,
        pid: None,
    })
}

/// A person restarted the agent (`phoenix restart`, or `restart`/`fresh` typed in safe mode):
/// every count in its restart ledger that stops it for a person starts again (the crash
/// history and quarantine, the Clinic's recoveries and the watchdog's revivals for the task,
/// the daemon's starts).
pub fn reset_counts(dir: &state::AgentDir) -> crate::error::Result<()> {
    record::update(dir, |r| r.reset()).context("cannot reset the restart ledger")
}

/// The agent `name` if it can be restarted: declared and enabled.
pub fn restartable<'a>(spec: &'a Spec, name: &str) -> crate::error::Result<&'a AgentSpec> {
    let Some(agent) = spec.agent(name) else {
        bail!(
            "no agent `{name}` (declared: {})",
            spec.agent_names().join(", ")
        );
    };
    if !agent.enabled {
        bail!("agent `{name}` is disabled in phoenix.toml: set `enabled = true` first");
    }
    Ok(agent)
}

/// Restart the agent `name` now, holding the fleet lock, without waiting for the new process:
/// the live wrapper is asked to restart it, or its pane is respawned (or started) through
/// [`Applier`], the same path every reconcile takes.
pub fn carry_out(
    spec: &Spec,
    runtime: &dyn Runtime,
    name: &str,
    fresh: bool,
    on_wait: &dyn Fn(&str),
    by: By,
) -> crate::error::Result<Carried> {
    restartable(spec, name)?;
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(name);
    // `phoenix stop` holds until `phoenix start`: no restart (a person's, the API's or the
    // watchdog's revival) may quietly undo it.
    if dir.has_marker(state::STOPPED) {
        bail!(
            "agent `{name}` is stopped (`phoenix stop`): start it again with `phoenix start {name}`"
        );
    }
    if let Some(fence) = state::fence::refused(&fleet, name) {
        bail!(
            "agent `{name}` was {}: it does not run on this machine (`phoenix move` on the operator's machine places it)",
            fence.describe()
        );
    }
    dir.ensure()
        .with_context(|| format!("cannot create state dir `{}`", dir.path.display()))?;
    // One change of the fleet at a time: a reconcile or an apply racing this restart would
    // otherwise see the pane dead or missing and start the agent a second time. And one owner
    // of this agent's restart: the claim outlasts the lock, through the new CLI's start.
    let (lock, claim) = lock_and_claim(&fleet, name, by, on_wait)?;
    match restart_claimed(spec, runtime, name, fresh, by) {
        Ok(carried) => {
            claim.starting();
            drop(lock);
            state::daemon::poke(&fleet, name);
            Ok(carried)
        }
        Err(e) => {
            claim.release();
            Err(e)
        }
    }
}

/// Claim `dir`'s agent for a restart `by` someone who acts without the fleet lock (the
/// watchdog stopping a CLI under its live wrapper, which starts the next one): an error when
/// another owner's restart is in progress, which is left to finish.
pub fn claim(dir: &state::AgentDir, by: By) -> crate::error::Result<claim::Held> {
    match claim::take(dir, owner(by)).context("cannot claim the restart")? {
        Ok(held) => Ok(held),
        Err(other) => bail!(
            "agent `{}` is {}: left to that restart",
            dir.name,
            other.describe()
        ),
    }
}

/// The owner a restart `by` someone claims the agent as.
fn owner(by: By) -> Owner {
    match by {
        By::Operator => Owner::Operator,
        By::Watchdog => Owner::Watchdog,
    }
}

/// The fleet lock and this agent's restart claim. Another owner's restart in progress is
/// never doubled: the watchdog leaves the agent to it; a person's restart waits until it is
/// done (the new CLI runs, or its claim lapses), holding neither lock meanwhile, and then
/// restarts the agent as asked.
fn lock_and_claim(
    fleet: &FleetDir,
    name: &str,
    by: By,
    on_wait: &dyn Fn(&str),
) -> crate::error::Result<(FleetLock, claim::Held)> {
    let dir = fleet.agent(name);
    let started = Instant::now();
    let mut told = false;
    loop {
        let lock = FleetLock::acquire(fleet, "restart", LOCK_WAIT, on_wait)?;
        let other = match claim::take(&dir, owner(by)).context("cannot claim the restart")? {
            Ok(held) => return Ok((lock, held)),
            Err(other) => other,
        };
        drop(lock);
        if by == By::Watchdog {
            bail!(
                "agent `{name}` is {}: the watchdog leaves it to that restart",
                other.describe()
            );
        }
        if started.elapsed() >= LOCK_WAIT {
            bail!(
                "agent `{name}` is still {} after {}s; try again when it is done",
                other.describe(),
                LOCK_WAIT.as_secs()
            );
        }
        if !std::mem::replace(&mut told, true) {
            on_wait(&format!("agent `{name}` {}", other.describe()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`carry_out`] once the fleet lock and the agent's claim are held.
fn restart_claimed(
    spec: &Spec,
    runtime: &dyn Runtime,
    name: &str,
    fresh: bool,
    by: By,
) -> crate::error::Result<Carried> {
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(name);
    let world = world::observe(spec, runtime)
        .with_context(|| format!("cannot observe {}", runtime.location()))?;

    // The intent goes to disk before anything is killed: whoever starts the agent next sees it.
    // `.clean-exit` is left to the new wrapper, which clears it as it starts the agent: cleared
    // any earlier, a reconciler could see a dead pane without it and start a second wrapper.
    // A person decided: every count that stops an agent for a person starts again (see
    // docs/recovery.md). The watchdog's own revival resets none of them.
    if by == By::Operator {
        reset_counts(&dir)?;
    }
    if fresh {
        execute::intend_fresh(&dir)?;
        if let Some(s) = record::recorded_session(&dir) {
            record::clear_session(&dir, &s.id)?;
        }
    }
    match by {
        By::Operator => dir.record_op(Op::OperatorRestart, json!({"fresh": fresh}))?,
        By::Watchdog => dir.record_op(Op::WatchdogRestart, json!({"fresh": fresh}))?,
    }

    let pane = world.pane_of(name);
    let old_pid = pane.and_then(|p| p.agent_process()).map(|p| p.pid);
    let wrapper_running_agent = pane.is_some_and(|p| {
        !p.dead
            && p.agent_process().is_some()
            && matches!(p.phase.as_deref(), None | Some("running"))
    });
    let via = if wrapper_running_agent {
        let pid = old_pid.expect("checked above");
        let reason = match by {
            By::Operator => EndReason::OperatorRestart,
            By::Watchdog => EndReason::WatchdogKill,
        };
        stop_under_wrapper(&dir, pid, reason, fresh, Duration::ZERO)?;
        "wrapper"
    } else {
        let action = match pane {
            Some(p) => Action::Restart { pane: p.id.clone() },
            None => Action::Start,
        };
        let via = if pane.is_some() { "respawn" } else { "start" };
        let plan = Plan::of(vec![Change {
            agent: name.to_string(),
            symbol: action.symbol(),
            action,
            reason: match by {
                By::Operator => "operator restart".into(),
                By::Watchdog => "watchdog revival".into(),
            },
        }]);
        let report = Applier {
            spec,
            runtime,
            exe: crate::process::main_binary().context("cannot find the phoenix binary")?,
        }
        .apply(&plan);
        if let Some(step) = report.steps.iter().find(|s| !s.ok) {
            bail!("cannot restart agent `{name}`: {}", step.detail);
        }
        via
    };
    Ok(Carried {
        via: via.to_string(),
        old_pid,
    })
}

/// Wait (up to [`WAIT_FOR_NEW`]) for the agent process that replaces `carried.old_pid`, and
/// report where it runs.
pub fn wait_for_new(
    spec: &Spec,
    runtime: &dyn Runtime,
    name: &str,
    fresh: bool,
    carried: &Carried,
) -> RestartReport {
    let old_pid = carried.old_pid;
    let deadline = Instant::now() + WAIT_FOR_NEW;
    let mut found = (None, None);
    while Instant::now() < deadline {
        if let Ok(w) = world::observe(spec, runtime)
            && let Some(p) = w.pane_of(name)
        {
            let pid = p.agent_process().map(|a| a.pid);
            found = (Some(p.id.clone()), pid);
            if pid.is_some() && pid != old_pid {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    RestartReport {
        agent: name.to_string(),
        fresh,
        via: carried.via.clone(),
        pane: found.0,
        pid: found.1.filter(|p| Some(*p) != old_pid),
    }
}

/// Stop the agent process `pid` that a live wrapper runs, announcing why first, so the wrapper
/// starts it again at once (resuming unless `fresh`) instead of counting a crash. SIGTERM to
/// its process group, SIGKILL after a grace period.
pub fn stop_under_wrapper(
    dir: &state::AgentDir,
    pid: u32,
    reason: EndReason,
    fresh: bool,
    delay: Duration,
) -> crate::error::Result<()> {
    execute::request_stop_after(dir, reason, fresh, delay)?;
    // The agent leads its own process group (the wrapper made it so).
    signal_group(pid, Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while process_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if process_alive(pid) {
        signal_group(pid, Signal::SIGKILL);
    }
    Ok(())
}

/// Signal the process group `pgid` (an agent leads its own).
fn signal_group(pgid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pgid) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), sig);
    }
}

pub(crate) use crate::process::alive as process_alive;

/// An operator's restart on the fake runtime.
#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::PlanOptions;
    use crate::world::fake::{Call, FakeRuntime};

    fn applied(dir: &Path, fake: &FakeRuntime) -> FleetContext {
        let spec = crate::world::fake::unit_fleet(dir, &["one"]);
        let ctx = FleetContext::with_runtime(&dir.join("phoenix.toml"), spec, fake.shared());
        let world = world::observe(&ctx.spec, fake).unwrap();
        let options = PlanOptions {
            prune: false,
            force_remove_worktrees: false,
            hooks_exe: None,
        };
        let plan = crate::plan::diff(&ctx.spec, &world, &options);
        Applier {
            spec: &ctx.spec,
            runtime: fake,
            exe: "/usr/bin/phoenix".into(),
        }
        .apply(&plan);
        fake.clear_calls();
        ctx
    }

    #[test]
    fn an_operator_restart_of_a_dead_pane_respawns_it_fresh_when_asked() {
        let tmp = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::new();
        let ctx = applied(tmp.path(), &fake);
        let pane = fake.panes()[0].id.clone();
        fake.exit(&pane, 1);
        let report = in_process(&ctx, "one", true, &|_| {}).unwrap();
        assert_eq!(report.via, "respawn");
        assert_eq!(report.pane.as_deref(), Some(pane.as_str()));
        assert_eq!(report.pid, fake.pane(&pane).unwrap().agent_pid);
        assert_eq!(
            fake.changes(),
            [Call::Respawn {
                agent: "one".into(),
                pane
            }]
        );
        let dir = ctx.dir.agent("one");
        assert!(dir.has_marker(state::FRESH));
        let ops = std::fs::read_to_string(dir.file(state::OPS_LOG)).unwrap();
        assert!(ops.contains("\"operator_restart\""), "{ops}");
    }

    #[test]
    fn an_operator_restart_of_a_missing_pane_starts_it() {
        let tmp = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::new();
        let ctx = applied(tmp.path(), &fake);
        fake.kill_server().unwrap();
        fake.clear_calls();
        let report = in_process(&ctx, "one", false, &|_| {}).unwrap();
        assert_eq!(report.via, "start");
        assert!(matches!(&fake.changes()[..], [Call::Start { agent, .. }] if agent == "one"));
    }
}
