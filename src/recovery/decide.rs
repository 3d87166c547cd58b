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
    /// The CLI ended at its folder-trust question, answered no (Claude Code 2.1.332 has "No,
    /// exit" selected: Enter quits): a person's answer, not a crash; it waits for a person.
    TrustDeclined,
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
            EndReason::TrustDeclined => "trust_declined",
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
    /// Wait this long before the next start (a revival's backoff: a 429 is retried after
    /// the Clinic's delay, not at once). Absent in requests an older phoenix wrote.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// The run did work after it started (a finished turn, a tool call): the backoff starts
    /// over.
    pub worked: bool,
    pub requested: Option<StopRequest>,
    /// The `.fresh` marker asks for a clean slate (the one way a fresh start is asked for).
    pub fresh_requested: bool,
    /// The CLI refused to resume `session_id` (see `ExitInfo::resume_refused`).
    pub resume_refused: bool,
    /// The run ended at the CLI's folder-trust question, before it showed life: what it
    /// asked. Starting it again would only ask again (or exit again on a key).
    pub trust_question: Option<String>,
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
        matches!(self, Incident::Exit(e) if e.requested.is_none() && !e.is_clean() && e.trust_question.is_none())
    }
}

/// What the decision knows about the agent, from its spec and its restart ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// As a policy sees it (restart settings, thresholds, its policy file).
    pub info: AgentInfo,
    /// Earlier crashes (seconds since the epoch); those outside the crash window are ignored.
    pub recent_crashes: Vec<i64>,
    /// When a run that did work last ended (seconds since the epoch): the crashes before it
    /// do not count for the backoff.
    pub last_work: Option<i64>,
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
            last_work: None,
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
    /// The Clinic's recovery counter after its treatment (the executor writes it).
    #[serde(skip)]
    pub recoveries: Option<crate::clinic::Counter>,
    /// What went wrong on the way (a broken policy, a template).
    pub problems: Vec<String>,
}

/// The Clinic's part of a recovery, for the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Treatment {
    pub root_cause: String,
    pub action: String,
}

impl Treatment {
    fn of(treated: &crate::clinic::Recovery) -> Treatment {
        Treatment {
            root_cause: treated.diagnosis.root_cause.to_string(),
            action: treated.prescription.action.as_str().to_string(),
        }
    }
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
            recoveries: None,
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
        return as_requested(exit, req);
    }
    if let Some(question) = &exit.trust_question {
        return declined_trust(question);
    }
    let clean = exit.is_clean();
    let reason = match (clean, exit.showed_life) {
        (true, _) => EndReason::CleanExit,
        (false, true) => EndReason::Crash,
        (false, false) => EndReason::NoLife,
    };
    let info = exit_info(exit, facts);
    let (answer, by, _) = ask(
        policies,
        |p| p.on_exit(&facts.info, &info),
        || policy::builtin::on_exit(&facts.info, &info),
    );
    let why = answer
        .reason
        .clone()
        .unwrap_or_else(|| format!("the policy chose {}", answer.action.as_str()));
    let safe = answer.action == Start::SafeMode;
    let critical = (safe && !clean).then(|| crash_loop(facts, info.crashes_in_window, &why));
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
        // A refused id is given up whatever the answer (safe mode too): a `phoenix restart`
        // must not resume it again.
        clear_session: answer.action == Start::Fresh || info.resume_refused,
        clean_exit_marker: clean && safe,
        quarantine: critical.clone(),
        critical,
        ..Recovery::new(reason, format!("{}{why}", describe(exit)), by)
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

/// A stop asked for on purpose: the agent starts again, fresh only if the `.fresh` marker
/// asks for it.
fn as_requested(exit: &ExitFacts, req: &StopRequest) -> Recovery {
    let start = if exit.fresh_requested {
        Start::Fresh
    } else {
        Start::Resume
    };
    Recovery {
        start: Some(start),
        delay: Duration::from_millis(req.delay_ms),
        clear_session: start == Start::Fresh,
        ..Recovery::new(
            req.reason,
            format!("stopped on purpose ({})", req.reason.as_str()),
            "requested".into(),
        )
    }
}

/// The CLI ended at its folder-trust question: a person said no (or a key reached the dialog
/// that exits). Not a crash, and no policy's to judge: starting it again shows the same
/// question, and one more key there makes a crash loop of it. It waits for a person: the
/// folder trusted (the wrapper watches the CLI's own record of it), or `phoenix restart`.
fn declined_trust(question: &str) -> Recovery {
    Recovery {
        start: Some(Start::SafeMode),
        ..Recovery::new(
            EndReason::TrustDeclined,
            format!(
                "{question}, and it exited at that question (answered \"No, exit\"): it starts \
                 again once the folder is trusted, or with `phoenix restart`"
            ),
            "trust_dialog".into(),
        )
    }
}

