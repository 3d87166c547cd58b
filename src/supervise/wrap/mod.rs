//! `phoenix wrap --agent NAME`: the supervisor inside the agent's pane. It starts the CLI
//! (resuming the recorded session when it can), waits for it in the terminal's foreground,
//! checks that it shows life, and after every exit asks the `on_exit` policy what to do next
//! (resume, start fresh, or stop in safe mode) and, after a crash it can diagnose, the Clinic
//! how to treat it.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use crate::error::Context;
use nix::sys::signal::Signal;
use serde_json::json;

use super::term::{self, Terminal};
use crate::clinic::{Clinic, TriageInput};
use crate::policy::{AgentInfo, Policies};
use crate::recovery::record::{self, CrashEntry, CrashRecord};
use crate::recovery::{self, EndReason, ExitFacts, Facts, Incident, Recovery, Start};
use crate::render::Templates;
use crate::spec::{self, AgentSpec, Spec};
use crate::state::Op;
use crate::state::{self, AgentDir, FleetDir};
use crate::world::{self, SharedRuntime};

mod argv;
mod exit;
mod inject;
mod prepared;
mod probe;
mod run;
mod safe;
mod sandbox;

pub use argv::{NextStart, base_argv, next_start, resume_argv};
use probe::{LifeProbe, without_our_lines};

/// Lines of the pane kept in a crash record: what 50 lines of history and the pane's 50 rows
/// held, taken from the end of the one read of the pane after the exit.
const EVIDENCE_LINES: usize = 100;
/// How long an agent gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How long the wrapper's pass for a failed turn waits for another pass to let go.
const TREAT_PATIENCE: Duration = Duration::from_secs(30);
/// How often ended orphans reparented to the wrapper are collected while the agent runs.
const ORPHAN_REAP_EVERY: Duration = Duration::from_secs(30);
/// Everything the wrapper prints starts with this, so pane-output checks can ignore it.
const SAY: &str = "[phoenix]";

/// The pane starts in a fixed directory (tmux would format-expand a workdir given to it), so
/// the wrapper changes into the agent's workdir itself: the pane then shows it, and relative
/// paths in the agent's command mean what they meant. A workdir that is gone is reported when
/// the agent is started in it.
fn enter_workdir(agent: &AgentSpec) {
    let _ = std::env::set_current_dir(&agent.workdir);
}

