//! The thread that owns the Lua state, and waiting for its answers with a deadline.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::Limits;
use super::engine::Engine;

/// Work sent to the Lua thread.
pub(super) type Job = Box<dyn FnOnce(&Engine) + Send>;

/// The thread that owns the Lua state.
pub(super) struct Worker {
    pub(super) jobs: mpsc::Sender<Job>,
    /// Set when a call on it missed its deadline and it was replaced.
    abandoned: Arc<AtomicBool>,
}

/// Workers replaced after missing a deadline whose call still runs, in this process. The
/// budget stops Lua and pattern matching, so none should; should one, calls fall back to the
/// built-ins once `MAX_ABANDONED` are stuck instead of leaving one more thread behind each.
pub(super) static ABANDONED: AtomicUsize = AtomicUsize::new(0);
pub(super) const MAX_ABANDONED: usize = 2;

impl Worker {
    pub(super) fn spawn(dir: Option<PathBuf>, limits: Limits, base: PathBuf) -> Worker {
        let (jobs, queue) = mpsc::channel::<Job>();
        let abandoned = Arc::new(AtomicBool::new(false));
        let given_up = abandoned.clone();
        // If the thread cannot start, every call finds the channel closed and falls back.
        let _ = std::thread::Builder::new()
            .name("phoenix-policy".into())
            .spawn(move || {
                let engine = Engine::new(dir.as_deref(), limits, base);
                for job in queue {
                    job(&engine);
                }
                // The queue ends when the worker is replaced: a stuck call has finished.
                if given_up.load(Ordering::Acquire) {
                    ABANDONED.fetch_sub(1, Ordering::AcqRel);
                }
            });
        Worker { jobs, abandoned }
    }

    /// Give up on this worker (its call missed the deadline); it is replaced next.
    pub(super) fn abandon(&self) {
        if !self.abandoned.swap(true, Ordering::AcqRel) {
            ABANDONED.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Wait for the worker's answer. A decision takes tens of microseconds, about what going to
/// sleep and being woken costs: so look for it a little while before blocking.
pub(super) fn wait<R>(
    answer: &mpsc::Receiver<R>,
    deadline: Duration,
) -> Result<R, mpsc::RecvTimeoutError> {
    const SPIN: Duration = Duration::from_micros(300);
    let started = Instant::now();
    while started.elapsed() < SPIN {
        match answer.try_recv() {
            Ok(r) => return Ok(r),
            Err(mpsc::TryRecvError::Disconnected) => {
                return Err(mpsc::RecvTimeoutError::Disconnected);
            }
            Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
    answer.recv_timeout(deadline.saturating_sub(started.elapsed()))
}
