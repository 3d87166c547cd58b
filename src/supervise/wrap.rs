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

use anyhow::Context;
use nix::sys::signal::Signal;
use serde_json::json;

use super::term::{self, Terminal};
use crate::clinic::{Clinic, TriageInput};
use crate::policy::{AgentInfo, Policies};
use crate::recovery::record::{self, CrashEntry, CrashRecord};
use crate::recovery::{self, EndReason, ExitFacts, Facts, Incident, Recovery, Start};
use crate::render::Templates;
use crate::spec::{self, AgentSpec, Cli, Spec};
use crate::state::Op;
use crate::state::{self, AgentDir, FleetDir};
use crate::world::{self, SharedRuntime};

/// Lines of the pane kept in a crash record.
const EVIDENCE_LINES: usize = 50;
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

/// Run the agent in the foreground of this pane and keep it alive.
pub fn wrap(config: &Path, agent_name: &str) -> anyhow::Result<i32> {
    term::install_handlers();
    let spec = spec::load(config)?;
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
    let runtime = world::runtime_for(&spec);
    let pane = runtime.own_pane();
    let mut wrapper = Wrapper {
        config: config.to_path_buf(),
        runtime,
        spec,
        agent,
        fleet,
        dir,
        pane,
        terminal: Terminal::open(),
        interrupted_by: None,
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

fn find_agent<'a>(spec: &'a Spec, name: &str) -> anyhow::Result<&'a AgentSpec> {
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
}

/// One finished run of the agent CLI.
struct Run {
    argv: Vec<String>,
    mode: Start,
    session_id: Option<String>,
    status: Option<ExitStatus>,
    runtime: Duration,
    showed_life: bool,
}

enum SafeOutcome {
    /// Start again (a fresh start was asked for through the executor).
    Start,
    Quit,
    Stopped(i32),
}

impl Wrapper {
    /// Stream the pane's output to `phoenix tap` for its `->continuity:` commands. tmux runs
    /// the pipe command through `sh -c`, so every word is quoted (and `pipe_output` keeps tmux
    /// from format-expanding it); `-o` keeps an existing pipe.
    fn start_tap(&self) {
        let (Some(pane), true) = (&self.pane, self.agent.tap) else {
            return;
        };
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        use crate::hooks::config::sh_quote;
        let command = [
            exe.to_string_lossy().as_ref(),
            "--config",
            self.spec.file.to_string_lossy().as_ref(),
            "tap",
            "--agent",
            self.agent.name.as_str(),
        ]
        .map(sh_quote)
        .join(" ");
        match self.runtime.pipe_output(pane, &command) {
            Ok(()) => {
                let _ = self.dir.record_op(Op::TapStarted, json!({"pane": pane}));
            }
            Err(e) => {
                let _ = self
                    .dir
                    .record_op(Op::TapFailed, json!({"error": e.to_string()}));
            }
        }
    }

    fn run(&mut self) -> anyhow::Result<i32> {
        self.start_tap();
        loop {
            if let Some(sig) = term::stop_signal() {
                return Ok(128 + sig);
            }
            self.reload();
            if let Some(q) = record::load(&self.dir).safe_mode {
                match self.safe_mode(&format!("quarantined since {}: {}", q.since, q.reason))? {
                    SafeOutcome::Start => {}
                    SafeOutcome::Quit => return Ok(0),
                    SafeOutcome::Stopped(code) => return Ok(code),
                }
                continue;
            }
            let run = self.run_once();
            let requested = record::take_stop_request(&self.dir);
            if let Some(sig) = term::stop_signal() {
                // The wrapper itself is going away (pane killed, replaced, SIGTERM).
                let reason = requested
                    .map(|r| r.reason)
                    .unwrap_or(EndReason::RuntimeStop);
                self.record_end(&run, reason, json!({"wrapper_signal": sig}));
                // The pane is being replaced or closed: save what this session knew first.
                if let Err(e) = crate::continuity::auto_handoff(
                    &self.spec,
                    &self.agent,
                    crate::continuity::Trigger::AutoRestart,
                    None,
                ) {
                    let _ = self.dir.record_op(Op::HandoffFailed, json!({"error": e}));
                }
                crate::state::daemon::poke(&self.fleet, &self.agent.name);
                return Ok(128 + sig);
            }
            let decision = self.after_exit(&run, requested);
            match decision.reason {
                EndReason::Crash | EndReason::WatchdogKill | EndReason::PlannedCycle => {
                    self.interrupted(decision.reason.as_str(), run.session_id.as_deref());
                }
                EndReason::CleanExit | EndReason::OperatorRestart | EndReason::OperatorStop => {
                    self.interrupted_by = None;
                }
                _ => {}
            }
            // A fresh start was asked for through the executor (`.fresh`): the next run
            // honours it, whoever starts it.
            match decision.start {
                Some(Start::SafeMode) | None => {
                    let why = match decision.reason {
                        EndReason::CleanExit => "the agent exited cleanly (code 0)".to_string(),
                        _ => decision.explain.clone(),
                    };
                    match self.safe_mode(&why)? {
                        SafeOutcome::Start => {}
                        SafeOutcome::Quit => return Ok(0),
                        SafeOutcome::Stopped(code) => return Ok(code),
                    }
                }
                Some(Start::Resume | Start::Fresh) => {
                    if !self.cooldown(decision.delay) {
                        return Ok(128 + term::stop_signal().unwrap_or(0));
                    }
                }
            }
        }
    }

