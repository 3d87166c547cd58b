//! Recovery decisions as Lua policies: a sandboxed Lua 5.4 state that loads `policies/*.lua`
//! (defaults built in, a file of the same name overrides), typed calls of the entry points
//! `on_exit`, `on_unhealthy`, `diagnose` and `prescribe`, and a built-in Rust default behind
//! every call. A broken policy never stops phoenix: that decision falls back to the default
//! and a critical event says where the policy broke.
//!
//! mlua types never leave this module: inputs go in through serde, outputs come back as
//! JSON and are checked field by field ([`types::FromPolicy`]).

pub mod builtin;
mod engine;
mod entry;
mod error;
pub mod fixture;
mod pattern;
mod sandbox;
pub mod types;
mod worker;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use mlua::{Lua, MultiValue};

use crate::state::FleetDir;
use engine::Engine;
pub use error::{Error, Failure};
pub use types::*;
use worker::{ABANDONED, MAX_ABANDONED, Worker, wait};

/// The entry script: every agent uses it unless `[[agent]] policy` names another, and an
/// agent's own policy falls back to it for the entry points it does not define.
pub const DEFAULT_POLICY: &str = "recovery.lua";

/// Policies built into the binary, by their path under policies/.
pub const EMBEDDED: [(&str, &str); 2] = [
    ("recovery.lua", include_str!("../../policies/recovery.lua")),
    ("patterns.lua", include_str!("../../policies/patterns.lua")),
];

/// Where a decision came from when no policy made it.
pub const BUILTIN: &str = "built-in default";

/// What a policy may use per call.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes the whole Lua state may hold.
    pub memory: usize,
    /// VM instructions per call (counted in steps of 1000).
    pub instructions: u64,
    /// Wall-clock time per call.
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 32 << 20,
            // A pattern-matching policy needs tens of thousands; five million is a few
            // milliseconds of a runaway loop in a release build.
            instructions: 5_000_000,
            time: Duration::from_millis(250),
        }
    }
}

/// A decision and where it came from.
#[derive(Debug, Clone)]
pub struct Decided<T> {
    pub value: T,
    /// The script that decided, or [`BUILTIN`].
    pub by: String,
    /// Why the policy's answer was not used, if it was not.
    pub error: Option<Error>,
    /// What the policy wrote with `phoenix.log`.
    pub logs: Vec<String>,
    /// VM instructions the call used, in steps of 1000.
    pub instructions: u64,
}

impl<T> Decided<T> {
    fn builtin(value: T, error: Option<Error>) -> Decided<T> {
        Decided {
            value,
            by: BUILTIN.into(),
            error,
            logs: Vec::new(),
            instructions: 0,
        }
    }

    pub fn fell_back(&self) -> bool {
        self.error.is_some()
    }
}

/// The policies of one fleet: one reused Lua state on a thread of its own.
///
/// The instruction hook stops any Lua loop, but not a C function that runs long (a
/// pathological `string.find` pattern): so calls run on the worker thread and are waited for
/// with a deadline. A worker that misses it is abandoned with its state, the decision falls
/// back, and the next call gets a fresh state.
pub struct Policies {
    dir: Option<PathBuf>,
    limits: Limits,
    base: PathBuf,
    worker: RefCell<Worker>,
    events: Option<FleetDir>,
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policies")
            .field("dir", &self.dir)
            .field("base", &self.base)
            .finish()
    }
}

impl Policies {
    /// Policies from `dir` (usually `<dir of phoenix.toml>/policies`; `None`: built-ins only).
    pub fn new(dir: Option<&Path>) -> Policies {
        Policies::with_limits(dir, Limits::default())
    }

    pub fn with_limits(dir: Option<&Path>, limits: Limits) -> Policies {
        let base = dir
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let dir = dir.map(Path::to_path_buf);
        Policies {
            worker: RefCell::new(Worker::spawn(dir.clone(), limits.clone(), base.clone())),
            dir,
            limits,
            base,
            events: None,
        }
    }