/// A wrapper runs for every agent for as long as the agent does: its threads (the tap, the
/// wait for the agent, an exit's bookkeeping) share one malloc arena instead of one each.
/// (glibc's malloc: musl's has no per-thread arenas, and no such knob.)
fn one_arena() {
    // SAFETY: mallopt only sets a tuning parameter of this process's allocator.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Give freed heap pages back after the work around a start (the spec, the state files):
/// they would stay resident for the whole run of the agent otherwise.
fn give_back_freed_memory() {
    // SAFETY: malloc_trim only returns free memory at the allocator's discretion. (glibc's:
    // musl's malloc gives freed pages back by itself.)
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
    give_back_unused_stack();
}

/// Stack the wrapper leaves alone below the frame that calls this: the calls the work around
/// a start makes, which return long before the next.
const STACK_KEPT_BELOW: usize = 16 << 10;

/// The deepest calls of the work around a start (reading the config, the first state files)
/// leave stack pages dirty that an idle wrapper never touches again: ~130 kB of every
/// wrapper, for as long as its agent runs. Below the caller's frame (and a margin for the
/// calls it still makes and a signal handler), the pages of the main thread's stack are
/// handed back: a later deep call finds zero-filled pages, as on the first. Nothing lives
/// below the stack pointer, so nothing is lost; the main thread only (another thread's
/// stack is its own mapping).
#[inline(never)]
fn give_back_unused_stack() {
    // SAFETY: getpid and gettid only read this process's ids.
    if unsafe { libc::getpid() != libc::gettid() } {
        return;
    }
    let here = 0u8;
    let frame = std::hint::black_box(std::ptr::addr_of!(here)) as usize;
    let Some(lowest) = main_stack_lowest() else {
        return;
    };
    // SAFETY: sysconf only reads a constant of the system.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let end = frame.saturating_sub(STACK_KEPT_BELOW) & !(page - 1);
    if end <= lowest {
        return;
    }
    // SAFETY: [lowest, end) lies inside the main thread's stack mapping and wholly below the
    // stack pointer (a margin below this frame): no live value is there, and MADV_DONTNEED
    // on a private anonymous mapping only makes its next use read zero-filled pages.
    unsafe {
        libc::madvise(
            lowest as *mut libc::c_void,
            end - lowest,
            libc::MADV_DONTNEED,
        );
    }
}

/// Where the main thread's stack mapping starts (its lowest address, it grows down), as
/// the kernel lists it in `/proc/self/maps`.
fn main_stack_lowest() -> Option<usize> {
    let maps = crate::state::bounded::read_whole(
        Path::new("/proc/self/maps"),
        1 << 20,
        crate::state::bounded::Links::Follow,
    )
    .ok()?;
    let maps = String::from_utf8_lossy(&maps);
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (start, _) = line.split_once('-')?;
    usize::from_str_radix(start, 16).ok()
}

/// Run the agent in the foreground of this pane and keep it alive.
pub fn wrap(config: &Path, agent_name: &str, part: Option<PathBuf>) -> crate::error::Result<i32> {
    one_arena();
    term::install_handlers();
    let spec = spec::narrow::load_for_agent(config, agent_name, part.as_deref())?;
    let agent = find_agent(&spec, agent_name)?.clone();
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(&agent.name);
    dir.ensure()
        .with_context(|| format!("cannot create state dir `{}`", dir.path.display()))?;
    let _ = spec::remember_good(&spec);
    // The wrapper this one replaces may still be ending: let it record its own end first.
    super::strays::wait_for_previous_wrapper(&dir);
    record_a_lost_end(&dir);
    // Orphans of the agent's tree come to this wrapper, not init: it can stop them all.
    if !super::strays::become_subreaper() {
        let _ = dir.record_op(Op::SubreaperUnavailable, json!({}));
    }
    // A killed wrapper's agent may still run in this pane: never two copies of one session.
    let previous = super::strays::stop_previous(&dir);
    if !previous.is_empty() {
        say(&format!(
            "stopped {} process(es) a previous wrapper of `{}` left running",
            previous.len(),
            agent.name
        ));
    }
    enter_workdir(&agent);
    // What it acts on rings this (hooks, messages, signals, the agent's exit): it sleeps
    // until then. Without one it looks four times a second, as it always did.
    let doorbell = match state::doorbell::Doorbell::install(&dir) {
        Ok(bell) => {
            term::wake_signals_through(bell.raw_write_fd());
            Some(bell)
        }
        Err(e) => {
            let _ = dir.record_op(
                Op::DoorbellUnavailable,
                json!({"error": e.to_string(), "instead": "a look every 250 ms"}),
            );
            None
        }
    };
    let runtime = world::runtime_for(&spec);
    let pane = runtime.own_pane();
    let mut wrapper = Wrapper {
        config: config.to_path_buf(),
        part,
        runtime,
        spec,
        agent,
        fleet,
        dir,
        pane,
        terminal: Terminal::open(),
        interrupted_by: None,
        phase: Default::default(),
        phase_changed: Default::default(),
        proxy: Default::default(),
        doorbell,
        policies: None,
        prepared: None,
    };
    // A session that died with its pane or its host, mid-task, is owed the nudge as well.
    let state = wrapper.dir.read_state().ok();
    if state.is_some_and(|s| {
        crate::continuity::startup::was_interrupted(&wrapper.dir, &s)
            || s.status == crate::state::Status::Failed
    }) {
        wrapper.interrupted("an interrupted session", None);
    }
    wrapper.run()
}

/// How long ops.jsonl is now: what is appended after it is what happened since.
fn ops_len(dir: &AgentDir) -> u64 {
    std::fs::metadata(dir.file(state::OPS_LOG))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// Every session end gets one recorded reason. A wrapper killed with its pane (or a host
/// that went down) could not write its `agent_exit`: the next wrapper writes it for it.
fn record_a_lost_end(dir: &AgentDir) {
    let ops = state::op::tail(&dir.file(state::OPS_LOG));
    let last = ops
        .iter()
        .rev()
        .find(|o| matches!(o.op, Op::AgentStart(_) | Op::AgentExit(_)));
    if let Some(start) = last.filter(|o| matches!(o.op, Op::AgentStart(_))) {
        let _ = dir.record_op(
            Op::AgentExit,
            json!({
                "reason": EndReason::RuntimeStop, "code": null, "signal": null,
                "mode": start.get("mode"), "session_id": start.get("session_id"),
                "started": start.ts, "lost": true,
                "explain": "the previous wrapper ended without recording why (killed with its pane, or the host went down)",
            }),
        );
    }
}

fn find_agent<'a>(spec: &'a Spec, name: &str) -> crate::error::Result<&'a AgentSpec> {
    spec.agent(name).with_context(|| {
        format!(
            "agent `{name}` is not declared in {} (declared: {})",
            spec.file.display(),
            spec.agent_names().join(", ")
        )
    })
}