/// The exit as `on_exit` sees it, with the crashes within the crash window counting this one.
fn exit_info(exit: &ExitFacts, facts: &Facts) -> ExitInfo {
    let window_start_ms =
        i128::from(exit.now) * 1000 - facts.info.restart.crash_window.as_millis() as i128;
    let earlier = facts
        .recent_crashes
        .iter()
        .filter(|&&t| i128::from(t) * 1000 > window_start_ms)
        .count();
    let crashes = if exit.is_clean() {
        0
    } else {
        u32::try_from(earlier + 1).unwrap_or(u32::MAX)
    };
    let since_work = if exit.is_clean() {
        0
    } else if exit.worked {
        1
    } else {
        let after_work = facts
            .recent_crashes
            .iter()
            .filter(|&&t| i128::from(t) * 1000 > window_start_ms)
            .filter(|&&t| facts.last_work.is_none_or(|w| t > w))
            .count();
        u32::try_from(after_work + 1).unwrap_or(u32::MAX)
    };
    ExitInfo {
        code: exit.code,
        signal: exit.signal,
        runtime_ms: exit.runtime_ms,
        resumed: exit.mode == Start::Resume,
        showed_life: exit.showed_life,
        crashes_in_window: crashes,
        crashes_since_work: since_work,
        fresh_requested: exit.fresh_requested,
        session_id: exit.session_id.clone(),
        resume_refused: exit.resume_refused && exit.mode == Start::Resume,
    }
}

/// How a run that was not clean ended, as the start of the explanation (`exit code 1; `);
/// nothing for a clean exit.
fn describe(exit: &ExitFacts) -> String {
    if exit.is_clean() {
        return String::new();
    }
    let what = match (exit.code, exit.signal) {
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(code), None) => format!("exit code {code}"),
        (None, None) => "unknown exit".to_string(),
    };
    if exit.showed_life {
        format!("{what}; ")
    } else {
        format!("{what}, never showed life; ")
    }
}

/// The critical event (and what safe mode shows) of a crash that ends in safe mode: a crash
/// loop past `max_crashes`, or the policy's own reason.
fn crash_loop(facts: &Facts, crashes: u32, why: &str) -> String {
    let restart = &facts.info.restart;
    if crashes >= restart.max_crashes {
        let window = crate::spec::duration::format(restart.crash_window);
        format!(
            "agent `{}` crashed {crashes} times within {window} (max_crashes = {}): safe mode",
            facts.info.name, restart.max_crashes
        )
    } else {
        format!("agent `{}`: {why}: safe mode", facts.info.name)
    }
}

/// The policy's answer (the built-in one without `policies`), who gave it, and why the
/// policy's own answer was not used, if it was not.
fn ask<T>(
    policies: Option<&Policies>,
    asked: impl FnOnce(&Policies) -> policy::Decided<T>,
    builtin: impl FnOnce() -> T,
) -> (T, String, Option<String>) {
    match policies {
        Some(p) => {
            let d = asked(p);
            (d.value, d.by, d.error.map(|e| e.to_string()))
        }
        None => (builtin(), policy::BUILTIN.to_string(), None),
    }
}

/// A crash the Clinic could name: its prescription refines the start (`fresh` and
/// `safe_mode` override `on_exit`'s answer, `resume` keeps it, so a failed resume still starts
/// fresh), and the longer of the two delays wins.
fn treat(r: &mut Recovery, treated: &crate::clinic::Recovery) {
    let rehab = &treated.rehab;
    r.recoveries = treated.spent.clone();
    r.delay = r.delay.max(rehab.delay);
    r.context_cleared =
        treated.prescription.action == crate::policy::PrescriptionAction::SummarizeHistory;
    r.clinic = Some(Treatment::of(treated));
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
    if let Some(over) = u.findings.iter().find(|f| f.check == BUDGET_CHECK) {
        return over_budget(&over.summary);
    }
    let health = policy::Health {
        findings: u.findings.clone(),
        task: u.task.clone(),
        revivals_for_task: facts.revivals_for_task,
        max_revivals: facts.max_revivals,
    };
    let (decision, by, error) = ask(
        policies,
        |p| p.on_unhealthy(&facts.info, &health),
        || policy::builtin::on_unhealthy(&facts.info, &health),
    );
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
                r.recoveries = t.spent.clone();
                r.clinic = Some(Treatment::of(t));
                // The Clinic's wait before the retry (a 429's backoff): the revived session
                // starts after it.
                r.delay = t.rehab.delay;
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

/// The watchdog's finding of a day past the agent's `budget`.
pub const BUDGET_CHECK: &str = "budget";

/// A day past the budget: the operator's own limit, so no policy revives the agent past it.
/// It stops for a person (its session ends with a handoff, as any stop by the watchdog) with
/// the budget as the reason, and the failure message goes out.
fn over_budget(summary: &str) -> Recovery {
    let why = format!("budget: {summary}");
    Recovery {
        start: Some(Start::SafeMode),
        notify: Some(Notify::Failure(None)),
        quarantine: Some(why.clone()),
        unhealthy: Some(UnhealthyDecision {
            action: UnhealthyAction::SafeMode,
            reason: Some(why.clone()),
        }),
        ..Recovery::new(EndReason::WatchdogKill, why, BUDGET_CHECK.into())
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
