//! Observing the world: panes from the runtime (one call), process trees from /proc, and
//! each agent's state dir and markers. Produces a `World` for the pure diff in `plan`.

pub mod cli_version;
#[cfg(test)]
mod conformance;
pub mod fake;
pub mod inert;
pub mod procs;
// The one adapter that knows the runtime's program: nothing outside `world/` can reach it,
// only the `Runtime` it implements (see `connect`).
mod tmux;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::spec::{LaunchSpec, Spec};
use crate::state::{self, FleetDir};
pub use procs::{ProcInfo, ProcTable};
/// One agent's sandbox as a plan shows it: what it shows and its last verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SandboxReport {
    pub agent: String,
    pub profile: String,
    pub summary: String,
    /// `passed`, `failed` or `unverified` (never, or of another layout: apply verifies it
    /// before it starts the agent).
    pub verified: String,
    /// The canaries that escaped at the last verification.
    #[serde(default)]
    pub failed: Vec<String>,
    #[serde(default)]
    pub verified_at: Option<String>,
    /// What phoenix tells the CLI about its own sandbox.
    #[serde(default)]
    pub own_sandbox: Option<String>,
}

/// Where the fleet's pane server listens (a sandbox hides it).
pub use tmux::socket_path as server_socket_path;

/// What a runtime reports about one pane (or, for other runtimes, one process slot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaneObs {
    pub id: String,
    pub session: String,
    pub window: String,
    /// The pane's own process: `phoenix wrap` for panes phoenix started.
    pub pid: u32,
    pub dead: bool,
    pub dead_status: Option<i32>,
    /// The signal that killed the pane's process, if one did.
    pub dead_signal: Option<i32>,
    /// The agent phoenix started here, from the pane's `@phoenix_agent` option.
    pub agent: Option<String>,
    /// The fleet that started it (`Fleet::id`, the pane's `@phoenix_fleet` option).
    pub fleet: Option<String>,
    /// Fingerprint of the launch spec it was started with.
    pub fingerprint: Option<String>,
    /// What the wrapper says it is doing (`running`, `cooldown`, `safe`), if it says.
    pub phase: Option<String>,
    /// When the pane's own process started (seconds since the epoch), if known.
    pub started: Option<i64>,
    /// Descendants of `pid`, children first. The first child is the agent's CLI.
    pub processes: Vec<ProcInfo>,
}

impl PaneObs {
    /// The agent CLI process: the child of the pane's wrapper that leads a process group of
    /// its own (the wrapper always starts it so). A helper the wrapper runs for a moment (a
    /// `tmux capture-pane`), or an orphan of a killed agent, is never taken for the agent.
    pub fn agent_process(&self) -> Option<&ProcInfo> {
        if self.dead {
            return None;
        }
        self.processes
            .iter()
            .find(|p| p.ppid == self.pid && p.pgid == p.pid)
    }
}

/// Everything a runtime needs to start an agent.
#[cfg(test)]
mod agent_process_tests {
    use super::*;

    fn proc(pid: u32, ppid: u32, pgid: u32, comm: &str) -> ProcInfo {
        ProcInfo {
            pid,
            ppid,
            comm: comm.into(),
            started: 0,
            pgid,
        }
    }

    #[test]
    fn a_helper_of_the_wrapper_is_not_the_agent() {
        let pane = |processes| PaneObs {
            id: "%1".into(),
            session: "s".into(),
            window: "w".into(),
            pid: 100,
            dead: false,
            dead_status: None,
            dead_signal: None,
            agent: Some("a".into()),
            fleet: None,
            fingerprint: None,
            phase: None,
            started: None,
            processes,
        };
        // The capture started before the agent (a lower pid after wraparound, say).
        let p = pane(vec![
            proc(90, 100, 100, "capture"),
            proc(120, 100, 120, "claude"),
        ]);
        assert_eq!(p.agent_process().unwrap().pid, 120);
        // Only the helper: no agent.
        let p = pane(vec![proc(90, 100, 100, "capture")]);
        assert!(p.agent_process().is_none());
        // Nor is a leftover in another process group.
        let p = pane(vec![proc(130, 100, 120, "phoenix")]);
        assert!(p.agent_process().is_none());
    }
}

