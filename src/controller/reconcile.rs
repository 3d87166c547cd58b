//! One pass of the controller: observe, diff, leave out what must wait (an agent in its own
//! backoff, a start loop, a hook file that cannot be changed), apply one change at a time.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::Controller;
use super::requeue::{LOCK_RETRY, ReconcileError, Requeue, requeue};
use crate::apply::{Applier, StepOutcome};
use crate::plan::{self, Action, PlanOptions};
use crate::state::lock::{FleetLock, LockError};
use crate::state::{FleetDir, claim};
use crate::world;

/// The daemon starts one agent at most this often within `START_WINDOW` before holding off:
/// a pane whose wrapper dies at once must not turn pidfd wake-ups into a hot loop. Counted
/// in the agent's restart ledger, so a restarted daemon does not start the count again.
const MAX_STARTS: usize = 5;
const START_WINDOW: Duration = Duration::from_secs(60);

/// What a pass answers: when to come back, and the pane processes to watch (`None`: keep
/// watching what is watched).
#[must_use]
#[derive(Debug)]
pub(super) struct Reconciled {
    pub requeue: Requeue,
    pub pids: Option<Vec<u32>>,
    /// Changes the pass applied (tried).
    pub changes: usize,
}

impl Controller {
    /// Observe, diff, apply, holding the fleet lock. An agent whose change fails waits out its
    /// own backoff; only a failure to look at the fleet at all is an error of the pass.
    pub(super) fn reconcile(&mut self, now: Instant) -> Result<Reconciled, ReconcileError> {
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        // Another phoenix (an apply, a restart) is changing the fleet: look again when it is
        // done rather than wait here, deaf to signals and wake-ups.
        let _lock = match FleetLock::acquire(
            &fleet,
            "phoenix run: reconcile",
            Duration::ZERO,
            |_| {},
        ) {
            Ok(lock) => lock,
            Err(LockError::Timeout { holder, .. }) => {
                debug!(%holder, "the fleet is being changed by another phoenix; reconciling after it");
                return Ok(Reconciled {
                    requeue: requeue(LOCK_RETRY),
                    pids: None,
                    changes: 0,
                });
            }
            Err(e) => return Err(ReconcileError::Lock(e)),
        };
        // The operator took the fleet down: nothing starts until the operator's `apply`
        // brings it up (checked under the lock, which `down` and `apply` hold as they change
        // it). No pane process is watched meanwhile.
        if let Some(why) = crate::state::down::reason(&fleet) {
            if !std::mem::replace(&mut self.held_down, true) {
                info!("{why}: the daemon starts and restarts nothing until then");
            }
            return Ok(Reconciled {
                requeue: requeue(self.spec.fleet.reconcile_interval),
                pids: Some(Vec::new()),
                changes: 0,
            });
        }
        if std::mem::take(&mut self.held_down) {
            info!("the fleet was brought up again: reconciling it");
        }
        // Under the lock the operator's apply held as it changed the fleet: the edit it
        // applied is what this pass reconciles toward.
        self.take_over_applied(&fleet);
        let world = world::observe(&self.spec, &*self.runtime)?;
        // Hook files too: the daemon converges everything `apply` converges, or an agent it
        // (re)starts runs without the hooks `plan` says it lacks.
        let options = PlanOptions {
            prune: false,
            force_remove_worktrees: false,
            hooks_exe: Some(crate::hooks::config::hook_binary(&self.exe)),
        };
        let mut plan = plan::diff(&self.spec, &world, &options);
        // An agent with nothing planned any more (it came back, or is gone) is done waiting.
        self.backoff.retain(|agent| {
            plan.changes
                .iter()
                .any(|c| c.agent == agent && !is_hook_change(c))
        });
        if plan.is_empty() {
            debug!("reconciled: nothing to do");
            self.held.clear();
        }
        self.hold_back_backoff(&mut plan, now);
        self.hold_back_restart_loops(&mut plan);
        self.hold_back_failed_hooks(&mut plan);
        let pids = if plan.is_empty() {
            Some(watched_pids(&world))
        } else {
            self.apply_each(&plan, now);
            world::observe(&self.spec, &*self.runtime)
                .ok()
                .map(|w| watched_pids(&w))
        };
        Ok(Reconciled {
            requeue: requeue(self.spec.fleet.reconcile_interval).min(self.backoff.next_due(now)),
            pids,
            changes: plan.changes.len(),
        })
    }

