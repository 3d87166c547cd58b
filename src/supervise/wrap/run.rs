//! One run of the agent: choose resume or fresh, start the CLI in the terminal's foreground,
//! watch it for life, a failed turn and stop signals, and clean up after it.

use super::prepared::PreparedStart;
use super::*;

/// How soon after a delivery attempt the wrapper looks at the inbox again.
const MESSAGE_RETRY: Duration = Duration::from_secs(2);
/// How long an idle wrapper sleeps when its doorbell does not ring: a last look, in case a
/// ringer could not reach it (an older phoenix's hook, a doorbell replaced meanwhile). Under
/// the issue's bound of two wakeups in 20 s, and the files decide, not the ring.
const IDLE_LOOK: Duration = Duration::from_secs(30);

/// Why the wrapper's sleep ended.
enum Wake {
    /// The agent exited, with this status (`None`: it could not be read).
    Exited(Option<ExitStatus>),
    /// Time to look at its files again.
    Look,
}

/// How the next run starts, as read from the state dir, before anything is done about it.
pub(super) struct StartChoice {
    mode: Start,
    session_id: Option<String>,
    argv: Vec<String>,
    /// The `.fresh` marker asked for it (consumed by the start).
    fresh_marker: bool,
    /// The recorded session, which a fresh start abandons.
    recorded: Option<String>,
    /// The recorded session not resumed for want of a turn, and why.
    no_turn: Option<(String, String)>,
}

#[cfg(test)]
impl StartChoice {
    pub(super) fn fresh(argv: Vec<String>) -> StartChoice {
        StartChoice {
            mode: Start::Fresh,
            session_id: None,
            argv,
            fresh_marker: false,
            recorded: None,
            no_turn: None,
        }
    }

    pub(super) fn mode(&self) -> Start {
        self.mode
    }
}

/// A started agent process, and when it was spawned (RFC 3339).
struct Spawned {
    child: std::process::Child,
    spawned: String,
}

impl Wrapper {
    /// Choose resume or fresh (fresh when the `.fresh` marker asks, the one way that intent
    /// travels), start the CLI in the foreground, and wait for it.
    pub(super) fn run_once(&mut self, mut prepared: Option<PreparedStart>) -> Run {
        // The last run's hooks may still be writing its session's end: start from what they
        // leave, not from half of it.
        crate::supervise::strays::wait_for_late_writers();
        let (mode, session_id, argv) = self.choose_start(prepared.as_mut());
        self.trust_hooks();
        let mut probe = LifeProbe::new(&self.dir, &self.agent, &self.runtime, &self.pane);
        let started = Instant::now();
        // Where this run's ops begin: its session-start hook may well come before it shows life.
        let ops_at_start = ops_len(&self.dir);
        let child = match self.spawn(&argv) {
            Ok(child) => child,
            Err((error, code)) => return self.spawn_failed(argv, mode, session_id, &error, code),
        };
        let pid = child.child.id();
        // The cooldown's watch, closed now that the agent runs (`PreparedStart::since`).
        drop(prepared);
        let _ = self.dir.record_op(
            Op::AgentStart,
            json!({"argv": argv, "pid": pid, "mode": mode.as_str(), "session_id": session_id,
                   "spawned": child.spawned}),
        );
        give_back_freed_memory();
        let (status, mut showed_life, asked) =
            self.watch(child.child, started, ops_at_start, &mut probe);
        let ended = Instant::now();
        let status = match &self.agent.sandbox {
            Some(_) => status.map(super::sandbox::as_the_clis),
            None => status,
        };
        // The one read of the pane after this exit: the last look for life, the crash's
        // evidence, and what the next start's life check compares with. Read while what
        // the agent left is stopped: the screen is the exit's, and neither waits for the other.
        let capture = self.pane.clone().map(|pane| {
            let runtime = self.runtime.clone();
            std::thread::spawn(move || runtime.capture(&pane, probe::SCREEN_LINES).ok())
        });
        self.clean_up_after(pid);
        let screen = capture.and_then(|c| c.join().ok().flatten());
        // Read: now what the CLI left set in the terminal goes (its last frame included), so
        // that what the pane shows next is the wrapper's and the next start's own.
        reset_terminal();
        if !showed_life {
            showed_life = probe.shown_at_exit(screen.as_deref());
        }
        // A session its hooks only ended never came up, whatever was taken for life on the
        // way (the end hook writes state.json before its op).
        if showed_life && probe.only_ended(ops_at_start) {
            showed_life = false;
        }
        let resume_refused = mode == Start::Resume
            && session_id.as_deref().is_some_and(|id| {
                self.resume_refused(id, ops_at_start, status, screen.as_deref(), showed_life)
            });
        let mode = self.check_resumed(mode, session_id.as_deref(), showed_life);
        // It ended at its folder-trust question: what it asked (its last screen shows it, or
        // the wrapper saw it asking). Only before life: a session that showed life was past it.
        let trust_question = (!showed_life)
            .then(|| {
                screen
                    .as_deref()
                    .and_then(|s| self.trust_question_in(s))
                    .or(asked)
            })
            .flatten();
        Run {
            argv,
            mode,
            session_id,
            status,
            runtime: started.elapsed(),
            showed_life,
            resume_refused,
            screen,
            trust_question,
            ended,
        }
    }