struct Wrapper {
    config: PathBuf,
    /// The agent's own part of the config (`spec::narrow`), read instead of the whole file
    /// while it is current.
    part: Option<PathBuf>,
    spec: Spec,
    agent: AgentSpec,
    fleet: FleetDir,
    dir: AgentDir,
    runtime: SharedRuntime,
    pane: Option<String>,
    terminal: Option<Terminal>,
    /// Why the next session must be told to go on (the last one was interrupted mid-task):
    /// kept until a run shows life and the continuation prompt is sent.
    interrupted_by: Option<&'static str>,
    /// The pane's phase being set on a thread: joined before it is set again.
    phase: std::cell::RefCell<Option<std::thread::JoinHandle<()>>>,
    /// This wrapper has set the pane's phase (it starts with none).
    phase_changed: std::cell::Cell<bool>,
    /// The proxy of its sandbox's network, once a start needed it.
    proxy: std::cell::RefCell<Option<crate::sandbox::Proxy>>,
    /// What wakes it (`state::doorbell`); `None` where the FIFO could not be made.
    doorbell: Option<state::doorbell::Doorbell>,
    /// The policies the last exit was decided with, and their files as they were then.
    policies: Option<(crate::policy::Sources, std::rc::Rc<Policies>)>,
    /// The next start, read during the cooldown that precedes it (`prepared`).
    prepared: Option<prepared::PreparedStart>,
}

/// One finished run of the agent CLI.
#[derive(Clone)]
struct Run {
    argv: Vec<String>,
    mode: Start,
    session_id: Option<String>,
    status: Option<ExitStatus>,
    runtime: Duration,
    showed_life: bool,
    /// The CLI refused to resume the session (its own words, before the first turn; or the
    /// transcript is gone): the id is never tried again.
    resume_refused: bool,
    /// The pane after the exit (`None` without a pane or when it could not be read).
    screen: Option<String>,
    /// It ended at its folder-trust question, before it showed life: what it asked.
    trust_question: Option<String>,
    /// When the wrapper saw it end.
    ended: Instant,
}

enum SafeOutcome {
    /// Start again (a fresh start was asked for through the executor).
    Start,
    Quit,
    Stopped(i32),
}

impl Wrapper {
    /// Read the pane's output for its `->continuity:` commands. tmux gives a pane's output
    /// only to a command it starts: the `pipe-pane` that made this pane with its wrapper
    /// (`world::Launch::tap`) started `phoenix tap --wrapper PID`, which waits for this
    /// wrapper to listen, passes the pipe over and exits; the wrapper reads it on a thread
    /// (`tap_host`). A wrapper that cannot listen leaves the reading to that tap.
    fn start_tap(&self) {
        if self.pane.is_none() || !self.agent.tap {
            return;
        }
        // The proofs the tap's hand-over needs go to the pane: this wrapper's stdout.
        if let Err(e) = crate::continuity::tap_host::Host::start(
            &self.spec.file,
            &self.agent.name,
            &self.dir,
            Box::new(std::io::stdout()),
        ) {
            let _ = self.dir.record_op(
                Op::TapFailed,
                json!({"error": format!("the wrapper cannot read the pane itself ({e}); its `phoenix tap` process does")}),
            );
        }
    }

