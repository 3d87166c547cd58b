//! What an agent leaves behind: the wrapper is the child subreaper of everything its agent
//! starts, records the agent's pid, and stops every process of a run before the next run
//! starts, so a tool that outlived a killed CLI cannot act a second time beside its rerun.

use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::Op;
use crate::state::{self, AgentDir};
use crate::world::procs::{self, ProcInfo, ProcTable};

/// The running agent's pid and start time, in its state dir: a wrapper that replaces a
/// killed one finds the agent it left running.
pub const AGENT_PID: &str = "agent.pid";
/// How long the processes get to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(3);

#[derive(Serialize, Deserialize)]
struct Recorded {
    pid: u32,
    /// Seconds since the epoch, from /proc: a reused pid has another start time.
    started: i64,
    /// The wrapper that started it, and when that wrapper started.
    #[serde(default)]
    wrapper: Option<(u32, i64)>,
    /// The run ended and its wrapper stopped everything it left (`sweep`): a successor has
    /// nothing to look for. False while a run may be going on (a record from before this
    /// field, too).
    #[serde(default)]
    swept: bool,
}

/// How long a new wrapper waits for the one it replaces to finish its exit.
const PREVIOUS_WRAPPER_WAIT: Duration = Duration::from_secs(10);

fn recorded(dir: &AgentDir) -> Option<Recorded> {
    state::file::read_bounded(&dir.file(AGENT_PID), 4096)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// A wrapper replaced in its pane (respawned on a drift, say) is told to stop while its
/// successor already starts: the successor waits until it has stopped its agent, recorded
/// the end and exited, so one end is recorded once and one agent runs at a time.
pub fn wait_for_previous_wrapper(dir: &AgentDir) {
    let Some((pid, started)) = recorded(dir).and_then(|r| r.wrapper) else {
        return;
    };
    if pid == std::process::id() {
        return;
    }
    let until = Instant::now() + PREVIOUS_WRAPPER_WAIT;
    while Instant::now() < until && procs::live(pid).is_some_and(|p| p.started == started) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Orphans of the agent's tree (a tool that `setsid`s and whose parent exits, a shell's
/// background job) reparent to the wrapper instead of init, so they stay findable as its
/// descendants. False where the kernel refuses (not Linux ≥ 3.4).
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
    let became = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 };
    IS_SUBREAPER.store(became, std::sync::atomic::Ordering::Relaxed);
    became
}

/// This wrapper is its agent's subreaper: a sweep of its own tree misses nothing of a run.
static IS_SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A run is about to start: until its agent is recorded, a successor of a wrapper killed now
/// must look for what it may have left (no pid to go by, so everything with the marker).
pub fn run_starting(dir: &AgentDir) {
    save(
        dir,
        &Recorded {
            pid: 0,
            started: 0,
            wrapper: this_wrapper(),
            swept: false,
        },
    );
}

/// Record the agent just started.
pub fn record_agent(dir: &AgentDir, pid: u32) {
    let Some(info) = procs::live(pid) else {
        return;
    };
    save(
        dir,
        &Recorded {
            pid,
            started: info.started,
            wrapper: this_wrapper(),
            swept: false,
        },
    );
}

/// phoenix's own processes the last run's hooks left running (a session-end hook still
/// writing the agent's state), found by the sweep.
static LATE_WRITERS: std::sync::Mutex<Vec<ProcInfo>> = std::sync::Mutex::new(Vec::new());
/// How long the next start waits for them: hooks are bounded and end by themselves.
const LATE_WRITERS_WAIT: Duration = Duration::from_secs(3);

/// Before the next start: wait (bounded) until the hooks the last run left have written what
/// they write, so the start reads the state they leave (the session to resume), not the state
/// half-way. Returns at once when none was left.
pub fn wait_for_late_writers() {
    let late = LATE_WRITERS
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default();
    let until = Instant::now() + LATE_WRITERS_WAIT;
    while late.iter().any(same) && Instant::now() < until {
        late.iter().for_each(reap);
        std::thread::sleep(Duration::from_millis(5));
    }
    late.iter().for_each(reap);
}