    /// What the CLI asks, when this session's part of `screen` shows its folder-trust dialog.
    fn trust_question_in(&self, screen: &str) -> Option<String> {
        let this_session = crate::clinic::triage::this_session(screen, &self.agent.name);
        self.agent
            .cli
            .adapter()
            .trust_question(this_session, &self.agent.workdir)
    }

    /// Resume the recorded session when it can be resumed and no fresh start is asked for;
    /// else start fresh, consuming the `.fresh` marker. Announces the start in the pane.
    /// `prepared` is the choice read during the cooldown, taken if nothing it read changed.
    fn choose_start(
        &self,
        prepared: Option<&mut PreparedStart>,
    ) -> (Start, Option<String>, Vec<String>) {
        let choice = prepared
            .and_then(PreparedStart::if_unchanged)
            .unwrap_or_else(|| self.read_start());
        self.begin_start(choice)
    }

    /// During the cooldown of a restart: the next start read now, to be taken at its end.
    pub(super) fn prepare_start(&mut self) {
        // Read after the last run's hooks are done with what they write.
        crate::supervise::strays::wait_for_late_writers();
        self.prepared = PreparedStart::read(&self.dir.path, || self.read_start());
    }

    /// What the next start is, from the state dir; nothing written yet (`begin_start` does).
    fn read_start(&self) -> StartChoice {
        let saved = record::load(&self.dir);
        let fresh_marker = self.dir.has_marker(state::FRESH);
        let recorded = record::recorded_session(&self.dir);
        let mut no_turn = None;
        let resume = recorded
            .as_ref()
            .filter(|s| record::resumable(s, &saved, &self.agent.workdir))
            .filter(|_| !fresh_marker)
            // A session that never got a prompt was never written: its CLI cannot resume it.
            .filter(|s| {
                let has_turn = record::session_has_turn(&self.dir, &s.id);
                if !has_turn {
                    no_turn = Some((s.id.clone(), record::no_turn_why(&self.dir, &s.id)));
                }
                has_turn
            })
            .and_then(|s| resume_argv(&self.agent, &s.id).map(|argv| (s.id.clone(), argv)));
        let (mode, session_id, argv) = match resume {
            Some((id, argv)) => (Start::Resume, Some(id), argv),
            None => (Start::Fresh, None, base_argv(&self.agent)),
        };
        StartChoice {
            mode,
            session_id,
            argv,
            fresh_marker,
            recorded: recorded.map(|s| s.id),
            no_turn,
        }
    }

