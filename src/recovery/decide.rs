//! The one decision of the recovery pipeline: from an [`Incident`] (an exit its wrapper saw,
//! or findings the watchdog confirmed) and the [`Facts`], what happens next ([`Recovery`]).
//! The `on_exit` / `on_unhealthy` policies (Lua or the built-ins) answer the crash-loop and
//! the what-to-do questions; the Clinic, asked only when the answer leaves room for a
//! treatment, refines how the agent starts again. Pure: no files, no clock; the detectors
//! gather the facts and [`super::execute`] carries the answer out.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::policy::Start;
use crate::policy::{self, AgentInfo, ExitInfo, Policies, UnhealthyAction, UnhealthyDecision};

/// The one recorded reason a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The CLI exited with code 0.
    CleanExit,
    /// Non-zero exit or a signal.
    Crash,
    /// Alive but never showed life within `life_deadline`: a failed start, replaced.
    NoLife,
    WatchdogKill,
    DriftReplacement,
    /// A planned cycle, e.g. before the context fills up.
    PlannedCycle,
    OperatorRestart,
    /// Stopped on purpose: disabled, pruned, or `quit` in safe mode.
    OperatorStop,
    /// The pane or the wrapper was killed from outside (tmux `kill-pane`, SIGTERM).
    RuntimeStop,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::CleanExit => "clean_exit",
            EndReason::Crash => "crash",
            EndReason::NoLife => "no_life",
            EndReason::WatchdogKill => "watchdog_kill",
            EndReason::DriftReplacement => "drift_replacement",
            EndReason::PlannedCycle => "planned_cycle",
            EndReason::OperatorRestart => "operator_restart",
            EndReason::OperatorStop => "operator_stop",
            EndReason::RuntimeStop => "runtime_stop",
        }
    }
}

/// An intentional stop announced before the agent was killed (`stop_request.json`). Whether
/// the next start is fresh is not its to say: that intent travels one way only, the `.fresh`
/// marker (an old request's `fresh` field is ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    pub reason: EndReason,
    /// Seconds since the epoch; old requests are ignored.
    pub ts: i64,
}

/// How the run ended, as its wrapper saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitFacts {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub runtime_ms: u64,
    /// How the run was started (`resume` or `fresh`); a resume that came back as another
    /// session counts as fresh.
    pub mode: Start,
    pub session_id: Option<String>,
    /// The run showed life (a hook, or pane output for custom CLIs) before it ended.
    pub showed_life: bool,
    pub requested: Option<StopRequest>,
    /// The `.fresh` marker asks for a clean slate (the one way a fresh start is asked for).
    pub fresh_requested: bool,
    /// Seconds since the epoch.
    pub now: i64,
}

impl ExitFacts {
    fn is_clean(&self) -> bool {
        self.code == Some(0) && self.signal.is_none()
    }
}

/// Findings the watchdog confirmed about a session (a failed turn is one: `turn_failed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Unhealthy {
    pub findings: Vec<policy::Finding>,
    /// The task (prompt) the session is on: revivals are counted per task.
    pub task: Option<String>,
    /// An error the CLI reported (a failed turn) or shows (a wedged screen): the Clinic can
    /// read its cause.
    pub erred: bool,
}

/// What happened: what a detector (the wrapper, the watchdog) saw, and nothing it decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Incident {
    /// The agent's CLI exited under its wrapper.
    Exit(ExitFacts),
    /// The watchdog confirmed findings about a running (or vanished) session.
    Unhealthy(Unhealthy),
}

impl Incident {
    /// Whether this incident is a crash (an exit that was neither clean nor asked for): its
    /// evidence is kept before anything else happens.
    pub fn is_crash(&self) -> bool {
        matches!(self, Incident::Exit(e) if e.requested.is_none() && !e.is_clean())
    }
}

/// What the decision knows about the agent, from its spec and its restart ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// As a policy sees it (restart settings, thresholds, its policy file).
    pub info: AgentInfo,
    /// Earlier crashes (seconds since the epoch); those outside the crash window are ignored.
    pub recent_crashes: Vec<i64>,
    /// Watchdog revivals already spent on the current task, and the limit.
    pub revivals_for_task: u32,
    pub max_revivals: u32,
    /// `phoenix run` is stopping: no revival starts anything now.
    pub stopping: bool,
}