    fn run(&mut self) -> crate::error::Result<i32> {
        self.start_tap();
        // The spec was read a moment ago: read again only between runs.
        // Read a moment ago, or during the cooldown just waited out.
        let mut spec_is_fresh = true;
        loop {
            // Read during the cooldown that just ended; only for the start that follows it.
            let prepared = self.prepared.take();
            if let Some(sig) = term::stop_signal() {
                return Ok(128 + sig);
            }
            if !std::mem::take(&mut spec_is_fresh) {
                self.reload();
            }
            // The operator moved the agent to another machine (its fence here): this copy is
            // stale and never starts again, whatever ended its last run.
            if let Some(fence) = crate::state::fence::refused(&self.fleet, &self.agent.name) {
                let _ = self
                    .dir
                    .record_op(Op::StartFenced, json!({"fence": fence.describe()}));
                return Ok(0);
            }
            if let Some(q) = record::load(&self.dir).safe_mode {
                match self.safe_mode(&format!("quarantined since {}: {}", q.since, q.reason))? {
                    SafeOutcome::Start => {}
                    SafeOutcome::Quit => return Ok(0),
                    SafeOutcome::Stopped(code) => return Ok(code),
                }
                continue;
            }
            let run = self.run_once(prepared);
            let requested = record::take_stop_request(&self.dir);
            if let Some(sig) = term::stop_signal() {
                // The wrapper itself is going away (pane killed, replaced, SIGTERM).
                let reason = requested
                    .map(|r| r.reason)
                    .unwrap_or(EndReason::RuntimeStop);
                self.books()
                    .record_end(&run, reason, json!({"wrapper_signal": sig}));
                // The pane is being replaced or closed: save what this session knew first.
                if let Err(e) = crate::continuity::auto_handoff(
                    &self.spec,
                    &self.agent,
                    crate::continuity::Trigger::AutoRestart,
                    None,
                ) {
                    let _ = self
                        .dir
                        .record_op(Op::HandoffFailed, json!({"error": e.to_string()}));
                }
                crate::state::daemon::poke(&self.fleet, &self.agent.name);
                return Ok(128 + sig);
            }
            let (decision, aftermath) = self.after_exit(&run, requested);
            // The exit's bookkeeping (evidence, handoff, the executor's writes, the record of
            // the end) runs during the cooldown and is done before anything else happens here:
            // the next start, safe mode, or the wrapper's own end. The cooldown counts from
            // the exit: the decision, the sweep, the config's reload and the reading of the
            // next start all happen within it, so that its end is followed by the spawn alone.
            let restarts = matches!(decision.start, Some(Start::Resume | Start::Fresh));
            if restarts {
                self.reload();
                spec_is_fresh = true;
            }
            aftermath.finish();
            // Whether the session's turn was open is read from what its hooks wrote: a Stop
            // hook the killed CLI had already launched may still be writing the turn's end.
            crate::supervise::strays::wait_for_late_writers();
            match decision.reason {
                EndReason::Crash | EndReason::WatchdogKill | EndReason::PlannedCycle => {
                    self.interrupted(decision.reason.as_str(), run.session_id.as_deref());
                }
                EndReason::CleanExit | EndReason::OperatorRestart | EndReason::OperatorStop => {
                    self.interrupted_by = None;
                }
                _ => {}
            }
            if restarts {
                self.prepare_start();
                if !self.cooldown(run.ended + decision.delay) {
                    return Ok(128 + term::stop_signal().unwrap_or(0));
                }
            }
            // A fresh start was asked for through the executor (`.fresh`): the next run
            // honours it, whoever starts it.
            match decision.start {
                Some(Start::SafeMode) | None => {
                    let why = match decision.reason {
                        EndReason::CleanExit => "the agent exited cleanly (code 0)".to_string(),
                        _ => decision.explain.clone(),
                    };
                    // Ended at its trust question: it waits for a person's answer, and starts
                    // again by itself once the folder is trusted.
                    let trust = match (&run.trust_question, decision.reason) {
                        (Some(question), EndReason::TrustDeclined) => {
                            // Said and notified once per wait (the run may have begun it).
                            if self.wait_for_trust(question) {
                                let _ = self.dir.clear_marker(state::NEEDS_INPUT);
                                drop(self.notify_waiting());
                            }
                            crate::hooks::trust::TrustWatch::new(&self.agent)
                        }
                        _ => None,
                    };
                    match self.safe_mode_until(&why, trust)? {
                        SafeOutcome::Start => {}
                        SafeOutcome::Quit => return Ok(0),
                        SafeOutcome::Stopped(code) => return Ok(code),
                    }
                }
                Some(Start::Resume | Start::Fresh) => {}
            }
        }
    }

    /// The session (`session`, else the recorded one) stopped mid-task: the next one is told
    /// to go on. Only if it had a task and its turn was open: a session that never got a
    /// prompt, or waited idle at its prompt with its turn done, has nothing to go on with,
    /// and a continue prompt typed into its successor would be a task nobody gave.
    fn interrupted(&mut self, why: &'static str, session: Option<&str>) {
        let id = session
            .map(str::to_string)
            .or_else(|| record::recorded_session(&self.dir).map(|s| s.id));
        let skipped = match id {
            Some(id) if !record::session_had_task(&self.dir, &id) => {
                Some("the session had no prompt: no task to continue")
            }
            Some(id) if !record::turn_was_open(&self.dir, &id) => {
                Some("the session's turn had finished: it waited for a prompt")
            }
            Some(_) => None,
            None => Some("the session had no prompt: no task to continue"),
        };
        self.interrupted_by = match skipped {
            None => Some(why),
            Some(skip) => {
                let _ = self.dir.record_op(
                    Op::ContinuePromptSkipped,
                    json!({"after": why, "why": skip}),
                );
                None
            }
        };
    }

