//! Restart claims: one owner of an agent's restart at a time. Whoever restarts an agent (a
//! person through `phoenix restart`, the daemon's reconcile, the watchdog's revival) first
//! claims it: `restart.claim` in the agent's state dir names the owner and how long the claim
//! holds. It holds while the owner acts, then through the start grace, until the agent's
//! wrapper has started the new CLI (or settled in safe mode: it ends the claim then) or the
//! deadline passes. Every other restarter sees the claim and yields, and a plan reads a
//! claimed agent as starting, not as dead: a restart in progress is never doubled.
//!
//! The wrapper's start and the owner's hand-on may come in either order (the watchdog stops a
//! CLI and its wrapper starts the next one at once): both change the claim under the lock, so
//! neither undoes the other. A claim the wrapper ends while its owner still acts is marked
//! started, not removed: it keeps holding for that owner (who may yet act, a pane respawn
//! say), and its hand-on then ends it instead of holding it through the start grace.
//!
//! A claim is changed under a short `flock` of its own lock file (never held across anything
//! slow, nor across a prompt) and written atomically, so a reader without the lock sees the
//! old claim or the new one. The claim outlives the process that took it (`phoenix restart`
//! returns before the new CLI runs) and is bounded by its deadline; while its owner still acts,
//! it also ends with the owner's process.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::AgentDir;
use super::bounded::{self, Links};

/// The claim, in the agent's state dir, while one holds.
pub const CLAIM: &str = "restart.claim";
/// Locked while a claim is taken, handed on or released.
const CLAIM_LOCK: &str = "restart.claim.lock";
const MAX_BYTES: u64 = 4096;

/// How long an owner may take to act (stop the old agent through its grace periods, respawn
/// the pane) before its claim lapses even if its process lives on.
pub const ACT_BUDGET: Duration = Duration::from_secs(30);
/// How long the claim holds once the owner is done, for the wrapper to start the new CLI:
/// the plan's grace for a freshly started pane.
pub const START_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// A person: `phoenix restart`, the API, the dashboard (carried out by the daemon or in
    /// the process that asked).
    Operator,
    /// The daemon's reconcile starting, restarting or replacing the agent.
    Daemon,
    /// The watchdog's revival, or its stop for a person.
    Watchdog,
}

impl Owner {
    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Operator => "a person",
            Owner::Daemon => "the daemon",
            Owner::Watchdog => "the watchdog",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub owner: Owner,
    /// The process that took it.
    pub pid: u32,
    /// This claim among all claims of the agent: only its holder hands it on or releases it.
    pub id: String,
    /// Until when it holds at most (milliseconds since the epoch).
    pub until_ms: i64,
    /// The owner is still acting: the claim also ends with its process.
    pub acting: bool,
    /// The agent's wrapper started its CLI (or settled in safe mode) while the owner still
    /// acted: the owner's hand-on ends the claim.
    #[serde(default)]
    pub started: bool,
}

impl Claim {
    /// Whether it still holds at `now_ms`.
    pub fn holds(&self, now_ms: i64) -> bool {
        now_ms < self.until_ms && (!self.acting || process_exists(self.pid))
    }

    /// For messages: ``being restarted by the daemon (pid 12)``.
    pub fn describe(&self) -> String {
        let what = if self.acting {
            "being restarted by"
        } else {
            "starting after a restart by"
        };
        format!("{what} {} (pid {})", self.owner.as_str(), self.pid)
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// `pid` exists (a zombie does too: an owner's process is waited for by its parent).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    }
}

/// The claim on `dir`'s agent, if one holds now. Read without the lock: claims are written
/// atomically.
pub fn current(dir: &AgentDir) -> Option<Claim> {
    read(dir).filter(|c| c.holds(now_ms()))
}

fn read(dir: &AgentDir) -> Option<Claim> {
    let text = bounded::read_string(&dir.file(CLAIM), MAX_BYTES, Links::Refuse).ok()?;
    serde_json::from_str(&text).ok()
}

fn write(dir: &AgentDir, claim: &Claim) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(claim).map_err(std::io::Error::other)?;
    // No fsync: a claim a crash of the machine lost restarts nothing twice (everything that
    // could act on it went down with it), and a restart must not wait for the disk.
    super::file::write_atomic(&dir.file(CLAIM), &bytes, 0o600, false)
}