    /// The fleet's policies: `policies/` next to phoenix.toml, every agent's own policy file
    /// loaded up front, and fallbacks recorded in the fleet's critical events.
    pub fn for_spec(spec: &crate::spec::Spec) -> Policies {
        let dir = spec.dir.join("policies");
        let limits = Limits::default();
        let policies = Policies {
            worker: RefCell::new(Worker::spawn(
                Some(dir.clone()),
                limits.clone(),
                spec.dir.clone(),
            )),
            dir: Some(dir),
            limits,
            base: spec.dir.clone(),
            events: Some(FleetDir::new(&spec.fleet.state_dir)),
        };
        let paths: Vec<String> = spec
            .agents
            .iter()
            .filter_map(|a| a.policy.as_ref().map(|p| p.display().to_string()))
            .collect();
        let _ = policies.on_worker(None, "load", move |e| {
            for p in &paths {
                e.script_index(p);
            }
        });
        policies
    }

    /// What `for_spec` would load, as it is on disk now: a kept `Policies` is reused while
    /// this stays the same, and replaced once a policy file is edited, added or removed.
    pub fn sources(spec: &crate::spec::Spec) -> Sources {
        // Where fallbacks are recorded is part of what was loaded.
        let mut seen = vec![(spec.fleet.state_dir.clone(), None)];
        stamp_tree(&spec.dir.join("policies"), 0, &mut seen);
        for p in spec.agents.iter().filter_map(|a| a.policy.as_ref()) {
            let path = if p.is_absolute() {
                p.clone()
            } else {
                spec.dir.join(p)
            };
            seen.push((path.clone(), stamp(&path)));
        }
        Sources(seen)
    }

    /// Record fallbacks as critical events in this fleet's state dir.
    pub fn record_events_in(&mut self, fleet: FleetDir) {
        self.events = Some(fleet);
    }

    /// Name agent policies relative to `base` (the dir of phoenix.toml).
    pub fn set_base(&mut self, base: &Path) {
        self.base = base.to_path_buf();
        self.restart_worker();
    }

    fn restart_worker(&self) {
        *self.worker.borrow_mut() =
            Worker::spawn(self.dir.clone(), self.limits.clone(), self.base.clone());
    }

    /// How long a call may take before its worker is given up: well past the Lua budget, so
    /// that a loop is stopped by the budget (with its line) and only C gets here.
    fn deadline(&self) -> Duration {
        (self.limits.time * 4).max(Duration::from_millis(100))
    }

