//! `phoenix run`: the controller daemon. It reconciles the fleet on `reconcile_interval` and
//! at once when something happens — a wrapper pokes the FIFO, a pane's process exits (pidfd),
//! phoenix.toml changes (inotify) — and runs the `[schedules]` jobs. One daemon per state dir
//! (flock); SIGTERM/SIGINT finish the current step and exit 0; after `kill -9` the next start
//! simply converges again, because all state lives in tmux and the state dir.

mod jobs;
mod journal;
pub mod log;
mod reconcile;
pub mod request;
pub mod requeue;
mod wake;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::bail;
use crate::error::Context;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tracing::{debug, error, info, warn};

pub use log::{LogFormat, RunOptions, init_tracing};
pub use requeue::{Backoff, ReconcileError, Requeue, await_change, error_policy, requeue};

use crate::spec::{self, Spec};
use crate::state::FleetDir;
use crate::telemetry::{Attr, Record, SpanRecord, Telemetry};
use crate::world::{self, SharedRuntime};
use jobs::Jobs;
use wake::{Event, PaneWatch};

/// The jobs that run off the loop, one of each at a time.
#[derive(Default)]
struct Busy {
    watchdog: Arc<AtomicBool>,
    brief: Arc<AtomicBool>,
    mirror: Arc<AtomicBool>,
    fences: Arc<AtomicBool>,
    intake: Arc<AtomicBool>,
}

/// How often the operator's daemon refreshes its mirror of the hosts' agent contexts (what
/// `phoenix move --from-unreachable` starts from), at most.
const MIRROR_EVERY: Duration = Duration::from_secs(60);
/// How often the operator's daemon tells the hosts it owes a fence (they were unreachable
/// when an agent moved away from them) where those agents run now, at most (at its passes:
/// a host that comes back with a stale copy has it stopped at the next one).
const FENCES_EVERY: Duration = Duration::from_secs(10);

/// Events arriving together (many wrappers, an editor's several writes) make one reconcile.
const DEBOUNCE: Duration = Duration::from_millis(50);