/// The wrapper's tree once it holds still. It is read from the top down while the agent's
/// group is dying: a child that a dying process hands to the wrapper (its subreaper) after
/// the wrapper's list was read, and before its parent's was, is on neither list read. So it
/// is read again until two reads find the same processes (a few, a millisecond apart).
fn settled_tree(me: u32) -> Option<ProcTable> {
    let pids = |t: &ProcTable| {
        let mut p: Vec<(u32, u32)> = t.all().map(|p| (p.pid, p.ppid)).collect();
        p.sort_unstable();
        p
    };
    let mut last = ProcTable::whole_tree(me)?;
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(1));
        let now = ProcTable::whole_tree(me)?;
        if pids(&now) == pids(&last) {
            return Some(now);
        }
        last = now;
    }
    Some(last)
}

/// The run's processes are all stopped: a wrapper started after this one ends (killed in its
/// cooldown, say) has nothing of it to look for.
fn record_swept(dir: &AgentDir) {
    if let Some(mut record) = recorded(dir) {
        record.swept = true;
        save(dir, &record);
    }
}

/// This wrapper and when it started, read once.
fn this_wrapper() -> Option<(u32, i64)> {
    static ME: std::sync::OnceLock<Option<(u32, i64)>> = std::sync::OnceLock::new();
    *ME.get_or_init(|| procs::live(std::process::id()).map(|w| (w.pid, w.started)))
}

fn save(dir: &AgentDir, record: &Recorded) {
    if let Ok(bytes) = serde_json::to_vec(record) {
        let _ = state::file::write_atomic(&dir.file(AGENT_PID), &bytes, 0o600, false);
    }
}

/// The recorded agent has ended and what it left is stopped.
fn forget_agent(dir: &AgentDir) {
    let _ = std::fs::remove_file(dir.file(AGENT_PID));
}

/// Before a wrapper's first start: the agent a previous wrapper of this agent left running
/// (that wrapper was killed; same pid and same start time), its process tree, and anything
/// else still carrying the agent's marker, are stopped, so one session never runs twice.
///
/// Only when a run may have been left: every start is recorded before its spawn and every
/// ended run swept, so an agent never started, or whose last run was swept, has nothing to
/// look for, and a thousand wrappers starting at once do not each read every process of the
/// machine. A record that cannot be read is looked behind.
pub fn stop_previous(dir: &AgentDir) -> Vec<ProcInfo> {
    let record_file = dir.file(AGENT_PID);
    let recorded = recorded(dir);
    let nothing_left = match &recorded {
        Some(r) => r.swept,
        None => std::fs::symlink_metadata(&record_file).is_err(),
    };
    if nothing_left {
        forget_agent(dir);
        interrupted_call(dir, &[]);
        return Vec::new();
    }
    let table = ProcTable::read();
    let spared = Spared::of(&table);
    let mut targets = Vec::new();
    // The recorded agent is stopped whatever it runs (`phoenix demo-agent` is phoenix too).
    if let Some(r) = &recorded
        && let Some(agent) = table.get(r.pid).filter(|p| p.started == r.started)
        && !ancestors(&table).contains(&agent.pid)
    {
        targets.push(agent.clone());
        targets.extend(
            table
                .descendants(agent.pid)
                .into_iter()
                .filter(|p| !spared.spares(p.pid)),
        );
    }
    add_marked(&table, dir, &spared, &mut targets);
    let stopped = stop_recorded(
        dir,
        targets,
        Op::PreviousAgentStopped,
        recorded.as_ref().map(|r| r.pid),
        "a previous wrapper of this agent ended without stopping its agent",
    );
    forget_agent(dir);
    interrupted_call(dir, &stopped);
    stopped
}

/// Stop `targets` and, when there were any, record them as `op` with the agent's pid and
/// why they were stopped. The processes stopped.
fn stop_recorded(
    dir: &AgentDir,
    targets: Vec<ProcInfo>,
    op: crate::state::op::Make,
    agent_pid: Option<u32>,
    why: &str,
) -> Vec<ProcInfo> {
    let (stopped, listing) = stop(targets);
    record_stopped(dir, &stopped, listing, op, agent_pid, why);
    stopped
}

