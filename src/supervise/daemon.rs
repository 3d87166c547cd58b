//! `phoenix run`: the controller daemon. It reconciles the fleet on `reconcile_interval` and
//! at once when something happens — a wrapper pokes the FIFO, a pane's process exits (pidfd),
//! phoenix.toml changes (inotify) — and runs the `[schedules]` jobs. One daemon per state dir
//! (flock); SIGTERM/SIGINT finish the current step and exit 0; after `kill -9` the next start
//! simply converges again, because all state lives in tmux and the state dir.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tracing::{debug, error, info, warn};

use crate::apply::Applier;
use crate::plan::{self, Action, PlanOptions};
use crate::spec::{self, Schedule, Spec};
use crate::state::FleetDir;
use crate::state::lock::{FleetLock, LockError};
use crate::world::{self, RuntimeError, SharedRuntime};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    pub log_format: LogFormat,
    pub verbose: u8,
    pub quiet: u8,
}

/// What the loop does after a reconcile: come back after a while, or only when woken.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    After(Duration),
    OnChange,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("cannot observe the runtime: {0}")]
    Observe(#[from] RuntimeError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{failed} of {total} steps failed")]
    Steps { failed: usize, total: usize },
}

/// How soon to try again when another phoenix holds the fleet lock.
const LOCK_RETRY: Duration = Duration::from_millis(500);
/// Longest wait after failures; the regular interval still applies when it is shorter.
const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(60);
/// The daemon starts one agent at most this often within `START_WINDOW` before holding off:
/// a pane whose wrapper dies at once must not turn pidfd wake-ups into a hot loop. Counted
/// in the agent's restart ledger, so a restarted daemon does not start the count again.
const MAX_STARTS: usize = 5;
const START_WINDOW: Duration = Duration::from_secs(60);
/// Events arriving together (many wrappers, an editor's several writes) make one reconcile.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Pure: how long to wait after a failed reconcile. Doubles from one second; a missing tmux
/// will not appear within seconds, so that waits longest.
pub fn error_policy(err: &ReconcileError, attempt: u32) -> Requeue {
    match err {
        ReconcileError::Observe(RuntimeError::NotInstalled) => Requeue::After(MAX_ERROR_BACKOFF),
        _ => {
            let secs = 1u64 << attempt.min(6);
            Requeue::After(Duration::from_secs(secs).min(MAX_ERROR_BACKOFF))
        }
    }
}

#[derive(Debug)]
enum Event {
    /// A wrapper or a phoenix command wrote to the FIFO.
    Poke(String),
    /// The process of a watched pane exited.
    PaneExited(u32),
    ConfigChanged,
}

pub fn run(config: &Path, options: RunOptions) -> anyhow::Result<i32> {
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
    let fifo = super::fifo_path(&fleet);
    ensure_fifo(&fifo)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let daemon = Daemon {
        config: config.to_path_buf(),
        config_digest: config_digest(config),
        runtime: world::runtime_for(&spec),
        spec,
        exe: std::env::current_exe().context("cannot find the phoenix binary")?,
        held: Vec::new(),
        failed_hooks: HashSet::new(),
        stopping: Arc::new(AtomicBool::new(false)),
    };
    runtime.block_on(daemon.serve(fifo))
}

struct Daemon {
    config: PathBuf,
    /// Digest of the config bytes last loaded (valid or not): an editor's save raises two or
    /// three file events, and only the first one with new bytes is a reload.
    config_digest: Option<String>,
    spec: Spec,
    runtime: SharedRuntime,
    exe: PathBuf,
    /// Hook-file changes that failed (a settings file that is not JSON, not writable): not
    /// tried and logged again every pass while they stay the same; a person fixes the file.
    failed_hooks: HashSet<String>,
    /// Agents currently held back by that guard (to warn once).
    held: Vec<String>,
    /// Set by SIGTERM/SIGINT the moment they arrive, even while a pass blocks the loop: no
    /// agent is started after it (the rest of the pass is abandoned).
    stopping: Arc<AtomicBool>,
}