impl Facts {
    pub fn new(info: AgentInfo) -> Facts {
        Facts {
            info,
            recent_crashes: Vec::new(),
            revivals_for_task: 0,
            max_revivals: 1,
            stopping: false,
        }
    }
}

/// What the next session is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Inject {
    Nothing,
    /// The Clinic's rendered reminder or recovery context.
    Text(String),
    /// The watchdog's revival context (`revival_context.md.j2`, rendered by the executor).
    RevivalContext,
}

/// Who is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Notify {
    /// "couldn't recover": the Clinic's own text, else `failure_message.md.j2`.
    Failure(Option<String>),
}

/// What happens next: one value, carried out by [`super::execute`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recovery {
    /// How the agent starts again; `None`: nothing is restarted (the watchdog only reports,
    /// or ignores what it found).
    pub start: Option<Start>,
    /// Wait this long before starting again.
    #[serde(with = "crate::policy::types::seconds")]
    pub delay: Duration,
    /// The reason the session ends (recorded once, in `agent_exit`).
    pub reason: EndReason,
    pub inject: Inject,
    pub notify: Option<Notify>,
    /// Stop for a person until `phoenix restart`, with why (what safe mode shows).
    pub quarantine: Option<String>,
    /// A crash loop's critical event.
    pub critical: Option<String>,
    /// For people only: nothing is decided on it.
    pub explain: String,
    /// The policy that answered (`requested` for a stop asked for on purpose).
    pub decided_by: String,
    pub counts_as_crash: bool,
    /// Forget the session id: it is not to be resumed.
    pub clear_session: bool,
    /// Write `.clean-exit` so that no reconciler restarts it.
    pub clean_exit_marker: bool,
    /// The Clinic cleared the context (a full one): the handoff is a context-limit one.
    pub context_cleared: bool,
    /// One watchdog revival is spent on the task.
    pub spends_revival: bool,
    /// Why nothing is started now although `start` says how (`phoenix run` is stopping).
    pub held: Option<String>,
    /// The `on_unhealthy` answer, for the watchdog's report and templates.
    pub unhealthy: Option<UnhealthyDecision>,
    /// The Clinic's cause and treatment, when it treated the incident.
    pub clinic: Option<Treatment>,
    /// What went wrong on the way (a broken policy, a template).
    pub problems: Vec<String>,
}

/// The Clinic's part of a recovery, for the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Treatment {
    pub root_cause: String,
    pub action: String,
}

impl Recovery {
    fn new(reason: EndReason, explain: String, decided_by: String) -> Recovery {
        Recovery {
            start: None,
            delay: Duration::ZERO,
            reason,
            inject: Inject::Nothing,
            notify: None,
            quarantine: None,
            critical: None,
            explain,
            decided_by,
            counts_as_crash: false,
            clear_session: false,
            clean_exit_marker: false,
            context_cleared: false,
            spends_revival: false,
            held: None,
            unhealthy: None,
            clinic: None,
            problems: Vec::new(),
        }
    }

    pub fn delay_ms(&self) -> u64 {
        self.delay.as_millis().min(u128::from(u64::MAX)) as u64
    }
}

/// The one decision. `policies`: `None` answers with the built-ins (a stop asked for on
/// purpose needs none). `clinic` is asked only when the answer leaves room for a treatment
/// (a crash the policy does not stop, a revival of a session that showed an error); it is
/// given what `on_exit` was shown (`None` for the watchdog's findings).
pub fn decide(
    incident: &Incident,
    facts: &Facts,
    policies: Option<&Policies>,
    clinic: impl FnOnce(Option<&ExitInfo>) -> Option<crate::clinic::Recovery>,
) -> Recovery {
    match incident {
        Incident::Exit(exit) => after_exit(exit, facts, policies, clinic),
        Incident::Unhealthy(u) => when_unhealthy(u, facts, policies, clinic),
    }
}