    /// The session (`session`, else the recorded one) stopped mid-task: the next one is told
    /// to go on. Only if it had a task: a session that never got a prompt has nothing to go
    /// on with, and a continue prompt typed into its successor would be a task nobody gave.
    fn interrupted(&mut self, why: &'static str, session: Option<&str>) {
        let id = session
            .map(str::to_string)
            .or_else(|| record::recorded_session(&self.dir).map(|s| s.id));
        if id.is_some_and(|id| record::session_had_task(&self.dir, &id)) {
            self.interrupted_by = Some(why);
        } else {
            self.interrupted_by = None;
            let _ = self.dir.record_op(
                Op::ContinuePromptSkipped,
                json!({"after": why, "why": "the session had no prompt: no task to continue"}),
            );
        }
    }

    /// Pick up config edits between runs; a broken config keeps the last good one.
    fn reload(&mut self) {
        match spec::load(&self.config) {
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

    fn set_phase(&self, phase: &str) {
        if let Some(pane) = &self.pane {
            let _ = self.runtime.set_phase(pane, phase);
        }
    }

    /// Choose resume or fresh (fresh when the `.fresh` marker asks, the one way that intent
    /// travels), start the CLI in the foreground, and wait for it.
    fn run_once(&mut self) -> Run {
        let saved = record::load(&self.dir);
        let fresh_marker = self.dir.has_marker(state::FRESH);
        let recorded = record::recorded_session(&self.dir);
        let resume = recorded
            .as_ref()
            .filter(|s| record::resumable(s, &saved, &self.agent.workdir))
            .filter(|_| !fresh_marker)
            // A session that never got a prompt was never written: its CLI cannot resume it.
            .filter(|s| {
                let has_turn = record::session_has_turn(&self.dir, &s.id);
                if !has_turn {
                    let _ = self.dir.record_op(
                        Op::ResumeSkipped,
                        json!({"session_id": s.id, "why": "its transcript has no turn"}),
                    );
                }
                has_turn
            })
            .and_then(|s| resume_argv(&self.agent, &s.id).map(|argv| (s.id.clone(), argv)));
        let (mode, session_id, argv) = match resume {
            Some((id, argv)) => (Start::Resume, Some(id), argv),
            None => (Start::Fresh, None, base_argv(&self.agent)),
        };
        if mode == Start::Fresh {
            if fresh_marker {
                // Consumed when honoured, so it forces exactly one clean slate.
                let _ = self.dir.clear_marker(state::FRESH);
                let _ = self.dir.record_op(Op::FreshMarkerHonoured, json!({}));
            }
            // A session abandoned for a fresh one is never resumed later, whoever starts next.
            if let Some(old) = &recorded {
                let _ = record::clear_session(&self.dir, &old.id);
            }
        }
        let _ = self.dir.clear_marker(state::CLEAN_EXIT);
        // The banner marks where this session's output begins (`triage::this_session`).
        let banner = crate::clinic::triage::start_banner(&self.agent.name);
        let banner = banner.trim_start_matches(SAY).trim_start();
        match &session_id {
            Some(id) => say(&format!("{banner}, resuming session {id}")),
            None => say(&format!("{banner} (fresh session)")),
        }

        self.trust_hooks();
        let mut probe = LifeProbe::new(&self.dir, self.agent.cli, &self.runtime, &self.pane);
        let started = Instant::now();
        let mut cmd = match self.command(&argv) {
            Ok(cmd) => cmd,
            Err(e) => return self.spawn_failed(argv, mode, session_id, &e.to_string(), 127),
        };
        term::foreground(&mut cmd, self.terminal.is_some());
        // Where this run's ops begin: its session-start hook may well come before it shows life.
        let ops_at_start = ops_len(&self.dir);
        // A signal left for an earlier run: what became of that turn was decided at its exit.
        let _ = self.dir.clear_marker(state::TURN_FAILED);
        // Taken before the spawn: what the CLI writes (its first transcript record may come
        // before `agent_start` is recorded) is this session's from here on.
        let spawned = state::now_rfc3339();
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let msg = format!("cannot start `{}`: {e}", argv[0]);
                // What a shell reports: 126 found but not executable, 127 not found.
                let code = match e.kind() {
                    std::io::ErrorKind::PermissionDenied => 126,
                    _ => 127,
                };
                return self.spawn_failed(argv, mode, session_id, &msg, code);
            }
        };
        let pid = child.id();
        super::strays::record_agent(&self.dir, pid);
        term::set_child(Some(pid));
        if let Some(t) = &self.terminal {
            t.give_to(pid);
        }
        // Set only now that the child exists: a reconciler must never see `running` without it.
        self.set_phase("running");
        let _ = self.dir.record_op(
            Op::AgentStart,
            json!({"argv": argv, "pid": pid, "mode": mode.as_str(), "session_id": session_id,
                   "spawned": spawned}),
        );

        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let deadline = started + self.agent.restart.life_deadline;
        let mut showed_life = false;
        let mut stop_sent: Option<Instant> = None;
        let mut treating: Option<std::thread::JoinHandle<()>> = None;
        let mut next_reap = Instant::now() + ORPHAN_REAP_EVERY;
        let status = loop {
            // Once alive, a tick costs one stat (the turn-failed marker): often enough that a
            // failed turn waits a quarter of a second for its decision, not a second.
            let tick = if showed_life && stop_sent.is_none() {
                Duration::from_millis(250)
            } else {
                Duration::from_millis(100)
            };
            match rx.recv_timeout(tick) {
                Ok(status) => break status.ok(),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            }
            if !showed_life && probe.shown() {
                showed_life = true;
                let _ = self.dir.record_op(
                    Op::AgentAlive,
                    json!({"pid": pid, "after_ms": started.elapsed().as_millis() as u64}),
                );
                self.startup_context_without_hooks(ops_at_start);
                self.continue_after_interruption(ops_at_start);
            }
            if stop_sent.is_none()
                && self.dir.has_marker(state::TURN_FAILED)
                && treating.as_ref().is_none_or(|t| t.is_finished())
            {
                let _ = self.dir.clear_marker(state::TURN_FAILED);
                treating = Some(self.treat_failed_turn());
            }
            if !showed_life && stop_sent.is_none() && Instant::now() >= deadline {
                say(&format!(
                    "`{}` showed no life within {}: replacing it",
                    self.agent.name,
                    spec::duration::format(self.agent.restart.life_deadline)
                ));
                term::signal_group(pid, Signal::SIGTERM);
                stop_sent = Some(Instant::now());
            }
            if term::stop_signal().is_some() && stop_sent.is_none() {
                // The handler already passed the signal on; escalate if it is ignored.
                stop_sent = Some(Instant::now());
            }
            if stop_sent.is_some_and(|t| t.elapsed() >= STOP_GRACE) {
                term::signal_group(pid, Signal::SIGKILL);
            }
            if Instant::now() >= next_reap {
                next_reap = Instant::now() + ORPHAN_REAP_EVERY;
                super::strays::reap_ended_orphans(pid);
            }
        };
        term::set_child(None);
        // Whatever the agent left behind in its process group (tool processes, a hook still
        // writing) ends with it: orphans would fight the next run for the terminal, and a
        // late hook would look like the next run showing life.
        term::signal_group(pid, Signal::SIGTERM);
        // And so does everything else it started, in sessions of its own too: a tool that
        // outlived a killed CLI would otherwise finish beside its rerun in the next session.
        let stopped = super::strays::sweep(&self.dir, pid);
        if !stopped.is_empty() && term::stop_signal().is_none() {
            say(&format!(
                "stopped {} process(es) `{}` left behind",
                stopped.len(),
                self.agent.name
            ));
        }
        // While deciding, nothing runs here on purpose: say so before anything else. A wrapper
        // told to stop stays quiet: its pane may already belong to its replacement.
        if term::stop_signal().is_none() {
            self.set_phase("cooldown");
        }
        if let Some(t) = &self.terminal {
            t.take_back();
        }
        if !showed_life {
            // The last look reads the pane whatever the throttle says.
            probe.next_capture = Instant::now();
            showed_life = probe.shown();
        }
        let mut mode = mode;
        if mode == Start::Resume && showed_life {
            let now = record::recorded_session(&self.dir);
            let same_id = now.as_ref().map(|s| s.id.as_str()) == session_id.as_deref();
            let same_dir = now
                .as_ref()
                .and_then(|s| s.cwd.as_deref())
                .is_none_or(|cwd| record::same_dir(cwd, &self.agent.workdir));
            if !same_id || !same_dir {
                // It came back as another session: that is a fresh start, not a resume.
                mode = Start::Fresh;
                let _ = self.dir.record_op(
                    Op::ResumeMismatch,
                    json!({"resumed": session_id, "recorded": now.map(|s| s.id)}),
                );
                if let Some(id) = &session_id {
                    let _ = record::clear_session(&self.dir, id);
                }
            }
        }
        Run {
            argv,
            mode,
            session_id,
            status,
            runtime: started.elapsed(),
            showed_life,
        }
    }