/// Record what was stopped (`listing`: what each ran) as `op`, when anything was.
fn record_stopped(
    dir: &AgentDir,
    stopped: &[ProcInfo],
    listing: serde_json::Value,
    op: crate::state::op::Make,
    agent_pid: Option<u32>,
    why: &str,
) {
    if !stopped.is_empty() {
        let _ = dir.record_op(
            op,
            json!({"agent_pid": agent_pid, "processes": listing, "why": why}),
        );
    }
}

/// After the agent (pid `agent`) exited: every process of its run still alive, the
/// wrapper's descendants outside its own process group (its own helpers, a `tmux` call,
/// stay in it) and whatever carries the agent's marker, is stopped and recorded.
///
/// `held`: [`hold_interrupted_call`] set the agent's call in flight aside at its exit.
///
/// The wrapper is the subreaper of everything its agent starts: while it lives, no process of
/// the run can leave its tree (an orphan, a `setsid`, a double fork all come back to it), so
/// its own tree is read, not every process of the machine. What left the tree because the
/// wrapper itself was killed is for its successor to find by the marker ([`stop_previous`]).
/// Where the kernel keeps no children lists, or the wrapper could not become a subreaper,
/// every process is read and the marker looked for, as before.
pub fn sweep(dir: &AgentDir, agent: u32, held: bool) -> Vec<ProcInfo> {
    let me = std::process::id();
    let own_group = nix::unistd::getpgrp().as_raw() as u32;
    let why = "processes the agent started outlived it; stopped before the next start";
    let tree = if IS_SUBREAPER.load(std::sync::atomic::Ordering::Relaxed) {
        settled_tree(me)
    } else {
        None
    };
    let stopped = match tree {
        Some(table) => sweep_tree(dir, agent, why, me, own_group, table),
        None => {
            let table = ProcTable::read();
            let spared = Spared::of(&table);
            let mut targets: Vec<ProcInfo> = table
                .descendants(me)
                .into_iter()
                .filter(|p| p.pgid != own_group && !spared.spares(p.pid))
                .collect();
            add_marked(&table, dir, &spared, &mut targets);
            stop_recorded(dir, targets, Op::StraysStopped, Some(agent), why)
        }
    };
    // agent.pid stays: it also names this wrapper, which a successor waits for.
    record_swept(dir);
    if held {
        record_interrupted_call(dir, &stopped);
    } else {
        interrupted_call(dir, &stopped);
    }
    stopped
}

/// The sweep of the wrapper's own tree (`table`, settled): what phoenix's own programs the
/// hooks left is set aside to be waited for, the rest is stopped, and the tree looked at again
/// for what was forked meanwhile (bounded). Recorded once, as `strays_stopped`.
fn sweep_tree(
    dir: &AgentDir,
    agent: u32,
    why: &str,
    me: u32,
    own_group: u32,
    table: ProcTable,
) -> Vec<ProcInfo> {
    let spared = Spared::of_tree();
    // phoenix's own programs the run's hooks left (spared: what they write is what the next
    // session starts from) are waited for before that session starts.
    let of_the_run = |table: &ProcTable| -> (Vec<ProcInfo>, Vec<ProcInfo>) {
        table
            .descendants(me)
            .into_iter()
            .filter(|p| p.pgid != own_group)
            .partition(|p| spared.spares(p.pid))
    };
    let (own, targets) = of_the_run(&table);
    if let Ok(mut late) = LATE_WRITERS.lock() {
        *late = own;
    }
    let (mut stopped, mut listing) = stop(targets);
    // A process forked while the first ones were read and signalled is not on the lists
    // read before it: look again until a look finds nothing new.
    for _ in 0..3 {
        if stopped.is_empty() {
            break;
        }
        let Some(table) = settled_tree(me) else {
            break;
        };
        let late: Vec<ProcInfo> = of_the_run(&table)
            .1
            .into_iter()
            .filter(|p| {
                !stopped
                    .iter()
                    .any(|s| s.pid == p.pid && s.started == p.started)
            })
            .collect();
        if late.is_empty() {
            break;
        }
        let (more, more_listed) = stop(late);
        if let (Some(all), Some(extra)) = (listing.as_array_mut(), more_listed.as_array()) {
            all.extend(extra.iter().cloned());
        }
        stopped.extend(more);
    }
    record_stopped(dir, &stopped, listing, Op::StraysStopped, Some(agent), why);
    stopped
}