#[derive(Debug, Clone)]
pub struct Launch {
    /// The owning fleet's identity, tagged on the pane.
    pub fleet: String,
    pub agent: String,
    pub session: String,
    pub window: String,
    pub workdir: PathBuf,
    pub argv: Vec<String>,
    pub fingerprint: String,
    /// The program the pane's output streams to (`phoenix tap`), started with the pane in
    /// the same call (so none of its output is missed and its wrapper needs no call of its
    /// own), the pid of the pane's own process appended as its last argument.
    pub tap: Option<Vec<String>>,
}

/// What became of one launch of `Runtime::start_many`.
#[derive(Debug)]
pub enum Started {
    /// Started in this pane.
    Pane(String),
    /// Tried, and it failed: the runtime made no pane for it.
    Failed(RuntimeError),
    /// Not tried: an earlier launch of the same batch failed first. Nothing was started.
    NotTried,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("`{program}` was not found on PATH", program = tmux::PROGRAM)]
    NotInstalled,
    #[error("{program} `{command}` failed: {stderr}", program = tmux::PROGRAM)]
    Failed { command: String, stderr: String },
    #[error("unexpected runtime output: {0}")]
    Parse(String),
}

/// A pane option phoenix sets: who started the pane and what it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tag {
    /// The fleet's identity (`Fleet::id`).
    Fleet,
    Agent,
    /// Fingerprint of the launch spec.
    Fingerprint,
    /// What the wrapper says it is doing (`running`, `cooldown`, `safe`).
    Phase,
}

/// One line of `phoenix doctor` (about the runtime here; the CLI adds its own), and of a
/// host's answer to `phoenix hosts check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Check {
    pub check: String,
    pub ok: bool,
    pub detail: String,
    #[serde(default)]
    pub fix: Option<String>,
}

/// Whether an agent's command and workdir are there on this machine.
pub fn agent_checks(agent: &crate::spec::AgentSpec) -> [Check; 2] {
    let program = agent.argv.first().map(String::as_str).unwrap_or("");
    let found = agent.command_problem().is_none();
    let dir_ok = agent.workdir.is_dir();
    [
        Check {
            check: format!("agent `{}` command", agent.name),
            ok: found,
            detail: format!("`{program}` ({})", agent.cli),
            fix: (!found).then(|| {
                format!(
                    "install `{program}` or fix `command` for agent `{}`",
                    agent.name
                )
            }),
        },
        Check {
            check: format!("agent `{}` workdir", agent.name),
            ok: dir_ok,
            detail: agent.workdir.display().to_string(),
            fix: (!dir_ok).then(|| "create it or fix `workdir`".into()),
        },
    ]
}

/// A runtime shared by the parts of one fleet (the wrapper's threads, the daemon's passes).
pub type SharedRuntime = Arc<dyn Runtime>;

/// The runtime of the fleet whose server is called `socket`: the one place a runtime is built.
pub fn connect(socket: &str) -> SharedRuntime {
    Arc::new(tmux::Tmux::new(socket))
}

/// The fleet's own runtime.
pub fn runtime_for(spec: &Spec) -> SharedRuntime {
    connect(&spec.fleet.socket)
}

/// Checks of the machine the runtime needs (program installed and recent, a place for its
/// sockets), for `phoenix doctor`.
pub fn host_checks() -> Vec<Check> {
    tmux::host_checks()
}

/// Whether process `pid` is a server of the runtime's program (the process that starts a
/// pane's output pipe), by its executable's name.
pub fn is_pane_server(pid: i32) -> bool {
    tmux::is_server_process(pid)
}

/// Agents of this fleet left running on another server (after an upgrade or a rename): what
/// to do about them, if there are any.
pub fn leftover_problem(spec: &Spec) -> Option<String> {
    tmux::leftover_problem(spec)
}