    /// Act on the choice: what it skips and consumes is recorded, and the pane says it.
    fn begin_start(&self, choice: StartChoice) -> (Start, Option<String>, Vec<String>) {
        let StartChoice {
            mode,
            session_id,
            argv,
            fresh_marker,
            recorded,
            no_turn,
        } = choice;
        if let Some((id, why)) = no_turn {
            let _ = self
                .dir
                .record_op(Op::ResumeSkipped, json!({"session_id": id, "why": why}));
        }
        if mode == Start::Fresh {
            if fresh_marker {
                // Consumed when honoured, so it forces exactly one clean slate.
                let _ = self.dir.clear_marker(state::FRESH);
                let _ = self.dir.record_op(Op::FreshMarkerHonoured, json!({}));
            }
            // A session abandoned for a fresh one is never resumed later, whoever starts next.
            if let Some(old) = &recorded {
                let _ = record::clear_session(&self.dir, old);
            }
        }
        let _ = self.dir.clear_marker(state::CLEAN_EXIT);
        // Where this run's output begins in its kept log (`logs --previous`), before its
        // banner reaches the pane.
        if self.agent.tap && self.pane.is_some() {
            state::pane_log::mark_run(&self.dir, mode.as_str());
        }
        // The banner marks where this session's output begins (`triage::this_session`).
        let banner = crate::clinic::triage::start_banner(&self.agent.name);
        let banner = banner.trim_start_matches(SAY).trim_start();
        match &session_id {
            Some(id) => say(&format!("{banner}, resuming session {id}")),
            None => say(&format!("{banner} (fresh session)")),
        }
        (mode, session_id, argv)
    }