    /// Apply the plan one change at a time, each after a look at the stop flag: a SIGTERM in
    /// the middle of a pass that starts many agents must not be followed by more starts. Each
    /// agent's outcome goes to its backoff; a failed hook change to the hook guard.
    fn apply_each(&mut self, plan: &plan::Plan, now: Instant) {
        for c in &plan.changes {
            info!(agent = %c.agent, action = c.symbol, reason = %c.reason, "planned");
        }
        let applier = Applier {
            spec: &self.spec,
            runtime: &*self.runtime,
            exe: self.exe.clone(),
        };
        // Per agent, its first failed step (hook changes aside), or none.
        let mut outcome: BTreeMap<String, Option<StepOutcome>> = BTreeMap::new();
        for (done, change) in plan.changes.iter().enumerate() {
            if self.stopping.load(Ordering::SeqCst) {
                info!(
                    abandoned = plan.changes.len() - done,
                    "asked to stop: the rest of this pass is abandoned"
                );
                break;
            }
            // One owner of a restart: the agent is claimed for the daemon while it starts,
            // restarts or replaces it, and through the new CLI's start; one someone else
            // claimed since this pass looked is left to them.
            let claim = match self.claim(change) {
                Ok(claim) => claim,
                Err(other) => {
                    info!(agent = %change.agent, "{}: left to it", other.describe());
                    continue;
                }
            };
            let steps = applier.apply(&plan::Plan::of(vec![change.clone()])).steps;
            if let Some(claim) = claim {
                if steps.iter().all(|s| s.ok) {
                    claim.starting();
                } else {
                    claim.release();
                }
            }
            for s in &steps {
                if s.ok {
                    info!(agent = %s.agent, action = %s.action, detail = %s.detail, "applied");
                } else {
                    warn!(agent = %s.agent, action = %s.action, detail = %s.detail, "step failed");
                }
            }
            if is_hook_change(change) {
                if steps.iter().any(|s| !s.ok) {
                    self.failed_hooks.insert(hook_change_key(change));
                }
                continue;
            }
            let first_failed = outcome.entry(change.agent.clone()).or_default();
            if first_failed.is_none() {
                *first_failed = steps.into_iter().find(|s| !s.ok);
            }
        }
        for (agent, failed) in outcome {
            let Some(s) = failed else {
                self.backoff.succeeded(&agent);
                continue;
            };
            let err = ReconcileError::Step {
                agent: s.agent,
                action: s.action,
                detail: s.detail,
            };
            if let Requeue::After(wait) = self.backoff.failed(&err, now) {
                warn!(agent = %agent, "trying this agent again in {}s; the others go on", wait.as_secs_f32());
            }
        }
    }

    /// Claim the agent of `change` for the daemon if the change starts it (`Ok(None)`: it
    /// does not, or the claim cannot be written, which does not stop the fleet); the claim
    /// someone else holds when another owner's restart is under way.
    fn claim(&self, change: &plan::Change) -> Result<Option<claim::Held>, claim::Claim> {
        if !matches!(
            change.action,
            Action::Start | Action::Restart { .. } | Action::Replace { .. }
        ) {
            return Ok(None);
        }
        let dir = FleetDir::new(&self.spec.fleet.state_dir).agent(&change.agent);
        // The plan has already left out every agent someone restarts, but for a pane that
        // died after its restart's owner was done: a start that failed, which is taken over.
        match claim::take_after_failed_start(&dir, claim::Owner::Daemon) {
            Ok(taken) => taken.map(Some),
            Err(e) => {
                warn!(agent = %change.agent, error = %e, "cannot claim the restart; going ahead");
                Ok(None)
            }
        }
    }

    /// Leave out the changes of agents still waiting out their backoff.
    fn hold_back_backoff(&mut self, plan: &mut plan::Plan, now: Instant) {
        plan.changes.retain(|c| {
            let wait = !is_hook_change(c) && self.backoff.holds(&c.agent, now);
            if wait {
                debug!(agent = %c.agent, reason = %c.reason, "waiting out this agent's backoff");
            }
            !wait
        });
    }

    /// Leave out hook-file changes that failed before and are planned the same way again;
    /// forget failures no longer planned (the file was fixed, or changed again).
    fn hold_back_failed_hooks(&mut self, plan: &mut plan::Plan) {
        let planned: HashSet<String> = plan
            .changes
            .iter()
            .filter(|c| is_hook_change(c))
            .map(hook_change_key)
            .collect();
        self.failed_hooks.retain(|k| planned.contains(k));
        plan.changes.retain(|c| {
            let again = is_hook_change(c) && self.failed_hooks.contains(&hook_change_key(c));
            if again {
                debug!(agent = %c.agent, reason = %c.reason, "hook file still cannot be changed; see the earlier warning");
            }
            !again
        });
    }

    fn hold_back_restart_loops(&mut self, plan: &mut plan::Plan) {
        let now = jiff::Timestamp::now().as_second();
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        let mut held = Vec::new();
        plan.changes.retain(|c| {
            if !matches!(c.action, Action::Start | Action::Restart { .. }) {
                return true;
            }
            let dir = fleet.agent(&c.agent);
            // A ledger that cannot be written does not stop the fleet: the start goes ahead.
            let allowed = dir
                .ensure()
                .and_then(|()| {
                    crate::recovery::record::update(&dir, |l| {
                        l.note_start(now, START_WINDOW.as_secs() as i64, MAX_STARTS)
                    })
                })
                .unwrap_or(true);
            if !allowed {
                held.push(c.agent.clone());
            }
            allowed
        });
        for agent in &held {
            if !self.held.contains(agent) {
                warn!(
                    agent = %agent,
                    "started {MAX_STARTS} times within {}s and its pane keeps dying: holding off (see `phoenix status {agent}` and the pane)",
                    START_WINDOW.as_secs()
                );
            }
        }
        self.held = held;
    }
}

fn is_hook_change(c: &plan::Change) -> bool {
    matches!(
        c.action,
        Action::InstallHooks { .. } | Action::RemoveHooks { .. }
    )
}

/// A hook change as planned: the same key means the same file, wanting the same edit.
fn hook_change_key(c: &plan::Change) -> String {
    format!("{}\u{0}{:?}\u{0}{}", c.agent, c.action, c.reason)
}

fn watched_pids(world: &world::World) -> Vec<u32> {
    world
        .panes
        .iter()
        .filter(|p| !p.dead && p.agent.is_some())
        .map(|p| p.pid)
        .collect()
}