    /// The turn-failed hook said the CLI's turn ended in an API error: the CLI waits at its
    /// prompt and nobody will type. The watchdog's own pass for this agent decides, now rather
    /// than at the daemon's next tick (or never, without one): the same Clinic and policy, and
    /// the pass's memory says the turn was handled, so no later pass handles it again. A full
    /// context stops this run for a fresh session with a handoff; 401/quota quarantine it.
    /// On a thread: the pass may notify people, and supervision goes on meanwhile.
    fn treat_failed_turn(&self) -> std::thread::JoinHandle<()> {
        let (spec, runtime) = (self.spec.clone(), self.runtime.clone());
        let (name, dir) = (self.agent.name.clone(), self.dir.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            loop {
                let report = crate::watchdog::Watchdog::new(&spec, &*runtime)
                    .failed_turn_of(&name)
                    .pass();
                // Another pass (the daemon's) holds the lock: it may be handling this very
                // turn; if not, the next try does.
                if report.skipped.is_some() && started.elapsed() < TREAT_PATIENCE {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                let a = report.agents.first();
                let _ = dir.record_op(
                    Op::FailedTurnChecked,
                    json!({
                        "by": "wrapper",
                        "after_ms": started.elapsed().as_millis() as u64,
                        "verdict": a.map(|a| a.verdict),
                        "action_taken": a.and_then(|a| a.action_taken.clone()),
                        "skipped": a.and_then(|a| a.skipped.clone()).or(report.skipped.clone()),
                    }),
                );
                return;
            }
        })
    }