/// Hold the claim lock of `dir` for the few file operations of a change of claim.
fn locked(dir: &AgentDir) -> std::io::Result<super::file::Held> {
    super::file::lock(&dir.file(CLAIM_LOCK))
}

/// A claim this process holds: hand it on ([`Held::starting`]) once done acting, or
/// [`Held::release`] it when nothing was restarted.
#[must_use = "a claim is handed on or released"]
#[derive(Debug)]
pub struct Held {
    dir: AgentDir,
    id: String,
}

/// Claim `dir`'s agent for `owner`: `Ok(Err(claim))` when another claim holds (its owner's
/// restart is in progress: yield to it).
pub fn take(dir: &AgentDir, owner: Owner) -> std::io::Result<Result<Held, Claim>> {
    claim(dir, owner, |_| true)
}

/// [`take`] for a restart a plan found due because the pane died after its restart's owner
/// was done (the start failed): only an owner still acting is yielded to.
pub fn take_after_failed_start(
    dir: &AgentDir,
    owner: Owner,
) -> std::io::Result<Result<Held, Claim>> {
    claim(dir, owner, |other| other.acting)
}

fn claim(
    dir: &AgentDir,
    owner: Owner,
    yield_to: impl Fn(&Claim) -> bool,
) -> std::io::Result<Result<Held, Claim>> {
    dir.ensure()?;
    let _lock = locked(dir)?;
    if let Some(other) = current(dir).filter(|c| yield_to(c)) {
        return Ok(Err(other));
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = format!(
        "{}-{}-{}",
        std::process::id(),
        now_ms(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let claim = Claim {
        owner,
        pid: std::process::id(),
        id: id.clone(),
        until_ms: now_ms() + ACT_BUDGET.as_millis() as i64,
        acting: true,
        started: false,
    };
    write(dir, &claim)?;
    Ok(Ok(Held {
        dir: dir.clone(),
        id,
    }))
}

impl Held {
    /// Done acting: the claim holds through the start grace, so that no one takes the agent
    /// without its new CLI for dead. Unless the wrapper already started it: then it ends.
    pub fn starting(self) {
        let Ok(_lock) = locked(&self.dir) else {
            return;
        };
        match read(&self.dir).filter(|c| c.id == self.id) {
            Some(claim) if claim.started => {
                let _ = std::fs::remove_file(self.dir.file(CLAIM));
            }
            Some(mut claim) => {
                claim.acting = false;
                claim.until_ms = now_ms() + START_GRACE.as_millis() as i64;
                let _ = write(&self.dir, &claim);
            }
            None => {}
        }
    }

    /// Nothing was restarted after all (the restart failed): the claim goes.
    pub fn release(self) {
        let Ok(_lock) = locked(&self.dir) else {
            return;
        };
        if read(&self.dir).is_some_and(|c| c.id == self.id) {
            let _ = std::fs::remove_file(self.dir.file(CLAIM));
        }
    }
}

/// The agent's wrapper started its CLI, or settled in safe mode: whatever restart was claimed
/// has come to its end. A claim whose owner still acts is marked started instead: removed, it
/// would let a second owner act beside that one; its owner's hand-on ends it. Under the lock:
/// a hand-on that read the claim just before must not write it back after it ended (it then
/// held through the start grace for a start already made, and the watchdog's pass for the
/// new session's failed turn yielded to it). Costs one stat when there is no claim.
pub fn end(dir: &AgentDir) {
    let file = dir.file(CLAIM);
    // One taken after this check is a restart after this start: not this start's to end.
    if std::fs::symlink_metadata(&file).is_err() {
        return;
    }
    let Ok(_lock) = locked(dir) else {
        let _ = std::fs::remove_file(&file);
        return;
    };
    match read(dir) {
        Some(mut claim) if claim.acting && claim.holds(now_ms()) => {
            if !claim.started {
                claim.started = true;
                let _ = write(dir, &claim);
            }
        }
        _ => {
            let _ = std::fs::remove_file(&file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::testing;

    #[test]
    fn a_claim_refuses_another_owner_until_it_is_released() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        let held = take(&dir, Owner::Operator).unwrap().unwrap();
        let other = take(&dir, Owner::Daemon).unwrap().unwrap_err();
        assert_eq!(other.owner, Owner::Operator);
        assert!(other.acting);
        assert_eq!(current(&dir).unwrap().pid, std::process::id());
        held.release();
        assert!(current(&dir).is_none());
        take(&dir, Owner::Daemon).unwrap().unwrap().release();
    }

    #[test]
    fn a_claim_handed_on_holds_through_the_start_grace_until_the_wrapper_ends_it() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        take(&dir, Owner::Watchdog).unwrap().unwrap().starting();
        let claim = current(&dir).expect("held while the new CLI starts");
        assert!(!claim.acting);
        assert!(claim.until_ms <= now_ms() + START_GRACE.as_millis() as i64);
        assert!(take(&dir, Owner::Operator).unwrap().is_err());
        end(&dir);
        assert!(current(&dir).is_none());
    }

    #[test]
    fn a_claim_ended_by_the_wrapper_is_not_brought_back_by_its_owner() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        let held = take(&dir, Owner::Operator).unwrap().unwrap();
        end(&dir);
        held.starting();
        assert!(current(&dir).is_none());
    }

    #[test]
    fn a_failed_start_is_taken_over_but_an_owner_still_acting_is_not() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        let acting = take(&dir, Owner::Operator).unwrap().unwrap();
        assert!(
            take_after_failed_start(&dir, Owner::Daemon)
                .unwrap()
                .is_err()
        );
        acting.starting();
        let daemon = take_after_failed_start(&dir, Owner::Daemon)
            .unwrap()
            .unwrap();
        assert_eq!(current(&dir).unwrap().owner, Owner::Daemon);
        daemon.release();
    }

    #[test]
    fn a_claim_whose_owner_died_while_acting_or_whose_deadline_passed_holds_no_more() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let dead = Claim {
            owner: Owner::Operator,
            pid: i32::MAX as u32,
            id: "x".into(),
            until_ms: now_ms() + 60_000,
            acting: true,
            started: false,
        };
        write(&dir, &dead).unwrap();
        assert!(current(&dir).is_none());
        let lapsed = Claim {
            pid: std::process::id(),
            acting: false,
            until_ms: now_ms() - 1,
            ..dead
        };
        write(&dir, &lapsed).unwrap();
        assert!(current(&dir).is_none());
        take(&dir, Owner::Daemon).unwrap().unwrap().release();
    }

    /// The watchdog's pass stops a CLI and hands its claim on as the wrapper starts the next
    /// one (the wrapper's own pass for a failed turn: one process, two threads). Whichever
    /// comes first, no claim is left over the running CLI (one resurrected by the hand-on held
    /// for the start grace, and the pass for the new session's failed turn yielded to it).
    #[test]
    fn a_hand_on_racing_the_wrappers_start_leaves_no_claim_behind() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        let mut left = 0;
        for round in 0..400u32 {
            let held = take(&dir, Owner::Watchdog).unwrap().unwrap();
            let go = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                s.spawn(|| {
                    go.wait();
                    held.starting();
                });
                s.spawn(|| {
                    go.wait();
                    // Lands anywhere from before the hand-on to after it.
                    let at = std::time::Instant::now()
                        + std::time::Duration::from_micros(u64::from(round % 40) * 5);
                    while std::time::Instant::now() < at {
                        std::hint::spin_loop();
                    }
                    end(&dir);
                });
            });
            if current(&dir).is_some() {
                left += 1;
                end(&dir);
                let _ = std::fs::remove_file(dir.file(CLAIM));
            }
        }
        assert_eq!(left, 0, "claims left over a started CLI in 400 rounds");
    }

    /// A claim whose owner still acts (a person's restart about to respawn the pane) is not
    /// removed by a start under it: no second owner may act meanwhile. Its hand-on ends it.
    #[test]
    fn a_start_under_an_owner_still_acting_keeps_its_claim_until_the_hand_on() {
        let (_tmp, fleet) = testing::temp_fleet();
        let dir = fleet.agent("a");
        let person = take(&dir, Owner::Operator).unwrap().unwrap();
        end(&dir);
        let claim = current(&dir).expect("still held for the person");
        assert!(claim.acting && claim.started);
        assert!(take(&dir, Owner::Watchdog).unwrap().is_err());
        person.starting();
        assert!(current(&dir).is_none(), "the start it handed on was made");
        // A claim handed on before the start ends with the start.
        take(&dir, Owner::Daemon).unwrap().unwrap().starting();
        assert!(current(&dir).is_some());
        end(&dir);
        assert!(current(&dir).is_none());
    }
}