pub fn run(config: &Path, options: RunOptions) -> crate::error::Result<i32> {
    init_tracing(options);
    let spec = spec::load(config)?;
    if let Some(problem) = world::leftover_problem(&spec) {
        bail!("{problem}");
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    fleet.ensure().with_context(|| {
        format!(
            "cannot create state dir `{}`",
            spec.fleet.state_dir.display()
        )
    })?;
    let _lock = acquire_lock(&fleet)?;
    let fifo = crate::state::daemon::fifo_path(&fleet);
    wake::ensure_fifo(&fifo)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let exe = crate::process::main_binary().context("cannot find the phoenix binary")?;
    let telemetry = Telemetry::start(&spec)?.map(Arc::new);
    let controller =
        Controller::new(config, world::runtime_for(&spec), spec, exe).exporting(telemetry.clone());
    let code = runtime.block_on(controller.serve(fifo));
    // The journal's task holds the exporter too: gone with the runtime.
    drop(runtime);
    // The last records (this stop, the last pass) go out, unless the collector is too slow.
    if let Some(t) = telemetry.and_then(Arc::into_inner) {
        let (queued, dropped, failed) = t.counts().snapshot();
        let flushed = t.shutdown(TELEMETRY_SHUTDOWN);
        info!(
            queued,
            dropped,
            failed_posts = failed,
            flushed,
            "telemetry: exporter stopped"
        );
    }
    code
}

/// How long a stopping daemon waits for its last telemetry records to be posted.
const TELEMETRY_SHUTDOWN: Duration = Duration::from_secs(3);

/// The controller of one fleet: its spec, its runtime, and what it remembers between passes.
pub struct Controller {
    config: PathBuf,
    /// Digest of the config bytes last loaded (valid or not): an editor's save raises two or
    /// three file events, and only the first one with new bytes is a reload.
    config_digest: Option<String>,
    /// With `[fleet] reload = "plan"`: the digest of an edit of phoenix.toml that waits for
    /// the operator's `phoenix apply` (`state::applied`), while `spec` stays the last applied.
    unapplied: Option<String>,
    spec: Spec,
    runtime: SharedRuntime,
    exe: PathBuf,
    /// Hook-file changes that failed (a settings file that is not JSON, not writable): not
    /// tried and logged again every pass while they stay the same; a person fixes the file.
    failed_hooks: HashSet<String>,
    /// Agents currently held back by the start-loop guard (to warn once).
    held: Vec<String>,
    /// The last pass found the fleet taken down with `phoenix down` (to say so once).
    held_down: bool,
    /// Agents whose last change failed, each waiting out its own delay.
    backoff: Backoff,
    /// Agents poked since the last pass: each may have an operator's restart request waiting.
    poked: BTreeSet<String>,
    /// Set by SIGTERM/SIGINT the moment they arrive, even while a pass blocks the loop: no
    /// agent is started after it (the rest of the pass is abandoned).
    stopping: Arc<AtomicBool>,
    /// `[telemetry]`'s exporter, when it is on (its endpoint is read once, at start).
    telemetry: Option<Arc<Telemetry>>,
    /// Every pass so far, kept in the state dir for `/metrics` (counted on after a restart).
    stats: crate::state::daemon::ReconcileStats,
}

impl Controller {
    pub fn new(config: &Path, runtime: SharedRuntime, spec: Spec, exe: PathBuf) -> Controller {
        let stats =
            crate::state::daemon::ReconcileStats::load(&FleetDir::new(&spec.fleet.state_dir));
        Controller {
            config: config.to_path_buf(),
            config_digest: wake::config_digest(config),
            unapplied: None,
            runtime,
            spec,
            exe,
            held: Vec::new(),
            held_down: false,
            failed_hooks: HashSet::new(),
            backoff: Backoff::default(),
            poked: BTreeSet::new(),
            stopping: Arc::new(AtomicBool::new(false)),
            telemetry: None,
            stats,
        }
    }

    pub fn exporting(mut self, telemetry: Option<Arc<Telemetry>>) -> Controller {
        self.telemetry = telemetry;
        self
    }

    async fn serve(mut self, fifo: PathBuf) -> crate::error::Result<i32> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        // tokio's streams above wake the loop; this flag is seen inside a pass as well.
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, self.stopping.clone())
                .context("cannot handle SIGTERM/SIGINT")?;
        }
        let (tx, mut rx) = unbounded_channel();
        tokio::spawn(wake::read_fifo(fifo, tx.clone()));
        let _watcher = match wake::watch_config(&self.spec.file, tx.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                warn!(error = %e, "cannot watch the config file; edits apply at the next interval");
                None
            }
        };
        // Every crash, restart, revival and safe-mode entry in the log (journal.rs).
        let journal = journal::Journal::new(FleetDir::new(&self.spec.fleet.state_dir))
            .exporting(self.telemetry.clone());
        tokio::spawn(journal.follow());
        let mut panes = PaneWatch::default();
        let mut jobs = Jobs::new(&self.spec);
        let busy = Busy::default();
        info!(
            config = %self.spec.file.display(),
            state_dir = %self.spec.fleet.state_dir.display(),
            socket = %self.spec.fleet.socket,
            interval = %spec::duration::format(self.spec.fleet.reconcile_interval),
            agents = self.spec.agents.len(),
            telemetry = self.telemetry.as_ref().map(|t| t.endpoint()).unwrap_or("off"),
            "phoenix run: supervising the fleet"
        );
        let mut next = requeue(Duration::ZERO);
        let mut attempt = 0u32;
        let mut mirrored: Option<Instant> = None;
        let mut fenced: Option<Instant> = None;
        let mut intake_read: HashMap<String, Instant> = HashMap::new();
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                info!("asked to stop: stopping");
                break;
            }
            let wake = match next {
                Requeue::After(d) => tokio::time::Instant::now() + d,
                Requeue::OnChange => tokio::time::Instant::now() + Duration::from_secs(86_400),
            };
            let job_at = jobs.next_instant();
            tokio::select! {
                biased;
                _ = sigterm.recv() => { info!("SIGTERM received: stopping"); break; }
                _ = sigint.recv() => { info!("SIGINT received: stopping"); break; }
                Some(event) = rx.recv() => self.settle(event, &mut rx, &mut jobs).await,
                _ = tokio::time::sleep_until(wake) => {}
                _ = tokio::time::sleep_until(job_at) => {
                    self.run_due(&mut jobs, &busy);
                    continue;
                }
            }
            if self.stopping.load(Ordering::SeqCst) {
                continue;
            }
            self.serve_requests();
            (next, attempt) = self.pass(attempt, &mut panes, &tx);
            self.start_fences(&busy.fences, &mut fenced);
            self.start_intake(&busy.intake, &mut intake_read, &tx);
            self.start_mirror(&busy.mirror, &mut mirrored);
        }
        info!("phoenix run: stopped");
        Ok(0)
    }

    /// Let a burst of events settle, then reload once for all of it: a save truncates before
    /// it writes, and the empty file in between is no config.
    async fn settle(&mut self, first: Event, rx: &mut UnboundedReceiver<Event>, jobs: &mut Jobs) {
        let mut config_changed = self.on_event(first);
        tokio::time::sleep(DEBOUNCE).await;
        while let Ok(event) = rx.try_recv() {
            config_changed |= self.on_event(event);
        }
        if config_changed {
            self.reload();
        }
        if jobs.reschedule_if_changed(&self.spec) {
            info!("schedules changed");
        }
    }

    /// One reconcile, and the requeue and the count of failures in a row after it. A failed
    /// pass goes through [`error_policy`], never later than the regular interval.
    fn pass(
        &mut self,
        attempt: u32,
        panes: &mut PaneWatch,
        tx: &UnboundedSender<Event>,
    ) -> (Requeue, u32) {
        let started_at = std::time::SystemTime::now();
        let started = Instant::now();
        let result = self.reconcile(started);
        self.export_pass(started_at, &result);
        self.count_pass(started.elapsed(), result.is_ok());
        match result {
            Ok(done) => {
                if let Some(pids) = done.pids {
                    panes.refresh(&pids, tx);
                }
                (done.requeue, 0)
            }
            Err(e) => {
                let attempt = attempt.saturating_add(1);
                error!(error = %e, attempt, "reconcile failed");
                let next = error_policy(&e, attempt).at_most(self.spec.fleet.reconcile_interval);
                (next, attempt)
            }
        }
    }

    /// A pass as a `reconcile` span (only queued: the export thread posts it).
    fn export_pass(
        &self,
        started: std::time::SystemTime,
        result: &Result<reconcile::Reconciled, ReconcileError>,
    ) {
        let Some(telemetry) = &self.telemetry else {
            return;
        };
        let mut attributes = vec![(
            "agents".to_string(),
            Attr::Int(self.spec.agents.len() as i64),
        )];
        if let Ok(done) = result {
            attributes.push(("changes".into(), Attr::Int(done.changes as i64)));
        }
        telemetry.send(Record::Span(SpanRecord {
            name: "reconcile",
            start: started,
            end: std::time::SystemTime::now(),
            attributes,
            error: result.as_ref().err().map(|e| e.to_string()),
        }));
    }

    /// Count the pass for `/metrics`. A state dir that cannot be written is the pass's own
    /// problem, reported there; the count is not worth a second warning on every pass.
    fn count_pass(&mut self, took: Duration, ok: bool) {
        self.stats.observe(took.as_secs_f64(), ok);
        if let Some(telemetry) = &self.telemetry {
            telemetry.pass_took(took);
        }
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        if let Err(e) = self.stats.save(&fleet) {
            debug!(error = %e, "cannot record the reconcile pass for /metrics");
        }
    }

    /// Start the `[schedules]` jobs that are due, unless the daemon is stopping.
    fn run_due(&self, jobs: &mut Jobs, busy: &Busy) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        for job in jobs.take_due() {
            match job {
                "watchdog" => self.start_watchdog(&busy.watchdog),
                _ => self.start_briefs(&busy.brief),
            }
        }
    }

    /// A watchdog pass off the reconcile loop (it may wait on `gh`, a webhook, or an agent
    /// that takes its time to stop); one at a time.
    fn start_watchdog(&self, busy: &Arc<AtomicBool>) {
        if busy.swap(true, Ordering::SeqCst) {
            warn!("the previous watchdog pass is still running; skipping this one");
            return;
        }
        let (spec, runtime, busy) = (self.spec.clone(), self.runtime.clone(), busy.clone());
        let stopping = self.stopping.clone();
        tokio::task::spawn_blocking(move || {
            let report = crate::watchdog::Watchdog::new(&spec, &*runtime)
                .stop_when(stopping)
                .pass();
            if let Some(why) = &report.skipped {
                warn!("watchdog pass skipped: {why}");
            }
            for a in report.agents.iter().filter(|a| a.verdict != "healthy") {
                let findings: Vec<&str> = a.findings.iter().map(|f| f.reason.as_str()).collect();
                info!(
                    agent = %a.agent, verdict = a.verdict, findings = %findings.join(","),
                    action = ?a.action, skipped = ?a.skipped, "watchdog"
                );
            }
            info!(
                agents = report.agents.len(),
                unhealthy = report.unhealthy(),
                "watchdog pass done"
            );
            // Keep the search index warm, so a session start (which never builds it) finds
            // the earlier decisions that match its task; checked whole, so a partly corrupt
            // one is rebuilt rather than answering from what is left of it.
            let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
            if let Err(e) = crate::store::Store::open_checked(&fleet) {
                warn!(error = %e, "cannot bring the search index up to date");
            }
            busy.store(false, Ordering::SeqCst);
        });
    }

    /// Refresh the mirror of the hosts' agent contexts off the loop (each host bounded by its
    /// own timeout), at most every [`MIRROR_EVERY`]; only a fleet with `[[host]]`s has one.
    fn start_mirror(&self, busy: &Arc<AtomicBool>, last: &mut Option<Instant>) {
        if self.spec.hosts.is_empty() || last.is_some_and(|t| t.elapsed() < MIRROR_EVERY) {
            return;
        }
        if busy.swap(true, Ordering::SeqCst) {
            return;
        }
        *last = Some(Instant::now());
        let (spec, busy) = (self.spec.clone(), busy.clone());
        tokio::task::spawn_blocking(move || {
            match crate::hosts::mirror::refresh(&spec) {
                Ok(hosts) => {
                    for h in hosts {
                        match &h.error {
                            Some(e) => warn!(host = %h.host, error = %e, "mirror not refreshed"),
                            None => debug!(
                                host = %h.host, agents = h.agents.len(),
                                new_handoffs = h.new_handoffs, "mirror refreshed"
                            ),
                        }
                    }
                }
                Err(e) => warn!(error = %e, "cannot refresh the mirror of the hosts"),
            }
            busy.store(false, Ordering::SeqCst);
        });
    }

    /// Deliver the fences the placement record owes (the hosts that were unreachable when an
    /// agent moved away from them) off the loop, at most every [`FENCES_EVERY`]: each host
    /// that answers records them and stops its stale copies.
    fn start_fences(&self, busy: &Arc<AtomicBool>, last: &mut Option<Instant>) {
        if self.spec.hosts.is_empty() || last.is_some_and(|t| t.elapsed() < FENCES_EVERY) {
            return;
        }
        if busy.swap(true, Ordering::SeqCst) {
            return;
        }
        *last = Some(Instant::now());
        let (spec, busy) = (self.spec.clone(), busy.clone());
        tokio::task::spawn_blocking(move || {
            match crate::hosts::moves::settle_owed(&spec) {
                Ok(settled) => {
                    for s in settled {
                        match (&s.error, &s.fenced) {
                            (Some(e), _) => {
                                debug!(on = %s.on, error = %e, "owed fences not delivered yet")
                            }
                            (None, Some(f)) if !f.failed.is_empty() => {
                                warn!(on = %s.on, failed = ?f.failed, "a stale copy was not stopped; tried again")
                            }
                            (None, f) => info!(
                                on = %s.on, agents = ?s.agents,
                                stopped = ?f.as_ref().map(|f| &f.stopped),
                                "told the machine where its moved agents run; its stale copies are stopped"
                            ),
                        }
                    }
                }
                Err(e) => warn!(error = %e, "cannot deliver the fences the placement record owes"),
            }
            busy.store(false, Ordering::SeqCst);
        });
    }

    /// Read the sources of the `[[agent_set]]`s that are due (each on its own `every`) off the
    /// loop, one round at a time: a `gh` call may take seconds. A new list stored wakes the
    /// loop to expand the spec anew; a source that failed or gave garbage changed nothing
    /// (its event is in critical_events.jsonl).
    fn start_intake(
        &self,
        busy: &Arc<AtomicBool>,
        last: &mut HashMap<String, Instant>,
        tx: &UnboundedSender<Event>,
    ) {
        let due: HashSet<String> = self
            .spec
            .agent_sets
            .iter()
            .filter(|s| last.get(&s.name).is_none_or(|t| t.elapsed() >= s.every))
            .map(|s| s.name.clone())
            .collect();
        if due.is_empty() || busy.swap(true, Ordering::SeqCst) {
            return;
        }
        for name in &due {
            last.insert(name.clone(), Instant::now());
        }
        let (spec, busy, tx) = (self.spec.clone(), busy.clone(), tx.clone());
        tokio::task::spawn_blocking(move || {
            let refreshed = crate::intake::refresh(&spec, |s| due.contains(&s.name));
            for r in &refreshed {
                match (&r.outcome, r.describe()) {
                    (crate::intake::Outcome::Updated { .. }, Some(line)) => info!("{line}"),
                    (_, Some(line)) => warn!("{line}"),
                    (_, None) => debug!(agent_set = %r.set, "source read: no change"),
                }
            }
            if refreshed.iter().any(|r| r.changed()) {
                let _ = tx.send(Event::IntakeChanged);
            }
            busy.store(false, Ordering::SeqCst);
        });
    }

    /// Every enabled agent's brief, off the reconcile loop (a command generator may take
    /// minutes); one round at a time.
    fn start_briefs(&self, busy: &Arc<AtomicBool>) {
        if busy.swap(true, Ordering::SeqCst) {
            warn!("the previous brief round is still running; skipping this one");
            return;
        }
        let (spec, busy) = (self.spec.clone(), busy.clone());
        tokio::task::spawn_blocking(move || {
            for agent in spec.agents.iter().filter(|a| a.enabled) {
                match crate::continuity::brief::generate(&spec, agent) {
                    Ok(done) => {
                        info!(agent = %agent.name, by = %done.by, chars = done.chars, "brief written")
                    }
                    Err(e) => warn!(agent = %agent.name, error = %e, "brief not written"),
                }
            }
            busy.store(false, Ordering::SeqCst);
        });
    }

    /// Logs the event; true when it asks for a config reload.
    fn on_event(&mut self, event: Event) -> bool {
        match event {
            Event::Poke(agent) => {
                debug!(agent = %agent, "woken by a wrapper or command");
                self.poked.insert(agent);
            }
            Event::PaneExited(pid) => info!(pid, "a pane's process exited"),
            Event::ConfigChanged => return true,
            Event::IntakeChanged => self.reload_intake(),
        }
        false
    }

    /// An `[[agent_set]]` stored a new list: the same phoenix.toml, expanded from it. An edit
    /// that waits for `phoenix apply` (`reload = "plan"`) keeps the daemon where it is.
    fn reload_intake(&mut self) {
        if self.unapplied.is_some() || wake::config_digest(&self.config) != self.config_digest {
            return;
        }
        match spec::load(&self.config) {
            Ok(spec) => self.take_over(spec),
            Err(e) => {
                warn!(error = %e, "the agent sets' new lists cannot be expanded; keeping the last spec")
            }
        }
    }

    fn reload(&mut self) {
        // A save that truncates, then writes, leaves an empty file for a moment; under load
        // that moment can outlast the debounce. Empty is a valid config (no agents) that no
        // one means to switch to: wait for the write's own event instead.
        if std::fs::metadata(&self.config).is_ok_and(|m| m.len() == 0) {
            debug!("config file is empty: waiting for the save to finish");
            return;
        }
        let digest = wake::config_digest(&self.config);
        if digest == self.config_digest {
            debug!("config file event without a change");
            return;
        }
        self.config_digest = digest.clone();
        match spec::load(&self.config) {
            Ok(spec) => {
                let fleet = FleetDir::new(&self.spec.fleet.state_dir);
                if spec.fleet.reload == spec::Reload::Plan
                    && crate::state::applied::digest(&fleet) != digest
                {
                    self.log_unapplied(&spec);
                    self.unapplied = digest;
                    return;
                }
                self.unapplied = None;
                self.take_over(spec);
            }
            Err(e) => {
                let text = match &e {
                    spec::LoadError::Invalid(d) => d
                        .located()
                        .iter()
                        .map(|l| format!("{}:{}:{}: {}", l.file, l.line, l.column, l.message))
                        .collect::<Vec<_>>()
                        .join("; "),
                    other => other.to_string(),
                };
                warn!(error = %text, "config is invalid; keeping the last good one");
            }
        }
    }

    /// `reload = "plan"`: what the edit would change, for the operator, who applies it.
    fn log_unapplied(&self, spec: &Spec) {
        let world = match world::observe(spec, &*self.runtime) {
            Ok(world) => world,
            Err(e) => {
                warn!(error = %e, "config changed (reload = \"plan\"); its plan cannot be made: {e}");
                return;
            }
        };
        let options = crate::plan::PlanOptions {
            prune: false,
            force_remove_worktrees: false,
            hooks_exe: Some(crate::hooks::config::hook_binary(&self.exe)),
        };
        let plan = crate::plan::diff(spec, &world, &options);
        info!(
            changes = plan.changes.len(),
            "config changed (reload = \"plan\"): nothing of it is applied until `phoenix apply`"
        );
        for line in plan.to_string().lines().filter(|l| !l.trim().is_empty()) {
            info!("plan: {line}");
        }
    }

    /// `reload = "plan"`, in a pass under the fleet lock: the operator's `phoenix apply`
    /// applied the waiting edit, so the daemon reconciles toward it from this pass on (never
    /// back toward the file before it).
    pub(super) fn take_over_applied(&mut self, fleet: &FleetDir) {
        let Some(edit) = self.unapplied.clone() else {
            return;
        };
        if crate::state::applied::digest(fleet).as_deref() != Some(edit.as_str()) {
            return;
        }
        // Edited again since: that edit's own event decides.
        if wake::config_digest(&self.config).as_deref() != Some(edit.as_str()) {
            return;
        }
        match spec::load(&self.config) {
            Ok(spec) => {
                info!("`phoenix apply` applied the edit of the config: reconciling toward it");
                self.unapplied = None;
                self.take_over(spec);
            }
            Err(e) => warn!(error = %e, "the applied config cannot be read; keeping the last one"),
        }
    }

    /// Reconcile toward `spec` from now on.
    fn take_over(&mut self, mut spec: Spec) {
        if spec.telemetry != self.spec.telemetry {
            warn!("`[telemetry]` changes take effect when the daemon restarts");
        }
        if spec.fleet.state_dir != self.spec.fleet.state_dir
            || spec.fleet.socket != self.spec.fleet.socket
            || spec.fleet.id != self.spec.fleet.id
        {
            warn!(
                "`name`, `state_dir` and `tmux_socket` changes take effect when the daemon restarts"
            );
            spec.fleet.state_dir = self.spec.fleet.state_dir.clone();
            spec.fleet.socket = self.spec.fleet.socket.clone();
            spec.fleet.id = self.spec.fleet.id.clone();
        }
        info!(agents = spec.agents.len(), "config reloaded");
        self.spec = spec;
        if let Some(telemetry) = &self.telemetry {
            telemetry.spec_changed(&self.spec);
        }
        // A fixed config deserves a new try of every change that failed.
        self.backoff.clear();
    }
}

/// One daemon per state dir: an exclusive flock, released by the kernel even after `kill -9`.
fn acquire_lock(fleet: &FleetDir) -> crate::error::Result<nix::fcntl::Flock<File>> {
    let path = fleet.root.join(crate::state::daemon::DAEMON_LOCK);
    // Never through a link planted in the state dir (the pid is written into it).
    let file = crate::state::file::open_lock(&path)
        .with_context(|| format!("cannot open lock file `{}`", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            let _ = lock.set_len(0);
            let _ = (&*lock).write_all(format!("{}\n", std::process::id()).as_bytes());
            Ok(lock)
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            bail!(
                "another `phoenix run` (pid {}) already supervises state dir `{}`",
                pid.trim(),
                fleet.root.display()
            )
        }
        Err((_, e)) => bail!("cannot lock `{}`: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests;
