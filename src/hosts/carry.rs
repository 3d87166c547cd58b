//! An agent's externalized state as it travels between machines: state.json, the ledger,
//! the handoffs, brief.md and the resolved log, read from one machine's state dir and
//! written into another's. The host protocol's `context`, `export`, `import`, `fence` and
//! `mirror` verbs answer with these functions on a host; the operator calls the same ones
//! in-process for its own machine.
//!
//! Nothing here trusts a request beyond its shape: an agent name is a valid name, a file is
//! one of the carried names (a handoff a plain id), sizes are bounded, reads refuse links
//! and anything but regular files, writes are atomic (0600 files in 0700 dirs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::continuity::{handoff, valid_handoff_id};
use crate::spec::{self, LoadOptions, Spec};
use crate::state::bounded::{self, Links, ReadError};
use crate::state::fence::{self, Fence};
use crate::state::ledger::LEDGER;
use crate::state::{self, AgentDir, FleetDir};

/// The files of an agent's state dir that carry its context, besides its handoffs.
pub const CARRIED: [&str; 5] = [
    state::STATE,
    LEDGER,
    state::BRIEF,
    state::RESOLVED_LOG,
    state::inbox::INBOX,
];
/// The most one context carries: the request that imports it stays well under the host
/// protocol's 16 MiB, JSON escapes included.
pub const MAX_CONTEXT_BYTES: usize = 8 << 20;
/// The largest file carried (what phoenix reads of a handoff at most too).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Handoffs carried at most, the newest first.
pub const MAX_HANDOFFS: usize = 500;
/// How long the git look at a workdir may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Session facts of the machine the state was written on: meaningless on another.
const SESSION_KEYS: [&str; 5] = [
    "session_id",
    "session_cwd",
    "session_source",
    "transcript_path",
    "turn_started",
];

/// One agent's externalized state, by path relative to its state dir.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentContext {
    pub agent: String,
    /// `state.json`, `ledger.json`, `brief.md`, `resolved.jsonl`, `inbox.jsonl`,
    /// `handoffs/<id>.md`.
    pub files: BTreeMap<String, String>,
    /// What was not carried, and why (too large, not text, past the bounds).
    #[serde(default)]
    pub left_out: Vec<String>,
}

impl AgentContext {
    /// The ids of the handoffs carried, oldest first.
    pub fn handoff_ids(&self) -> Vec<&str> {
        self.files
            .keys()
            .filter_map(|k| k.strip_prefix("handoffs/")?.strip_suffix(".md"))
            .collect()
    }

    /// The newest handoff carried.
    pub fn latest_handoff(&self) -> Option<HandoffRef> {
        let id = self.handoff_ids().pop()?;
        let h = handoff::parse(&self.files[&format!("{}/{id}.md", handoff::DIR)])?;
        Some(HandoffRef::of(&h))
    }

    pub fn bytes(&self) -> usize {
        self.files.values().map(String::len).sum()
    }
}

/// A handoff, named: what a plan line and a move report show of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffRef {
    pub id: String,
    pub created_at: String,
    pub trigger: String,
}

impl HandoffRef {
    pub fn of(h: &handoff::Handoff) -> HandoffRef {
        HandoffRef {
            id: h.id.clone(),
            created_at: h.created_at.clone(),
            trigger: h.trigger.as_str().to_string(),
        }
    }
}

/// What one machine has of an agent, for a move's checks and the plan's move line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub agent: String,
    /// In this machine's phoenix.toml.
    pub declared: bool,
    /// A live pane of it runs here.
    pub running: bool,
    pub workdir: Option<String>,
    pub latest_handoff: Option<HandoffRef>,
    pub handoffs: usize,
    pub ledger: bool,
    pub open_loops: usize,
    /// The workdir's git state; `None` when it is not a git repository (or git is missing).
    pub git: Option<GitState>,
    /// The operator's last word here about where the agent runs.
    pub fence: Option<Fence>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GitState {
    /// Commits on local branches that no remote has.
    pub unpushed_commits: usize,
    /// Changed or untracked files.
    pub uncommitted_files: usize,
}

