//! The watchdog: every pass checks every declared, enabled agent whatever its tool activity
//! (process, silence, error cascade, runaway, repetition, spend, wedged screen), confirms a
//! finding over two passes unless the evidence is unambiguous, asks the `on_unhealthy` policy
//! what to do, and heals: revive (at most `max_revivals` per task, with a revival context),
//! notify (an investigation report), or stop for a person (safe mode and a failure message).
//! Each unhealthy agent becomes a `session_unhealthy` critical event.

pub mod health;
pub mod observe;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::notify::{Kind, Message, Notifier, Sent};
use crate::policy::{AgentInfo, Policies, UnhealthyAction};
use crate::recovery::{self, EndReason, Facts, Incident, Inject, Notify, Start, Unhealthy};
use crate::render::Templates;
use crate::spec::{AgentSpec, Spec};
use crate::state::Op;
use crate::state::lock::{FleetLock, LockError, WATCHDOG_LOCK};
use crate::state::{self, AgentDir, FleetDir};
use crate::world::{self, Runtime};
pub use health::{Check, Finding};

/// The watchdog's memory of one agent between passes (`watchdog.json` in its state dir).
pub const MEMORY: &str = "watchdog.json";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    #[serde(default)]
    pub last_pass: Option<i64>,
    /// What the previous pass found (confirmed or not).
    #[serde(default)]
    pub pending: Vec<Check>,
    #[serde(default)]
    pub screen_hash: Option<String>,
    /// The screen's digest without spinners and elapsed-time counters, and the latest pass
    /// that saw it change: a sign of life for the silence check.
    #[serde(default)]
    pub screen_moved_hash: Option<String>,
    #[serde(default)]
    pub screen_changed_at: Option<i64>,
    /// Tool calls in the log and the latest one's time at the previous pass (progress).
    #[serde(default)]
    pub tool_count: Option<u64>,
    #[serde(default)]
    pub last_tool_call: Option<i64>,
    /// The last notification: what it was about and when, so a long-running problem is not
    /// reported on every pass.
    #[serde(default)]
    pub notified_key: Option<String>,
    #[serde(default)]
    pub notified_at: Option<i64>,
    /// The failed turn (`Observed::failed_turn`) last acted on: whoever ran the pass (the
    /// agent's wrapper at once, the daemon, a cron `watchdog --once`), it is handled once.
    #[serde(default)]
    pub failed_turn_handled: Option<String>,
    /// The revivals an older phoenix kept here, kept as they are until the restart ledger
    /// has read them (it reads them once, when it is first written); never read otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revival_task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revivals: Option<u32>,
}

impl Memory {
    /// `watchdog.json` as a `JsonFile`, not synced: losing a write to a power cut only means
    /// confirming a finding once more.
    fn file(dir: &AgentDir) -> state::JsonFile<Memory> {
        state::JsonFile::new(dir, MEMORY, "watchdog").unsynced()
    }

    pub fn load(dir: &AgentDir) -> Memory {
        Memory::file(dir).load_or_default()
    }

    /// Write it if it changed since `before` (the time of the pass alone is no change): a
    /// pass over a large quiet fleet then writes nothing.
    fn save_if_changed(&self, before: &Memory, dir: &AgentDir) -> std::io::Result<()> {
        let unchanged = Memory {
            last_pass: self.last_pass,
            ..before.clone()
        } == *self;
        if unchanged && dir.file(MEMORY).exists() {
            return Ok(());
        }
        dir.ensure()?;
        // Last write wins, as for a memory of findings: no lock.
        Memory::file(dir)
            .save_locked(self)
            .map_err(std::io::Error::other)
    }
}

/// What one pass did for one agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentReport {
    pub agent: String,
    /// `healthy`, `suspect` (found once, to be confirmed), `unhealthy`, or `skipped`.
    pub verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Confirmed findings (all of them while `suspect`).
    pub findings: Vec<Finding>,
    /// Found for the first time along with confirmed ones: acted on if the next pass agrees.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unconfirmed: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<UnhealthyAction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// What was done, e.g. `revival_attempted (started fresh by its wrapper)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_taken: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issue_url: Option<String>,
    pub notifications: Vec<Sent>,
    pub notes: Vec<String>,
    pub problems: Vec<String>,
}

