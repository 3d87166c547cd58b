//! Recovery decisions as Lua policies: a sandboxed Lua 5.4 state that loads `policies/*.lua`
//! (defaults built in, a file of the same name overrides), typed calls of the entry points
//! `on_exit`, `on_unhealthy`, `diagnose` and `prescribe`, and a built-in Rust default behind
//! every call. A broken policy never stops phoenix: that decision falls back to the default
//! and a critical event says where the policy broke.
//!
//! mlua types never leave this module: inputs go in through serde, outputs come back as
//! JSON and are checked field by field ([`types::FromPolicy`]).

pub mod builtin;
pub mod fixture;
mod pattern;
mod sandbox;
pub mod types;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use mlua::{Lua, LuaSerdeExt, MultiValue, Table, Value};
use serde::Serialize;
use serde_json::json;

use crate::state::FleetDir;
pub use types::*;

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

/// How a policy broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    #[error("cannot read the policy: {0}")]
    Read(String),
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("{message}")]
    Runtime {
        message: String,
        traceback: Option<String>,
    },
    #[error("stopped: {0}")]
    Budget(String),
    #[error("stopped: out of memory (limit {limit} bytes)")]
    Memory { limit: usize },
    #[error("{0}")]
    BadReturn(BadReturn),
    #[error("`{name}` is {kind}, not a function")]
    NotAFunction { name: String, kind: String },
    #[error("the Lua state could not be created: {0}")]
    State(String),
}

impl Failure {
    /// A short machine-readable kind for events and `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Read(_) => "read",
            Failure::Syntax(_) => "syntax",
            Failure::Runtime { .. } => "runtime",
            Failure::Budget(_) => "budget",
            Failure::Memory { .. } => "memory",
            Failure::BadReturn(_) => "bad_return",
            Failure::NotAFunction { .. } => "not_a_function",
            Failure::State(_) => "state",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// `script` is the name tracebacks use (`policies/recovery.lua`), `function` the entry
    /// point (or `load` while the file itself ran), `line` where it broke if Lua said so.
    #[error("policy `{}`: `{function}`: {source}", location(script, *line))]
    Policy {
        script: String,
        function: String,
        line: Option<u32>,
        source: Failure,
    },
}

fn location(script: &str, line: Option<u32>) -> String {
    match line {
        Some(l) => format!("{script}:{l}"),
        None => script.to_string(),
    }
}

impl Error {
    pub fn script(&self) -> &str {
        let Error::Policy { script, .. } = self;
        script
    }

    pub fn function(&self) -> &str {
        let Error::Policy { function, .. } = self;
        function
    }

    pub fn line(&self) -> Option<u32> {
        let Error::Policy { line, .. } = self;
        *line
    }

    pub fn failure(&self) -> &Failure {
        let Error::Policy { source, .. } = self;
        source
    }

    /// `policies/recovery.lua:12`, or just the file when the line is unknown.
    pub fn location(&self) -> String {
        location(self.script(), self.line())
    }