/// The agent's exit was just seen: the call its PreToolUse hook noted and no PostToolUse
/// cleared is interrupted, so it is set aside before anything is signalled. A CLI whose
/// launcher died reports its stopped tool as finished on its way out (the Gemini CLI's
/// AfterTool hook did, under load), and that report must not erase the interruption.
/// Whether a call was set aside.
pub fn hold_interrupted_call(dir: &AgentDir) -> bool {
    std::fs::rename(
        dir.file(state::IN_FLIGHT),
        dir.file(state::INTERRUPTED_TOOL),
    )
    .is_ok()
}

/// The tool call the agent was running when it ended (its PreToolUse hook noted it, no
/// PostToolUse cleared it) is kept for the next session's startup context to name, and
/// recorded with what was stopped.
fn interrupted_call(dir: &AgentDir, stopped: &[ProcInfo]) {
    if hold_interrupted_call(dir) {
        record_interrupted_call(dir, stopped);
    }
}

/// Record the call [`hold_interrupted_call`] set aside, with what was stopped.
fn record_interrupted_call(dir: &AgentDir, stopped: &[ProcInfo]) {
    let kept = dir.file(state::INTERRUPTED_TOOL);
    let call = state::bounded::read_whole(&kept, 16 * 1024, state::bounded::Links::Refuse)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or_default();
    let _ = dir.record_op(
        Op::ToolInterrupted,
        json!({
            "tool": call["tool"], "input": call["input"], "session_id": call["session_id"],
            "stopped_pids": stopped.iter().map(|p| p.pid).collect::<Vec<_>>(),
        }),
    );
}

/// This process and its ancestors (the tmux server among them) are never stopped, even if
/// they carry the marker (a tmux server or daemon first started from inside an agent).
///
/// Nor are phoenix's own programs the agent's hooks started (a `phoenix handoff save` the
/// pre-compact hook detached, a hook still writing): they are bounded, end by themselves, and
/// what they save is what the next session starts from. The agent's process group was
/// signalled already; this only spares the detached ones. Which program a process runs is
/// looked up only for the processes that would be stopped, not for the whole table.
struct Spared {
    ancestors: Vec<u32>,
    own: Vec<std::path::PathBuf>,
}

impl Spared {
    fn of(table: &ProcTable) -> Spared {
        Spared {
            ancestors: ancestors(table),
            own: own_programs(),
        }
    }

    /// For a sweep of the wrapper's own tree: its ancestors are not in it, so only its own
    /// programs need looking up.
    fn of_tree() -> Spared {
        Spared {
            ancestors: vec![std::process::id()],
            own: own_programs(),
        }
    }

    fn spares(&self, pid: u32) -> bool {
        self.ancestors.contains(&pid)
            || std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| self.own.contains(&exe))
    }
}

/// This process and the chain of its parents.
fn ancestors(table: &ProcTable) -> Vec<u32> {
    let mut out = vec![std::process::id()];
    let mut pid = std::process::id();
    while let Some(p) = table.get(pid) {
        if p.ppid == 0 || out.contains(&p.ppid) {
            break;
        }
        out.push(p.ppid);
        pid = p.ppid;
    }
    out
}

/// phoenix and the small binaries installed beside it.
fn own_programs() -> Vec<std::path::PathBuf> {
    let Ok(exe) = crate::process::main_binary() else {
        return Vec::new();
    };
    let exe = exe.canonicalize().unwrap_or(exe);
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    let mut programs: Vec<_> = crate::process::COMPANIONS
        .iter()
        .filter_map(|suffix| {
            let name = crate::process::companion_name(name.as_deref()?, suffix);
            Some(exe.with_file_name(name))
        })
        .collect();
    programs.push(exe);
    programs
}