impl AgentReport {
    /// A report that found nothing yet: `verdict`, with the notes observation left.
    fn new(agent: &AgentSpec, verdict: &'static str, notes: Vec<String>) -> AgentReport {
        AgentReport {
            agent: agent.name.clone(),
            verdict,
            skipped: None,
            findings: Vec::new(),
            unconfirmed: Vec::new(),
            action: None,
            reason: None,
            decided_by: None,
            action_taken: None,
            issue_url: None,
            notifications: Vec::new(),
            notes,
            problems: Vec::new(),
        }
    }

    /// An agent whose files could not be read in time: nothing is decided, its memory is left
    /// as it was, and the next pass tries again.
    fn not_checked(agent: &AgentSpec, why: String) -> AgentReport {
        AgentReport {
            skipped: Some(why),
            ..AgentReport::new(agent, "skipped", Vec::new())
        }
    }
}

/// How long reading one agent's files may take before the pass goes on without it. Reads are
/// bounded (regular files only, byte limits); this covers what bounds cannot (a hung network
/// file system, a disk that stalls).
const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Agents (their state dirs) being observed. One still there when a pass starts is left out
/// of it, so a file that hangs every read holds one thread, not one more per pass.
static STILL_OBSERVING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Takes an agent off `STILL_OBSERVING` when dropped.
struct Done(PathBuf);

impl Drop for Done {
    fn drop(&mut self) {
        STILL_OBSERVING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n| *n != self.0);
    }
}

/// Threads that observe agents in one pass: enough that a few agents whose files hang leave
/// the rest to the others, few enough for a fleet of hundreds.
const OBSERVERS: usize = 8;

/// Observe every agent on a few threads, all within `timeout`: one agent's files can never
/// stall the pass for the others. An `Err` says why an agent was not observed.
fn observe_all<T: Send + 'static>(
    agents: &[AgentSpec],
    fleet: &FleetDir,
    timeout: Duration,
    observe: impl Fn(&AgentSpec, &AgentDir) -> T + Send + Sync + 'static,
) -> Vec<Result<T, String>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, mpsc};
    let deadline = std::time::Instant::now() + timeout;
    let still: Vec<PathBuf> = STILL_OBSERVING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut results: Vec<Option<Result<T, String>>> = Vec::new();
    let mut todo = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let dir = fleet.agent(&agent.name);
        if still.contains(&dir.path) {
            results.push(Some(Err(format!(
                "reading its files has not finished since an earlier pass (more than {}s): not checked",
                timeout.as_secs()
            ))));
        } else {
            results.push(None);
            todo.push((i, agent.clone(), dir));
        }
    }
    let todo = Arc::new(todo);
    let next = Arc::new(AtomicUsize::new(0));
    let observe = Arc::new(observe);
    let (tx, rx) = mpsc::channel::<(usize, T)>();
    for _ in 0..todo.len().min(OBSERVERS) {
        let (todo, next, observe, tx) = (todo.clone(), next.clone(), observe.clone(), tx.clone());
        // A thread that cannot start leaves its share to the others.
        let _ = std::thread::Builder::new()
            .name("phoenix-observe".into())
            .spawn(move || {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    // Past the deadline the pass has gone on: start nothing more for it.
                    let Some((i, agent, dir)) = todo.get(k) else {
                        break;
                    };
                    if std::time::Instant::now() >= deadline {
                        break;
                    }
                    STILL_OBSERVING
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(dir.path.clone());
                    // Dropped at the end, even by a panic: the agent is observable again.
                    let done = Done(dir.path.clone());
                    let observed = observe(agent, dir);
                    drop(done);
                    if tx.send((*i, observed)).is_err() {
                        break;
                    }
                }
            });
    }
    drop(tx);
    for _ in 0..todo.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok((i, observed)) => results[i] = Some(Ok(observed)),
            Err(_) => break,
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(format!(
                    "reading its files took more than {}s: not checked this pass",
                    timeout.as_secs()
                ))
            })
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ts: String,
    pub fleet: String,
    pub agents: Vec<AgentReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_pruned: Option<usize>,
    /// Why this pass did nothing: another pass (named) was running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Report {
    pub fn unhealthy(&self) -> usize {
        self.agents
            .iter()
            .filter(|a| a.verdict == "unhealthy")
            .count()
    }
}