/// Classify the exit, ask `on_exit` what next, let the Clinic treat a crash it can name, and
/// derive the bookkeeping. Stops announced on purpose (operator restart, drift replacement)
/// are not the policy's to judge: they are carried out as requested.
fn after_exit(
    exit: &ExitFacts,
    facts: &Facts,
    policies: Option<&Policies>,
    clinic: impl FnOnce(Option<&ExitInfo>) -> Option<crate::clinic::Recovery>,
) -> Recovery {
    if let Some(req) = &exit.requested {
        let start = if exit.fresh_requested {
            Start::Fresh
        } else {
            Start::Resume
        };
        return Recovery {
            start: Some(start),
            clear_session: start == Start::Fresh,
            ..Recovery::new(
                req.reason,
                format!("stopped on purpose ({})", req.reason.as_str()),
                "requested".into(),
            )
        };
    }
    let clean = exit.is_clean();
    let reason = match (clean, exit.showed_life) {
        (true, _) => EndReason::CleanExit,
        (false, true) => EndReason::Crash,
        (false, false) => EndReason::NoLife,
    };
    let restart = &facts.info.restart;
    let window_start_ms = i128::from(exit.now) * 1000 - restart.crash_window.as_millis() as i128;
    let earlier = facts
        .recent_crashes
        .iter()
        .filter(|&&t| i128::from(t) * 1000 > window_start_ms)
        .count();
    let crashes = if clean {
        0
    } else {
        u32::try_from(earlier + 1).unwrap_or(u32::MAX)
    };
    let info = ExitInfo {
        code: exit.code,
        signal: exit.signal,
        runtime_ms: exit.runtime_ms,
        resumed: exit.mode == Start::Resume,
        showed_life: exit.showed_life,
        crashes_in_window: crashes,
        fresh_requested: exit.fresh_requested,
        session_id: exit.session_id.clone(),
    };
    let (answer, by) = match policies {
        Some(p) => {
            let d = p.on_exit(&facts.info, &info);
            (d.value, d.by)
        }
        None => (
            policy::builtin::on_exit(&facts.info, &info),
            policy::BUILTIN.to_string(),
        ),
    };
    let why = answer
        .reason
        .clone()
        .unwrap_or_else(|| format!("the policy chose {}", answer.action.as_str()));
    let what = match (exit.code, exit.signal) {
        _ if clean => String::new(),
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(code), None) => format!("exit code {code}"),
        (None, None) => "unknown exit".to_string(),
    };
    let what = match (clean, exit.showed_life) {
        (true, _) => what,
        (false, true) => format!("{what}; "),
        (false, false) => format!("{what}, never showed life; "),
    };
    let safe = answer.action == Start::SafeMode;
    let critical = (safe && !clean).then(|| {
        if crashes >= restart.max_crashes {
            let window = crate::spec::duration::format(restart.crash_window);
            format!(
                "agent `{}` crashed {crashes} times within {window} (max_crashes = {}): safe mode",
                facts.info.name, restart.max_crashes
            )
        } else {
            format!("agent `{}`: {why}: safe mode", facts.info.name)
        }
    });
    let mut r = Recovery {
        start: Some(answer.action),
        // A restart never comes sooner than the shortest allowed cooldown, whatever the
        // policy said: a policy answering `delay = 0` forever would otherwise busy-loop starts.
        delay: if safe {
            answer.delay
        } else {
            answer.delay.max(crate::spec::floors::COOLDOWN.min)
        },
        counts_as_crash: !clean,
        clear_session: answer.action == Start::Fresh,
        clean_exit_marker: clean && safe,
        quarantine: critical.clone(),
        critical,
        ..Recovery::new(reason, format!("{what}{why}"), by)
    };
    if r.counts_as_crash
        && !safe
        && policies.is_some()
        && let Some(treated) = clinic(Some(&info))
    {
        treat(&mut r, &treated);
    }
    r
}

/// A crash the Clinic could name: its prescription refines the start (`fresh` and
/// `safe_mode` override `on_exit`'s answer, `resume` keeps it, so a failed resume still starts
/// fresh), and the longer of the two delays wins.
fn treat(r: &mut Recovery, treated: &crate::clinic::Recovery) {
    let rehab = &treated.rehab;
    r.delay = r.delay.max(rehab.delay);
    r.context_cleared =
        treated.prescription.action == crate::policy::PrescriptionAction::SummarizeHistory;
    r.clinic = Some(Treatment {
        root_cause: treated.diagnosis.root_cause.to_string(),
        action: treated.prescription.action.as_str().to_string(),
    });
    r.explain = format!(
        "{}; clinic: {} → {}",
        r.explain,
        treated.diagnosis.root_cause,
        treated.prescription.action.as_str()
    );
    r.inject = match &rehab.inject {
        Some(text) => Inject::Text(text.clone()),
        None => Inject::Nothing,
    };
    match rehab.start {
        Start::Resume => {}
        Start::Fresh => {
            r.start = Some(Start::Fresh);
            r.clear_session = true;
        }
        Start::SafeMode => {
            r.start = Some(Start::SafeMode);
            let abort = clinic_abort(treated);
            // What safe mode shows: the Clinic's reason (what to fix), not the policy's
            // "resuming" it overruled.
            r.explain = abort.clone();
            r.quarantine = Some(abort);
        }
    }
}

