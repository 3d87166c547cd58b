//! The watchdog: every pass checks every declared, enabled agent whatever its tool activity
//! (process, silence, error cascade, runaway, repetition, spend, wedged screen), confirms a
//! finding over two passes unless the evidence is unambiguous, asks the `on_unhealthy` policy
//! what to do, and heals: revive (at most `max_revivals` per task, with a revival context),
//! notify (an investigation report), or stop for a person (safe mode and a failure message).
//! Each unhealthy agent becomes a `session_unhealthy` critical event.

pub mod dialog;
mod events;
mod heal;
pub mod health;
mod memory;
pub mod needs_input;
pub mod observe;
mod observers;
mod report;
pub mod waiting;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::policy::{Policies, UnhealthyAction};
use crate::render::Templates;
use crate::spec::{AgentSpec, Spec};
use crate::state::lock::{FleetLock, LockError, WATCHDOG_LOCK};
use crate::state::{self, AgentDir, FleetDir};
use crate::world::{self, Runtime};
pub use events::prune_events;
pub use health::{Check, Finding};
pub use memory::{MEMORY, Memory};
use observe::Observed;
use observers::{OBSERVE_TIMEOUT, observe_all};
pub use report::{AgentReport, Report};

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
        let _pass = match self.lock() {
            Ok(lock) => lock,
            Err(holder) => {
                let why = format!("another watchdog pass ({holder}) is running");
                return self.report(Vec::new(), None, Some(why));
            }
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
        // Lua only when something is unhealthy.
        let mut policies: Option<Policies> = None;
        let agents = match state::down::reason(&self.fleet) {
            // The operator took the fleet down: nothing is looked at, and nothing revived,
            // until the operator's `phoenix apply` brings it up.
            Some(why) => checked
                .iter()
                .map(|agent| {
                    let dir = self.fleet.agent(&agent.name);
                    let report = AgentReport::not_checked(agent, why.clone());
                    self.skipped(&dir, Memory::load(&dir), now, report)
                })
                .collect(),
            None => checked
                .iter()
                .zip(self.observe(&checked, now))
                .map(|(agent, observed)| match observed {
                    Ok((memory, seen)) => self.check(agent, memory, seen, now, &mut policies),
                    Err(why) => AgentReport::not_checked(agent, why),
                })
                .collect(),
        };
        let events_pruned = self
            .only
            .is_none()
            .then(|| prune_events(&self.fleet, self.spec.thresholds.events_retention).ok())
            .flatten()
            .filter(|n| *n > 0);
        self.report(agents, events_pruned, None)
    }

    fn report(
        &self,
        agents: Vec<AgentReport>,
        events_pruned: Option<usize>,
        skipped: Option<String>,
    ) -> Report {
        Report {
            ts: state::now_rfc3339(),
            fleet: self.spec.fleet.name.clone(),
            agents,
            events_pruned,
            skipped,
        }
    }

    /// The fleet's watchdog lock. A pass running in another process (the daemon's, a cron
    /// `watchdog --once`) is doing this very work: `Err` names it. Without a state dir yet
    /// there is nothing to share: `Ok(None)`, the pass goes on unlocked.
    fn lock(&self) -> Result<Option<FleetLock>, String> {
        match FleetLock::acquire_file(
            &self.fleet,
            WATCHDOG_LOCK,
            "watchdog pass",
            Duration::ZERO,
            |_| {},
        ) {
            Ok(lock) => Ok(Some(lock)),
            Err(LockError::Timeout { holder, .. }) => Err(holder),
            Err(_) => Ok(None),
        }
    }

    /// Each checked agent's memory and what its files and pane say, in the order of
    /// `checked` (an `Err` says why one was not observed in time), with every screen the
    /// checks need read in one runtime call.
    fn observe(&self, checked: &[AgentSpec], now: i64) -> Vec<Result<(Memory, Observed), String>> {
        let world = world::observe(self.spec, self.runtime).unwrap_or_else(|e| {
            tracing::warn!("watchdog: cannot observe the runtime ({e}); every agent looks gone");
            world::World::default()
        });
        let world = Arc::new(world);
        // The wrapper's pass (`only`) is about a failed turn: no ledger to bring up to date.
        let usage = self.only.is_none().then(|| observe::UsageCheck {
            prices: crate::usage::Prices::new(&self.spec.prices),
            max_tokens: self.spec.thresholds.max_tokens.is_some(),
        });
        let mut observed = observe_all(
            checked,
            &self.fleet,
            OBSERVE_TIMEOUT,
            move |agent: &AgentSpec, dir: &AgentDir| {
                let memory = Memory::load(dir);
                let observed = observe::observe(agent, &world, dir, &memory, usage.as_ref(), now);
                (memory, observed)
            },
        );
        let wanted: Vec<String> = observed
            .iter()
            .flatten()
            .filter_map(|(_, o)| o.wants_screen.clone())
            .collect();
        let mut screens = self.runtime.capture_many(&wanted, observe::SCREEN_LINES);
        for (memory, seen) in observed.iter_mut().flatten() {
            if let Some(text) = seen.wants_screen.as_ref().and_then(|p| screens.remove(p)) {
                seen.with_screen(text, memory);
            }
        }
        observed
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
            budget: agent.budget,
            screen_patterns,
        }
    }

    /// One observed agent: its findings, confirmed over two passes unless unambiguous, and
    /// healed once confirmed; its memory saved for the next pass.
    fn check(
        &self,
        agent: &AgentSpec,
        mut memory: Memory,
        mut seen: Observed,
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
            return self.skipped(&dir, memory, now, report);
        }
        // A wait for a person is no illness: it quiets the checks that would call it one.
        let wait = self
            .only
            .is_none()
            .then(|| self.waits(agent, &dir, &seen, &mut memory))
            .flatten();
        seen.inputs.waiting_for_person = wait.is_some();
        if let Some(wait) = &wait {
            self.notify_wait(agent, wait, &mut memory, now, &mut report);
            report.needs_input = Some(wait.clone());
        }
        let found = self.findings(agent, &seen, &memory, &mut report);
        if self.only.is_none()
            && let Some(warning) = health::reported_over_budget(&seen.inputs, &self.limits(agent))
        {
            self.warn_reported_budget(agent, &warning, &mut memory, now, &mut report);
        }
        // Confirm before acting: the same check in the previous pass, or evidence that needs
        // no second look. A session in the middle of a clean turn is never acted on at once.
        let confirmed: Vec<Finding> = found
            .iter()
            .filter(|f| f.unambiguous || memory.pending.contains(&f.check))
            .cloned()
            .collect();
        if self.only.is_none() {
            memory.remember(&seen, &found, now);
        }
        if confirmed.is_empty() {
            report.verdict = if found.is_empty() {
                "healthy"
            } else {
                "suspect"
            };
            report.findings = found;
        } else {
            report.verdict = "unhealthy";
            report.unconfirmed = found
                .iter()
                .filter(|f| !confirmed.contains(f))
                .cloned()
                .collect();
            report.findings = confirmed.clone();
            let policies = policies.get_or_insert_with(|| Policies::for_spec(self.spec));
            let case = heal::Case::new(agent, &dir, &seen, &confirmed, now);
            self.heal(&case, &mut memory, policies, &mut report);
            if matches!(
                report.action,
                Some(UnhealthyAction::Revive | UnhealthyAction::SafeMode)
            ) {
                memory.new_episode(&seen, &confirmed, &report);
            }
        }
        if let Err(e) = memory.save_if_changed(&before, &dir) {
            report.problems.push(format!("cannot save {MEMORY}: {e}"));
        }
        report
    }

    /// An agent not checked on purpose (stopped, in safe mode, the fleet down, …): a stop
    /// for a person or a restart ends the episode, so its findings start counting afresh.
    fn skipped(
        &self,
        dir: &AgentDir,
        mut memory: Memory,
        now: i64,
        report: AgentReport,
    ) -> AgentReport {
        if self.only.is_none() {
            let before = memory.clone();
            memory.pending.clear();
            memory.needs_input = None;
            memory.last_pass = Some(now);
            let _ = dir
                .path
                .is_dir()
                .then(|| memory.save_if_changed(&before, dir));
        }
        report
    }

    /// The budget is past only with what the agent reported itself: a note on every pass and
    /// a `usage_reported_over_budget` critical event once a day, never a stop.
    fn warn_reported_budget(
        &self,
        agent: &AgentSpec,
        warning: &str,
        memory: &mut Memory,
        now: i64,
        report: &mut AgentReport,
    ) {
        report.notes.push(warning.to_string());
        let day = crate::usage::local_day(now);
        if memory.reported_budget_warned.as_deref() == Some(day.as_str()) {
            return;
        }
        memory.reported_budget_warned = Some(day);
        let _ = self.fleet.record_critical(
            "usage_reported_over_budget",
            &agent.name,
            warning,
            "warned only: usage an agent reports itself never stops it alone",
            serde_json::json!({"budget": agent.budget.map(|b| serde_json::json!({
                "tokens_per_day": b.tokens_per_day, "usd_per_day": b.usd_per_day}))}),
        );
    }

    /// What the checks find, less a failed turn already handled; for the wrapper's pass
    /// (`failed_turn_of`) a failed turn only.
    fn findings(
        &self,
        agent: &AgentSpec,
        seen: &Observed,
        memory: &Memory,
        report: &mut AgentReport,
    ) -> Vec<Finding> {
        let mut found = health::assess(&seen.inputs, &self.limits(agent));
        if seen.failed_turn.is_some() && seen.failed_turn == memory.failed_turn_handled {
            found.retain(|f| f.check != health::Check::TurnFailed);
            report
                .notes
                .push("the failed turn was already handled; its next session is starting".into());
        }
        // The wrapper's pass is about its failed turn only: the other checks, and the memory
        // their confirmation over two passes an interval apart relies on, are the fleet's.
        if self.only.is_some() {
            found.retain(|f| f.check == health::Check::TurnFailed);
        }
        found
    }
}

#[cfg(test)]
mod fake_tests;
