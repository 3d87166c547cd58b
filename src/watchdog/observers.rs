//! Reading the agents' files on a few threads within a deadline: one agent whose files hang
//! never stalls the pass for the others, nor holds more than one thread across passes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use crate::spec::AgentSpec;
use crate::state::{AgentDir, FleetDir};

/// How long reading one agent's files may take before the pass goes on without it. Reads are
/// bounded (regular files only, byte limits); this covers what bounds cannot (a hung network
/// file system, a disk that stalls).
pub(super) const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Agents (their state dirs) being observed. One still there when a pass starts is left out
/// of it, so a file that hangs every read holds one thread, not one more per pass.
static STILL_OBSERVING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Takes an agent off `STILL_OBSERVING` when dropped.
struct Done(PathBuf);

impl Drop for Done {
    fn drop(&mut self) {
        STILL_OBSERVING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n| *n != self.0);
    }
}

/// Threads that observe agents in one pass: enough that a few agents whose files hang leave
/// the rest to the others, few enough for a fleet of hundreds.
const OBSERVERS: usize = 8;

/// Observe every agent on a few threads, all within `timeout`: one agent's files can never
/// stall the pass for the others. An `Err` says why an agent was not observed.
pub(super) fn observe_all<T: Send + 'static>(
    agents: &[AgentSpec],
    fleet: &FleetDir,
    timeout: Duration,
    observe: impl Fn(&AgentSpec, &AgentDir) -> T + Send + Sync + 'static,
) -> Vec<Result<T, String>> {
    let deadline = std::time::Instant::now() + timeout;
    let still: Vec<PathBuf> = STILL_OBSERVING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut results: Vec<Option<Result<T, String>>> = Vec::new();
    let mut todo = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let dir = fleet.agent(&agent.name);
        if still.contains(&dir.path) {
            results.push(Some(Err(format!(
                "reading its files has not finished since an earlier pass (more than {}s): not checked",
                timeout.as_secs()
            ))));
        } else {
            results.push(None);
            todo.push((i, agent.clone(), dir));
        }
    }
    let todo = Arc::new(todo);
    let next = Arc::new(AtomicUsize::new(0));
    let observe = Arc::new(observe);
    let (tx, rx) = mpsc::channel::<(usize, T)>();
    for _ in 0..todo.len().min(OBSERVERS) {
        let (todo, next, observe, tx) = (todo.clone(), next.clone(), observe.clone(), tx.clone());
        // A thread that cannot start leaves its share to the others.
        let _ = std::thread::Builder::new()
            .name("phoenix-observe".into())
            .spawn(move || {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    // Past the deadline the pass has gone on: start nothing more for it.
                    let Some((i, agent, dir)) = todo.get(k) else {
                        break;
                    };
                    if std::time::Instant::now() >= deadline {
                        break;
                    }
                    STILL_OBSERVING
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(dir.path.clone());
                    // Dropped at the end, even by a panic: the agent is observable again.
                    let done = Done(dir.path.clone());
                    let observed = observe(agent, dir);
                    drop(done);
                    if tx.send((*i, observed)).is_err() {
                        break;
                    }
                }
            });
    }
    drop(tx);
    for _ in 0..todo.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok((i, observed)) => results[i] = Some(Ok(observed)),
            Err(_) => break,
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(format!(
                    "reading its files took more than {}s: not checked this pass",
                    timeout.as_secs()
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One agent whose files hang every read: the others are observed, it is reported as not
    /// checked, and the next pass starts no second reader for it.
    #[test]
    fn one_stuck_agent_does_not_stall_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = crate::spec::parse(
            "[[agent]]\nname = \"ok\"\ncommand = \"x\"\n[[agent]]\nname = \"stuck\"\ncommand = \"x\"\n\
             [[agent]]\nname = \"fine\"\ncommand = \"x\"\n",
            &tmp.path().join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        let fleet = FleetDir::new(tmp.path().join(".phoenix"));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let observe = move |agent: &AgentSpec, _: &AgentDir| {
            if agent.name == "stuck" {
                let _ = wait.lock().unwrap().recv();
            }
            agent.name.clone()
        };
        let observe = std::sync::Arc::new(observe);
        type Observer = dyn Fn(&AgentSpec, &AgentDir) -> String + Send + Sync;
        let run = |observe: std::sync::Arc<Observer>| {
            observe_all(
                &spec.agents,
                &fleet,
                Duration::from_millis(200),
                move |a, d| observe(a, d),
            )
        };
        let started = std::time::Instant::now();
        let first = run(observe.clone());
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(first[0], Ok("ok".to_string()));
        assert!(
            first[1].as_ref().unwrap_err().contains("took more than"),
            "{first:?}"
        );
        assert_eq!(first[2], Ok("fine".to_string()));
        let second = run(observe.clone());
        assert!(
            second[1]
                .as_ref()
                .unwrap_err()
                .contains("has not finished since an earlier pass"),
            "{second:?}"
        );
        assert_eq!(second[2], Ok("fine".to_string()));
        // Once the read ends, the agent is observed again.
        release.send(()).unwrap();
        let dir = fleet.agent("stuck").path;
        for _ in 0..100 {
            if !STILL_OBSERVING.lock().unwrap().contains(&dir) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        release.send(()).unwrap();
        assert_eq!(run(observe)[1], Ok("stuck".to_string()));
    }
}