/// One watchdog pass over the fleet of `config`.
pub fn pass(config: &Path) -> crate::error::Result<Report> {
    let spec = crate::spec::load(config)?;
    let runtime = world::runtime_for(&spec);
    Ok(Watchdog::new(&spec, &*runtime).pass())
}

pub struct Watchdog<'a> {
    spec: &'a Spec,
    runtime: &'a dyn Runtime,
    fleet: FleetDir,
    templates: Templates,
    /// Set when the daemon running this pass was asked to stop: no revival starts an agent
    /// after that.
    stopping: Option<Arc<AtomicBool>>,
    /// Check this agent's failed turn only (`failed_turn_of`).
    only: Option<String>,
}

impl<'a> Watchdog<'a> {
    pub fn new(spec: &'a Spec, runtime: &'a dyn Runtime) -> Watchdog<'a> {
        Watchdog {
            spec,
            runtime,
            fleet: FleetDir::new(&spec.fleet.state_dir),
            templates: Templates::for_spec(spec),
            stopping: None,
            only: None,
        }
    }

    /// Check only the agent `name`, and only for a failed turn (the wrapper's pass when the
    /// turn-failed hook signals one); the other checks and the fleet-wide chores (temp files,
    /// old events) are left to the fleet's passes.
    pub fn failed_turn_of(mut self, name: &str) -> Self {
        self.only = Some(name.to_string());
        self
    }

    /// Skip every revival once `flag` is set (`phoenix run` sets it on SIGTERM/SIGINT).
    pub fn stop_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stopping = Some(flag);
        self
    }

    fn is_stopping(&self) -> bool {
        self.stopping
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }

    pub fn pass(&self) -> Report {
        // A pass running in another process (the daemon's, a cron `watchdog --once`) is doing
        // this very work. Without a state dir yet there is nothing to share: go on unlocked.
        let _pass = match FleetLock::acquire_file(
            &self.fleet,
            WATCHDOG_LOCK,
            "watchdog pass",
            Duration::ZERO,
            |_| {},
        ) {
            Ok(lock) => Some(lock),
            Err(LockError::Timeout { holder, .. }) => {
                return Report {
                    ts: state::now_rfc3339(),
                    fleet: self.spec.fleet.name.clone(),
                    agents: Vec::new(),
                    events_pruned: None,
                    skipped: Some(format!("another watchdog pass ({holder}) is running")),
                };
            }
            Err(_) => None,
        };
        let now = jiff::Timestamp::now().as_second();
        // Temp files of writers killed mid-write (or of writes that failed where removing
        // them failed too) would pile up forever: each pass removes the stale ones.
        if self.only.is_none() {
            let swept = self.fleet.sweep_temp_files();
            if swept > 0 {
                tracing::info!("watchdog: removed {swept} stale temp file(s) from the state dir");
            }
        }
        let checked: Vec<AgentSpec> = self
            .spec
            .agents
            .iter()
            .filter(|a| self.only.as_ref().is_none_or(|name| *name == a.name))
            .cloned()
            .collect();
        let world = world::observe(self.spec, self.runtime).unwrap_or_else(|e| {
            tracing::warn!("watchdog: cannot observe the runtime ({e}); every agent looks gone");
            world::World::default()
        });
        // Lua only when something is unhealthy.
        let mut policies: Option<Policies> = None;
        let world = std::sync::Arc::new(world);
        let count_tokens = self.spec.thresholds.max_tokens.is_some();
        let observing = observe_all(
            &checked,
            &self.fleet,
            OBSERVE_TIMEOUT,
            move |agent: &AgentSpec, dir: &AgentDir| {
                let memory = Memory::load(dir);
                let observed = observe::observe(agent, &world, dir, &memory, count_tokens, now);
                (memory, observed)
            },
        );
        let mut late = Vec::new();
        let mut seen: Vec<(Memory, observe::Observed)> = Vec::new();
        for (agent, observed) in checked.iter().zip(observing) {
            match observed {
                Ok(pair) => seen.push(pair),
                Err(why) => late.push((agent.name.clone(), why)),
            }
        }
        // Every screen the checks need, in one runtime call.
        let wanted: Vec<String> = seen
            .iter()
            .filter_map(|(_, o)| o.wants_screen.clone())
            .collect();
        let mut screens = self.runtime.capture_many(&wanted, observe::SCREEN_LINES);
        for (memory, observed) in &mut seen {
            if let Some(text) = observed
                .wants_screen
                .as_ref()
                .and_then(|p| screens.remove(p))
            {
                observed.with_screen(text, memory);
            }
        }
        let mut agents = Vec::new();
        let mut seen = seen.into_iter();
        for agent in &checked {
            match late.iter().position(|(name, _)| *name == agent.name) {
                Some(i) => agents.push(AgentReport::not_checked(agent, late.remove(i).1)),
                None => {
                    let (memory, observed) = seen.next().expect("one observation per agent");
                    agents.push(self.check(agent, memory, observed, now, &mut policies));
                }
            }
        }
        let events_pruned = self
            .only
            .is_none()
            .then(|| prune_events(&self.fleet, self.spec.thresholds.events_retention).ok())
            .flatten()
            .filter(|n| *n > 0);
        Report {
            ts: state::now_rfc3339(),
            fleet: self.spec.fleet.name.clone(),
            agents,
            events_pruned,
            skipped: None,
        }
    }

    fn limits(&self, agent: &AgentSpec) -> health::Limits {
        let t = &self.spec.thresholds;
        let mut screen_patterns: Vec<String> = health::SCREEN_PATTERNS
            .iter()
            .map(|s| s.to_string())
            .collect();
        for key in ["all", agent.cli.to_string().as_str()] {
            if let Some(extra) = self.spec.watchdog.screen_patterns.get(key) {
                screen_patterns.extend(extra.iter().map(|s| s.to_lowercase()));
            }
        }
        health::Limits {
            silence: t.silence,
            error_cascade: t.error_cascade,
            runaway: t.runaway,
            repeat: t.repeat,
            max_tokens: t.max_tokens,
            screen_patterns,
        }
    }

    fn check(
        &self,
        agent: &AgentSpec,
        mut memory: Memory,
        seen: observe::Observed,
        now: i64,
        policies: &mut Option<Policies>,
    ) -> AgentReport {
        let dir = self.fleet.agent(&agent.name);
        let before = memory.clone();
        let mut report = AgentReport {
            skipped: seen.skip.clone(),
            ..AgentReport::new(agent, "healthy", seen.inputs.notes.clone())
        };
        if seen.skip.is_some() {
            report.verdict = "skipped";
            if self.only.is_some() {
                return report;
            }
            // A stop for a person or a restart ends the episode: start counting afresh.
            memory.pending.clear();
            memory.last_pass = Some(now);
            let _ = dir
                .path
                .is_dir()
                .then(|| memory.save_if_changed(&before, &dir));
            return report;
        }
        let mut found = health::assess(&seen.inputs, &self.limits(agent));
        if seen.failed_turn.is_some() && seen.failed_turn == memory.failed_turn_handled {
            found.retain(|f| f.check != health::Check::TurnFailed);
            report
                .notes
                .push("the failed turn was already handled; its next session is starting".into());
        }
        // The wrapper's pass is about its failed turn only: the other checks, and the memory
        // their confirmation over two passes an interval apart relies on, are the fleet's.
        let failed_turn_only = self.only.is_some();
        if failed_turn_only {
            found.retain(|f| f.check == health::Check::TurnFailed);
        }
        // Confirm before acting: the same check in the previous pass, or evidence that needs
        // no second look. A session in the middle of a clean turn is never acted on at once.
        let confirmed: Vec<Finding> = found
            .iter()
            .filter(|f| f.unambiguous || memory.pending.contains(&f.check))
            .cloned()
            .collect();
        if !failed_turn_only {
            memory.pending = found.iter().map(|f| f.check).collect();
            memory.screen_hash = seen.screen_hash.clone();
            memory.screen_moved_hash = seen.screen_moved_hash.clone();
            memory.screen_changed_at = seen.inputs.screen_changed_at;
            memory.tool_count = Some(seen.inputs.tool_count);
            memory.last_tool_call = seen.inputs.last_tool_call;
            memory.last_pass = Some(now);
        }
        report.findings = found.clone();
        if confirmed.is_empty() {
            report.verdict = if found.is_empty() {
                "healthy"
            } else {
                "suspect"
            };
            if let Err(e) = memory.save_if_changed(&before, &dir) {
                report.problems.push(format!("cannot save {MEMORY}: {e}"));
            }
            return report;
        }
        report.verdict = "unhealthy";
        report.findings = confirmed.clone();
        report.unconfirmed = found
            .iter()
            .filter(|f| !confirmed.contains(f))
            .cloned()
            .collect();
        let policies = policies.get_or_insert_with(|| Policies::for_spec(self.spec));
        self.heal(
            agent,
            &dir,
            &seen,
            &confirmed,
            &mut memory,
            policies,
            &mut report,
            now,
        );
        if matches!(
            report.action,
            Some(UnhealthyAction::Revive | UnhealthyAction::SafeMode)
        ) {
            // A new session is a new episode: its problems are confirmed afresh.
            memory.pending.clear();
            if confirmed
                .iter()
                .any(|f| f.check == health::Check::TurnFailed)
                && !report
                    .action_taken
                    .as_deref()
                    .is_some_and(|a| a.starts_with("revival_skipped"))
            {
                memory.failed_turn_handled = seen.failed_turn.clone();
            }
            memory.screen_hash = None;
            memory.screen_moved_hash = None;
        }
        if let Err(e) = memory.save_if_changed(&before, &dir) {
            report.problems.push(format!("cannot save {MEMORY}: {e}"));
        }
        report
    }

    /// Confirmed findings are an incident: the recovery pipeline decides what to do (the
    /// `on_unhealthy` policy, and the Clinic for an error the session showed); this carries
    /// it out: the investigation report, then the revival, the report, or the stop for a
    /// person.
    #[allow(clippy::too_many_arguments)]
    fn heal(
        &self,
        agent: &AgentSpec,
        dir: &AgentDir,
        seen: &observe::Observed,
        findings: &[Finding],
        memory: &mut Memory,
        policies: &Policies,
        report: &mut AgentReport,
        now: i64,
    ) {
        let task = seen.task.clone();
        // Spent revivals live in the restart ledger, with the agent's other budgets.
        let revivals = recovery::record::load(dir)
            .revivals
            .for_task(task.as_deref());
        let max_revivals = self.spec.watchdog.max_revivals;
        let incident = Incident::Unhealthy(Unhealthy {
            findings: findings
                .iter()
                .map(|f| crate::policy::Finding {
                    check: f.check.as_str().to_string(),
                    reason: f.reason.clone(),
                    summary: f.summary.clone(),
                })
                .collect(),
            task: task.clone(),
            // An error the CLI showed or reported is the Clinic's to treat.
            erred: findings
                .iter()
                .any(|f| matches!(f.check, health::Check::TurnFailed | health::Check::Screen)),
        });
        let facts = Facts {
            revivals_for_task: revivals,
            max_revivals,
            stopping: self.is_stopping(),
            ..Facts::new(AgentInfo::from_spec(self.spec, agent))
        };
        let r = recovery::decide(&incident, &facts, Some(policies), |_| {
            self.treat(agent, dir, seen, policies)
        });
        report.problems.extend(r.problems.iter().cloned());
        let decision = r
            .unhealthy
            .clone()
            .expect("an unhealthy incident's decision");
        report.action = Some(decision.action);
        report.reason = decision.reason.clone();
        report.decided_by = Some(r.decided_by.clone());

        let inputs = &seen.inputs;
        let last_tool_call = inputs.last_tool_call.map(|t| {
            jiff::Timestamp::from_second(t)
                .map(|t| t.to_string())
                .unwrap_or_default()
        });
        let mut ctx = json!({
            "agent": agent.name, "fleet": self.spec.fleet.name, "cli": agent.cli.to_string(),
            "findings": findings, "decision": decision, "decided_by": r.decided_by,
            "task": task, "revivals": revivals, "max_revivals": max_revivals,
            "last_tool_call": last_tool_call, "tool_count": inputs.tool_count,
            "recent_calls": inputs.recent_calls.iter().rev().take(10).rev().collect::<Vec<_>>(),
            "notes": inputs.notes, "ts": state::now_rfc3339(), "issue_url": Value::Null,
        });
        let reason = findings
            .iter()
            .map(|f| f.reason.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let title = findings
            .iter()
            .map(|f| f.check.as_str())
            .collect::<Vec<_>>()
            .join(", ");

        // The investigation report, unless this very problem was reported recently.
        let key = format!("{}|{}", reason_key(findings), task.as_deref().unwrap_or(""));
        let cooldown = self.spec.notify.issue_cooldown.as_secs() as i64;
        let reported_recently = memory.notified_key.as_deref() == Some(key.as_str())
            && memory.notified_at.is_some_and(|t| now - t < cooldown);
        if decision.action != UnhealthyAction::Ignore && !reported_recently {
            let body = self.render("investigation.md.j2", &ctx, report);
            report.notifications = self.notify(Kind::Investigation, agent, &title, &body);
            report.issue_url = report
                .notifications
                .iter()
                .find_map(|s| s.url.clone().filter(|_| s.channel == "github"));
            ctx["issue_url"] = json!(report.issue_url);
            memory.notified_key = Some(key);
            memory.notified_at = Some(now);
        }

        // What the next start gets: the Clinic's context, else the revival context.
        if decision.action == UnhealthyAction::Revive {
            let revival = (r.inject == Inject::RevivalContext)
                .then(|| self.render("revival_context.md.j2", &ctx, report));
            if let Err(e) = recovery::execute::prepare_start(dir, &r, revival.as_deref()) {
                report
                    .problems
                    .push(format!("cannot save the revival context: {e}"));
            }
        }
        if r.spends_revival
            && let Err(e) = recovery::execute::spend_revival(dir, task.as_deref())
        {
            report
                .problems
                .push(format!("cannot record the revival: {e}"));
        }
        if let Some(Notify::Failure(text)) = &r.notify {
            let text = match text {
                Some(text) => text.clone(),
                None => self.render("failure_message.md.j2", &ctx, report),
            };
            let sent = self.notify(Kind::Failure, agent, "couldn't recover", &text);
            report.notifications.extend(sent);
        }
        let action_taken = match (decision.action, r.start) {
            (UnhealthyAction::Ignore, _) => "ignored".to_string(),
            (UnhealthyAction::Notify, _) if reported_recently => "already reported".to_string(),
            (UnhealthyAction::Notify, _) => "notified".to_string(),
            (action, Some(Start::SafeMode)) => {
                let why = r.quarantine.as_deref().unwrap_or("watchdog");
                match self.stop_for_a_person(dir, why, &inputs.process) {
                    Ok(()) if action == UnhealthyAction::Revive => "safe_mode (clinic)".to_string(),
                    Ok(()) => "safe_mode (unrecoverable)".to_string(),
                    Err(e) => {
                        report
                            .problems
                            .push(format!("cannot stop the agent: {e:#}"));
                        "safe_mode_failed".to_string()
                    }
                }
            }
            _ if r.held.is_some() => {
                report.problems.push(format!(
                    "revival skipped: {}",
                    r.held.as_deref().unwrap_or("")
                ));
                "revival_skipped (stopping)".to_string()
            }
            (_, start) => match self.revive(agent, dir, &inputs.process, start, r.reason) {
                Ok(how) => format!("revival_attempted ({how})"),
                Err(e) => {
                    report.problems.push(format!("revival failed: {e:#}"));
                    "revival_failed".to_string()
                }
            },
        };
        report.action_taken = Some(action_taken.clone());
        let _ = dir.record_op(
            Op::Watchdog,
            json!({"findings": findings, "action": decision.action, "reason": decision.reason,
                   "action_taken": action_taken, "issue_url": report.issue_url}),
        );
        let event = json!({
            "ts": state::now_rfc3339(), "event": "session_unhealthy", "agent": agent.name,
            "project": self.spec.fleet.name, "reason": reason, "action_taken": action_taken,
            "github_issue": report.issue_url,
            "details": {
                "findings": findings, "decided_by": r.decided_by, "policy_reason": decision.reason,
                "last_tool_call": ctx["last_tool_call"], "tool_count": inputs.tool_count,
                "task": task, "revivals_for_task": revivals, "notifications": report.notifications,
                "problems": report.problems,
            },
        });
        if let Err(e) = recovery::execute::record_unhealthy(&self.fleet, &event) {
            report
                .problems
                .push(format!("cannot record the critical event: {e}"));
        }
    }

    fn render(&self, template: &str, ctx: &Value, report: &mut AgentReport) -> String {
        let (text, broken) = self.templates.render_or_builtin(template, ctx);
        if let Some(e) = broken {
            report.problems.push(e.to_string());
        }
        text.unwrap_or_else(|e| {
            report.problems.push(e.to_string());
            format!("agent `{}`: see `phoenix events`", ctx["agent"])
        })
    }

    fn notify(&self, kind: Kind, agent: &AgentSpec, title: &str, body: &str) -> Vec<Sent> {
        if self.spec.notify.is_empty() {
            return Vec::new();
        }
        Notifier::new(&self.spec.notify, &self.fleet)
            .only(agent.notify.as_deref())
            .send(&Message {
                kind,
                agent: agent.name.clone(),
                fleet: self.spec.fleet.name.clone(),
                title: title.to_string(),
                body: body.to_string(),
            })
    }

    /// Restart the agent: through its live wrapper when the CLI is there (resuming, or fresh
    /// when the recovery says so: the executor wrote that intent), else by restarting the
    /// pane.
    fn revive(
        &self,
        agent: &AgentSpec,
        dir: &AgentDir,
        process: &Option<health::Process>,
        start: Option<Start>,
        reason: EndReason,
    ) -> crate::error::Result<&'static str> {
        let fresh = start == Some(Start::Fresh);
        match process {
            Some(health::Process::Alive { pid }) => {
                crate::restart::stop_under_wrapper(dir, *pid, reason, fresh)?;
                crate::state::daemon::poke(&self.fleet, &agent.name);
                Ok(if fresh {
                    "started fresh by its wrapper"
                } else {
                    "resumed by its wrapper"
                })
            }
            _ => {
                crate::restart::revive(self.spec, self.runtime, &agent.name)?;
                Ok("pane restarted")
            }
        }
    }

    /// The Clinic on an error the CLI reported (a failed turn) or shows (a wedged screen):
    /// triage from the screen, the transcript and the logs. `None` when the Clinic cannot
    /// name the cause (the revival then goes as usual).
    fn treat(
        &self,
        agent: &AgentSpec,
        dir: &AgentDir,
        seen: &observe::Observed,
        policies: &Policies,
    ) -> Option<crate::clinic::Recovery> {
        let clinic = crate::clinic::Clinic {
            policies,
            templates: &self.templates,
            settings: &self.spec.clinic,
            fleet: self.fleet.clone(),
            spent: recovery::record::load(dir).recoveries,
        };
        let output = [seen.inputs.turn_error.clone(), seen.inputs.screen.clone()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("\n");
        clinic.after_crash(&crate::clinic::TriageInput {
            agent: AgentInfo::from_spec(self.spec, agent),
            dir,
            exit: None,
            transcript: None,
            output: (!output.trim().is_empty()).then_some(output),
            session: crate::clinic::triage::Session::Latest,
        })
    }

    /// Quarantine the agent and stop its CLI: its wrapper shows safe mode until a person runs
    /// `phoenix restart`.
    fn stop_for_a_person(
        &self,
        dir: &AgentDir,
        why: &str,
        process: &Option<health::Process>,
    ) -> crate::error::Result<()> {
        recovery::execute::quarantine(dir, why)?;
        if let Some(health::Process::Alive { pid }) = process {
            crate::restart::stop_under_wrapper(dir, *pid, EndReason::WatchdogKill, false)?;
        }
        Ok(())
    }
}