    /// Codex and Gemini CLI run the hooks in a workdir only once they trust it (and Codex each
    /// hook too); otherwise they stop at a dialog. Recorded before every start, so a reset CLI
    /// config or a changed hook command is trusted again.
    fn trust_hooks(&self) {
        let lock = self.fleet.root.join(".hooks-trust.lock");
        match crate::hooks::trust::ensure(&self.agent, &lock) {
            Ok(None) => {}
            Ok(Some(t)) => {
                say(&format!(
                    "{} now trusts `{}` and phoenix's hooks for `{}` ({} entries)",
                    t.file.display(),
                    self.agent.workdir.display(),
                    self.agent.name,
                    t.entries.len()
                ));
                let _ = self.dir.record_op(
                    Op::HooksTrusted,
                    json!({"file": t.file, "entries": t.entries}),
                );
            }
            Err(e) => {
                say(&format!("phoenix's hooks may not run: {e}"));
                let _ = self
                    .dir
                    .record_op(Op::HooksTrustFailed, json!({"error": e}));
            }
        }
    }

    fn spawn_failed(
        &self,
        argv: Vec<String>,
        mode: Start,
        session_id: Option<String>,
        error: &str,
        code: i32,
    ) -> Run {
        say(error);
        let _ = self
            .dir
            .record_op(Op::SpawnFailed, json!({"argv": argv, "error": error}));
        self.set_phase("cooldown");
        Run {
            argv,
            mode,
            session_id,
            status: Some(ExitStatus::from_raw(code << 8)),
            runtime: Duration::ZERO,
            showed_life: false,
        }
    }