/// An agent name from a request is a valid name before it becomes a path.
pub fn check_name(agent: &str) -> Result<(), String> {
    if spec::valid_name(agent) {
        return Ok(());
    }
    Err(format!(
        "`{}` is not an agent name ({})",
        crate::text::shorten(agent, 80),
        spec::NAME_HINT
    ))
}

/// The path under the agent's state dir that `relative` names, if it is a carried file: one
/// of [`CARRIED`] or `handoffs/<id>.md` with a plain handoff id. Never anything else.
pub fn carried_path(relative: &str) -> Option<PathBuf> {
    if CARRIED.contains(&relative) {
        return Some(PathBuf::from(relative));
    }
    let id = relative
        .strip_prefix("handoffs/")?
        .strip_suffix(".md")
        .filter(|id| valid_handoff_id(id))?;
    let path = Path::new(handoff::DIR).join(format!("{id}.md"));
    handoff::is_handoff_file(&path).then_some(path)
}

/// One file of the state dir as text, within `max` bytes; why not, as a note.
fn read_text(path: &Path, max: u64) -> Result<Option<String>, String> {
    match bounded::read_whole(path, max, Links::Refuse) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| "not UTF-8 text".to_string()),
        Err(e) if e.is_not_found() => Ok(None),
        Err(ReadError::TooLarge { len, .. }) => Err(format!("{len} bytes, over {max}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The last `max` bytes of an append-only log, from a line's start.
fn log_tail(path: &Path, max: u64) -> Result<Option<String>, String> {
    match bounded::read_tail(path, max, Links::Refuse) {
        Ok(tail) => {
            let text = String::from_utf8_lossy(&tail.bytes).into_owned();
            Ok(Some(if tail.start > 0 {
                text.split_once('\n')
                    .map_or(String::new(), |(_, rest)| rest.to_string())
            } else {
                text
            }))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The agent's context as it is on disk now. `newer_than`: only the handoffs after that id
/// (the mirror holds the rest). Within [`MAX_CONTEXT_BYTES`] and [`MAX_HANDOFFS`]: the small
/// files first, then handoffs newest first; what does not fit is named in `left_out`.
pub fn export(dir: &AgentDir, newer_than: Option<&str>) -> AgentContext {
    let mut context = AgentContext {
        agent: dir.name.clone(),
        ..AgentContext::default()
    };
    let mut budget = MAX_CONTEXT_BYTES;
    for name in CARRIED {
        let path = dir.file(name);
        let read = if name == state::RESOLVED_LOG {
            log_tail(&path, MAX_FILE_BYTES)
        } else {
            read_text(&path, MAX_FILE_BYTES)
        };
        match read {
            Ok(Some(text)) if text.len() <= budget => {
                budget -= text.len();
                context.files.insert(name.to_string(), text);
            }
            Ok(Some(_)) => context
                .left_out
                .push(format!("{name}: over the context's bound")),
            Ok(None) => {}
            Err(why) => context.left_out.push(format!("{name}: {why}")),
        }
    }
    let ids = handoff::list_ids(dir);
    let newer: Vec<&String> = ids
        .iter()
        .rev()
        .take_while(|id| newer_than.is_none_or(|n| id.as_str() > n))
        .collect();
    for (n, id) in newer.iter().enumerate() {
        let name = format!("{}/{id}.md", handoff::DIR);
        if n >= MAX_HANDOFFS {
            context.left_out.push(format!(
                "{} older handoffs: past the {MAX_HANDOFFS} carried",
                newer.len() - n
            ));
            break;
        }
        if carried_path(&name).is_none() {
            continue;
        }
        match read_text(&handoff::path(dir, id), MAX_FILE_BYTES) {
            Ok(Some(text)) if text.len() <= budget => {
                budget -= text.len();
                context.files.insert(name, text);
            }
            Ok(Some(_)) => {
                context.left_out.push(format!(
                    "{} older handoffs: over the context's bound of {MAX_CONTEXT_BYTES} bytes",
                    newer.len() - n
                ));
                break;
            }
            Ok(None) => {}
            Err(why) => context.left_out.push(format!("{name}: {why}")),
        }
    }
    context
}

/// Why `context` cannot be written for `agent`, if it cannot.
pub fn check(context: &AgentContext, agent: &str) -> Result<(), String> {
    check_name(agent)?;
    if context.agent != agent {
        return Err(format!(
            "the context is agent `{}`'s, not `{agent}`'s",
            crate::text::shorten(&context.agent, 80)
        ));
    }
    if let Some(bad) = context.files.keys().find(|k| carried_path(k).is_none()) {
        return Err(format!(
            "`{}` is not a file an agent's context carries ({}, handoffs/<id>.md)",
            crate::text::shorten(bad, 80),
            CARRIED.join(", ")
        ));
    }
    if let Some((name, _)) = context
        .files
        .iter()
        .find(|(_, text)| text.len() as u64 > MAX_FILE_BYTES)
    {
        return Err(format!("`{name}` is larger than {MAX_FILE_BYTES} bytes"));
    }
    if context.bytes() > MAX_CONTEXT_BYTES {
        return Err(format!(
            "the context is larger than {MAX_CONTEXT_BYTES} bytes"
        ));
    }
    Ok(())
}

/// Write `context`'s files under `root` (created 0700), each whole, mode `mode`. The small
/// files it does not carry are removed (they are an older state); handoffs only ever add.
pub fn write_files(root: &Path, context: &AgentContext, mode: u32) -> Result<(), String> {
    let fail = |path: &Path, e: &dyn std::fmt::Display| format!("`{}`: {e}", path.display());
    state::create_private_dir(root).map_err(|e| fail(root, &e))?;
    if context.files.keys().any(|k| k.starts_with("handoffs/")) {
        let handoffs = root.join(handoff::DIR);
        state::create_private_dir(&handoffs).map_err(|e| fail(&handoffs, &e))?;
    }
    for name in CARRIED {
        if !context.files.contains_key(name) {
            remove(&root.join(name)).map_err(|e| fail(&root.join(name), &e))?;
        }
        // A last good copy of an older state would be rolled back to.
        let last_good = root.join(format!("{name}.last-good"));
        remove(&last_good).map_err(|e| fail(&last_good, &e))?;
    }
    for (relative, text) in &context.files {
        let path = root.join(
            carried_path(relative)
                .ok_or_else(|| format!("`{relative}` is not a file an agent's context carries"))?,
        );
        state::file::write_atomic(&path, text.as_bytes(), mode, true)
            .map_err(|e| fail(&path, &e))?;
    }
    Ok(())
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// What an import wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Imported {
    pub files: usize,
    pub handoffs: usize,
    pub latest_handoff: Option<HandoffRef>,
}

/// Make `context` agent `agent`'s externalized state in `fleet`, and record `fence` (the
/// operator's placement of it). Its next start is fresh (no session of another machine to
/// resume), and a stop or clean exit recorded here earlier no longer holds it.
pub fn import(
    fleet: &FleetDir,
    agent: &str,
    context: &AgentContext,
    fence: &Fence,
) -> Result<Imported, String> {
    check(context, agent)?;
    let dir = fleet.agent(agent);
    dir.ensure()
        .map_err(|e| format!("cannot make `{}`: {e}", dir.path.display()))?;
    let mut context = context.clone();
    if let Some(text) = context.files.get_mut(state::STATE) {
        *text = without_session(text, agent)?;
    }
    write_files(&dir.path, &context, 0o600)?;
    let marked = (|| {
        dir.clear_marker(state::STOPPED)?;
        dir.clear_marker(state::CLEAN_EXIT)?;
        remove(&dir.file(state::INTERRUPTED_TOOL))?;
        state::inbox::carried_in(&dir)?;
        dir.set_marker(state::FRESH)
    })();
    marked.map_err(|e| {
        format!(
            "cannot mark `{}` for a fresh start: {e}",
            dir.path.display()
        )
    })?;
    fence::merge(fleet, &BTreeMap::from([(agent.to_string(), fence.clone())]))
        .map_err(|e| e.to_string())?;
    Ok(Imported {
        files: context.files.len(),
        handoffs: context.handoff_ids().len(),
        latest_handoff: context.latest_handoff(),
    })
}

/// state.json without the facts of the other machine's session (its id, its transcript's
/// path there), named for this agent.
fn without_session(text: &str, agent: &str) -> Result<String, String> {
    let mut doc: Value =
        serde_json::from_str(text).map_err(|e| format!("state.json is not valid JSON: {e}"))?;
    let Some(map) = doc.as_object_mut() else {
        return Err("state.json is not a JSON object".into());
    };
    for key in SESSION_KEYS {
        map.remove(key);
    }
    map.insert("agent".into(), Value::String(agent.to_string()));
    serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())
}

/// What `fleet` has of `agent`; `spec` (this machine's phoenix.toml, if it has one) says
/// whether it is declared, where its workdir is and whether its pane runs.
pub fn summarize(spec: Option<&Spec>, fleet: &FleetDir, agent: &str) -> Result<Summary, String> {
    check_name(agent)?;
    let dir = fleet.agent(agent);
    let declared = spec.and_then(|s| s.agent(agent));
    let running = match spec {
        Some(spec) => {
            let runtime = crate::world::runtime_for(spec);
            let world = crate::status::observe(spec, &*runtime).map_err(|e| e.to_string())?;
            world.pane_of(agent).is_some_and(|p| !p.dead)
        }
        None => false,
    };
    let ids = handoff::list_ids(&dir);
    let latest_handoff = crate::continuity::latest_for_startup(&dir).map(|h| HandoffRef::of(&h));
    let state = dir.peek_state();
    Ok(Summary {
        agent: agent.to_string(),
        declared: declared.is_some(),
        running,
        workdir: declared.map(|a| a.workdir.display().to_string()),
        latest_handoff,
        handoffs: ids.len(),
        ledger: dir.file(LEDGER).is_file(),
        open_loops: state.map_or(0, |s| s.open_loops.len()),
        git: declared.and_then(|a| git_state(&a.workdir)),
        fence: fence::load(fleet)
            .ok()
            .and_then(|f| f.agents.get(agent).cloned()),
    })
}

/// Unpushed commits and uncommitted files in `workdir`; `None` when it is no git repository.
fn git_state(workdir: &Path) -> Option<GitState> {
    let git = |args: &[&str]| {
        let mut command = std::process::Command::new("git");
        // No pager, no prompt, and no fsmonitor program of the repository's own config.
        command
            .arg("-C")
            .arg(workdir)
            .args(["-c", "core.fsmonitor=", "--no-pager"])
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0");
        crate::process::run(command, b"", GIT_TIMEOUT)
            .ok()
            .filter(|f| f.status.success())
            .map(|f| f.stdout.lines().filter(|l| !l.trim().is_empty()).count())
    };
    Some(GitState {
        unpushed_commits: git(&["log", "--branches", "--not", "--remotes", "--format=%h"])?,
        uncommitted_files: git(&["status", "--porcelain"])?,
    })
}

/// A host's fleet in `dir` (`~/` is this user's home): its phoenix.toml if it has one yet,
/// and its state dir (the default one, `.phoenix` in `dir`, before it has).
pub fn host_fleet(dir: &str) -> Result<(Option<Spec>, FleetDir), String> {
    let dir = spec::expand_path(dir, Path::new("/"));
    let config = dir.join(spec::DEFAULT_CONFIG);
    if !config.exists() {
        return Ok((None, FleetDir::new(dir.join(".phoenix"))));
    }
    let spec = spec::load_with(
        &config,
        LoadOptions {
            check_filesystem: false,
        },
    )
    .map_err(|e| format!("the host's phoenix.toml: {e}"))?;
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    Ok((Some(spec), fleet))
}

/// What a [`fence_here`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fenced {
    /// The agents whose fence changed.
    pub recorded: Vec<String>,
    /// The stale copies stopped (the agents placed elsewhere whose pane ran here).
    pub stopped: Vec<String>,
    /// Stops that failed, with why.
    #[serde(default)]
    pub failed: Vec<String>,
}

/// Record the operator's `fences` in `fleet`, then stop every copy of an agent placed
/// elsewhere whose pane runs here (with the fleet lock, as a planned stop). `spec`: this
/// machine's phoenix.toml (none yet: nothing runs).
pub fn fence_here(
    spec: Option<&Spec>,
    fleet: &FleetDir,
    fences: &BTreeMap<String, Fence>,
) -> Result<Fenced, String> {
    fence_within(spec, fleet, fences, crate::state::lock::LOCK_WAIT)
}

/// [`fence_here`], waiting at most `lock_wait` for the fleet lock to stop the stale copies
/// (the fences are recorded first all the same: this host's daemon, plan and restarts refuse
/// the copy from then on, and the daemon stops it at its next pass).
pub fn fence_within(
    spec: Option<&Spec>,
    fleet: &FleetDir,
    fences: &BTreeMap<String, Fence>,
    lock_wait: Duration,
) -> Result<Fenced, String> {
    fences.keys().try_for_each(|a| check_name(a))?;
    fleet
        .ensure()
        .map_err(|e| format!("cannot make `{}`: {e}", fleet.root.display()))?;
    let recorded = fence::merge(fleet, fences).map_err(|e| e.to_string())?;
    let Some(spec) = spec else {
        return Ok(Fenced {
            recorded,
            ..Fenced::default()
        });
    };
    // Every stale copy, whether this word or an earlier one fenced it.
    let (stopped, failed) = stop_here(spec, fleet, "fence", lock_wait, |_, obs| {
        obs.is_some_and(|o| o.fenced.is_some())
    })?;
    Ok(Fenced {
        recorded,
        stopped: stopped.into_iter().map(|(agent, _)| agent).collect(),
        failed,
    })
}

/// The agents a [`stop_here`] stopped, each with its pane's process (the wrapper), and the
/// stops that failed.
type Stops = (Vec<(String, u32)>, Vec<String>);

/// Stop, with the fleet lock, every pane that `plan` would stop of the agents `which`
/// picks (by name and what the world knows of them), as planned stops.
fn stop_here(
    spec: &Spec,
    fleet: &FleetDir,
    what: &str,
    lock_wait: Duration,
    which: impl Fn(&str, Option<&crate::world::AgentObs>) -> bool,
) -> Result<Stops, String> {
    let lock = crate::state::lock::FleetLock::acquire(fleet, what, lock_wait, |_| {})
        .map_err(|e| e.to_string())?;
    let runtime = crate::world::runtime_for(spec);
    let world = crate::status::observe(spec, &*runtime).map_err(|e| e.to_string())?;
    let options = crate::plan::PlanOptions::for_this_binary(false)
        .map_err(|e| format!("cannot find this phoenix: {e}"))?;
    let stops: Vec<crate::plan::Change> = crate::plan::diff(spec, &world, &options)
        .changes
        .into_iter()
        .filter(|c| matches!(c.action, crate::plan::Action::Stop { .. }))
        .filter(|c| which(&c.agent, world.agents.get(&c.agent)))
        .collect();
    let pid_of = |agent: &str| world.pane_of(agent).map_or(0, |p| p.pid);
    let applier = crate::apply::Applier {
        spec,
        runtime: &*runtime,
        exe: crate::process::main_binary().map_err(|e| format!("cannot find this phoenix: {e}"))?,
    };
    let report = applier.apply(&crate::plan::Plan::of(stops));
    drop(lock);
    let (stopped, failed): (Vec<_>, Vec<_>) = report.steps.into_iter().partition(|s| s.ok);
    Ok((
        stopped
            .into_iter()
            .map(|s| {
                let pid = pid_of(&s.agent);
                (s.agent, pid)
            })
            .collect(),
        failed
            .into_iter()
            .map(|s| format!("{}: {}", s.agent, s.detail))
            .collect(),
    ))
}

/// Start `agent` here as `spec` declares it (what `phoenix apply AGENT` does: its state,
/// its hooks, its pane), with the fleet lock.
pub fn start_here(spec: &Spec, fleet: &FleetDir, agent: &str) -> Result<(), String> {
    fleet
        .ensure()
        .map_err(|e| format!("cannot make `{}`: {e}", fleet.root.display()))?;
    let lock = crate::state::lock::FleetLock::acquire(
        fleet,
        "move",
        crate::state::lock::LOCK_WAIT,
        |_| {},
    )
    .map_err(|e| e.to_string())?;
    let runtime = crate::world::runtime_for(spec);
    let world = crate::status::observe(spec, &*runtime).map_err(|e| e.to_string())?;
    let options = crate::plan::PlanOptions::for_this_binary(false)
        .map_err(|e| format!("cannot find this phoenix: {e}"))?;
    let mut plan = crate::plan::diff(spec, &world, &options);
    plan.only(&[agent.to_string()]);
    let applier = crate::apply::Applier {
        spec,
        runtime: &*runtime,
        exe: crate::process::main_binary().map_err(|e| format!("cannot find this phoenix: {e}"))?,
    };
    let report = applier.apply(&plan);
    drop(lock);
    match report.steps.iter().find(|s| !s.ok) {
        Some(s) => Err(format!("{}: {}", s.action, s.detail)),
        None => Ok(()),
    }
}

/// How long a stopped agent's wrapper may take to finish (it records the session's end and
/// saves its own handoff as it goes).
const WRAPPER_EXIT_WAIT: Duration = Duration::from_secs(15);

/// What a machine gives for an agent leaving it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Left {
    /// The handoff saved for the move.
    pub handoff: Option<HandoffRef>,
    pub context: AgentContext,
}

/// Agent `agent` leaves this machine: stopped as `phoenix stop` does (it stays down here),
/// its wrapper waited for, then a handoff saved with reason `move` (the newest, made from
/// everything the session did), and its context read.
pub fn leave(spec: Option<&Spec>, fleet: &FleetDir, agent: &str) -> Result<Left, String> {
    check_name(agent)?;
    let Some((spec, declared)) = spec.and_then(|s| Some((s, s.agent(agent)?))) else {
        return Err(format!("agent `{agent}` is not declared here"));
    };
    let dir = fleet.agent(agent);
    dir.ensure()
        .and_then(|()| dir.set_marker(state::STOPPED))
        .map_err(|e| format!("cannot record the stop in `{}`: {e}", dir.path.display()))?;
    let (stopped, failed) = stop_here(
        spec,
        fleet,
        "move",
        crate::state::lock::LOCK_WAIT,
        |a, _| a == agent,
    )?;
    if let Some(why) = failed.first() {
        return Err(format!("cannot stop it: {why}"));
    }
    for (_, pid) in stopped {
        wait_gone(pid, WRAPPER_EXIT_WAIT);
    }
    let handoff = crate::continuity::save(spec, declared, crate::continuity::Trigger::Move, None)
        .map_err(|e| format!("cannot save the move handoff: {e}"))?;
    Ok(Left {
        handoff: Some(HandoffRef::of(&handoff)),
        context: export(&dir, None),
    })
}

/// Wait until process `pid` is gone, at most `limit`.
fn wait_gone(pid: u32, limit: Duration) {
    if pid == 0 {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let deadline = std::time::Instant::now() + limit;
    while nix::sys::signal::kill(pid, None).is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The most one mirror reply carries; an agent that does not fit waits for the next pass
/// (by then the others send only what is new).
pub const MAX_MIRROR_BYTES: usize = 24 << 20;

/// A host's answer to the operator's mirror.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mirrored {
    pub agents: BTreeMap<String, AgentContext>,
    /// Agents left for the next pass: this reply was full.
    #[serde(default)]
    pub deferred: Vec<String>,
}

/// The contexts of `agents` in `fleet`, each with only the handoffs newer than the id the
/// mirror holds.
pub fn mirror_export(
    fleet: &FleetDir,
    agents: &BTreeMap<String, Option<String>>,
) -> Result<Mirrored, String> {
    let mut mirrored = Mirrored::default();
    let mut total = 0;
    for (agent, newest) in agents {
        check_name(agent)?;
        let dir = fleet.agent(agent);
        if !dir.exists() {
            continue;
        }
        let context = export(&dir, newest.as_deref());
        if total + context.bytes() > MAX_MIRROR_BYTES {
            mirrored.deferred.push(agent.clone());
            continue;
        }
        total += context.bytes();
        mirrored.agents.insert(agent.clone(), context);
    }
    Ok(mirrored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(here: bool) -> Fence {
        Fence {
            generation: 2,
            here,
            runs_on: "gpu-2".into(),
            since: String::new(),
        }
    }

    #[test]
    fn only_carried_names_are_paths() {
        assert_eq!(
            carried_path("state.json"),
            Some(PathBuf::from("state.json"))
        );
        assert_eq!(
            carried_path("handoffs/20261123T101010000Z-x.md"),
            Some(PathBuf::from("handoffs/20261123T101010000Z-x.md"))
        );
        for bad in [
            "handoffs/../../x.md",
            "handoffs/.hidden.md",
            "handoffs/a/b.md",
            "/etc/passwd",
            "ops.jsonl",
            "handoffs/x.md",
            "state.json/../x",
            "",
        ] {
            assert_eq!(carried_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_context_travels_whole_and_a_fresh_start_is_marked() {
        let (_a, source) = crate::state::testing::temp_fleet();
        let dir = source.agent("a");
        dir.ensure().unwrap();
        std::fs::write(
            dir.file("state.json"),
            r#"{"agent": "a", "current_task": "t", "transcript_path": "/there/x.jsonl", "session_id": "s1"}"#,
        )
        .unwrap();
        std::fs::write(dir.file("brief.md"), "the brief").unwrap();
        std::fs::write(dir.file("ops.jsonl"), "{}\n").unwrap();
        std::fs::create_dir(dir.file("handoffs")).unwrap();
        let h = "---\nid: \"20261123T101010000Z-x\"\nagent: \"a\"\ncli: \"custom\"\ncreated_at: \"2026-11-23T10:10:10Z\"\ntrigger_reason: \"move\"\nrelated: []\nsummary: \"t\"\n---\n\nbody\n";
        std::fs::write(dir.file("handoffs/20261123T101010000Z-x.md"), h).unwrap();
        // A link is never carried.
        std::os::unix::fs::symlink("/etc/passwd", dir.file("ledger.json")).unwrap();
        let context = export(&dir, None);
        assert_eq!(context.handoff_ids(), ["20261123T101010000Z-x"]);
        assert!(!context.files.contains_key("ops.jsonl"));
        assert!(!context.files.contains_key("ledger.json"));
        assert!(
            context.left_out[0].starts_with("ledger.json"),
            "{context:?}"
        );
        assert_eq!(context.latest_handoff().unwrap().trigger, "move");

        let (_b, target) = crate::state::testing::temp_fleet();
        let there = target.agent("a");
        there.ensure().unwrap();
        there.set_marker(state::STOPPED).unwrap();
        std::fs::write(there.file("resolved.jsonl"), "old\n").unwrap();
        let imported = import(&target, "a", &context, &fence(true)).unwrap();
        assert_eq!(imported.handoffs, 1);
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(there.file("state.json")).unwrap())
                .unwrap();
        assert_eq!(state["current_task"], "t");
        assert!(state.get("transcript_path").is_none(), "{state}");
        assert!(!there.file("resolved.jsonl").exists());
        assert!(there.has_marker(state::FRESH));
        assert!(!there.has_marker(state::STOPPED));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(there.file("brief.md"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(fence::load(&target).unwrap().agents["a"].here);
        // Since the newest one, nothing new.
        assert!(
            export(&dir, Some("20261123T101010000Z-x"))
                .handoff_ids()
                .is_empty()
        );
    }

    #[test]
    fn a_hostile_context_is_refused_and_writes_nothing() {
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
        let mut context = AgentContext {
            agent: "a".into(),
            ..AgentContext::default()
        };
        for name in ["../x", "a/../../b", "a\nb", ""] {
            let err = import(&fleet, name, &context, &fence(true)).unwrap_err();
            assert!(err.contains("not an agent name"), "{err}");
        }
        context
            .files
            .insert("handoffs/../../../evil.md".into(), "x".into());
        let err = import(&fleet, "a", &context, &fence(true)).unwrap_err();
        assert!(
            err.contains("not a file an agent's context carries"),
            "{err}"
        );
        assert!(!fleet.agent("a").exists());
        context.files.clear();
        context.agent = "b".into();
        assert!(import(&fleet, "a", &context, &fence(true)).is_err());
    }
}