fn reason_key(findings: &[Finding]) -> String {
    let mut checks: Vec<&str> = findings.iter().map(|f| f.check.as_str()).collect();
    checks.sort_unstable();
    checks.join(",")
}

/// Drop events older than `retention` from critical_events.jsonl (atomically, keeping lines
/// that do not parse: a person may want to see them). Returns how many were dropped.
pub fn prune_events(fleet: &FleetDir, retention: Duration) -> std::io::Result<usize> {
    let path = fleet.critical_events_path();
    // Never through a link planted in its place.
    let read = |path: &Path| -> std::io::Result<String> {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut state::file::open_read(path)?, &mut text)?;
        Ok(text)
    };
    let Ok(text) = read(&path) else {
        return Ok(0);
    };
    let cutoff = jiff::Timestamp::now().as_second() - retention.as_secs() as i64;
    let time = |line: &str| {
        serde_json::from_str::<Value>(line).ok().and_then(|v| {
            v["ts"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        })
    };
    let old = |line: &str| time(line).is_some_and(|t| t.as_second() < cutoff);
    // Cheap check first: events are appended in time order, so look at the oldest one.
    if text
        .lines()
        .find_map(time)
        .is_none_or(|t| t.as_second() >= cutoff)
    {
        return Ok(0);
    }
    let _lock = fleet.events_lock()?;
    // Read again under the lock: an event appended meanwhile must not be lost.
    let text = read(&path)?;
    let mut dropped = 0;
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        if old(line) {
            dropped += 1;
        } else {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    state::atomic_write(&path, kept.as_bytes())?;
    Ok(dropped)
}

#[cfg(test)]
mod fake_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// One agent whose files hang every read: the others are observed, it is reported as not
    /// checked, and the next pass starts no second reader for it.
    #[test]
    fn one_stuck_agent_does_not_stall_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = crate::spec::parse(
            "[[agent]]\nname = \"ok\"\ncommand = \"x\"\n[[agent]]\nname = \"stuck\"\ncommand = \"x\"\n\
             [[agent]]\nname = \"fine\"\ncommand = \"x\"\n",
            &tmp.path().join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        let fleet = FleetDir::new(tmp.path().join(".phoenix"));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let observe = move |agent: &AgentSpec, _: &AgentDir| {
            if agent.name == "stuck" {
                let _ = wait.lock().unwrap().recv();
            }
            agent.name.clone()
        };
        let observe = std::sync::Arc::new(observe);
        type Observer = dyn Fn(&AgentSpec, &AgentDir) -> String + Send + Sync;
        let run = |observe: std::sync::Arc<Observer>| {
            observe_all(
                &spec.agents,
                &fleet,
                Duration::from_millis(200),
                move |a, d| observe(a, d),
            )
        };
        let started = std::time::Instant::now();
        let first = run(observe.clone());
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(first[0], Ok("ok".to_string()));
        assert!(
            first[1].as_ref().unwrap_err().contains("took more than"),
            "{first:?}"
        );
        assert_eq!(first[2], Ok("fine".to_string()));
        let second = run(observe.clone());
        assert!(
            second[1]
                .as_ref()
                .unwrap_err()
                .contains("has not finished since an earlier pass"),
            "{second:?}"
        );
        assert_eq!(second[2], Ok("fine".to_string()));
        // Once the read ends, the agent is observed again.
        release.send(()).unwrap();
        let dir = fleet.agent("stuck").path;
        for _ in 0..100 {
            if !STILL_OBSERVING.lock().unwrap().contains(&dir) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        release.send(()).unwrap();
        assert_eq!(run(observe)[1], Ok("stuck".to_string()));
    }

    #[test]
    fn old_events_are_pruned_and_new_and_unreadable_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        fleet.ensure().unwrap();
        let now = jiff::Timestamp::now();
        let old = (now - jiff::SignedDuration::from_hours(24 * 40)).to_string();
        let text = format!(
            "not json\n{{\"ts\":\"{old}\",\"event\":\"a\"}}\n{{\"ts\":\"{old}\",\"event\":\"b\"}}\n{{\"ts\":\"{now}\",\"event\":\"c\"}}\n"
        );
        std::fs::write(fleet.critical_events_path(), text).unwrap();
        let dropped = prune_events(&fleet, Duration::from_secs(30 * 86_400)).unwrap();
        assert_eq!(dropped, 2);
        let kept = std::fs::read_to_string(fleet.critical_events_path()).unwrap();
        assert_eq!(kept.lines().count(), 2, "{kept}");
        assert!(kept.contains("not json") && kept.contains("\"c\""));
        // Nothing old left: the file is not rewritten.
        assert_eq!(
            prune_events(&fleet, Duration::from_secs(30 * 86_400)).unwrap(),
            0
        );
    }
}