    fn command(&self, argv: &[String]) -> anyhow::Result<Command> {
        let (program, args) = argv
            .split_first()
            .with_context(|| format!("agent `{}` has an empty command", self.agent.name))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.agent.workdir)
            .envs(&self.agent.env)
            .env("PHOENIX_AGENT", &self.agent.name)
            .env("PHOENIX_CONFIG", &self.spec.file)
            .env("PHOENIX_STATE_DIR", &self.dir.path);
        Ok(cmd)
    }

    /// The exit is an incident: build it with its facts, let the recovery pipeline decide
    /// (the policy, and the Clinic for a crash it can name), keep the evidence, record the one
    /// reason, and let the executor carry the answer out.
    fn after_exit(&mut self, run: &Run, requested: Option<recovery::StopRequest>) -> Recovery {
        let saved = record::load(&self.dir);
        let facts = Facts {
            recent_crashes: saved.recent_crash_times(),
            ..Facts::new(AgentInfo::from_spec(&self.spec, &self.agent))
        };
        let (code, signal) = status_parts(run.status);
        // The session a restart would resume: the resumed one, else the one this run recorded
        // if it got as far as a turn. Without one, a restart is no resume.
        let session_id = run.session_id.clone().or_else(|| {
            record::recorded_session(&self.dir)
                .map(|s| s.id)
                .filter(|id| record::session_has_turn(&self.dir, id))
        });
        let exit = ExitFacts {
            code,
            signal,
            runtime_ms: run.runtime.as_millis() as u64,
            mode: run.mode,
            session_id: session_id.clone(),
            showed_life: run.showed_life,
            fresh_requested: self.dir.has_marker(state::FRESH),
            requested,
            now: jiff::Timestamp::now().as_second(),
        };
        let incident = Incident::Exit(exit.clone());
        // The evidence of a crash, before anything else: only what this session printed (the
        // scrollback above its start is another's).
        let pane_tail = incident
            .is_crash()
            .then(|| {
                self.pane
                    .as_ref()
                    .and_then(|p| self.runtime.capture(p, EVIDENCE_LINES).ok())
            })
            .flatten()
            .map(|t| {
                crate::clinic::triage::this_session(&t, &self.agent.name)
                    .trim_end()
                    .to_string()
            });
        // Lua is loaded here, after an exit, never on a hook's path; a new state each time
        // picks up edited policies. Stops requested on purpose need no policy.
        let policies = exit
            .requested
            .is_none()
            .then(|| Policies::for_spec(&self.spec));
        let templates = Templates::for_spec(&self.spec);
        let decision = recovery::decide(&incident, &facts, policies.as_ref(), |shown| {
            let clinic = Clinic {
                policies: policies.as_ref()?,
                templates: &templates,
                settings: &self.spec.clinic,
                fleet: self.fleet.clone(),
                spent: saved.recoveries.clone(),
            };
            clinic.after_crash(&TriageInput {
                agent: AgentInfo::from_spec(&self.spec, &self.agent),
                dir: &self.dir,
                exit: shown.cloned(),
                transcript: None,
                output: pane_tail.as_deref().map(without_our_lines),
                session: crate::clinic::triage::Session::Latest,
            })
        });

        if decision.counts_as_crash {
            let crash = CrashRecord {
                ts: state::now_rfc3339(),
                agent: self.agent.name.clone(),
                reason: decision.reason,
                code,
                signal,
                runtime_ms: exit.runtime_ms,
                mode: run.mode,
                session_id: run.session_id.clone(),
                argv: run.argv.clone(),
                decision: decision.explain.clone(),
                pane_tail: pane_tail.clone(),
            };
            let entry = CrashEntry {
                ts: exit.now,
                reason: decision.reason,
                code,
                signal,
                mode: run.mode,
            };
            let window = self.agent.restart.crash_window.as_secs() as i64;
            recovery::execute::keep_evidence(&self.dir, &crash, entry, window);
        }
        // Clear, don't compact: what this session knew is saved before the next one starts.
        // A clean exit was a person's choice; anything else gets a handoff.
        if decision.reason != EndReason::CleanExit {
            let trigger = if decision.context_cleared || decision.reason == EndReason::PlannedCycle
            {
                crate::continuity::Trigger::ContextLimit
            } else if decision.counts_as_crash {
                crate::continuity::Trigger::Crash
            } else {
                crate::continuity::Trigger::AutoRestart
            };
            if let Err(e) = crate::continuity::auto_handoff(&self.spec, &self.agent, trigger, None)
            {
                let _ = self.dir.record_op(Op::HandoffFailed, json!({"error": e}));
            }
        }
        // The sessions a fresh start leaves behind: the one this run resumed and the one
        // its hooks recorded last.
        let sessions: Vec<String> = run
            .session_id
            .iter()
            .cloned()
            .chain(record::recorded_session(&self.dir).map(|s| s.id))
            .collect();
        for problem in recovery::execute::after_exit(
            &self.fleet,
            &self.dir,
            &self.agent,
            &decision,
            (code, signal),
            &sessions,
        ) {
            say(&problem);
        }
        self.record_end(
            run,
            decision.reason,
            json!({
                "action": decision.start, "delay_ms": decision.delay_ms(),
                "explain": decision.explain, "counts_as_crash": decision.counts_as_crash,
                "decided_by": decision.decided_by,
            }),
        );
        let delay = decision.delay;
        let again = if session_id.is_some() {
            "resuming"
        } else {
            "restarting"
        };
        let next = match decision.start {
            Some(Start::SafeMode) | None => "safe mode".to_string(),
            Some(Start::Resume) if delay.is_zero() => format!("{again} now"),
            Some(Start::Fresh) if delay.is_zero() => "starting fresh now".to_string(),
            Some(Start::Resume) => format!("{again} in {}", spec::duration::format(delay)),
            Some(Start::Fresh) => format!("starting fresh in {}", spec::duration::format(delay)),
        };
        say(&format!(
            "`{}` ended ({}): {} → {next}",
            self.agent.name,
            decision.reason.as_str(),
            decision.explain
        ));
        crate::state::daemon::poke(&self.fleet, &self.agent.name);
        decision
    }

    /// A CLI without a session-start hook gets its startup context (latest handoff, ledger,
    /// open loops) pasted into its pane once it is up and quiet. A custom CLI that does call
    /// the hook (its session_start op appears) is left to the hook. On a thread of its own:
    /// the wrapper keeps supervising meanwhile. `since`: the length of ops.jsonl when the run
    /// started.
    fn startup_context_without_hooks(&self, since: u64) {
        let Some(pane) = self.pane.clone() else {
            return;
        };
        if self.agent.cli.adapter().has_session_start_hook() {
            return;
        }
        let (spec, dir) = (self.spec.clone(), self.dir.clone());
        std::thread::spawn(move || {
            let hooked = || {
                state::op::since(&dir.file(state::OPS_LOG), since)
                    .iter()
                    .any(|o| matches!(o.op, Op::SessionStart(_)))
            };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if hooked() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let Some(text) = crate::continuity::startup_text(&spec, &dir) else {
                return;
            };
            let runtime = world::runtime_for(&spec);
            match crate::continuity::inject::deliver(
                &*runtime,
                &pane,
                &dir,
                &text,
                &crate::continuity::inject::Options::default(),
            ) {
                Ok(r) => {
                    let _ = dir.record_op(
                        Op::StartupContextInjected,
                        json!({"chars": text.len(), "confirmed_by": r.confirmed_by}),
                    );
                }
                Err(e) => {
                    let _ = dir.record_op(Op::StartupContextFailed, json!({"error": e}));
                }
            }
        });
    }

    /// A hooked CLI started again after an interruption has its context (from the
    /// session-start hook) but nobody to type the next prompt: phoenix types the agent's
    /// `continue_prompt` once the CLI waits for input, and confirms it was submitted. On a
    /// thread of its own: the wrapper keeps supervising meanwhile. `since`: the length of
    /// ops.jsonl when the run started.
    fn continue_after_interruption(&mut self, since: u64) {
        let Some(why) = self.interrupted_by.take() else {
            return;
        };
        let prompt = self.agent.restart.continue_prompt.clone();
        let (Some(pane), false, false) = (
            self.pane.clone(),
            prompt.is_empty(),
            !self.agent.cli.adapter().has_session_start_hook(),
        ) else {
            return;
        };
        let (spec, dir) = (self.spec.clone(), self.dir.clone());
        // A CLI that runs its SessionStart hook only with the first prompt (Codex): waiting for
        // it would only hold the prompt that triggers it.
        let wait = if self.agent.cli.adapter().session_start_at_launch() {
            Duration::from_secs(10)
        } else {
            Duration::ZERO
        };
        std::thread::spawn(move || {
            // After the session-start hook, so the context is in before the prompt.
            let deadline = Instant::now() + wait;
            let hooked = || {
                state::op::since(&dir.file(state::OPS_LOG), since)
                    .iter()
                    .any(|o| matches!(o.op, Op::SessionStart(_)))
            };
            while Instant::now() < deadline && !hooked() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let runtime = world::runtime_for(&spec);
            // The hook fired: the CLI has loaded its session and draws its input box next, so
            // a short still screen says it waits. Without the hook nothing says the CLI got
            // that far, and a screen still for longer is the only sign.
            let quiet = if hooked() { 250 } else { 1500 };
            // Every hooked CLI runs its prompt hook on a submitted prompt: only that confirms
            // it, and an Enter the CLI swallowed while it settled is pressed again soon.
            let opts = crate::continuity::inject::Options {
                quiet: Duration::from_millis(quiet),
                confirm_timeout: Duration::from_secs(1),
                attempts: 6,
                hook_only: true,
                ..Default::default()
            };
            match crate::continuity::inject::deliver(&*runtime, &pane, &dir, &prompt, &opts) {
                Ok(r) => {
                    let _ = dir.record_op(
                        Op::ContinuePromptSent,
                        json!({"after": why, "confirmed_by": r.confirmed_by, "attempts": r.attempts}),
                    );
                }
                Err(e) => {
                    let _ =
                        dir.record_op(Op::ContinuePromptFailed, json!({"after": why, "error": e}));
                }
            }
        });
    }

    /// The one `agent_exit` line for this run: the supervisor's single reason for the end of
    /// the session (the CLI's own SessionEnd hook may log its view separately).
    fn record_end(&self, run: &Run, reason: EndReason, extra: serde_json::Value) {
        let (code, signal) = status_parts(run.status);
        let mut fields = json!({
            "reason": reason, "code": code, "signal": signal,
            "runtime_ms": run.runtime.as_millis() as u64, "mode": run.mode,
            "session_id": run.session_id, "showed_life": run.showed_life,
        });
        if let (Some(f), serde_json::Value::Object(x)) = (fields.as_object_mut(), extra) {
            f.extend(x);
        }
        let _ = self.dir.record_op(Op::AgentExit, fields);
    }

    /// Wait before the next start; false if the wrapper was told to stop meanwhile.
    fn cooldown(&self, delay: Duration) -> bool {
        let until = Instant::now() + delay;
        while Instant::now() < until {
            if term::stop_signal().is_some() {
                return false;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        term::stop_signal().is_none()
    }

    /// A plain read loop: explains the situation and accepts `restart`, `fresh`, `quit`. It
    /// never runs a shell or any other program.
    fn safe_mode(&self, why: &str) -> anyhow::Result<SafeOutcome> {
        self.set_phase("safe");
        let _ = self.dir.record_op(Op::SafeMode, json!({"why": why}));
        crate::state::daemon::poke(&self.fleet, &self.agent.name);
        let name = &self.agent.name;
        println!();
        say(&format!("agent `{name}` is in safe mode: {why}"));
        say("nothing runs in this pane until you type one of these words and press Enter:");
        say("  restart   start the agent again, resuming its session");
        say("  fresh     start the agent with a fresh session");
        say("  quit      leave it stopped and close this pane");
        say(&format!(
            "or from anywhere: phoenix restart {name} [--fresh]"
        ));
        let mut input = LineReader::default();
        loop {
            prompt();
            let word = loop {
                if let Some(sig) = term::stop_signal() {
                    return Ok(SafeOutcome::Stopped(128 + sig));
                }
                match input.next(Duration::from_millis(200)) {
                    Some(line) => break line,
                    None => continue,
                }
            };
            match word.trim() {
                "" => {}
                w @ ("restart" | "fresh") => {
                    let _ = crate::restart::reset_counts(&self.dir);
                    let _ = self.dir.clear_marker(state::CLEAN_EXIT);
                    let fresh = w == "fresh";
                    if fresh && let Err(e) = recovery::execute::intend_fresh(&self.dir) {
                        say(&format!("cannot ask for a fresh start: {e}"));
                    }
                    let _ = self.dir.record_op(
                        Op::OperatorRestart,
                        json!({"from": "safe_mode", "fresh": fresh}),
                    );
                    return Ok(SafeOutcome::Start);
                }
                "quit" => {
                    let _ = self.dir.set_marker(state::CLEAN_EXIT);
                    let _ = self
                        .dir
                        .record_op(Op::OperatorStop, json!({"from": "safe_mode"}));
                    say(&format!(
                        "`{name}` stays stopped; `phoenix restart {name}` brings it back"
                    ));
                    return Ok(SafeOutcome::Quit);
                }
                other => say(&format!(
                    "unknown word `{}`: type restart, fresh or quit",
                    other.chars().take(40).collect::<String>()
                )),
            }
        }
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

fn prompt() {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{SAY} safe mode> ");
    let _ = out.flush();
}

/// Lines from stdin without a reader thread: a thread blocked in `read` would keep stealing
/// the agent's input after a restart. Polls fd 0 with a timeout instead.
#[derive(Default)]
struct LineReader {
    buf: Vec<u8>,
    closed: bool,
}

impl LineReader {
    fn next(&mut self, timeout: Duration) -> Option<String> {
        if let Some(line) = self.take_line() {
            return Some(line);
        }
        if self.closed {
            std::thread::sleep(timeout);
            return None;
        }
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut fds, 1, ms) };
        if ready > 0 {
            let mut chunk = [0u8; 1024];
            match std::io::stdin().lock().read(&mut chunk) {
                Ok(0) | Err(_) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        self.take_line()
    }

    fn take_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(String::from_utf8_lossy(&line).trim().to_string())
    }
}

fn status_parts(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    }
}

/// The agent's base argv, rebuilt from its command every time, as its CLI wants it
/// (`AgentCli::base_argv`). A leading `phoenix` means this very binary, so bundled examples
/// work without phoenix on PATH.
pub fn base_argv(agent: &AgentSpec) -> Vec<String> {
    agent.cli.adapter().base_argv(with_exe(agent.argv.clone()))
}

fn with_exe(mut argv: Vec<String>) -> Vec<String> {
    if argv.first().map(String::as_str) == Some("phoenix")
        && let Ok(exe) = std::env::current_exe()
    {
        argv[0] = exe.to_string_lossy().into_owned();
    }
    argv
}

/// The CLI's resume form for session `id`, built from the base command (never from the
/// previous argv, so flags cannot pile up). `None` when the CLI has no known resume form.
pub fn resume_argv(agent: &AgentSpec, id: &str) -> Option<Vec<String>> {
    if let Some(template) = &agent.resume_argv {
        // Substituted per argument after splitting: an id can never become two arguments.
        let argv = template
            .iter()
            .map(|a| a.replace("{session_id}", id))
            .collect();
        return Some(with_exe(argv));
    }
    agent.cli.adapter().resume_argv(base_argv(agent), id)
}

/// Watches for the first sign of life of a started agent: its hooks write `state.json`,
/// `tool_use.jsonl`, `session_id` or hook lines in `ops.jsonl`; a CLI without a hook at launch
/// (`AgentCli::life_shows_in_pane`) may instead just print in its pane.
struct LifeProbe {
    files: Vec<(PathBuf, Option<(u64, SystemTime)>)>,
    ops: PathBuf,
    ops_len: u64,
    pane: Option<(SharedRuntime, String, String)>,
    /// When the pane may be read next, and the wait after that: a tmux call per agent every
    /// 100 ms would swamp the server of a large fleet of quiet agents.
    next_capture: Instant,
    capture_every: Duration,
    /// No hook is guaranteed and no pane can be read: being alive has to do.
    blind: bool,
}

impl LifeProbe {
    fn new(dir: &AgentDir, cli: Cli, runtime: &SharedRuntime, pane: &Option<String>) -> LifeProbe {
        let stamp = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
        };
        let files = ["state.json", "tool_use.jsonl", record::SESSION_ID]
            .iter()
            .map(|f| {
                let p = dir.file(f);
                let s = stamp(&p);
                (p, s)
            })
            .collect();
        let ops = dir.file(state::OPS_LOG);
        let ops_len = std::fs::metadata(&ops).map(|m| m.len()).unwrap_or(0);
        // A CLI whose hooks may not fire at launch: a change in the pane counts too.
        let watch_pane = cli.adapter().life_shows_in_pane();
        let pane = pane.as_ref().filter(|_| watch_pane).and_then(|p| {
            let snapshot = runtime.capture(p, 200).ok()?;
            Some((runtime.clone(), p.clone(), without_our_lines(&snapshot)))
        });
        LifeProbe {
            files,
            ops,
            ops_len,
            blind: watch_pane && pane.is_none(),
            pane,
            next_capture: Instant::now() + Duration::from_millis(200),
            capture_every: Duration::from_millis(250),
        }
    }

    fn shown(&mut self) -> bool {
        if self.blind {
            return true;
        }
        for (path, before) in &self.files {
            let now = std::fs::metadata(path)
                .ok()
                .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
            if now.is_some() && now != *before {
                return true;
            }
        }
        if self.hook_in_ops() {
            return true;
        }
        if let Some((runtime, pane, snapshot)) = &self.pane
            && Instant::now() >= self.next_capture
        {
            self.next_capture = Instant::now() + self.capture_every;
            self.capture_every = (self.capture_every * 2).min(Duration::from_secs(2));
            if let Ok(now) = runtime.capture(pane, 200)
                && without_our_lines(&now) != *snapshot
            {
                return true;
            }
        }
        false
    }

    /// Has a hook written an op since the last look: the CLI runs, and runs its hooks.
    fn hook_in_ops(&mut self) -> bool {
        let text = state::read_since(&self.ops, self.ops_len);
        self.ops_len += text.len() as u64;
        state::op::parse(&text).iter().any(|o| o.op.is_from_hook())
    }
}