    /// Pick up config edits between runs; a broken config keeps the last good one.
    fn reload(&mut self) {
        match spec::narrow::load_for_agent(&self.config, &self.agent.name, self.part.as_deref()) {
            Ok(spec) => match spec.agent(&self.agent.name) {
                Some(agent) => {
                    let _ = spec::remember_good(&spec);
                    enter_workdir(agent);
                    self.agent = agent.clone();
                    self.spec = spec;
                }
                None => say(&format!(
                    "agent `{}` is no longer declared in {}; keeping its last spec",
                    self.agent.name,
                    self.spec.file.display()
                )),
            },
            Err(e) => say(&format!(
                "cannot reload {} ({}); keeping the last good spec",
                self.config.display(),
                e.to_string().lines().next().unwrap_or("")
            )),
        }
    }

    /// The pane's phase after the agent is started: only once the wrapper has set another
    /// (a pane starts with none, which reads as running once the agent is there).
    fn set_running(&self) {
        if self.phase_changed.get() {
            self.set_phase("running");
        }
    }

    fn set_phase(&self, phase: &str) {
        self.phase_changed.set(true);
        self.phase_set();
        if let Some(pane) = &self.pane {
            let _ = self.runtime.set_phase(pane, phase);
        }
    }

    /// Set the pane's phase on a thread (a tmux call), while the wrapper goes on deciding.
    fn set_phase_meanwhile(&self, phase: &'static str) {
        self.phase_changed.set(true);
        self.phase_set();
        if let Some(pane) = self.pane.clone() {
            let runtime = self.runtime.clone();
            *self.phase.borrow_mut() = Some(std::thread::spawn(move || {
                let _ = runtime.set_phase(&pane, phase);
            }));
        }
    }

    /// A phase being set is set: phases are set in order.
    fn phase_set(&self) {
        let pending = self.phase.borrow_mut().take();
        if let Some(t) = pending {
            let _ = t.join();
        }
    }

    /// What an exit's bookkeeping needs, owned (it runs on a thread of its own).
    fn books(&self) -> exit::Books {
        exit::Books {
            spec: self.spec.clone(),
            agent: self.agent.clone(),
            fleet: self.fleet.clone(),
            dir: self.dir.clone(),
        }
    }
}

// The pane's screen. The wrapper is the program running in its pane, as the agent CLI is once
// started: its stdout is that pane, what a person attached reads and answers (safe mode), not
// the CLI's output channel, so it writes there itself; `say`, `blank_line`, `reset_terminal`
// and safe mode's `prompt` and `paste_brackets` are the only writers.

/// Between runs (cooldown, safe mode): the orphans that ended since the last look are
/// collected (the agent's own exit was waited for already).
fn collect_orphans() {
    if term::child_ended() {
        crate::supervise::strays::reap_ended_orphans(0);
    }
}

/// Print to the pane. What is said quotes configs, policies and agents' errors: no escape
/// sequence in them reaches the terminal (the paste rule, for output).
fn say(text: &str) {
    let text = crate::world::inert::keyboard_text(text);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{SAY} {text}");
    let _ = out.flush();
}

/// What a full-screen CLI sets in its terminal and undoes only when it exits cleanly: its
/// alternate screen (after a kill -9 the dead TUI's last frame stays on it, where its input box
/// and footer would pass for the next start's), mouse and focus reporting, bracketed paste,
/// application cursor keys and keypad, a hidden cursor. No-ops where nothing was set.
const TERMINAL_RESET: &str = "\x1b[?1049l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1004l\x1b[?2004l\x1b[?1l\x1b>\x1b[?25h";

/// Put the pane's terminal back as a shell leaves it, after the CLI's exit (only a terminal:
/// anything else has no modes to undo).
fn reset_terminal() {
    use std::io::IsTerminal;
    let mut out = std::io::stdout().lock();
    if !out.is_terminal() {
        return;
    }
    let _ = write!(out, "{TERMINAL_RESET}");
    let _ = out.flush();
}

fn blank_line() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out);
    let _ = out.flush();
}