/// Processes whose environment says they belong to this agent's runs (the wrapper gives the
/// agent `PHOENIX_STATE_DIR`, and children inherit it): found even after they left the tree.
fn add_marked(table: &ProcTable, dir: &AgentDir, spared: &Spared, out: &mut Vec<ProcInfo>) {
    let value = dir.path.as_os_str().as_bytes();
    for p in table.all() {
        if !out.iter().any(|o| o.pid == p.pid)
            && procs::environ_has(p.pid, "PHOENIX_STATE_DIR", value)
            && !spared.spares(p.pid)
        {
            out.push(p.clone());
        }
    }
}

/// SIGTERM, a grace period, SIGKILL; a process is signalled only while it is the one listed
/// (same pid, same start time). Returns the ones that were alive, and what they ran.
fn stop(targets: Vec<ProcInfo>) -> (Vec<ProcInfo>, serde_json::Value) {
    // Those that already ended (zombies reparented to the wrapper) only need collecting.
    targets.iter().for_each(reap);
    let targets: Vec<ProcInfo> = targets.into_iter().filter(same).collect();
    // What they were running, read while they still run.
    let listing = listed(&targets);
    for p in &targets {
        signal(p, Signal::SIGTERM);
    }
    for (sig, wait) in [
        (Some(Signal::SIGKILL), GRACE),
        (None, Duration::from_secs(2)),
    ] {
        let until = Instant::now() + wait;
        loop {
            targets.iter().for_each(reap);
            if !targets.iter().any(same) || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(sig) = sig {
            targets
                .iter()
                .filter(|p| same(p))
                .for_each(|p| signal(p, sig));
        }
    }
    // One that ended after the last pass is collected too: no zombie outlives the sweep.
    targets.iter().for_each(reap);
    (targets, listing)
}

/// Orphans that ended and were reparented to the wrapper (its subreaper) are collected, so
/// no zombie is left (a kill -9 of Codex's or Gemini's node launcher left `[codex]`, `[git]`,
/// `[bash]`, `[phoenix-hook]` until the pane went): the wrapper calls this when SIGCHLD says
/// a child ended, and now and then anyway. Never `agent` (its own thread waits for it), and
/// never a child the wrapper started itself, whose starter waits for it: those run in the
/// wrapper's process group (a `tmux` call) or lead a group of their own in the wrapper's
/// session (`process::run`: a notify, brief or clinic command). An orphan of the agent's
/// tree is in the agent's group, or in a session of its own.
pub fn reap_ended_orphans(agent: u32) {
    let me = std::process::id();
    let own_group = nix::unistd::getpgrp().as_raw() as u32;
    let own_session = procs::session(me);
    // Its own children only: a thousand wrappers would each read every process otherwise.
    let table = ProcTable::trees(&[me]).unwrap_or_else(ProcTable::read);
    for kid in table.descendants(me) {
        let inherited = kid.pgid != own_group
            && (kid.pgid != kid.pid || procs::session(kid.pid) != own_session);
        // `live` is None for a zombie: it has ended and waits to be collected.
        if kid.ppid == me && kid.pid != agent && inherited && procs::live(kid.pid).is_none() {
            reap(&kid);
        }
    }
}

fn same(p: &ProcInfo) -> bool {
    procs::live(p.pid).is_some_and(|now| now.started == p.started)
}

fn signal(p: &ProcInfo, sig: Signal) {
    if let Ok(pid) = i32::try_from(p.pid) {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
    }
}

/// Orphans reparented to the wrapper are its children now: collect their exit status so no
/// zombie is left. Harmless (ECHILD) for a process that is not its child.
fn reap(p: &ProcInfo) {
    if let Ok(pid) = i32::try_from(p.pid) {
        let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
    }
}

fn listed(procs: &[ProcInfo]) -> serde_json::Value {
    procs
        .iter()
        .map(|p| {
            let argv = procs::cmdline(p.pid).unwrap_or_default();
            json!({"pid": p.pid, "comm": p.comm, "argv": argv.iter().take(8).collect::<Vec<_>>()})
        })
        .collect()
}