fn without_our_lines(screen: &str) -> String {
    screen
        .lines()
        // Also after what a CLI killed mid-screen left on the line (`❯ [phoenix] … ended`):
        // the wrapper's own words are never the agent's error, nor a sign of its life.
        .filter(|l| !crate::clinic::triage::said_by_phoenix(l, SAY))
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{LoadOptions, parse};

    fn agent(body: &str) -> AgentSpec {
        let spec = parse(
            &format!("[[agent]]\nname = \"a\"\n{body}"),
            Path::new("/fleet/phoenix.toml"),
            LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        spec.agents[0].clone()
    }

    #[test]
    fn resume_forms_follow_each_cli() {
        let claude = agent("cli = \"claude\"\ncommand = \"claude --model opus\"\n");
        assert_eq!(
            resume_argv(&claude, "s1").unwrap(),
            ["claude", "--model", "opus", "--resume", "s1"]
        );
        let codex = agent("cli = \"codex\"\ncommand = \"codex -m o3\"\n");
        assert_eq!(
            resume_argv(&codex, "s1").unwrap(),
            ["codex", "resume", "s1", "--no-daemon", "-m", "o3"]
        );
        let gemini = agent("cli = \"gemini\"\n");
        assert_eq!(
            resume_argv(&gemini, "s1").unwrap(),
            ["gemini", "--resume", "s1"]
        );
        let custom = agent("command = \"my-cli\"\n");
        assert_eq!(resume_argv(&custom, "s1"), None);
    }

    #[test]
    fn codex_runs_its_session_in_the_supervised_process() {
        let codex = agent("cli = \"codex\"\ncommand = \"/opt/bin/codex --search\"\n");
        assert_eq!(
            base_argv(&codex),
            ["/opt/bin/codex", "--no-daemon", "--search"]
        );
        let chosen = agent("cli = \"codex\"\ncommand = \"codex --no-daemon\"\n");
        assert_eq!(base_argv(&chosen), ["codex", "--no-daemon"]);
        let remote = agent("cli = \"codex\"\ncommand = \"codex --remote ws://h:1\"\n");
        assert_eq!(base_argv(&remote), ["codex", "--remote", "ws://h:1"]);
        // Some other program that starts Codex its own way is left as written.
        let wrapped = agent("cli = \"codex\"\ncommand = \"npx @openai/codex\"\n");
        assert_eq!(base_argv(&wrapped), ["npx", "@openai/codex"]);
        let claude = agent("cli = \"claude\"\ncommand = \"codex\"\n");
        assert_eq!(base_argv(&claude), ["codex"]);
    }

    #[test]
    fn resume_command_template_substitutes_one_argument() {
        let a =
            agent("command = \"my-cli\"\nresume_command = \"my-cli --resume {session_id} --x\"\n");
        assert_eq!(
            resume_argv(&a, "a b;c").unwrap(),
            ["my-cli", "--resume", "a b;c", "--x"]
        );
    }

    #[test]
    fn base_command_never_accumulates_flags() {
        let a = agent("cli = \"claude\"\ncommand = \"claude\"\n");
        let _ = resume_argv(&a, "s1");
        let _ = resume_argv(&a, "s2");
        assert_eq!(base_argv(&a), ["claude"]);
        assert_eq!(resume_argv(&a, "s3").unwrap(), ["claude", "--resume", "s3"]);
    }

    #[test]
    fn pane_comparison_ignores_the_wrappers_own_lines() {
        assert_eq!(
            without_our_lines("$ x\n[phoenix] starting\n\n"),
            without_our_lines("$ x\n")
        );
        assert_eq!(
            without_our_lines("$ x\n❯ [phoenix] `a` ended (crash): clinic: transient_error\n"),
            "$ x"
        );
        assert_eq!(
            without_our_lines("echo '[phoenix] hi'\n"),
            "echo '[phoenix] hi'"
        );
    }
}