/// Where agents run. One adapter today; plain subprocesses, remote hosts or a cluster
/// scheduler can implement this without plan, apply, the watchdog or the wrapper changing:
/// every verb phoenix uses is here, and nothing outside `world/` talks to the runtime itself.
pub trait Runtime: Send + Sync {
    fn name(&self) -> &'static str;
    /// Where this runtime is, for messages: ``tmux server `phoenix-x` ``.
    fn location(&self) -> String;
    /// What an operator can run to look at the panes by hand, for hints.
    fn inspect_hint(&self) -> String;
    /// Why the runtime itself cannot work on this machine (not installed, nowhere to put its
    /// socket), with what to do about it; `None` when neither explains `err`.
    fn diagnose(&self, err: &RuntimeError) -> Option<String>;
    /// The check `phoenix doctor` prints about this fleet's server; `problem` is what is wrong
    /// with it, if anything.
    fn server_check(&self, fleet_id: &str, problem: Option<String>) -> Check;
    /// All panes, or `None` when the runtime is not running at all (an empty world).
    fn list(&self) -> Result<Option<Vec<PaneObs>>, RuntimeError>;
    /// Start an agent; returns the new pane's id.
    fn start(&self, launch: &Launch) -> Result<String, RuntimeError>;
    /// Start several agents at once, as few round trips to the runtime as it can manage; what
    /// became of each launch, in order. A launch is started at most once: a failed or untried
    /// one has no pane.
    fn start_many(&self, launches: &[Launch]) -> Vec<Started> {
        launches
            .iter()
            .map(|l| match self.start(l) {
                Ok(pane) => Started::Pane(pane),
                Err(e) => Started::Failed(e),
            })
            .collect()
    }
    /// Replace whatever runs in `pane` with a fresh launch.
    fn respawn(&self, pane: &str, launch: &Launch) -> Result<(), RuntimeError>;
    fn stop(&self, pane: &str) -> Result<(), RuntimeError>;
    /// Stop several panes, as few round trips to the runtime as it can manage; what became of
    /// each, in order. A pane already gone counts as stopped, as for `stop`.
    fn stop_many(&self, panes: &[&str]) -> Vec<Result<(), RuntimeError>> {
        panes.iter().map(|p| self.stop(p)).collect()
    }
    /// Paste `text` into `pane` as one bracketed paste (when the program there asked for
    /// one). The runtime makes the text inert (`inert::keyboard_text`): no caller can skip that.
    fn paste(&self, pane: &str, text: &str) -> Result<(), RuntimeError>;
    /// Press Enter in `pane` (a key, no text).
    fn press_enter(&self, pane: &str) -> Result<(), RuntimeError>;
    /// Interrupt what the program in `pane` is doing, as a person would: Escape, the key
    /// that stops the turn of Claude Code, Codex CLI and Gemini CLI (a key, no text).
    fn interrupt(&self, pane: &str) -> Result<(), RuntimeError>;
    /// Give `text` to the program in `pane` as one paste, then press Enter.
    fn send_input(&self, pane: &str, text: &str) -> Result<(), RuntimeError> {
        self.paste(pane, text)?;
        self.press_enter(pane)
    }
    /// The text of `pane`: its visible screen, and `lines` lines of its history above it
    /// (0: the visible screen only).
    fn capture(&self, pane: &str, lines: usize) -> Result<String, RuntimeError>;
    /// The screens of several panes; a pane that cannot be read is left out.
    fn capture_many(&self, panes: &[String], lines: usize) -> BTreeMap<String, String> {
        panes
            .iter()
            .filter_map(|p| self.capture(p, lines).ok().map(|t| (p.clone(), t)))
            .collect()
    }
    /// Show `pane` to the person at this terminal until they leave it (the runtime gets the
    /// terminal).
    fn show(&self, pane: &str) -> Result<(), RuntimeError>;
    fn set_tag(&self, pane: &str, tag: Tag, value: &str) -> Result<(), RuntimeError>;
    /// `None` when the pane has no such tag.
    fn tag(&self, pane: &str, tag: Tag) -> Result<Option<String>, RuntimeError>;
    /// Publish what the wrapper in `pane` is doing, for observers.
    fn set_phase(&self, pane: &str, phase: &str) -> Result<(), RuntimeError> {
        self.set_tag(pane, Tag::Phase, phase)
    }
    /// The pid of `pane`'s own process (`None` when there is no such pane).
    fn pane_pid(&self, pane: &str) -> Result<Option<u32>, RuntimeError>;
    /// The pane of this runtime this very process runs in, if it runs in one. A pane id
    /// inherited from another server (a wrapper run by hand in one's own session) does not
    /// count: the pane's process must be this one.
    fn own_pane(&self) -> Option<String>;
    /// Stop the whole server and every pane in it (nothing of it is left, not even its
    /// socket).
    fn kill_server(&self) -> Result<(), RuntimeError>;
}

