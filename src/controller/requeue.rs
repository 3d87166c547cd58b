//! The controller's contract (after kube-rs): a reconcile answers with a `#[must_use]`
//! [`Requeue`] instead of sleeping; a failure goes through the pure [`error_policy`]; an agent
//! whose change failed waits out its own [`Backoff`] while the rest of the fleet goes on.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::state::lock::LockError;
use crate::world::RuntimeError;

/// What the loop does after a reconcile: come back after a while, or only when woken.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    After(Duration),
    OnChange,
}

/// Come back after `d` (kube-rs `Action::requeue`; `Requeue` itself is `#[must_use]`).
pub const fn requeue(d: Duration) -> Requeue {
    Requeue::After(d)
}

/// Come back only when something happens (kube-rs `Action::await_change`).
pub const fn await_change() -> Requeue {
    Requeue::OnChange
}

impl Requeue {
    /// The sooner of two requeues.
    pub fn min(self, other: Requeue) -> Requeue {
        match (self, other) {
            (Requeue::After(a), Requeue::After(b)) => Requeue::After(a.min(b)),
            (Requeue::OnChange, x) | (x, Requeue::OnChange) => x,
        }
    }

    /// Never later than `d`.
    pub fn at_most(self, d: Duration) -> Requeue {
        self.min(requeue(d))
    }
}

/// Why a reconcile, or one agent's part of it, failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The fleet could not be looked at: the whole pass is off.
    #[error("cannot observe the runtime: {0}")]
    Observe(#[from] RuntimeError),
    #[error(transparent)]
    Lock(#[from] LockError),
    /// One agent's change failed: only that agent waits.
    #[error("agent `{agent}`: {action} failed: {detail}")]
    Step {
        agent: String,
        action: String,
        detail: String,
    },
}

/// How soon to try again when another phoenix holds the fleet lock.
pub const LOCK_RETRY: Duration = Duration::from_millis(500);
/// Longest wait after failures; the regular interval still applies when it is shorter.
pub const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(60);

/// Pure: how long to wait after the `attempt`-th failure in a row. Doubles from one second; a
/// missing tmux will not appear within seconds, so that waits longest.
pub fn error_policy(err: &ReconcileError, attempt: u32) -> Requeue {
    match err {
        ReconcileError::Observe(RuntimeError::NotInstalled) => requeue(MAX_ERROR_BACKOFF),
        ReconcileError::Observe(_) | ReconcileError::Lock(_) | ReconcileError::Step { .. } => {
            let secs = 1u64 << attempt.min(6);
            requeue(Duration::from_secs(secs).min(MAX_ERROR_BACKOFF))
        }
    }
}

/// Agents whose last change failed, each waiting out its own [`error_policy`] delay. A held
/// agent's changes are left out of a pass, so its failing start is neither retried on every
/// wake-up (each try costs a retry and a diagnosis) nor makes the other agents wait.
#[derive(Debug, Default)]
pub struct Backoff {
    agents: HashMap<String, Held>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    attempt: u32,
    /// `None`: until something changes (the policy said `OnChange`).
    until: Option<Instant>,
}

impl Backoff {
    /// Record that `err` (a [`ReconcileError::Step`]) failed at `now`; returns how long the
    /// agent now waits.
    pub fn failed(&mut self, err: &ReconcileError, now: Instant) -> Requeue {
        let ReconcileError::Step { agent, .. } = err else {
            return await_change();
        };
        let held = self.agents.entry(agent.clone()).or_insert(Held {
            attempt: 0,
            until: None,
        });
        held.attempt = held.attempt.saturating_add(1);
        let wait = error_policy(err, held.attempt);
        held.until = match wait {
            Requeue::After(d) => Some(now + d),
            Requeue::OnChange => None,
        };
        wait
    }

    /// The agent's change went through: its count starts again.
    pub fn succeeded(&mut self, agent: &str) {
        self.agents.remove(agent);
    }

    /// Whether the agent still waits at `now`.
    pub fn holds(&self, agent: &str, now: Instant) -> bool {
        self.agents
            .get(agent)
            .is_some_and(|h| h.until.is_none_or(|t| now < t))
    }

    /// Forget every agent not in `keep` (nothing planned for it any more).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.agents.retain(|agent, _| keep(agent));
    }

    /// Forget everything: the config changed, so every failed change deserves a new try.
    pub fn clear(&mut self) {
        self.agents.clear();
    }

    /// When the first held agent is due again.
    pub fn next_due(&self, now: Instant) -> Requeue {
        self.agents
            .values()
            .filter_map(|h| h.until)
            .map(|t| requeue(t.saturating_duration_since(now)))
            .fold(await_change(), Requeue::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(agent: &str) -> ReconcileError {
        ReconcileError::Step {
            agent: agent.into(),
            action: "start".into(),
            detail: "workdir does not exist".into(),
        }
    }

    #[test]
    fn error_policy_table() {
        let secs = |s| requeue(Duration::from_secs(s));
        let lock = || {
            ReconcileError::Lock(LockError::Open {
                path: "/x/fleet.lock".into(),
                source: std::io::Error::other("no"),
            })
        };
        let gone = || {
            ReconcileError::Observe(RuntimeError::Failed {
                command: "list".into(),
                stderr: "no server".into(),
            })
        };
        let table: Vec<(ReconcileError, u32, Requeue)> = vec![
            (step("a"), 0, secs(1)),
            (step("a"), 1, secs(2)),
            (step("a"), 2, secs(4)),
            (step("a"), 5, secs(32)),
            (step("a"), 6, secs(60)),
            (step("a"), u32::MAX, secs(60)),
            (gone(), 1, secs(2)),
            (gone(), 9, secs(60)),
            (lock(), 3, secs(8)),
            (
                ReconcileError::Observe(RuntimeError::NotInstalled),
                0,
                secs(60),
            ),
            (
                ReconcileError::Observe(RuntimeError::NotInstalled),
                7,
                secs(60),
            ),
        ];
        for (err, attempt, want) in table {
            assert_eq!(
                error_policy(&err, attempt),
                want,
                "{err} at attempt {attempt}"
            );
        }
    }

    #[test]
    fn requeue_min_prefers_the_sooner_and_any_time_over_on_change() {
        let (one, two) = (Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(requeue(one).min(requeue(two)), requeue(one));
        assert_eq!(await_change().min(requeue(two)), requeue(two));
        assert_eq!(requeue(two).min(await_change()), requeue(two));
        assert_eq!(await_change().min(await_change()), await_change());
        assert_eq!(await_change().at_most(one), requeue(one));
    }

    #[test]
    fn one_agents_backoff_holds_only_that_agent_and_doubles() {
        let now = Instant::now();
        let mut b = Backoff::default();
        assert_eq!(b.next_due(now), await_change());
        assert_eq!(
            b.failed(&step("broken"), now),
            requeue(Duration::from_secs(2))
        );
        assert!(b.holds("broken", now));
        assert!(!b.holds("healthy", now), "the others are never held");
        assert_eq!(b.next_due(now), requeue(Duration::from_secs(2)));
        let later = now + Duration::from_secs(2);
        assert!(!b.holds("broken", later), "due again after its own wait");
        assert_eq!(
            b.failed(&step("broken"), later),
            requeue(Duration::from_secs(4))
        );
        b.succeeded("broken");
        assert!(!b.holds("broken", later));
        assert_eq!(
            b.failed(&step("broken"), later),
            requeue(Duration::from_secs(2))
        );
        b.retain(|a| a != "broken");
        assert!(!b.holds("broken", later));
    }
}