/// The Clinic's reason to stop for a person: the cause and what to fix.
fn clinic_abort(treated: &crate::clinic::Recovery) -> String {
    format!(
        "clinic: {}: {}",
        treated.diagnosis.root_cause,
        treated
            .prescription
            .reason
            .as_deref()
            .unwrap_or("the recovery was aborted")
    )
}

/// Ask `on_unhealthy` what to do about confirmed findings. A revival of a session that
/// showed an error is the Clinic's to treat: it knows that a full context needs a fresh
/// session with a handoff, and that a bad key or an unknown model need a person.
fn when_unhealthy(
    u: &Unhealthy,
    facts: &Facts,
    policies: Option<&Policies>,
    clinic: impl FnOnce(Option<&ExitInfo>) -> Option<crate::clinic::Recovery>,
) -> Recovery {
    let health = policy::Health {
        findings: u.findings.clone(),
        task: u.task.clone(),
        revivals_for_task: facts.revivals_for_task,
        max_revivals: facts.max_revivals,
    };
    let (decision, by, error) = match policies {
        Some(p) => {
            let d = p.on_unhealthy(&facts.info, &health);
            (d.value, d.by, d.error.map(|e| e.to_string()))
        }
        None => (
            policy::builtin::on_unhealthy(&facts.info, &health),
            policy::BUILTIN.to_string(),
            None,
        ),
    };
    let explain = decision
        .reason
        .clone()
        .unwrap_or_else(|| "the watchdog's policy decided".into());
    let mut r = Recovery {
        unhealthy: Some(decision.clone()),
        problems: error.into_iter().collect(),
        ..Recovery::new(EndReason::WatchdogKill, explain, by)
    };
    match decision.action {
        UnhealthyAction::Ignore | UnhealthyAction::Notify => {}
        UnhealthyAction::SafeMode => {
            r.start = Some(Start::SafeMode);
            r.notify = Some(Notify::Failure(None));
            r.quarantine = Some(format!(
                "watchdog: {}",
                decision.reason.as_deref().unwrap_or("unrecoverable")
            ));
        }
        UnhealthyAction::Revive => {
            let treated = if u.erred { clinic(None) } else { None };
            if let Some(t) = &treated {
                r.problems.extend(t.problems.iter().cloned());
                r.clinic = Some(Treatment {
                    root_cause: t.diagnosis.root_cause.to_string(),
                    action: t.prescription.action.as_str().to_string(),
                });
            }
            let start = treated.as_ref().map_or(Start::Resume, |t| t.rehab.start);
            r.inject = match treated.as_ref().and_then(|t| t.rehab.inject.clone()) {
                Some(text) => Inject::Text(text),
                None => Inject::RevivalContext,
            };
            r.spends_revival = true;
            r.start = Some(start);
            match start {
                // A fresh start is a planned cycle: the wrapper saves a context-limit handoff.
                Start::Fresh => r.reason = EndReason::PlannedCycle,
                Start::Resume => {}
                Start::SafeMode => {
                    let t = treated.as_ref().expect("the Clinic chose safe mode");
                    // The cause and the Clinic's reason (what a person has to fix), as the
                    // wrapper's quarantine says it.
                    r.quarantine = Some(match t.prescription.reason.as_deref() {
                        Some(reason) => format!("clinic: {}: {reason}", t.diagnosis.root_cause),
                        None => format!("clinic: {}", t.diagnosis.root_cause),
                    });
                    r.notify = Some(Notify::Failure(t.rehab.notify.clone()));
                }
            }
            if facts.stopping && start != Start::SafeMode {
                // Not spent: the next pass (of the next daemon) may still revive it.
                r.spends_revival = false;
                r.held = Some("phoenix run is stopping".into());
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{Diagnosis, RootCause, Trauma};

    const NOW: i64 = 1_000_000;

    fn facts(max: u32, recent: Vec<i64>) -> Facts {
        let mut info = AgentInfo {
            name: "a".into(),
            ..AgentInfo::default()
        };
        info.restart.cooldown = Duration::from_secs(10);
        info.restart.backoff_max = Duration::from_secs(300);
        info.restart.max_crashes = max;
        info.restart.crash_window = Duration::from_secs(3600);
        Facts {
            recent_crashes: recent,
            ..Facts::new(info)
        }
    }

    fn exit(code: i32, mode: Start, runtime_ms: u64) -> ExitFacts {
        ExitFacts {
            code: Some(code),
            signal: None,
            runtime_ms,
            mode,
            session_id: Some("s1".into()),
            showed_life: true,
            requested: None,
            fresh_requested: false,
            now: NOW,
        }
    }

    fn requested(reason: EndReason, fresh: bool) -> ExitFacts {
        ExitFacts {
            requested: Some(StopRequest { reason, ts: NOW }),
            fresh_requested: fresh,
            ..exit(143, Start::Resume, 10)
        }
    }

    fn unhealthy(checks: &[&str], erred: bool) -> Incident {
        Incident::Unhealthy(Unhealthy {
            findings: checks
                .iter()
                .map(|c| policy::Finding {
                    check: c.to_string(),
                    reason: format!("{c}_found"),
                    summary: format!("{c} found"),
                })
                .collect(),
            task: Some("fix the login test".into()),
            erred,
        })
    }

    /// What the Clinic makes of `cause` with the built-in prescriptions and templates: the
    /// very answer the wrapper and the watchdog get from it.
    fn clinic_says(cause: RootCause, error: &str) -> crate::clinic::Recovery {
        let tmp = tempfile::tempdir().unwrap();
        let policies = Policies::new(None);
        let templates = crate::render::Templates::default();
        let settings = crate::spec::ClinicSettings::default();
        let clinic = crate::clinic::Clinic {
            policies: &policies,
            templates: &templates,
            settings: &settings,
            fleet: crate::state::FleetDir::new(tmp.path()),
        };
        let trauma = Trauma {
            error_message: error.into(),
            ..Trauma::default()
        };
        let diagnosis = Diagnosis {
            root_cause: cause,
            explanation: String::new(),
            confidence: 1.0,
        };
        let mut problems = Vec::new();
        let (prescription, prescribed_by) = clinic.prescribe(&diagnosis, &trauma, &mut problems);
        let rehab = clinic.rehabilitation(&diagnosis, &prescription, &trauma, 1, &mut problems);
        crate::clinic::Recovery {
            agent: "a".into(),
            trauma,
            diagnosis,
            diagnosed_by: "test".into(),
            prescription,
            prescribed_by,
            rehab,
            attempt: 1,
            max_recoveries: 2,
            problems,
        }
    }

    fn no_clinic(_: Option<&ExitInfo>) -> Option<crate::clinic::Recovery> {
        None
    }

    /// One row of the table: the incident, what the Clinic would say (if asked), and the
    /// answer's start, end reason and the marks a person would notice.
    struct Row {
        name: &'static str,
        incident: Incident,
        facts: Facts,
        clinic: Option<(RootCause, &'static str)>,
        start: Option<Start>,
        reason: EndReason,
        crash: bool,
        quarantine: Option<&'static str>,
        inject: &'static str,
    }

    fn rows() -> Vec<Row> {
        let crash_loop = facts(3, vec![NOW - 100, NOW - 50]);
        let mut missing = exit(127, Start::Fresh, 3);
        missing.showed_life = false;
        missing.session_id = None;
        let mut not_executable = missing.clone();
        not_executable.code = Some(126);
        let spent = Facts {
            revivals_for_task: 1,
            ..facts(5, vec![])
        };
        let row = |name, incident, clinic, start, reason| Row {
            name,
            incident,
            facts: facts(5, vec![]),
            clinic,
            start,
            reason,
            crash: false,
            quarantine: None,
            inject: "nothing",
        };
        vec![
            Row {
                crash: true,
                ..row(
                    "crash",
                    Incident::Exit(exit(1, Start::Fresh, 600_000)),
                    None,
                    Some(Start::Resume),
                    EndReason::Crash,
                )
            },
            row(
                "clean exit",
                Incident::Exit(exit(0, Start::Resume, 1)),
                None,
                Some(Start::SafeMode),
                EndReason::CleanExit,
            ),
            row(
                "planned cycle",
                Incident::Exit(requested(EndReason::PlannedCycle, true)),
                None,
                Some(Start::Fresh),
                EndReason::PlannedCycle,
            ),
            row(
                "operator restart",
                Incident::Exit(requested(EndReason::OperatorRestart, false)),
                None,
                Some(Start::Resume),
                EndReason::OperatorRestart,
            ),
            Row {
                crash: true,
                inject: "text",
                ..row(
                    "crash with a full context",
                    Incident::Exit(exit(1, Start::Resume, 600_000)),
                    Some((RootCause::ContextLengthExceeded, "prompt is too long")),
                    Some(Start::Fresh),
                    EndReason::Crash,
                )
            },
            Row {
                crash: true,
                quarantine: Some("clinic: invalid_credentials"),
                ..row(
                    "crash with a bad key",
                    Incident::Exit(exit(1, Start::Resume, 600_000)),
                    Some((RootCause::InvalidCredentials, "401 invalid x-api-key")),
                    Some(Start::SafeMode),
                    EndReason::Crash,
                )
            },
            Row {
                crash: true,
                quarantine: Some("cannot be run (exit 127: not found)"),
                ..row(
                    "missing binary 127",
                    Incident::Exit(missing),
                    None,
                    Some(Start::SafeMode),
                    EndReason::NoLife,
                )
            },
            Row {
                crash: true,
                quarantine: Some("cannot be run (exit 126"),
                ..row(
                    "not executable 126",
                    Incident::Exit(not_executable),
                    None,
                    Some(Start::SafeMode),
                    EndReason::NoLife,
                )
            },
            Row {
                facts: crash_loop,
                crash: true,
                quarantine: Some("crashed 3 times within 1h (max_crashes = 3)"),
                ..row(
                    "crash-loop limit",
                    Incident::Exit(exit(1, Start::Fresh, 600_000)),
                    None,
                    Some(Start::SafeMode),
                    EndReason::Crash,
                )
            },
            Row {
                inject: "text",
                ..row(
                    "failed turn: prompt too long",
                    unhealthy(&["turn_failed"], true),
                    Some((RootCause::ContextLengthExceeded, "Prompt is too long")),
                    Some(Start::Fresh),
                    EndReason::PlannedCycle,
                )
            },
            Row {
                quarantine: Some("clinic: invalid_credentials"),
                inject: "revival",
                ..row(
                    "failed turn: auth",
                    unhealthy(&["turn_failed"], true),
                    Some((RootCause::InvalidCredentials, "401 authentication_error")),
                    Some(Start::SafeMode),
                    EndReason::WatchdogKill,
                )
            },
            Row {
                quarantine: Some("clinic: quota_exhausted"),
                inject: "revival",
                ..row(
                    "failed turn: quota",
                    unhealthy(&["turn_failed"], true),
                    Some((RootCause::QuotaExhausted, "429 quota exceeded")),
                    Some(Start::SafeMode),
                    EndReason::WatchdogKill,
                )
            },
            Row {
                quarantine: Some("fix `--model`"),
                inject: "revival",
                ..row(
                    "failed turn: model not found",
                    unhealthy(&["turn_failed"], true),
                    Some((
                        RootCause::ModelUnavailable,
                        "model: claude-nope-4 not_found",
                    )),
                    Some(Start::SafeMode),
                    EndReason::WatchdogKill,
                )
            },
            Row {
                inject: "revival",
                ..row(
                    "failed turn: transient",
                    unhealthy(&["turn_failed"], true),
                    Some((RootCause::TransientError, "529 overloaded")),
                    Some(Start::Resume),
                    EndReason::WatchdogKill,
                )
            },
            Row {
                inject: "revival",
                ..row(
                    "silence",
                    unhealthy(&["silence"], false),
                    // Not asked: a silent session showed no error to read.
                    Some((RootCause::ContextLengthExceeded, "unused")),
                    Some(Start::Resume),
                    EndReason::WatchdogKill,
                )
            },
            Row {
                inject: "revival",
                ..row(
                    "loop",
                    unhealthy(&["repetition"], false),
                    None,
                    Some(Start::Resume),
                    EndReason::WatchdogKill,
                )
            },
            row(
                "long-running work",
                unhealthy(&["runaway"], false),
                None,
                None,
                EndReason::WatchdogKill,
            ),
            Row {
                facts: spent,
                quarantine: Some("watchdog: already revived for this task"),
                ..row(
                    "revivals spent on the task",
                    unhealthy(&["silence"], false),
                    None,
                    Some(Start::SafeMode),
                    EndReason::WatchdogKill,
                )
            },
        ]
    }

    #[test]
    fn every_incident_kind_gets_its_recovery() {
        let policies = Policies::new(None);
        for row in rows() {
            let mut asked = false;
            let r = decide(&row.incident, &row.facts, Some(&policies), |_| {
                asked = true;
                row.clinic.map(|(cause, error)| clinic_says(cause, error))
            });
            let name = row.name;
            assert_eq!(r.start, row.start, "{name}: {r:?}");
            assert_eq!(r.reason, row.reason, "{name}: {r:?}");
            assert_eq!(r.counts_as_crash, row.crash, "{name}: {r:?}");
            match row.quarantine {
                Some(why) => assert!(
                    r.quarantine.as_deref().is_some_and(|q| q.contains(why)),
                    "{name}: {r:?}"
                ),
                None => assert_eq!(r.quarantine, None, "{name}: {r:?}"),
            }
            let inject = match r.inject {
                Inject::Nothing => "nothing",
                Inject::Text(_) => "text",
                Inject::RevivalContext => "revival",
            };
            assert_eq!(inject, row.inject, "{name}: {r:?}");
            // A start that is not fresh never throws the session away.
            assert_eq!(
                r.clear_session,
                r.start == Some(Start::Fresh) && matches!(row.incident, Incident::Exit(_)),
                "{name}: {r:?}"
            );
            if name == "silence" {
                assert!(!asked, "silence: the Clinic has no error to read");
            }
            if r.start == Some(Start::SafeMode) && matches!(row.incident, Incident::Unhealthy(_)) {
                assert!(r.notify.is_some(), "{name}: a person hears it");
            }
        }
    }

    #[test]
    fn crash_of_a_long_run_resumes_after_cooldown() {
        let r = decide(
            &Incident::Exit(exit(1, Start::Fresh, 600_000)),
            &facts(5, vec![]),
            None,
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::Resume));
        assert_eq!(r.delay_ms(), 10_000);
        assert!(r.counts_as_crash && !r.clear_session);
        assert_eq!(r.reason, EndReason::Crash);
    }

    /// The resumed session took a turn and died seconds later: it is the conversation, and
    /// it is resumed again (a resume failed only when it never showed life).
    #[test]
    fn quick_crash_of_a_resumed_run_that_showed_life_resumes_it_again() {
        let r = decide(
            &Incident::Exit(exit(1, Start::Resume, 2_000)),
            &facts(5, vec![]),
            None,
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::Resume));
        assert!(!r.clear_session);
        assert_eq!(r.explain, "exit code 1; crash 1 of 5 within 1h: resuming");
    }

    #[test]
    fn resumed_run_without_life_starts_fresh_and_clears_the_id_however_long_it_ran() {
        for runtime_ms in [500, 120_000] {
            let mut e = exit(1, Start::Resume, runtime_ms);
            e.showed_life = false;
            let r = decide(&Incident::Exit(e), &facts(5, vec![]), None, no_clinic);
            assert_eq!(r.start, Some(Start::Fresh));
            assert_eq!(r.reason, EndReason::NoLife);
            assert!(r.clear_session);
        }
    }

    /// A missing binary (the shell's 127, or the wrapper's own spawn failure): safe mode on
    /// the first exit, with the reason, and no word of resuming.
    #[test]
    fn a_command_that_cannot_run_goes_to_safe_mode_on_the_first_exit() {
        let mut e = exit(127, Start::Fresh, 3);
        e.showed_life = false;
        e.session_id = None;
        let r = decide(&Incident::Exit(e), &facts(5, vec![]), None, no_clinic);
        assert_eq!(r.start, Some(Start::SafeMode));
        assert!(r.counts_as_crash && !r.clean_exit_marker);
        assert!(
            r.explain.contains("cannot be run (exit 127: not found)"),
            "{}",
            r.explain
        );
        assert!(!r.explain.contains("resum"), "{}", r.explain);
        assert!(r.critical.as_deref().unwrap().contains("fix `command`"));
    }

    #[test]
    fn clean_exit_enters_safe_mode_with_marker_and_no_quarantine() {
        let r = decide(
            &Incident::Exit(exit(0, Start::Resume, 1)),
            &facts(5, vec![]),
            None,
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::SafeMode));
        assert!(r.clean_exit_marker && !r.counts_as_crash);
        assert_eq!((r.quarantine, r.critical), (None, None));
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let delays: Vec<u64> = (0..8)
            .map(|n| {
                let recent = (0..n).map(|i| NOW - 10 - i).collect();
                decide(
                    &Incident::Exit(exit(1, Start::Fresh, 600_000)),
                    &facts(100, recent),
                    None,
                    no_clinic,
                )
                .delay_ms()
            })
            .collect();
        assert_eq!(
            delays,
            [
                10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000
            ]
        );
    }

    #[test]
    fn crashes_outside_the_window_do_not_count() {
        let r = decide(
            &Incident::Exit(exit(1, Start::Fresh, 600_000)),
            &facts(3, vec![NOW - 7200, NOW - 50]),
            None,
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::Resume));
    }

    #[test]
    fn requested_stops_are_not_crashes_and_fresh_comes_from_the_marker_only() {
        let r = decide(
            &Incident::Exit(requested(EndReason::OperatorRestart, true)),
            &facts(1, vec![]),
            None,
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::Fresh));
        assert_eq!(r.delay, Duration::ZERO);
        assert!(!r.counts_as_crash && r.clear_session);
        assert_eq!(r.decided_by, "requested");
    }

    /// A policy that fails (here: a runtime error) falls back to the built-in answer, and
    /// says so; the decision is the built-in one.
    #[test]
    fn a_broken_policy_falls_back_to_the_builtin_decision() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("policies");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("custom.lua"),
            "function on_exit(agent, exit) error('boom') end\n\
             function on_unhealthy(agent, health) error('boom') end\n",
        )
        .unwrap();
        let policies = Policies::new(Some(&dir));
        let mut f = facts(5, vec![]);
        f.info.policy = Some("policies/custom.lua".into());
        let r = decide(
            &Incident::Exit(exit(1, Start::Fresh, 600_000)),
            &f,
            Some(&policies),
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::Resume));
        assert_eq!(r.decided_by, policy::BUILTIN);
        let r = decide(
            &unhealthy(&["silence"], false),
            &f,
            Some(&policies),
            no_clinic,
        );
        assert_eq!(r.start, Some(Start::Resume));
        assert_eq!(r.decided_by, policy::BUILTIN);
        assert!(
            r.problems.iter().any(|p| p.contains("boom")),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn a_policy_asking_for_no_delay_still_waits_the_shortest_cooldown() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("policies");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("custom.lua"),
            "function on_exit(agent, exit) return {action = 'resume', delay = 0} end\n",
        )
        .unwrap();
        let policies = Policies::new(Some(&dir));
        let mut f = facts(5, vec![]);
        f.info.policy = Some("policies/custom.lua".into());
        let r = decide(
            &Incident::Exit(exit(1, Start::Fresh, 600_000)),
            &f,
            Some(&policies),
            no_clinic,
        );
        assert_eq!(r.delay_ms(), 100);
        assert!(r.decided_by.contains("custom.lua"), "{}", r.decided_by);
    }

    /// The Clinic's delay wins when it is the longer one; its cause is in the explanation.
    #[test]
    fn the_clinic_refines_a_crash_it_can_name() {
        let r = decide(
            &Incident::Exit(exit(1, Start::Resume, 600_000)),
            &facts(5, vec![]),
            Some(&Policies::new(None)),
            |shown| {
                assert!(shown.is_some_and(|i| i.crashes_in_window == 1 && i.resumed));
                Some(clinic_says(
                    RootCause::ContextLengthExceeded,
                    "prompt is too long",
                ))
            },
        );
        assert_eq!(r.start, Some(Start::Fresh));
        assert!(r.context_cleared && r.clear_session);
        assert!(
            r.explain
                .ends_with("clinic: context_length_exceeded → summarize_history"),
            "{}",
            r.explain
        );
    }

    #[test]
    fn a_revival_is_held_while_phoenix_run_stops_and_spends_nothing() {
        let f = Facts {
            stopping: true,
            ..facts(5, vec![])
        };
        let r = decide(&unhealthy(&["silence"], false), &f, None, no_clinic);
        assert_eq!(r.start, Some(Start::Resume));
        assert!(r.held.is_some() && !r.spends_revival);
    }

    #[test]
    fn recoveries_round_trip_through_json() {
        let r = decide(
            &Incident::Exit(exit(1, Start::Fresh, 600_000)),
            &facts(5, vec![]),
            None,
            no_clinic,
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["start"], "resume");
        assert_eq!(v["reason"], "crash");
    }
}