    pub fn to_json(&self) -> serde_json::Value {
        let traceback = match self.failure() {
            Failure::Runtime { traceback, .. } => traceback.clone(),
            _ => None,
        };
        json!({
            "script": self.script(), "function": self.function(), "line": self.line(),
            "kind": self.failure().kind(), "message": self.failure().to_string(),
            "traceback": traceback,
        })
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

struct State {
    lua: Lua,
    budget: Arc<sandbox::Budget>,
    logs: Arc<Mutex<Vec<String>>>,
}

/// One loaded policy file: its entry points, or why it could not be loaded.
struct Script {
    /// Resolved path (or `builtin:…`), to find it again.
    key: String,
    name: String,
    entries: Result<Table, Error>,
}

/// What a policy function returned, before it is checked.
struct Answer {
    json: serde_json::Value,
    by: String,
    instructions: u64,
    logs: Vec<String>,
}

/// The Lua side: one reused state, its scripts, and the calls into them. Lives on the
/// worker thread of a [`Policies`].
struct Engine {
    state: Result<State, Error>,
    limits: Limits,
    sources: Arc<sandbox::Sources>,
    /// Agent policies named relative to this (the dir of phoenix.toml).
    base: PathBuf,
    scripts: RefCell<Vec<Script>>,
}

impl Engine {
    fn new(dir: Option<&Path>, limits: Limits, base: PathBuf) -> Engine {
        let sources = Arc::new(sandbox::Sources {
            dir: dir.map(Path::to_path_buf),
            embedded: EMBEDDED.into_iter().collect::<BTreeMap<_, _>>(),
        });
        let logs = Arc::new(Mutex::new(Vec::new()));
        let state = sandbox::new_state(&limits, sources.clone(), logs.clone())
            .map(|(lua, budget)| State { lua, budget, logs })
            .map_err(|e| Error::Policy {
                script: "(sandbox)".into(),
                function: "load".into(),
                line: None,
                source: Failure::State(e.to_string()),
            });
        let engine = Engine {
            state,
            limits,
            sources,
            base,
            scripts: RefCell::new(Vec::new()),
        };
        engine.load_default();
        engine
    }

    fn script_names(&self) -> Vec<String> {
        self.scripts
            .borrow()
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    fn load_errors(&self) -> Vec<Error> {
        let mut errors: Vec<Error> = self
            .scripts
            .borrow()
            .iter()
            .filter_map(|s| s.entries.as_ref().err().cloned())
            .collect();
        if let Err(e) = &self.state {
            errors.insert(0, e.clone());
        }
        errors
    }

    fn load_default(&self) {
        let entries = match self.sources.file(DEFAULT_POLICY) {
            Some(source) => self.run_script(&source),
            None => Err(Error::Policy {
                script: format!("policies/{DEFAULT_POLICY}"),
                function: "load".into(),
                line: None,
                source: Failure::Read("not found".into()),
            }),
        };
        let name = self
            .sources
            .file(DEFAULT_POLICY)
            .map(|s| s.name)
            .unwrap_or_else(|| format!("policies/{DEFAULT_POLICY}"));
        self.scripts.borrow_mut().insert(
            0,
            Script {
                key: format!("default:{DEFAULT_POLICY}"),
                name,
                entries,
            },
        );
    }

    fn reload(&self) -> Vec<Error> {
        let mut errors = Vec::new();
        let keys: Vec<(String, String)> = self
            .scripts
            .borrow()
            .iter()
            .map(|s| (s.key.clone(), s.name.clone()))
            .collect();
        for (i, (key, name)) in keys.into_iter().enumerate() {
            let fresh = if i == 0 {
                match self.sources.file(DEFAULT_POLICY) {
                    Some(source) => self.run_script(&source),
                    None => continue,
                }
            } else {
                self.read_and_run(&key, &name)
            };
            let mut scripts = self.scripts.borrow_mut();
            match fresh {
                Ok(table) => scripts[i].entries = Ok(table),
                Err(e) => {
                    errors.push(e.clone());
                    if scripts[i].entries.is_err() {
                        scripts[i].entries = Err(e);
                    }
                }
            }
        }
        errors
    }

    fn resolve(&self, policy: &str) -> PathBuf {
        let path = crate::spec::expand_path(policy, &self.base);
        std::path::absolute(&path).unwrap_or(path)
    }

    fn display_name(&self, path: &Path) -> String {
        let base = std::path::absolute(&self.base).unwrap_or_else(|_| self.base.clone());
        path.strip_prefix(&base)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// The index of an agent policy, loading it the first time.
    fn script_index(&self, policy: &str) -> usize {
        let path = self.resolve(policy);
        if let Some(dir) = &self.sources.dir {
            let default = std::path::absolute(dir.join(DEFAULT_POLICY)).unwrap_or_default();
            if path == default {
                return 0;
            }
        }
        let key = path.display().to_string();
        if let Some(i) = self.scripts.borrow().iter().position(|s| s.key == key) {
            return i;
        }
        let name = self.display_name(&path);
        let entries = self.read_and_run(&key, &name);
        let mut scripts = self.scripts.borrow_mut();
        scripts.push(Script { key, name, entries });
        scripts.len() - 1
    }

    fn read_and_run(&self, path: &str, name: &str) -> Result<Table, Error> {
        match sandbox::read_script(Path::new(path)) {
            Ok(text) => self.run_script(&sandbox::Source {
                name: name.to_string(),
                text,
            }),
            Err(e) => Err(Error::Policy {
                script: name.to_string(),
                function: "load".into(),
                line: None,
                source: Failure::Read(e.to_string()),
            }),
        }
    }

    /// Run a script's top level under the budget; its entry points are the table it
    /// returns, or the globals it defines.
    fn run_script(&self, source: &sandbox::Source) -> Result<Table, Error> {
        let state = self.state.as_ref().map_err(Clone::clone)?;
        let fail = |e: &mlua::Error| self.convert(e, &source.name, "load");
        let (function, env) = sandbox::load_chunk(&state.lua, source).map_err(|e| fail(&e))?;
        state.budget.arm(&self.limits);
        let result = function.call::<Value>(());
        state.budget.disarm();
        match result {
            Ok(Value::Table(t)) => Ok(t),
            Ok(_) => Ok(env),
            Err(e) => {
                let _ = state.lua.gc_collect();
                Err(fail(&e))
            }
        }
    }

    fn convert(&self, err: &mlua::Error, script: &str, function: &str) -> Error {
        let (source, line) = failure(err, script, self.limits.memory);
        Error::Policy {
            script: script.to_string(),
            function: function.to_string(),
            line,
            source,
        }
    }

    /// The agent's policy, then the default: the scripts asked in turn.
    fn chain(&self, policy: Option<&str>) -> Vec<usize> {
        match policy {
            Some(p) => {
                let i = self.script_index(p);
                if i == 0 { vec![0] } else { vec![i, 0] }
            }
            None => vec![0],
        }
    }

    /// Ask the chain for `function`. `Ok(None)`: no script defines it.
    fn try_call(
        &self,
        policy: Option<&str>,
        function: &str,
        args: &dyn Fn(&Lua) -> mlua::Result<MultiValue>,
    ) -> Result<Option<Answer>, Error> {
        let state = self.state.as_ref().map_err(Clone::clone)?;
        for i in self.chain(policy) {
            let (name, entries) = {
                let scripts = self.scripts.borrow();
                let s = &scripts[i];
                (s.name.clone(), s.entries.clone())
            };
            let entries = entries?;
            // Armed from here: the lookup may run an `__index`, the conversion of the answer
            // may run finalizers, and Lua never runs unbudgeted.
            state.budget.arm(&self.limits);
            let disarmed = |r| {
                state.budget.disarm();
                r
            };
            let f = match entries.get::<Value>(function) {
                Ok(Value::Nil) => {
                    state.budget.disarm();
                    continue;
                }
                Ok(Value::Function(f)) => f,
                Ok(other) => {
                    state.budget.disarm();
                    return Err(Error::Policy {
                        script: name,
                        function: function.into(),
                        line: None,
                        source: Failure::NotAFunction {
                            name: function.into(),
                            kind: format!("a {}", other.type_name()),
                        },
                    });
                }
                Err(e) => return disarmed(Err(self.convert(&e, &name, function))),
            };
            // Only needed for an error: asking Lua for it costs more than the call itself.
            let defined_at = || {
                u32::try_from(f.info().line_defined.unwrap_or(0))
                    .ok()
                    .filter(|l| *l > 0)
            };
            state.logs.lock().unwrap_or_else(|e| e.into_inner()).clear();
            let result = args(&state.lua).and_then(|a| f.call::<Value>(a));
            let logs = std::mem::take(&mut *state.logs.lock().unwrap_or_else(|e| e.into_inner()));
            let value = match result {
                Ok(v) => v,
                Err(e) => {
                    state.budget.disarm();
                    // Finalizers run here unbudgeted are stopped at once (see `Budget`).
                    let _ = state.lua.gc_collect();
                    return Err(self.convert(&e, &name, function));
                }
            };
            // Checked on the Lua side: JSON has no NaN or infinity, so the conversion below
            // would quietly turn `delay = 0/0` into a missing field (no delay at all).
            if let Some(bad) = non_finite(&value, 0) {
                state.budget.disarm();
                return Err(Error::Policy {
                    script: name,
                    function: function.into(),
                    line: defined_at(),
                    source: Failure::BadReturn(bad),
                });
            }
            let json = match value {
                Value::Nil => Ok(serde_json::Value::Null),
                v => state.lua.from_value::<serde_json::Value>(v),
            };
            state.budget.disarm();
            let used = state.budget.used();
            let json = json.map_err(|e| Error::Policy {
                script: name.clone(),
                function: function.into(),
                line: defined_at(),
                source: Failure::BadReturn(BadReturn {
                    field: None,
                    message: first_line(&e.to_string()).to_string(),
                }),
            })?;
            if json.is_null() {
                return Err(Error::Policy {
                    script: name,
                    function: function.into(),
                    line: defined_at(),
                    source: Failure::BadReturn(BadReturn {
                        field: None,
                        message: "returned nothing (nil)".into(),
                    }),
                });
            }
            return Ok(Some(Answer {
                json,
                by: name,
                instructions: used,
                logs,
            }));
        }
        Ok(None)
    }

    /// Ask the policy chain. `Ok(None)`: no script defines `function`.
    fn ask<T: FromPolicy>(
        &self,
        policy: Option<&str>,
        function: &str,
        args: &dyn Fn(&Lua) -> mlua::Result<MultiValue>,
    ) -> Result<Option<Decided<T>>, Error> {
        let Some(Answer {
            json,
            by,
            instructions,
            logs,
        }) = self.try_call(policy, function, args)?
        else {
            return Ok(None);
        };
        match T::from_policy(&json) {
            Ok(value) => Ok(Some(Decided {
                value,
                by,
                error: None,
                logs,
                instructions,
            })),
            Err(bad) => Err(Error::Policy {
                line: self.defined_line(policy, function),
                script: by,
                function: function.into(),
                source: Failure::BadReturn(bad),
            }),
        }
    }

    /// Where the entry point that answered is defined (for bad returns).
    fn defined_line(&self, policy: Option<&str>, function: &str) -> Option<u32> {
        let chain = self.chain(policy);
        let scripts = self.scripts.borrow();
        chain.into_iter().find_map(|i| {
            let table = scripts[i].entries.as_ref().ok()?;
            // Raw: no `__index` runs outside a call's budget.
            match table.raw_get::<Value>(function).ok()? {
                Value::Function(f) => u32::try_from(f.info().line_defined?).ok(),
                _ => None,
            }
        })
    }

    /// The load errors of the scripts `policy` is answered by.
    fn chain_errors(&self, policy: Option<&str>) -> Vec<Error> {
        if let Err(e) = &self.state {
            return vec![e.clone()];
        }
        // The chain may load a script: before borrowing the list.
        let chain = self.chain(policy);
        let scripts = self.scripts.borrow();
        chain
            .into_iter()
            .filter_map(|i| scripts[i].entries.as_ref().err().cloned())
            .collect()
    }
}

/// Work sent to the Lua thread.
type Job = Box<dyn FnOnce(&Engine) + Send>;

/// The thread that owns the Lua state.
struct Worker {
    jobs: mpsc::Sender<Job>,
    /// Set when a call on it missed its deadline and it was replaced.
    abandoned: Arc<AtomicBool>,
}

/// Workers replaced after missing a deadline whose call still runs, in this process. The
/// budget stops Lua and pattern matching, so none should; should one, calls fall back to the
/// built-ins once `MAX_ABANDONED` are stuck instead of leaving one more thread behind each.
static ABANDONED: AtomicUsize = AtomicUsize::new(0);
const MAX_ABANDONED: usize = 2;

impl Worker {
    fn spawn(dir: Option<PathBuf>, limits: Limits, base: PathBuf) -> Worker {
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
    fn abandon(&self) {
        if !self.abandoned.swap(true, Ordering::AcqRel) {
            ABANDONED.fetch_add(1, Ordering::AcqRel);
        }
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
            return Err(Error::Policy {
                script: policy.unwrap_or(DEFAULT_POLICY).to_string(),
                function: function.into(),
                line: None,
                source: Failure::State(format!(
                    "{stuck} earlier policy calls are still stuck past their deadline: Lua policies are off until they end"
                )),
            });
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
            Error::Policy {
                script: policy.unwrap_or(DEFAULT_POLICY).to_string(),
                function: function.into(),
                line: None,
                source,
            }
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

    /// What the wrapper does after the agent CLI exited.
    pub fn on_exit(&self, agent: &AgentInfo, exit: &ExitInfo) -> Decided<ExitDecision> {
        let (a, x) = (agent.clone(), exit.clone());
        self.decide(
            Some(&agent.name),
            agent.policy.as_deref(),
            "on_exit",
            move |lua| args2(lua, &a, &x),
            || builtin::on_exit(agent, exit),
        )
    }

    /// What the watchdog does about an unhealthy agent.
    pub fn on_unhealthy(&self, agent: &AgentInfo, health: &Health) -> Decided<UnhealthyDecision> {
        self.on_unhealthy_with(agent, health, || builtin::on_unhealthy(agent, health))
    }

    /// `on_unhealthy` with any serialisable health report and the caller's own default, so
    /// the watchdog can keep its types.
    pub fn on_unhealthy_with<H: Serialize>(
        &self,
        agent: &AgentInfo,
        health: &H,
        fallback: impl FnOnce() -> UnhealthyDecision,
    ) -> Decided<UnhealthyDecision> {
        let a = agent.clone();
        let h = serde_json::to_value(health).unwrap_or(serde_json::Value::Null);
        self.decide(
            Some(&agent.name),
            agent.policy.as_deref(),
            "on_unhealthy",
            move |lua| args2(lua, &a, &h),
            fallback,
        )
    }

    /// Classify a failure.
    pub fn diagnose(&self, trauma: &Trauma) -> Decided<Diagnosis> {
        let t = trauma.clone();
        self.decide(
            Some(&trauma.agent.name),
            trauma.agent.policy.as_deref(),
            "diagnose",
            move |lua| Ok(MultiValue::from_iter([to_lua(lua, &t)?])),
            || builtin::diagnose(trauma),
        )
    }

    /// Choose a treatment for a diagnosed failure.
    pub fn prescribe(&self, diagnosis: &Diagnosis, trauma: &Trauma) -> Decided<Prescription> {
        let (d, t) = (diagnosis.clone(), trauma.clone());
        self.decide(
            Some(&trauma.agent.name),
            trauma.agent.policy.as_deref(),
            "prescribe",
            move |lua| args2(lua, &d, &t),
            || builtin::prescribe(diagnosis, trauma),
        )
    }

    /// Run every built-in fixture through the policy chain of `policy` (the default when
    /// `None`) and return every way it broke: load errors, runtime errors, bad returns,
    /// budgets. Nothing is recorded: this is `phoenix validate`.
    pub fn check(&self, policy: Option<&str>) -> Vec<Error> {
        let selector = policy.map(str::to_string);
        let mut errors = self
            .on_worker(policy, "load", move |e| e.chain_errors(selector.as_deref()))
            .unwrap_or_else(|e| vec![e]);
        if errors
            .iter()
            .any(|e| matches!(e.failure(), Failure::State(_)))
        {
            return errors;
        }
        for (name, text) in fixture::EMBEDDED {
            let fixture = match fixture::Fixture::parse(text) {
                Ok(f) => f,
                Err(e) => panic!("built-in fixture `{name}` is invalid: {e}"),
            };
            if let Some(e) = fixture::run_quiet(self, policy, &fixture).error
                && !errors.contains(&e)
            {
                errors.push(e);
            }
        }
        errors
    }
}

/// Wait for the worker's answer. A decision takes tens of microseconds, about what going to
/// sleep and being woken costs: so look for it a little while before blocking.
fn wait<R>(answer: &mpsc::Receiver<R>, deadline: Duration) -> Result<R, mpsc::RecvTimeoutError> {
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

/// A Lua value from any serialisable input. `None` is `nil`, so `if exit.signal then` works.
pub(crate) fn to_lua<T: Serialize + ?Sized>(lua: &Lua, value: &T) -> mlua::Result<Value> {
    let options = mlua::serde::SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    lua.to_value_with(value, options)
}

pub(crate) fn args2<A: Serialize, B: Serialize + ?Sized>(
    lua: &Lua,
    a: &A,
    b: &B,
) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([to_lua(lua, a)?, to_lua(lua, b)?]))
}

/// The first NaN or infinite number in a returned value, named by its field. Tables are
/// walked with raw iteration (no metamethods, so no policy code runs) and only a few levels
/// deep: every decision field is a scalar, and a deeper table is refused by its field's type.
fn non_finite(value: &Value, depth: usize) -> Option<BadReturn> {
    const DEPTH: usize = 3;
    match value {
        Value::Number(n) if !n.is_finite() => Some(BadReturn {
            field: None,
            message: format!("`{n}` is not a finite number"),
        }),
        Value::Table(t) if depth < DEPTH => {
            t.pairs::<Value, Value>().flatten().find_map(|(k, v)| {
                let mut bad = non_finite(&v, depth + 1)?;
                let key = match &k {
                    Value::String(s) => s.to_string_lossy(),
                    other => other.to_string().unwrap_or_else(|_| "?".into()),
                };
                bad.field = Some(match bad.field {
                    Some(inner) => format!("{key}.{inner}"),
                    None => key,
                });
                Some(bad)
            })
        }
        _ => None,
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The line of `script` an error message points at: `policies/x.lua:12: …`.
fn line_in(message: &str, script: &str) -> Option<u32> {
    let mut rest = message;
    while let Some(i) = rest.find(script) {
        let after = &rest[i + script.len()..];
        if let Some(digits) = after.strip_prefix(':') {
            let n: String = digits.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(line) = n.parse() {
                return Some(line);
            }
        }
        rest = after;
    }
    None
}

/// Strip `policies/x.lua:12: ` from the front of a message that already says where.
fn strip_location<'a>(message: &'a str, script: &str) -> &'a str {
    if let Some(rest) = message
        .strip_prefix(script)
        .and_then(|r| r.strip_prefix(':'))
        && let Some((digits, tail)) = rest.split_once(':')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return tail.trim_start();
    }
    message
}

/// Turn an mlua error into a [`Failure`] and the script line it points at.
fn failure(err: &mlua::Error, script: &str, memory: usize) -> (Failure, Option<u32>) {
    match err {
        mlua::Error::SyntaxError { message, .. } => (
            Failure::Syntax(strip_location(first_line(message), script).to_string()),
            line_in(message, script),
        ),
        mlua::Error::RuntimeError(message) => {
            let (head, traceback) = match message.split_once("\nstack traceback:") {
                Some((h, t)) => (h, Some(format!("stack traceback:{t}"))),
                None => (message.as_str(), None),
            };
            (
                Failure::Runtime {
                    message: strip_location(head.trim(), script).to_string(),
                    traceback,
                },
                line_in(head, script).or_else(|| line_in(message, script)),
            )
        }
        mlua::Error::MemoryError(_) => (Failure::Memory { limit: memory }, None),
        mlua::Error::CallbackError { traceback, cause } => {
            let (inner, line) = failure(cause, script, memory);
            let line = line.or_else(|| line_in(traceback, script));
            match inner {
                Failure::Runtime { message, .. } => (
                    Failure::Runtime {
                        message,
                        traceback: Some(traceback.clone()),
                    },
                    line,
                ),
                other => (other, line),
            }
        }
        mlua::Error::WithContext { cause, .. } => failure(cause, script, memory),
        mlua::Error::ExternalError(e) => {
            if let Some(exceeded) = e.downcast_ref::<sandbox::Exceeded>() {
                let line = line_in(exceeded.at(), script);
                (Failure::Budget(exceeded.to_string()), line)
            } else {
                (
                    Failure::Runtime {
                        message: e.to_string(),
                        traceback: None,
                    },
                    None,
                )
            }
        }
        other => {
            let text = other.to_string();
            (
                Failure::Runtime {
                    message: strip_location(first_line(&text), script).to_string(),
                    traceback: None,
                },
                line_in(&text, script),
            )
        }
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