impl Daemon {
    async fn serve(mut self, fifo: PathBuf) -> anyhow::Result<i32> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        // tokio's streams above wake the loop; this flag is seen inside a pass as well.
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, self.stopping.clone())
                .context("cannot handle SIGTERM/SIGINT")?;
        }
        let (tx, mut rx) = unbounded_channel();
        tokio::spawn(read_fifo(fifo, tx.clone()));
        let _watcher = match watch_config(&self.spec.file, tx.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                warn!(error = %e, "cannot watch the config file; edits apply at the next interval");
                None
            }
        };
        // Every crash, restart, revival and safe-mode entry in the log (journal.rs).
        let journal = super::journal::Journal::new(FleetDir::new(&self.spec.fleet.state_dir));
        tokio::spawn(journal.follow());
        let mut panes = PaneWatch::default();
        let mut jobs = Jobs::new(&self.spec);
        let watchdog_busy = Arc::new(AtomicBool::new(false));
        let brief_busy = Arc::new(AtomicBool::new(false));
        info!(
            config = %self.spec.file.display(),
            state_dir = %self.spec.fleet.state_dir.display(),
            socket = %self.spec.fleet.socket,
            interval = %spec::duration::format(self.spec.fleet.reconcile_interval),
            agents = self.spec.agents.len(),
            "phoenix run: supervising the fleet"
        );
        let mut requeue = Requeue::After(Duration::ZERO);
        let mut attempt = 0u32;
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                info!("asked to stop: stopping");
                break;
            }
            let wake = match requeue {
                Requeue::After(d) => tokio::time::Instant::now() + d,
                Requeue::OnChange => tokio::time::Instant::now() + Duration::from_secs(86_400),
            };
            let job_at = jobs.next_instant();
            tokio::select! {
                biased;
                _ = sigterm.recv() => { info!("SIGTERM received: stopping"); break; }
                _ = sigint.recv() => { info!("SIGINT received: stopping"); break; }
                Some(event) = rx.recv() => {
                    // Let a burst settle, then reload and reconcile once for all of it: a save
                    // truncates before it writes, and the empty file in between is no config.
                    let mut config_changed = self.on_event(event);
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
                _ = tokio::time::sleep_until(wake) => {}
                _ = tokio::time::sleep_until(job_at) => {
                    if self.stopping.load(Ordering::SeqCst) {
                        continue;
                    }
                    for job in jobs.take_due() {
                        match job {
                            "watchdog" => self.start_watchdog(&watchdog_busy),
                            _ => self.start_briefs(&brief_busy),
                        }
                    }
                    continue;
                }
            }
            if self.stopping.load(Ordering::SeqCst) {
                continue;
            }
            let (next, pids) = match self.reconcile() {
                Ok(result) => {
                    attempt = 0;
                    result
                }
                Err(e) => {
                    attempt = attempt.saturating_add(1);
                    error!(error = %e, attempt, "reconcile failed");
                    let next = match error_policy(&e, attempt) {
                        Requeue::After(d) => {
                            Requeue::After(d.min(self.spec.fleet.reconcile_interval))
                        }
                        other => other,
                    };
                    (next, None)
                }
            };
            requeue = next;
            if let Some(pids) = pids {
                panes.refresh(&pids, &tx);
            }
        }
        info!("phoenix run: stopped");
        Ok(0)
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
            Event::Poke(agent) => debug!(agent = %agent, "woken by a wrapper or command"),
            Event::PaneExited(pid) => info!(pid, "a pane's process exited"),
            Event::ConfigChanged => return true,
        }
        false
    }

    fn reload(&mut self) {
        let digest = config_digest(&self.config);
        if digest == self.config_digest {
            debug!("config file event without a change");
            return;
        }
        self.config_digest = digest;
        match spec::load(&self.config) {
            Ok(mut spec) => {
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

    /// Observe, diff, apply, holding the fleet lock. Returns when to come back and the pane
    /// processes to watch.
    fn reconcile(&mut self) -> Result<(Requeue, Option<Vec<u32>>), ReconcileError> {
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        // Another phoenix (an apply, a restart) is changing the fleet: look again when it is
        // done rather than wait here, deaf to signals and wake-ups.
        let _lock = match FleetLock::acquire(
            &fleet,
            "phoenix run: reconcile",
            Duration::ZERO,
            |_| {},
        ) {
            Ok(lock) => lock,
            Err(LockError::Timeout { holder, .. }) => {
                debug!(%holder, "the fleet is being changed by another phoenix; reconciling after it");
                return Ok((Requeue::After(LOCK_RETRY), None));
            }
            Err(e) => return Err(ReconcileError::Lock(e)),
        };
        let interval = Requeue::After(self.spec.fleet.reconcile_interval);
        let world = world::observe(&self.spec, &*self.runtime)?;
        // Hook files too: the daemon converges everything `apply` converges, or an agent it
        // (re)starts runs without the hooks `plan` says it lacks.
        let options = PlanOptions {
            prune: false,
            hooks_exe: Some(crate::hooks::config::hook_binary(&self.exe)),
        };
        let mut plan = plan::diff(&self.spec, &world, &options);
        if plan.is_empty() {
            debug!("reconciled: nothing to do");
            self.held.clear();
            return Ok((interval, Some(watched_pids(&world))));
        }
        self.hold_back_restart_loops(&mut plan);
        self.hold_back_failed_hooks(&mut plan);
        if plan.is_empty() {
            return Ok((interval, Some(watched_pids(&world))));
        }
        for c in &plan.changes {
            info!(agent = %c.agent, action = c.symbol, reason = %c.reason, "planned");
        }
        let applier = Applier {
            spec: &self.spec,
            runtime: &*self.runtime,
            exe: self.exe.clone(),
        };
        // One change at a time, each after a look at the stop flag: a SIGTERM in the middle
        // of a pass that starts many agents must not be followed by more starts.
        let mut report = crate::apply::ApplyReport { steps: Vec::new() };
        for (done, change) in plan.changes.iter().enumerate() {
            if self.stopping.load(Ordering::SeqCst) {
                info!(
                    abandoned = plan.changes.len() - done,
                    "asked to stop: the rest of this pass is abandoned"
                );
                break;
            }
            let one = plan::Plan::of(vec![change.clone()]);
            let steps = applier.apply(&one).steps;
            if is_hook_change(change) && steps.iter().any(|s| !s.ok) {
                self.failed_hooks.insert(hook_change_key(change));
            }
            report.steps.extend(steps);
        }
        for s in &report.steps {
            if s.ok {
                info!(agent = %s.agent, action = %s.action, detail = %s.detail, "applied");
            } else {
                warn!(agent = %s.agent, action = %s.action, detail = %s.detail, "step failed");
            }
        }
        let pids = world::observe(&self.spec, &*self.runtime)
            .ok()
            .map(|w| watched_pids(&w));
        match report.failed() {
            0 => Ok((interval, pids)),
            failed => Err(ReconcileError::Steps {
                failed,
                total: report.steps.len(),
            }),
        }
    }

    /// Leave out hook-file changes that failed before and are planned the same way again;
    /// forget failures no longer planned (the file was fixed, or changed again).
    fn hold_back_failed_hooks(&mut self, plan: &mut plan::Plan) {
        let planned: HashSet<String> = plan
            .changes
            .iter()
            .filter(|c| is_hook_change(c))
            .map(hook_change_key)
            .collect();
        self.failed_hooks.retain(|k| planned.contains(k));
        plan.changes.retain(|c| {
            let again = is_hook_change(c) && self.failed_hooks.contains(&hook_change_key(c));
            if again {
                debug!(agent = %c.agent, reason = %c.reason, "hook file still cannot be changed; see the earlier warning");
            }
            !again
        });
    }

    fn hold_back_restart_loops(&mut self, plan: &mut plan::Plan) {
        let now = jiff::Timestamp::now().as_second();
        let fleet = FleetDir::new(&self.spec.fleet.state_dir);
        let mut held = Vec::new();
        plan.changes.retain(|c| {
            if !matches!(c.action, Action::Start | Action::Restart { .. }) {
                return true;
            }
            let dir = fleet.agent(&c.agent);
            // A ledger that cannot be written does not stop the fleet: the start goes ahead.
            let allowed = dir
                .ensure()
                .and_then(|()| {
                    crate::recovery::record::update(&dir, |l| {
                        l.note_start(now, START_WINDOW.as_secs() as i64, MAX_STARTS)
                    })
                })
                .unwrap_or(true);
            if !allowed {
                held.push(c.agent.clone());
            }
            allowed
        });
        for agent in &held {
            if !self.held.contains(agent) {
                warn!(
                    agent = %agent,
                    "started {MAX_STARTS} times within {}s and its pane keeps dying: holding off (see `phoenix status {agent}` and the pane)",
                    START_WINDOW.as_secs()
                );
            }
        }
        self.held = held;
    }
}

fn is_hook_change(c: &plan::Change) -> bool {
    matches!(
        c.action,
        Action::InstallHooks { .. } | Action::RemoveHooks { .. }
    )
}

/// A hook change as planned: the same key means the same file, wanting the same edit.
fn hook_change_key(c: &plan::Change) -> String {
    format!("{}\u{0}{:?}\u{0}{}", c.agent, c.action, c.reason)
}

fn watched_pids(world: &world::World) -> Vec<u32> {
    world
        .panes
        .iter()
        .filter(|p| !p.dead && p.agent.is_some())
        .map(|p| p.pid)
        .collect()
}

pub(crate) fn init_tracing(options: RunOptions) {
    use tracing::Level;
    let level = match i16::from(options.verbose) - i16::from(options.quiet) {
        i16::MIN..=-2 => Level::ERROR,
        -1 => Level::WARN,
        0 => Level::INFO,
        1 => Level::DEBUG,
        _ => Level::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false);
    let _ = match options.log_format {
        LogFormat::Human => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// One daemon per state dir: an exclusive flock, released by the kernel even after `kill -9`.
fn acquire_lock(fleet: &FleetDir) -> anyhow::Result<nix::fcntl::Flock<File>> {
    let path = fleet.root.join(super::DAEMON_LOCK);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // Never through a link planted in the state dir (the pid is written into it).
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
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

fn ensure_fifo(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_fifo() => return Ok(()),
        Ok(_) => std::fs::remove_file(path)
            .with_context(|| format!("cannot replace `{}`", path.display()))?,
        Err(_) => {}
    }
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .with_context(|| format!("cannot create FIFO `{}`", path.display()))
}

/// Read agent names poked into the FIFO. Opened read-write so it never sees end-of-file when
/// the last writer goes.
async fn read_fifo(path: PathBuf, tx: UnboundedSender<Event>) {
    let receiver = match tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&path)
    {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, fifo = %path.display(), "cannot read the wake-up FIFO; relying on the interval");
            return;
        }
    };
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if receiver.readable().await.is_err() {
            return;
        }
        match receiver.try_read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let agent = String::from_utf8_lossy(&line).trim().to_string();
                    if tx.send(Event::Poke(agent)).is_err() {
                        return;
                    }
                }
                if pending.len() > 64 * 1024 {
                    pending.clear();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// What `reload` compares; `None` when the file cannot be read (a reload then reports why).
fn config_digest(file: &Path) -> Option<String> {
    use crate::state::bounded::{Links, read_whole};
    read_whole(file, spec::MAX_CONFIG_BYTES, Links::Follow)
        .ok()
        .map(|bytes| crate::state::digest(&bytes))
}

/// Watch the config file's directory: editors replace files by renaming, which a watch on the
/// file itself would lose.
fn watch_config(
    file: &Path,
    tx: UnboundedSender<Event>,
) -> notify::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let name = file.file_name().map(|n| n.to_owned());
    let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        if event
            .paths
            .iter()
            .any(|p| p.file_name().map(|n| n.to_owned()) == name)
        {
            let _ = tx.send(Event::ConfigChanged);
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// A task per live pane process, woken by its pidfd when it exits: even a wrapper killed with
/// SIGKILL is noticed at once, without polling and without tmux hooks running shell strings.
#[derive(Default)]
struct PaneWatch {
    tasks: HashMap<u32, tokio::task::JoinHandle<()>>,
}

impl PaneWatch {
    fn refresh(&mut self, pids: &[u32], tx: &UnboundedSender<Event>) {
        self.tasks.retain(|pid, task| {
            let keep = pids.contains(pid) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for &pid in pids {
            if self.tasks.contains_key(&pid) {
                continue;
            }
            let Some(fd) = pidfd_open(pid) else {
                continue;
            };
            let tx = tx.clone();
            let task = tokio::spawn(async move {
                // SAFETY: the AsyncFd owns the OwnedFd, which stays open until it is dropped.
                let registered = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        fd,
                        tokio::io::Interest::READABLE,
                    )
                };
                if let Ok(fd) = registered {
                    let _ = fd.readable().await;
                    let _ = tx.send(Event::PaneExited(pid));
                }
            });
            self.tasks.insert(pid, task);
        }
    }
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just handed us this fd and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The `[schedules]` jobs. The watchdog pass and brief generation arrive with later issues;
/// until then each run is a visible log line.
struct Jobs {
    jobs: Vec<Job>,
    exprs: Vec<Option<String>>,
}

struct Job {
    name: &'static str,
    schedule: Schedule,
    next: Option<jiff::Timestamp>,
}

impl Jobs {
    fn new(spec: &Spec) -> Jobs {
        let mut jobs = Vec::new();
        for (name, schedule) in [
            ("watchdog", &spec.schedules.watchdog),
            ("brief", &spec.schedules.brief),
        ] {
            if let Some(s) = schedule {
                let next = next_occurrence(s);
                if let Some(at) = next {
                    info!(job = name, schedule = %s.expr, next = %at, "scheduled");
                }
                jobs.push(Job {
                    name,
                    schedule: s.clone(),
                    next,
                });
            }
        }
        Jobs {
            jobs,
            exprs: schedule_exprs(spec),
        }
    }

    fn reschedule_if_changed(&mut self, spec: &Spec) -> bool {
        if schedule_exprs(spec) == self.exprs {
            return false;
        }
        *self = Jobs::new(spec);
        true
    }

    fn next_instant(&self) -> tokio::time::Instant {
        let now = jiff::Timestamp::now();
        let soonest = self.jobs.iter().filter_map(|j| j.next).min();
        let wait = soonest
            .map(|t| {
                let ms = t.as_millisecond() - now.as_millisecond();
                Duration::from_millis(ms.max(0) as u64)
            })
            .unwrap_or(Duration::from_secs(86_400));
        tokio::time::Instant::now() + wait
    }

    /// The jobs due now, rescheduled for their next time.
    fn take_due(&mut self) -> Vec<&'static str> {
        let now = jiff::Timestamp::now();
        let mut due = Vec::new();
        for job in &mut self.jobs {
            if job.next.is_some_and(|t| t <= now) {
                info!(job = job.name, schedule = %job.schedule.expr, "scheduled run");
                due.push(job.name);
                job.next = next_occurrence(&job.schedule);
            }
        }
        due
    }
}

fn schedule_exprs(spec: &Spec) -> Vec<Option<String>> {
    [&spec.schedules.watchdog, &spec.schedules.brief]
        .iter()
        .map(|s| s.as_ref().map(|s| s.expr.clone()))
        .collect()
}

fn next_occurrence(schedule: &Schedule) -> Option<jiff::Timestamp> {
    let now = jiff::Zoned::now();
    schedule
        .cron
        .find_next_occurrence(&now, false)
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_back_off_exponentially_up_to_a_minute() {
        let err = ReconcileError::Steps {
            failed: 1,
            total: 1,
        };
        let waits: Vec<Requeue> = (1..=8).map(|a| error_policy(&err, a)).collect();
        assert_eq!(waits[0], Requeue::After(Duration::from_secs(2)));
        assert_eq!(waits[1], Requeue::After(Duration::from_secs(4)));
        assert_eq!(waits[7], Requeue::After(MAX_ERROR_BACKOFF));
        assert_eq!(
            error_policy(&ReconcileError::Observe(RuntimeError::NotInstalled), 1),
            Requeue::After(MAX_ERROR_BACKOFF)
        );
    }

    #[test]
    fn every_minute_schedule_is_within_a_minute() {
        let s = Schedule::parse("* * * * *").unwrap();
        let next = next_occurrence(&s).unwrap();
        let wait = next.as_second() - jiff::Timestamp::now().as_second();
        assert!((0..=60).contains(&wait), "{wait}");
    }

    #[test]
    fn pidfd_fires_when_the_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.1")
            .spawn()
            .unwrap();
        let fd = pidfd_open(child.id()).expect("pidfd_open");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // SAFETY: the AsyncFd owns the OwnedFd.
            let fd = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            }
            .unwrap();
            let _ready = tokio::time::timeout(Duration::from_secs(5), fd.readable())
                .await
                .expect("pidfd readable")
                .unwrap();
        });
        child.wait().unwrap();
    }
}