    /// Run `job` on the Lua thread and wait for it.
    fn on_worker<R: Send + 'static>(
        &self,
        policy: Option<&str>,
        function: &str,
        job: impl FnOnce(&Engine) -> R + Send + 'static,
    ) -> Result<R, Error> {
        let stuck = ABANDONED.load(Ordering::Acquire);
        if stuck >= MAX_ABANDONED {
            return Err(Error::new(
                policy.unwrap_or(DEFAULT_POLICY),
                function,
                None,
                Failure::State(format!(
                    "{stuck} earlier policy calls are still stuck past their deadline: Lua policies are off until they end"
                )),
            ));
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let sent = self.worker.borrow().jobs.send(Box::new(move |engine| {
            let _ = reply.send(job(engine));
        }));
        let outcome = match sent {
            Ok(()) => wait(&answer, self.deadline()),
            Err(_) => Err(mpsc::RecvTimeoutError::Disconnected),
        };
        outcome.map_err(|why| {
            if why == mpsc::RecvTimeoutError::Timeout {
                self.worker.borrow().abandon();
            }
            self.restart_worker();
            let source = match why {
                mpsc::RecvTimeoutError::Timeout => Failure::Budget(format!(
                    "no answer within {}ms (stuck in a library function such as a `string.find` pattern?); the Lua state was replaced",
                    self.deadline().as_millis()
                )),
                mpsc::RecvTimeoutError::Disconnected => {
                    Failure::State("the policy thread stopped; it was restarted".into())
                }
            };
            Error::new(policy.unwrap_or(DEFAULT_POLICY), function, None, source)
        })
    }

    /// Ask the policy chain of `policy`; on any failure use `fallback`. `record`: the agent to
    /// write a critical event for when falling back (`None` while `phoenix validate` or
    /// `policy test` probe a policy).
    pub(crate) fn decide<T: FromPolicy + Send + 'static>(
        &self,
        record: Option<&str>,
        policy: Option<&str>,
        function: &'static str,
        args: impl Fn(&Lua) -> mlua::Result<MultiValue> + Send + 'static,
        fallback: impl FnOnce() -> T,
    ) -> Decided<T> {
        let selector = policy.map(str::to_string);
        let outcome = self
            .on_worker(policy, function, move |engine| {
                engine.ask::<T>(selector.as_deref(), function, &args)
            })
            .and_then(|r| r);
        match outcome {
            Ok(Some(decided)) => decided,
            Ok(None) => Decided::builtin(fallback(), None),
            Err(e) => {
                if let Some(agent) = record {
                    self.record_fallback(agent, &e);
                }
                Decided::builtin(fallback(), Some(e))
            }
        }
    }

    fn record_fallback(&self, agent: &str, error: &Error) {
        let Some(fleet) = &self.events else {
            return;
        };
        let _ = fleet.record_critical(
            "policy_error",
            agent,
            &error.to_string(),
            "fell back to the built-in default",
            error.to_json(),
        );
    }

    /// The names of the loaded scripts (`policies/recovery.lua`, `builtin:…`).
    pub fn script_names(&self) -> Vec<String> {
        self.on_worker(None, "load", |e| e.script_names())
            .unwrap_or_default()
    }

    /// Why scripts could not be loaded, if any could not.
    pub fn load_errors(&self) -> Vec<Error> {
        self.on_worker(None, "load", |e| e.load_errors())
            .unwrap_or_else(|e| vec![e])
    }

    /// Reread every script. One that no longer loads keeps its last good version; the
    /// errors say which.
    pub fn reload(&mut self) -> Vec<Error> {
        self.on_worker(None, "load", |e| e.reload())
            .unwrap_or_else(|e| vec![e])
    }
}

/// Create (and drop) a bare sandboxed Lua state, no script loaded: for the benchmark.
#[doc(hidden)]
pub fn bare_state() -> bool {
    let sources = Arc::new(sandbox::Sources {
        dir: None,
        embedded: BTreeMap::new(),
    });
    sandbox::new_state(
        &Limits::default(),
        sources,
        Arc::new(Mutex::new(Vec::new())),
    )
    .is_ok()
}

/// Time one closure, for the benchmark and `policy test`.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

#[cfg(test)]
mod tests;

/// The policy files of a fleet and how each was on disk ([`Policies::sources`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources(Vec<(PathBuf, Option<(u64, std::time::SystemTime)>)>);

/// How many entries of `policies/` are looked at, and how deep: a policy dir is a few files.
const SOURCES_MAX: usize = 512;
const SOURCES_DEPTH: usize = 4;

fn stamp(path: &Path) -> Option<(u64, std::time::SystemTime)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

fn stamp_tree(
    dir: &Path,
    depth: usize,
    seen: &mut Vec<(PathBuf, Option<(u64, std::time::SystemTime)>)>,
) {
    seen.push((dir.to_path_buf(), stamp(dir)));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if seen.len() >= SOURCES_MAX {
            return;
        }
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if is_dir && depth + 1 < SOURCES_DEPTH {
            stamp_tree(&path, depth + 1, seen);
        } else {
            seen.push((path.clone(), stamp(&path)));
        }
    }
}
