//! The fleet lock: one mutation of a fleet at a time (apply, restart, the daemon's reconcile
//! pass), so two phoenix processes never both see an agent missing and both start it.
//! An exclusive `flock` on `<state_dir>/fleet.lock`, released by the kernel when the holder
//! exits, even after `kill -9`; the file names the holder for whoever waits.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::FleetDir;

pub const FLEET_LOCK: &str = "fleet.lock";
/// One watchdog pass at a time (a second one would revive, notify and count the same
/// failure again).
pub const WATCHDOG_LOCK: &str = "watchdog.lock";

/// How long a mutating command waits for another one to finish before giving up.
pub const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Held while a fleet is being changed; dropping it releases the lock.
#[derive(Debug)]
pub struct FleetLock {
    _lock: super::file::Held,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open the fleet lock `{}`: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot lock `{}`: {source}", path.display())]
    Lock { path: PathBuf, source: nix::Error },
    #[error("`{}` is held already by this phoenix (a lock is never taken twice)", path.display())]
    Twice { path: PathBuf },
    #[error(
        "another phoenix ({holder}) is still changing the fleet after {}s (lock `{}`); try again when it is done",
        waited.as_secs(), path.display()
    )]
    Timeout {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
}

impl FleetLock {
    /// Take the lock for `what` (`apply`, `restart`, `reconcile`…). If another process holds
    /// it, `on_wait` is told who (once), and the lock is tried again until `wait` has passed.
    /// `wait` of zero means: do not wait at all.
    pub fn acquire(
        fleet: &FleetDir,
        what: &str,
        wait: Duration,
        on_wait: impl FnOnce(&str),
    ) -> Result<FleetLock, LockError> {
        Self::acquire_file(fleet, FLEET_LOCK, what, wait, on_wait)
    }

    /// [`FleetLock::acquire`] on another lock file of the state dir (`WATCHDOG_LOCK`).
    pub fn acquire_file(
        fleet: &FleetDir,
        file: &str,
        what: &str,
        wait: Duration,
        on_wait: impl FnOnce(&str),
    ) -> Result<FleetLock, LockError> {
        let path = fleet.root.join(file);
        let mut on_wait = Some(on_wait);
        let started = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            // Opened afresh each time: a flock attempt consumes the file on failure.
            let file = super::file::open_lock(&path).map_err(|source| LockError::Open {
                path: path.clone(),
                source,
            })?;
            match super::file::flock(file, false) {
                Ok(mut lock) => {
                    let _ = lock.set_len(0);
                    let _ = lock.rewind();
                    let _ = lock
                        .write_all(format!("pid {}, `{what}`\n", std::process::id()).as_bytes());
                    return Ok(FleetLock { _lock: lock });
                }
                Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                    let holder = holder(&mut file);
                    if started.elapsed() >= wait {
                        return Err(LockError::Timeout {
                            path,
                            holder,
                            waited: started.elapsed(),
                        });
                    }
                    if let Some(tell) = on_wait.take() {
                        tell(&holder);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err((_, nix::errno::Errno::EDEADLK)) => return Err(LockError::Twice { path }),
                Err((_, source)) => return Err(LockError::Lock { path, source }),
            }
        }
    }
}

/// Who holds the lock, as its holder wrote it (a few bytes at most).
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.take(200).read_to_string(&mut text);
    let text = text.trim();
    if text.is_empty() {
        "another process".to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_waits_then_times_out_naming_the_holder() {
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
        let first = FleetLock::acquire(&fleet, "apply", Duration::ZERO, |_| {}).unwrap();
        // Another taker (a thread of its own: this one's second take is refused at once).
        let other = fleet.clone();
        let (told, err) = std::thread::spawn(move || {
            let mut told = None;
            let err = FleetLock::acquire(&other, "reconcile", Duration::from_millis(50), |h| {
                told = Some(h.to_string())
            })
            .unwrap_err();
            (told, err)
        })
        .join()
        .unwrap();
        let holder = format!("pid {}, `apply`", std::process::id());
        assert_eq!(told.as_deref(), Some(holder.as_str()));
        assert!(err.to_string().contains(&holder), "{err}");
        let twice = FleetLock::acquire(&fleet, "again", Duration::from_secs(60), |_| {});
        assert!(matches!(twice, Err(LockError::Twice { .. })), "{twice:?}");
        drop(first);
        FleetLock::acquire(&fleet, "reconcile", Duration::ZERO, |_| {}).unwrap();
    }
}