    /// Start the CLI as the terminal's foreground process group; on failure, what to say and
    /// the exit code a shell would report (126 found but not executable, 127 not found).
    fn spawn(&self, argv: &[String]) -> Result<Spawned, (String, i32)> {
        let mut cmd = self.command(argv).map_err(|e| (e.to_string(), 127))?;
        self.give_marker_key(&mut cmd);
        term::foreground(&mut cmd, self.terminal.is_some());
        // A signal left for an earlier run: what became of that turn was decided at its exit.
        let _ = self.dir.clear_marker(state::TURN_FAILED);
        // Taken before the spawn: what the CLI writes (its first transcript record may come
        // before `agent_start` is recorded) is this session's from here on.
        let spawned = state::now_rfc3339();
        // Its hooks take only what was left for a session started after this (`clinic`).
        cmd.env(crate::clinic::RUN_STARTED_ENV, &spawned);
        crate::supervise::strays::run_starting(&self.dir);
        let spawned_child = cmd.spawn();
        // Whoever restarted the agent (a person, the daemon, the watchdog) handed the start
        // to this wrapper: it is done, and the phase set next says what runs here.
        state::claim::end(&self.dir);
        let child = spawned_child.map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 127,
            };
            (format!("cannot start `{}`: {e}", argv[0]), code)
        })?;
        let pid = child.id();
        crate::supervise::strays::record_agent(&self.dir, pid);
        term::set_child(Some(pid));
        if let Some(t) = &self.terminal {
            t.give_to(pid);
        }
        // Set only now that the child exists: a reconciler must never see `running` without it.
        self.set_running();
        Ok(Spawned { child, spawned })
    }

    /// Wait for the agent to exit, meanwhile watching for its first sign of life (then giving
    /// it its startup context), a failed turn, its life deadline and stop signals. Returns its
    /// exit status, whether it showed life, and what its folder-trust dialog asked if it was
    /// seen asking.
    fn watch(
        &mut self,
        mut child: std::process::Child,
        started: Instant,
        ops_at_start: u64,
        probe: &mut LifeProbe,
    ) -> (Option<ExitStatus>, bool, Option<String>) {
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        let ringer = self.doorbell.as_ref().and_then(|b| b.ringer().ok());
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
            if let Some(ringer) = ringer {
                ringer.ring();
            }
        });
        let mut deadline = started + self.agent.restart.life_deadline;
        let mut showed_life = false;
        let mut stop_sent: Option<Instant> = None;
        let mut treating: Option<std::thread::JoinHandle<()>> = None;
        let mut notifying: Option<std::thread::JoinHandle<()>> = None;
        let mut next_reap = Instant::now() + ORPHAN_REAP_EVERY;
        let mut delivering: Option<std::thread::JoinHandle<()>> = None;
        let mut next_delivery = Instant::now();
        let mut asked: Option<String> = None;
        let status = loop {
            // Until it shows life, and while it is being stopped, the wrapper looks ten times a
            // second (its probe reads files and the pane; the grace runs out). While a message
            // waits for a turn boundary, or a failed turn, a wait or a delivery is being
            // handled on a thread, four times. Otherwise it sleeps until its doorbell rings:
            // a marker set, a message left, a signal, the agent's exit.
            let busy = [&treating, &notifying, &delivering]
                .iter()
                .any(|t| t.as_ref().is_some_and(|t| !t.is_finished()))
                || (showed_life && crate::state::inbox::has_pending(&self.dir));
            let tick = if !showed_life || stop_sent.is_some() {
                Duration::from_millis(100)
            } else if busy || self.doorbell.is_none() {
                Duration::from_millis(250)
            } else {
                IDLE_LOOK
            };
            match self.sleep(&rx, tick) {
                Wake::Exited(status) => break status,
                Wake::Look => {}
            }
            if !showed_life && probe.shown() {
                showed_life = true;
                let _ = self.dir.record_op(
                    Op::AgentAlive,
                    json!({"pid": pid, "after_ms": started.elapsed().as_millis() as u64}),
                );
                self.startup_context_without_hooks(ops_at_start, pid);
                self.continue_after_interruption(ops_at_start, pid);
            }
            if stop_sent.is_none()
                && self.dir.has_marker(state::TURN_FAILED)
                && treating.as_ref().is_none_or(|t| t.is_finished())
            {
                let _ = self.dir.clear_marker(state::TURN_FAILED);
                treating = Some(self.treat_failed_turn());
            }
            // Messages wait for a turn boundary; an empty inbox costs one stat a tick.
            if showed_life
                && stop_sent.is_none()
                && Instant::now() >= next_delivery
                && delivering.as_ref().is_none_or(|t| t.is_finished())
                && crate::state::inbox::has_pending(&self.dir)
                && self.at_turn_boundary()
            {
                delivering = self.deliver_messages(pid);
                next_delivery = Instant::now() + MESSAGE_RETRY;
            }
            if self.dir.has_marker(state::NEEDS_INPUT)
                && notifying.as_ref().is_none_or(|t| t.is_finished())
            {
                let _ = self.dir.clear_marker(state::NEEDS_INPUT);
                notifying = Some(self.notify_waiting());
            }
            if !showed_life
                && stop_sent.is_none()
                && Instant::now() >= deadline
                && let Some(question) = self.asks_for_trust(probe)
            {
                // Waiting for a person is not a failed start: replacing it would only show
                // the same dialog again, restart after restart.
                deadline = Instant::now() + self.agent.restart.life_deadline;
                asked = Some(question);
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
            if term::child_ended() || Instant::now() >= next_reap {
                next_reap = Instant::now() + ORPHAN_REAP_EVERY;
                crate::supervise::strays::reap_ended_orphans(pid);
            }
        };
        (status, showed_life, asked)
    }

    /// Sleep until the doorbell rings, `tick` passes or the agent exits (without a doorbell,
    /// until `tick` passes or the agent exits).
    fn sleep(
        &mut self,
        exited: &mpsc::Receiver<std::io::Result<ExitStatus>>,
        tick: Duration,
    ) -> Wake {
        let got = match &mut self.doorbell {
            // The thread that waits for the agent rings it once it has sent the status.
            Some(bell) => {
                bell.wait(Some(tick));
                exited
                    .try_recv()
                    .map_err(|e| e == mpsc::TryRecvError::Disconnected)
            }
            None => exited
                .recv_timeout(tick)
                .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(status) => Wake::Exited(status.ok()),
            // Its sender gone without a word: the wait for the agent ended unread.
            Err(true) => Wake::Exited(None),
            Err(false) => Wake::Look,
        }
    }

    /// After the agent's exit: stop what it left behind, say the wrapper is deciding, and take
    /// the terminal back.
    fn clean_up_after(&self, pid: u32) {
        term::set_child(None);
        // While deciding, nothing runs here on purpose: say so before anything else, before
        // the strays are stopped too (that can take seconds, in which a reconciler must not
        // take the pane without its CLI for one to restart). On a thread: the tmux call is
        // not waited for, and the next phase waits for it. A wrapper told to stop stays
        // quiet: its pane may already belong to its replacement.
        if term::stop_signal().is_none() {
            self.set_phase_meanwhile("cooldown");
        }
        // Before anything is signalled: what is left of a dying CLI may report its call done.
        let held = crate::supervise::strays::hold_interrupted_call(&self.dir);
        // Whatever the agent left behind in its process group (tool processes, a hook still
        // writing) ends with it: orphans would fight the next run for the terminal, and a
        // late hook would look like the next run showing life.
        term::signal_group(pid, Signal::SIGTERM);
        // And so does everything else it started, in sessions of its own too: a tool that
        // outlived a killed CLI would otherwise finish beside its rerun in the next session.
        let stopped = crate::supervise::strays::sweep(&self.dir, pid, held);
        if !stopped.is_empty() && term::stop_signal().is_none() {
            say(&format!(
                "stopped {} process(es) `{}` left behind",
                stopped.len(),
                self.agent.name
            ));
        }
        if let Some(t) = &self.terminal {
            t.take_back();
        }
    }

    /// Did the CLI refuse to resume session `id`? Only its own word counts, and only before
    /// the session's first turn: it exited on its own (no signal, not 0) with its refusal
    /// among the last lines this run printed, before any session-start hook of this run
    /// (once a session is up its screen shows the resumed conversation, the model's words);
    /// or the session's transcript is gone. A CLI whose words phoenix does not know (a custom
    /// one) refuses by exiting on its own before it showed any life. A resume killed before
    /// it showed life is no refusal: its conversation is resumed again.
    fn resume_refused(
        &self,
        id: &str,
        since: u64,
        status: Option<ExitStatus>,
        screen: Option<&str>,
        showed_life: bool,
    ) -> bool {
        let ops = state::op::since(&self.dir.file(state::OPS_LOG), since);
        let had_turn = ops.iter().any(|o| matches!(o.op, Op::Prompt(_)));
        if had_turn {
            return false;
        }
        if !record::session_has_turn(&self.dir, id) {
            return true;
        }
        let came_up = ops.iter().any(|o| matches!(o.op, Op::SessionStart(_)));
        let exited_itself = status.is_some_and(|s| s.signal().is_none() && s.code() != Some(0));
        let refusals = self.agent.cli.adapter().resume_refusals();
        if refusals.is_empty() {
            return exited_itself && !came_up && !showed_life;
        }
        let (Some(screen), false, true) = (screen, came_up, exited_itself) else {
            return false;
        };
        said_refusal(
            crate::clinic::triage::this_session(screen, &self.agent.name),
            refusals,
            id,
        )
    }

    /// A resumed session that came back as another one (another id, another directory) was a
    /// fresh start: recorded so, and the resumed id is not resumed again.
    fn check_resumed(&self, mode: Start, session_id: Option<&str>, showed_life: bool) -> Start {
        let mut mode = mode;
        if mode == Start::Resume && showed_life {
            let now = record::recorded_session(&self.dir);
            let same_id = now.as_ref().map(|s| s.id.as_str()) == session_id;
            let same_dir = now
                .as_ref()
                .and_then(|s| s.cwd.as_deref())
                .is_none_or(|cwd| record::same_dir(cwd, &self.agent.workdir));
            // A fork (Claude Code's `--fork-session`) comes back as a new id that holds the
            // resumed conversation: still a resume.
            let forked = !same_id
                && same_dir
                && self
                    .dir
                    .peek_state()
                    .is_some_and(|s| s.session_source.as_deref() == Some("fork"));
            if (!same_id || !same_dir) && !forked {
                // It came back as another session: that is a fresh start, not a resume.
                mode = Start::Fresh;
                let _ = self.dir.record_op(
                    Op::ResumeMismatch,
                    json!({"resumed": session_id, "recorded": now.map(|s| s.id)}),
                );
                if let Some(id) = session_id {
                    let _ = record::clear_session(&self.dir, id);
                }
            }
        }
        mode
    }

    /// The turn-failed hook said the CLI's turn ended in an API error: the CLI waits at its
    /// prompt and nobody will type. The watchdog's own pass for this agent decides, now rather
    /// than at the daemon's next tick (or never, without one): the same Clinic and policy, and
    /// the pass's memory says the turn was handled, so no later pass handles it again. A full
    /// context stops this run for a fresh session with a handoff; 401/quota quarantine it.
    /// On a thread: the pass may notify people, and supervision goes on meanwhile.
    /// The hook said the CLI waits for a person: the notification goes out now, from a
    /// thread (a slow channel never holds up the wrapper), once per wait.
    /// The CLI's screen shows its folder-trust dialog (the trust could not be recorded, see
    /// `trust_hooks`): the agent needs a person, said once per wait, and is not replaced.
    /// What it asks, if it does. The wrapper's own write of the wait is no sign of the
    /// CLI's life: `probe` is told.
    fn asks_for_trust(&self, probe: &mut LifeProbe) -> Option<String> {
        let screen = self
            .pane
            .as_deref()
            .and_then(|p| self.runtime.capture(p, probe::SCREEN_LINES).ok())?;
        let message = self.trust_question_in(&screen)?;
        if self.wait_for_trust(&message) {
            probe.written_by_wrapper();
        }
        Some(message)
    }

    /// Record that the agent waits for a person to answer its folder-trust question
    /// (`needs_input`, reason `trust_dialog`), once per wait; said in the pane and notified.
    /// Whether it was recorded now.
    pub(super) fn wait_for_trust(&self, message: &str) -> bool {
        let retention = state::Retention::from(&self.spec.thresholds);
        let started = self.dir.update_state(retention, |s| {
            if s.needs_input
                .as_ref()
                .is_some_and(|n| n.reason == "trust_dialog")
            {
                return Ok(false);
            }
            s.needs_input = Some(state::NeedsInput {
                reason: "trust_dialog".into(),
                message: message.to_string(),
                since: state::rfc3339(jiff::Timestamp::now()),
                source: "screen".into(),
            });
            Ok(true)
        });
        let started = started.unwrap_or(false);
        if started {
            say(message);
            let _ = self.dir.record_op(
                Op::NeedsInput,
                json!({"reason": "trust_dialog", "message": message, "source": "screen"}),
            );
            let _ = self.dir.set_marker(state::NEEDS_INPUT);
        }
        started
    }

    pub(super) fn notify_waiting(&self) -> std::thread::JoinHandle<()> {
        let (spec, name) = (self.spec.clone(), self.agent.name.clone());
        std::thread::spawn(move || {
            crate::watchdog::needs_input::notify_now(&spec, &name);
        })
    }

    pub(super) fn treat_failed_turn(&self) -> std::thread::JoinHandle<()> {
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
    /// hook too), and Claude Code starts at all only in a folder it trusts; otherwise they stop
    /// at a dialog. Recorded before every start, so a reset CLI config or a changed hook
    /// command is trusted again.
    pub(super) fn trust_hooks(&self) {
        let lock = self.fleet.root.join(".hooks-trust.lock");
        match crate::hooks::trust::ensure(&self.agent, &lock) {
            Ok(None) => {}
            Ok(Some(t)) => {
                say(&format!(
                    "{} now trusts `{}` for `{}` ({} entries)",
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

    pub(super) fn spawn_failed(
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
            resume_refused: false,
            screen: None,
            trust_question: None,
            ended: Instant::now(),
        }
    }

    /// A custom CLI read through its pane gets a new marker key each start, in its
    /// environment (`continuity::marker_key`); the startup context names it too. No other
    /// CLI gets one, whatever the environment phoenix runs in holds.
    fn give_marker_key(&self, cmd: &mut Command) {
        use crate::continuity::marker_key;
        cmd.env_remove(marker_key::ENV);
        if !self.agent.tap || self.agent.cli.adapter().markers_at_turn_end() {
            return;
        }
        match marker_key::issue(&self.dir) {
            Ok(key) => {
                cmd.env(marker_key::ENV, key);
            }
            Err(e) => {
                let _ = self.dir.record_op(
                    Op::TapFailed,
                    json!({"error": format!("cannot issue the session's marker key ({e}): its markers are refused")}),
                );
            }
        }
    }

    pub(super) fn command(&self, argv: &[String]) -> crate::error::Result<Command> {
        if argv.is_empty() {
            crate::bail!("agent `{}` has an empty command", self.agent.name);
        }
        let sandbox = self.sandbox_start(argv).map_err(crate::error::Error::msg)?;
        let argv: Vec<std::ffi::OsString> = match &sandbox {
            Some(start) => start.argv.clone(),
            None => argv.iter().map(Into::into).collect(),
        };
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&self.agent.workdir)
            .envs(&self.agent.env)
            .env("PHOENIX_AGENT", &self.agent.name)
            .env("PHOENIX_CONFIG", &self.spec.file)
            .env("PHOENIX_STATE_DIR", &self.dir.path);
        if let Some(start) = &sandbox {
            start.apply(&mut cmd);
            let base = self
                .agent
                .cli
                .adapter()
                .base_argv(super::argv::with_exe(self.agent.argv.clone()));
            let own = super::argv::own_sandbox(&self.agent, base);
            cmd.envs(own.env.iter().map(|(k, v)| (k, v)));
        }
        Ok(cmd)
    }
}

/// Lines at the end of a refused resume's output that may hold the CLI's refusal (Gemini CLI
/// says it in three, after them nothing but an empty input line or the shell's).
const REFUSAL_LINES: usize = 6;

/// Does `output` end with one of the CLI's `refusals` (lowercase) of session `id`? The id must
/// be in those lines too (a line the pane wrapped is read joined).
fn said_refusal(output: &str, refusals: &[&str], id: &str) -> bool {
    let text = without_our_lines(output);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(REFUSAL_LINES)..]
        .concat()
        .to_lowercase();
    !id.is_empty() && tail.contains(&id.to_lowercase()) && refusals.iter().any(|r| tail.contains(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_clis_own_refusal_of_this_id_at_the_end_of_its_output_is_a_refusal() {
        let id = "0b6a1f0e-3c8e-4d7a-9a51-2f8f4f1d2c3b";
        let claude = crate::spec::Cli::Claude.adapter().resume_refusals();
        let said = format!(
            "[phoenix] starting `a`, resuming session {id}\nNo conversation found with session ID: {id}\n"
        );
        assert!(said_refusal(&said, claude, id));
        // Wrapped by a narrow pane.
        let (head, rest) = id.split_at(10);
        let wrapped = format!("No conversation found with session ID: {head}\n{rest}\n$ \n");
        assert!(said_refusal(&wrapped, claude, id));
        // Another id, another CLI's words, or the refusal long before the end are not.
        assert!(!said_refusal(&said, claude, "another-id"));
        let codex = crate::spec::Cli::Codex.adapter().resume_refusals();
        assert!(!said_refusal(&said, codex, id));
        let later = format!("{said}{}", "more output\n".repeat(REFUSAL_LINES));
        assert!(!said_refusal(&later, claude, id));
        // Codex's and Gemini CLI's words for an id they have no session for.
        let codex_said = format!(
            "No saved session found with ID {id}. Run `codex resume` without an ID to choose from existing sessions.\n"
        );
        assert!(said_refusal(&codex_said, codex, id));
        let gemini = crate::spec::Cli::Gemini.adapter().resume_refusals();
        let gemini_said = format!(
            "Error resuming session: Invalid session identifier \"{id}\".\n  Searched for sessions in /h/.gemini/tmp/x/chats.\n  Use --list-sessions to see available sessions, then use --resume {{number}}, --resume {{uuid}}, or --resume latest.\n"
        );
        assert!(said_refusal(&gemini_said, gemini, id));
        // The wrapper's own lines say nothing for the CLI.
        let ours = format!("[phoenix] No conversation found with session ID: {id}\n");
        assert!(!said_refusal(&ours, claude, id));
    }
}