/// Per-agent facts from the state directory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentObs {
    pub state_dir: bool,
    pub clean_exit: bool,
    /// `phoenix stop` holds it down until `phoenix start`.
    pub stopped: bool,
    /// The operator moved it to another machine (`phoenix move`): it must not run here.
    pub fenced: Option<state::fence::Fence>,
    /// Someone restarts it right now (`state::claim`): no one else may, and a pane without
    /// its CLI is starting, not dead.
    pub restarting: Option<state::claim::Claim>,
    /// The launch spec recorded when the agent was last started (for drift details).
    pub started: Option<LaunchSpec>,
    pub last_activity: Option<jiff::Timestamp>,
    /// Hook files `apply` installed phoenix entries in for this agent.
    pub installed_hooks: Vec<PathBuf>,
    /// Its state dir may hold a record of worktrees phoenix made (only those are read).
    #[serde(skip)]
    pub worktrees_recorded: bool,
}

/// A file phoenix manages inside a user's project (hook configuration), as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "detail", rename_all = "snake_case")]
pub enum FileObs {
    Missing,
    Text(String),
    Unreadable(String),
}

impl FileObs {
    /// Bounded: the file is in an agent's workdir, and a FIFO there must not hang `plan`.
    pub fn read(path: &Path) -> FileObs {
        use crate::state::bounded::{self, Links};
        match bounded::read_string(path, crate::agent_cli::MAX_CONFIG_BYTES, Links::Follow) {
            Ok(text) => FileObs::Text(text),
            Err(e) if e.is_not_found() => FileObs::Missing,
            Err(e) => FileObs::Unreadable(e.to_string()),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct World {
    /// When this was observed (seconds since the epoch).
    pub observed_at: i64,
    /// False when the runtime (its server) is not running at all.
    pub server_running: bool,
    /// Where the panes were observed, for messages (`Runtime::location`).
    #[serde(skip)]
    pub location: String,
    pub panes: Vec<PaneObs>,
    /// Keyed by agent name: every declared agent, every agent found in a pane or with a
    /// state dir.
    pub agents: BTreeMap<String, AgentObs>,
    /// Hook configuration files in the workdirs of declared agents and of agents that were
    /// started before (their recorded launch spec), keyed by path. Not in the JSON form.
    #[serde(skip)]
    pub hook_files: BTreeMap<PathBuf, FileObs>,
    /// Agents' git worktrees (`workspace`): only observed for a plan.
    pub workspaces: crate::workspace::Observed,
    /// The installed version of each declared agent's CLI (only those phoenix knows versions
    /// of), keyed by agent: only observed for a plan, whose hooks are made for it.
    #[serde(skip)]
    pub cli_versions: BTreeMap<String, cli_version::Installed>,
    /// Each sandboxed agent's sandbox and its last verification, keyed by agent: filled by
    /// `status::observe` for a plan (sandboxes sit above the world).
    #[serde(skip)]
    pub sandboxes: BTreeMap<String, SandboxReport>,
    /// Each agent's panes (indexes into `panes`), made at the first `pane_of`: a plan of a
    /// thousand agents went through every pane for each agent.
    #[serde(skip)]
    pub(crate) panes_by_agent: std::sync::OnceLock<HashMap<String, Vec<usize>>>,
}

impl World {
    /// Where the panes are, for messages: the runtime's location, if it was observed.
    pub fn location(&self) -> &str {
        if self.location.is_empty() {
            "the runtime"
        } else {
            &self.location
        }
    }

    /// The pane phoenix started for `agent`, if any. If several claim it, the one that stays
    /// is the oldest live one (tmux numbers panes in creation order), else the oldest.
    pub fn pane_of(&self, agent: &str) -> Option<&PaneObs> {
        self.panes_for(agent)
            .min_by_key(|p| (p.dead, pane_number(&p.id)))
    }

    /// Every other pane tagged for `agent`: a second start that should not have happened
    /// (two phoenix processes raced, or a copy made by hand). Plans remove them.
    pub fn extra_panes<'a>(&'a self, agent: &'a str) -> impl Iterator<Item = &'a PaneObs> {
        let keep = self.pane_of(agent).map(|p| p.id.as_str());
        self.panes_for(agent)
            .filter(move |p| Some(p.id.as_str()) != keep)
    }

    /// The panes tagged for `agent`, through the index made at the first lookup.
    fn panes_for(&self, agent: &str) -> impl Iterator<Item = &PaneObs> {
        let index = self.panes_by_agent.get_or_init(|| {
            let mut index: HashMap<String, Vec<usize>> = HashMap::new();
            for (i, pane) in self.panes.iter().enumerate() {
                if let Some(agent) = &pane.agent {
                    index.entry(agent.clone()).or_default().push(i);
                }
            }
            index
        });
        index
            .get(agent)
            .into_iter()
            .flatten()
            .map(|&i| &self.panes[i])
    }

    /// Agents present in the runtime, whatever the spec says.
    pub fn running_agents(&self) -> impl Iterator<Item = (&str, &PaneObs)> {
        self.panes
            .iter()
            .filter_map(|p| p.agent.as_deref().map(|a| (a, p)))
    }
}

/// `%12` → 12; anything else sorts last.
fn pane_number(id: &str) -> u64 {
    id.strip_prefix('%')
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Whether `pane` belongs to this fleet: tagged with its identity, or running a wrapper of
/// this very config file (a pane an older phoenix started before panes carried the tag, or
/// one started before the fleet was renamed: plan then replaces it, tagged anew). Panes of
/// other fleets sharing the server, and panes phoenix did not start, are not ours to see.
pub(crate) fn is_ours(pane: &PaneObs, spec: &Spec) -> bool {
    if pane.fleet.as_deref() == Some(spec.fleet.id.as_str()) {
        return true;
    }
    match &pane.agent {
        Some(agent) if !pane.dead => {
            procs::cmdline(pane.pid).is_some_and(|argv| wraps(&argv, &spec.file, agent))
        }
        _ => false,
    }
}

/// The agent whose wrapper runs this process: the outermost of its ancestors that is
/// `phoenix … wrap --agent NAME` for `file`. What a process may not take from its environment
/// (a CLI that passes its MCP servers only some variables, an agent that unsets them): a
/// process cannot leave its wrapper's tree (the wrapper is its subreaper), and one that names
/// another agent in its own arguments is below the real wrapper, so the outermost counts.
///
/// Only a phoenix process counts (its program's name starts with `phoenix`): the tmux server
/// keeps the arguments of the command that started it, often the first agent's wrapper, and
/// is an ancestor of every agent.
pub fn wrapping_agent(spec: &Spec) -> Option<String> {
    procs::ancestors(std::process::id())
        .filter(|(_, argv)| {
            argv.first()
                .and_then(|p| Path::new(p).file_name())
                .is_some_and(|p| p.to_string_lossy().starts_with("phoenix"))
        })
        .filter_map(|(_, argv)| {
            let after = |flag: &str| {
                argv.iter()
                    .position(|a| a == flag)
                    .and_then(|i| argv.get(i + 1))
            };
            let agent = after("--agent")?.clone();
            (spec.agent(&agent).is_some() && wraps(&argv, &spec.file, &agent)).then_some(agent)
        })
        .last()
}

/// `argv` is `<phoenix> --config <file> wrap --agent <agent>` for this config file.
fn wraps(argv: &[String], file: &Path, agent: &str) -> bool {
    let after = |flag: &str| {
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1))
    };
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    argv.iter().any(|a| a == "wrap")
        && after("--agent").is_some_and(|a| a == agent)
        && after("--config")
            .is_some_and(|c| canonical(Path::new(c)).is_some_and(|c| Some(c) == canonical(file)))
}

/// What the state dir says of one agent (its launch spec and installed hook files: for a plan).
fn agent_obs(
    fleet: &FleetDir,
    name: &str,
    for_plan: bool,
    fences: &state::fence::Fences,
) -> AgentObs {
    let dir = fleet.agent(name);
    // One listing answers every "is this file there"; only what may be there is read, with
    // the same reads as without it (a marker is still a file that `stat` finds).
    let Some(listing) = dir.listing() else {
        return AgentObs {
            state_dir: false,
            fenced: fences.refused(name).cloned(),
            ..AgentObs::default()
        };
    };
    let has = |file: &str| listing.may_have(file);
    AgentObs {
        // The listing was read: the dir is there.
        state_dir: true,
        clean_exit: has(state::CLEAN_EXIT) && dir.has_marker(state::CLEAN_EXIT),
        stopped: has(state::STOPPED) && dir.has_marker(state::STOPPED),
        fenced: fences.refused(name).cloned(),
        restarting: has(state::claim::CLAIM)
            .then(|| state::claim::current(&dir))
            .flatten(),
        started: (for_plan && has(state::STARTED_SPEC))
            .then(|| {
                state::JsonFile::new(&dir, state::STARTED_SPEC, "started_spec")
                    .load()
                    .ok()
                    .flatten()
            })
            .flatten(),
        last_activity: dir.last_activity_among(Some(&listing)),
        installed_hooks: if for_plan && has(state::store::INSTALLED_HOOKS) {
            dir.installed_hooks()
        } else {
            Vec::new()
        },
        worktrees_recorded: has(crate::workspace::record::WORKTREES),
    }
}

/// The processes of the panes a runtime does not describe itself (the fake does; a remote host
/// would have to): this host's, from /proc. Only this fleet's process trees are read, from the
/// panes' own processes down (the kernel's children lists), not every process of the machine;
/// the whole table only where the kernel keeps no such lists.
fn read_processes(panes: &mut [PaneObs]) {
    let local = |p: &PaneObs| !p.dead && p.started.is_none() && p.processes.is_empty();
    if !panes.iter().any(local) {
        return;
    }
    let pids: Vec<u32> = panes.iter().filter(|p| local(p)).map(|p| p.pid).collect();
    let table = ProcTable::trees(&pids).unwrap_or_else(ProcTable::read);
    for pane in panes.iter_mut().filter(|p| local(p)) {
        pane.started = table.get(pane.pid).map(|p| p.started);
        pane.processes = table.descendants(pane.pid);
    }
}

/// Observe everything relevant to `spec` with one runtime call and one /proc pass. Only this
/// fleet's panes are in the result (see [`is_ours`]).
pub fn observe(spec: &Spec, runtime: &dyn Runtime) -> Result<World, RuntimeError> {
    observe_with(spec, runtime, true)
}

/// `observe` without what only a plan needs (the hook files in every workdir, the launch spec
/// each agent was started with): what the fleet's
/// status is made of, for `/metrics`, which is scraped every few seconds.
pub fn observe_status(spec: &Spec, runtime: &dyn Runtime) -> Result<World, RuntimeError> {
    observe_with(spec, runtime, false)
}

fn observe_with(spec: &Spec, runtime: &dyn Runtime, for_plan: bool) -> Result<World, RuntimeError> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    // An unreadable fences file fences nothing: it is rolled back to its last good copy, and
    // the operator's next word writes it again.
    let fences = state::fence::load(&fleet).unwrap_or_default();
    let mut names: Vec<String> = spec.agents.iter().map(|a| a.name.clone()).collect();
    names.extend(fleet.agent_names());
    names.sort();
    names.dedup();
    // A few files per agent: a thousand agents are read on every core.
    let look = |names: Vec<String>| -> BTreeMap<String, AgentObs> {
        let workers = crate::parallel::workers_for(names.len());
        crate::parallel::parallel_map(names, workers, |name| {
            let obs = agent_obs(&fleet, &name, for_plan, &fences);
            (name, obs)
        })
        .into_iter()
        .collect()
    };
    let ours = |listed: Option<Vec<PaneObs>>| -> (Vec<PaneObs>, bool) {
        let running = listed.is_some();
        let panes = listed
            .unwrap_or_default()
            .into_iter()
            .filter(|p| is_ours(p, spec))
            .collect();
        (panes, running)
    };
    let (panes, server_running, mut agents) = if for_plan {
        // The panes and their processes first, the files after: a marker written before a
        // pane or its agent ended (a clean exit's) is then always seen with the end, and a
        // plan never restarts an agent that stopped on purpose.
        let (mut panes, running) = ours(runtime.list()?);
        read_processes(&mut panes);
        (panes, running, look(names))
    } else {
        // A status may see an end a moment before its marker: the runtime is asked while the
        // state dir is read (a tmux call is mostly its client starting and the server
        // answering; the other core reads the files meanwhile).
        let (listed, agents) = std::thread::scope(|s| {
            let listing = s.spawn(|| runtime.list());
            let agents = look(names);
            let listed = listing
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (listed, agents)
        });
        let (mut panes, running) = ours(listed?);
        read_processes(&mut panes);
        (panes, running, agents)
    };
    // Agents that run without being declared or having a state dir.
    let unknown: Vec<String> = panes
        .iter()
        .filter_map(|p| p.agent.clone())
        .filter(|a| !agents.contains_key(a))
        .collect();
    agents.extend(look(unknown));

    let mut workdirs: Vec<&Path> = if for_plan {
        spec.agents.iter().map(|a| a.workdir.as_path()).collect()
    } else {
        Vec::new()
    };
    workdirs.extend(
        agents
            .values()
            .filter_map(|o| o.started.as_ref())
            .map(|s| s.workdir.as_path()),
    );
    let mut paths: Vec<PathBuf> = workdirs
        .into_iter()
        .flat_map(|w| {
            crate::agent_cli::HOOKED.into_iter().flat_map(move |cli| {
                crate::agent_cli::hook_path_in(cli, w)
                    .into_iter()
                    .chain(crate::agent_cli::mcp_path_in(cli, w))
            })
        })
        .collect();
    paths.extend(
        agents
            .values()
            .flat_map(|o| o.installed_hooks.iter().cloned()),
    );
    let mut hook_files = BTreeMap::new();
    for path in paths {
        hook_files
            .entry(path)
            .or_insert_with_key(|p| FileObs::read(p));
    }
    let workspaces = if for_plan {
        crate::workspace::observe(
            spec,
            &fleet,
            agents
                .iter()
                .filter(|(_, obs)| obs.worktrees_recorded)
                .map(|(name, _)| name.as_str()),
        )
    } else {
        crate::workspace::Observed::default()
    };
    let cli_versions = if for_plan {
        spec.agents
            .iter()
            .filter_map(|a| {
                cli_version::installed(a, &spec.fleet.state_dir).map(|v| (a.name.clone(), v))
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    Ok(World {
        observed_at: jiff::Timestamp::now().as_second(),
        server_running,
        location: runtime.location(),
        panes,
        agents,
        hook_files,
        workspaces,
        cli_versions,
        sandboxes: BTreeMap::new(),
        panes_by_agent: Default::default(),
    })
}
