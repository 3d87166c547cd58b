//! The Clinic: failures treated as clinical cases. Triage (build the TraumaContext) →
//! Diagnosis (an external command if configured, else the `diagnose` policy, else the
//! built-in patterns) → Prescription (the `prescribe` policy, at most `max_recoveries` per
//! task) → Rehabilitation (what the next start looks like: resume, fresh with injected
//! context, or safe mode with a notification). Every step is written to ops.jsonl and
//! critical_events.jsonl so a person can see why phoenix did what it did.
//!
//! How recovery uses it: `recovery::decide` asks the Clinic only when the policy's answer
//! leaves room for a treatment, and maps its rehabilitation onto the next start there, in one
//! place; `recovery::execute` writes what the next start gets.

pub mod command;
pub mod triage;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::policy::{
    Decided, Diagnosis, Policies, Prescription, PrescriptionAction, RootCause, Trauma, builtin,
};
use crate::render::Templates;
use crate::spec::ClinicSettings;
use crate::state::Op;
use crate::state::{self, AgentDir, FleetDir};
pub use triage::{TriageInput, triage};

/// Text waiting to be given to the agent's next session (read once by the session-start
/// hook, then removed).
pub const PENDING_CONTEXT: &str = "clinic_context.md";
/// More than this in the pending context is not phoenix's: refused.
const PENDING_CONTEXT_LIMIT: u64 = 1 << 20;
/// When the wrapper started the CLI process (RFC 3339), in the CLI's environment and so in
/// its hooks': the pending context is for a session started after it was left.
pub const RUN_STARTED_ENV: &str = "PHOENIX_RUN_STARTED";

/// How the agent starts again: the recovery pipeline's one `Start`.
pub use crate::policy::Start;

/// Rehabilitation: what the next start looks like.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rehab {
    pub start: Start,
    #[serde(with = "crate::policy::types::seconds")]
    pub delay: Duration,
    /// Given to the next session (rendered from a template).
    pub inject: Option<String>,
    /// Sent to a person (rendered from a template).
    pub notify: Option<String>,
}

/// One whole recovery, for printing and for the caller to act on.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    pub agent: String,
    pub trauma: Trauma,
    pub diagnosis: Diagnosis,
    /// `diagnose_command`, a policy file, or the built-in default.
    pub diagnosed_by: String,
    pub prescription: Prescription,
    pub prescribed_by: String,
    pub rehab: Rehab,
    /// This recovery's number for the task (1-based).
    pub attempt: u32,
    pub max_recoveries: u32,
    /// What went wrong on the way (broken policy, bad command answer, broken template).
    pub problems: Vec<String>,
    /// The recovery counter after this recovery, for the restart ledger (`None`: nothing
    /// spent, as in a dry run or an abort).
    #[serde(skip)]
    pub spent: Option<Counter>,
}

/// The recovery counter of one agent (kept in its restart ledger, `recovery::record`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counter {
    /// The task the recoveries were spent on.
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub recoveries: u32,
    #[serde(default)]
    pub updated: Option<String>,
    #[serde(default)]
    pub history: Vec<Value>,
}

impl Counter {
    /// Recoveries already spent on `task`. A new task, or a turn finished since the last
    /// recovery (the treatment worked), starts from zero.
    pub fn spent_on(&self, task: Option<&str>, ops: &[state::op::Line]) -> u32 {
        if self.task.as_deref() != task {
            return 0;
        }
        let Some(updated) = self
            .updated
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            return self.recoveries;
        };
        // Older builds wrote the end of a turn as `hook_stop`: it reads as `TurnComplete`.
        let healed = ops
            .iter()
            .any(|o| matches!(o.op, Op::TurnComplete(_)) && o.time().is_some_and(|t| t > updated));
        if healed { 0 } else { self.recoveries }
    }
}

/// Take the text waiting for the next session, if any (the session-start hook calls this).
/// `run_started`: when the CLI process whose hook asks was started (`None`: not known, as
/// for a CLI started by an older wrapper). A context left after that is not this process's
/// to take: it was left for the session that replaces it. A session start in a process that
/// is being replaced (Claude Code compacting, or `/clear`, while the wrapper stops it for a
/// fresh session) leaves it where it is.
pub fn take_pending_context(
    dir: &AgentDir,
    run_started: Option<jiff::Timestamp>,
) -> Option<String> {
    let path = dir.file(PENDING_CONTEXT);
    let left = std::fs::symlink_metadata(&path).ok()?.modified().ok()?;
    if let Some(started) = run_started
        // In whole milliseconds, as the start is written: left in the start's own
        // millisecond is left before it.
        && jiff::Timestamp::try_from(left)
            .is_ok_and(|left| left.as_millisecond() > started.as_millisecond())
    {
        return None;
    }
    // Never through a link, never more than a context's worth.
    let bytes = state::file::read_bounded(&path, PENDING_CONTEXT_LIMIT);
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&bytes.ok()?).into_owned();
    (!text.trim().is_empty()).then_some(text)
}

/// The Clinic of one fleet.
pub struct Clinic<'a> {
    pub policies: &'a Policies,
    pub templates: &'a Templates,
    pub settings: &'a ClinicSettings,
    pub fleet: FleetDir,
    /// The recoveries already spent (from the agent's restart ledger).
    pub spent: Counter,
}

impl Clinic<'_> {
    /// Template `name` rendered (the built-in one when the user's is broken), with what went
    /// wrong noted in `problems`; `None` when not even the built-in one renders.
    fn render(&self, name: &str, ctx: &Value, problems: &mut Vec<String>) -> Option<String> {
        let (text, broken) = self.templates.render_or_builtin(name, ctx);
        if let Some(e) = broken {
            problems.push(e.to_string());
        }
        text.map_err(|e| problems.push(e.to_string())).ok()
    }

    /// The external command first (if configured), then the policy chain.
    pub fn diagnose(&self, trauma: &Trauma, problems: &mut Vec<String>) -> (Diagnosis, String) {
        if let Some(argv) = &self.settings.diagnose_command {
            let ctx = json!({
                "trauma": trauma,
                "root_causes": RootCause::ALL.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            });
            if let Some(text) = self.render("trauma.md.j2", &ctx, problems) {
                match command::diagnose(argv, &text, self.settings.diagnose_timeout) {
                    Ok(d) => return (d, format!("diagnose_command `{}`", argv.join(" "))),
                    Err(e) => problems.push(format!("{e}; diagnosing by patterns instead")),
                }
            }
        }
        noted(self.policies.diagnose(trauma), problems)
    }

    /// The policy's prescription, unless the task has used up its recoveries.
    pub fn prescribe(
        &self,
        diagnosis: &Diagnosis,
        trauma: &Trauma,
        problems: &mut Vec<String>,
    ) -> (Prescription, String) {
        if trauma.recoveries >= self.settings.max_recoveries {
            return (
                Prescription::abort(format!(
                    "{} recoveries already spent on this task (max_recoveries = {})",
                    trauma.recoveries, self.settings.max_recoveries
                )),
                "clinic (max_recoveries)".into(),
            );
        }
        noted(self.policies.prescribe(diagnosis, trauma), problems)
    }

    /// Render what the next start gets.
    pub fn rehabilitation(
        &self,
        diagnosis: &Diagnosis,
        prescription: &Prescription,
        trauma: &Trauma,
        attempt: u32,
        problems: &mut Vec<String>,
    ) -> Rehab {
        let ctx = json!({
            "agent": trauma.agent.name, "diagnosis": diagnosis, "prescription": prescription,
            "trauma": trauma, "attempt": attempt, "max_recoveries": self.settings.max_recoveries,
            "reason": prescription.reason.clone().unwrap_or_else(|| diagnosis.root_cause.to_string()),
        });
        let mut render = |name: &str| self.render(name, &ctx, problems);
        let delay = prescription.delay.unwrap_or_default();
        match prescription.action {
            PrescriptionAction::Retry => Rehab {
                start: Start::Resume,
                delay: prescription
                    .delay
                    .unwrap_or_else(|| builtin::backoff(&trauma.agent.restart, attempt)),
                inject: (prescription.reminder.is_some() || prescription.modified_prompt.is_some())
                    .then(|| render("clinic_reminder.md.j2"))
                    .flatten(),
                notify: None,
            },
            PrescriptionAction::ModifyPrompt => Rehab {
                start: Start::Resume,
                delay,
                inject: render("clinic_reminder.md.j2"),
                notify: None,
            },
            PrescriptionAction::SummarizeHistory => Rehab {
                start: Start::Fresh,
                delay,
                inject: render("recovery_context.md.j2"),
                notify: None,
            },
            PrescriptionAction::Abort => Rehab {
                start: Start::SafeMode,
                delay: Duration::ZERO,
                inject: None,
                notify: render("clinic_abort.md.j2"),
            },
        }
    }

    /// Triage → Diagnosis → Prescription → Rehabilitation, recorded step by step. With
    /// `apply`, the steps and the recovery counter are written; without, nothing is written at
    /// all (a dry run). What the next start gets (`.fresh`, the pending context) is the
    /// recovery executor's to write (`recovery::execute`).
    pub fn recover(&self, input: &TriageInput<'_>, apply: bool) -> Recovery {
        self.run(input, apply, false)
            .expect("a recovery that treats every diagnosis always returns one")
    }

    /// What the wrapper calls after a crash. A failure the Clinic cannot name (a `kill -9`, a
    /// segfault without an error anywhere) is not treated: it is noted in ops.jsonl and left
    /// to `on_exit`'s hybrid resume and crash limits, so it spends no recovery. `None` then.
    pub fn after_crash(&self, input: &TriageInput<'_>) -> Option<Recovery> {
        self.run(input, true, true)
    }

    fn run(&self, input: &TriageInput<'_>, apply: bool, leave_unknown: bool) -> Option<Recovery> {
        let dir = input.dir;
        let agent = input.agent.name.clone();
        let mut problems = Vec::new();
        let mut trauma = triage(input);
        let ops = state::op::tail(&dir.file(state::OPS_LOG));
        let counter = &self.spent;
        trauma.recoveries = counter.spent_on(trauma.original_prompt.as_deref(), &ops);
        let attempt = trauma.recoveries + 1;
        let (diagnosis, diagnosed_by) = self.diagnose(&trauma, &mut problems);
        if leave_unknown && diagnosis.root_cause == RootCause::Unknown {
            if apply {
                let _ = dir.record_op(
                    Op::ClinicUndiagnosed,
                    json!({
                        "error_type": trauma.error_type, "error_message": trauma.error_message,
                        "by": diagnosed_by, "problems": problems,
                        "left_to": "on_exit",
                    }),
                );
            }
            return None;
        }
        let chart = Chart {
            fleet: &self.fleet,
            dir,
            agent: &agent,
            apply,
        };
        chart.triaged(&trauma);
        chart.record(
            Op::ClinicDiagnosis,
            &format!("{}: {}", diagnosis.root_cause, diagnosis.explanation),
            "prescribing",
            json!({"diagnosis": diagnosis, "by": diagnosed_by, "problems": problems}),
        );

        let (prescription, prescribed_by) = self.prescribe(&diagnosis, &trauma, &mut problems);
        chart.record(
            Op::ClinicPrescription,
            prescription
                .reason
                .as_deref()
                .unwrap_or(prescription.action.as_str()),
            prescription.action.as_str(),
            json!({"prescription": prescription, "by": prescribed_by, "attempt": attempt,
                   "max_recoveries": self.settings.max_recoveries}),
        );

        let rehab = self.rehabilitation(&diagnosis, &prescription, &trauma, attempt, &mut problems);
        let spent = (apply && rehab.start != Start::SafeMode)
            .then(|| self.spend(&trauma, &diagnosis, &prescription, counter));
        chart.record(
            if rehab.start == Start::SafeMode {
                Op::ClinicAbort
            } else {
                Op::ClinicRehabilitation
            },
            &format!("{}: {}", diagnosis.root_cause, prescription.action.as_str()),
            rehab.action_taken(),
            json!({"rehab": rehab, "problems": problems}),
        );
        Some(Recovery {
            agent,
            trauma,
            diagnosis,
            diagnosed_by,
            prescription,
            prescribed_by,
            rehab,
            attempt,
            max_recoveries: self.settings.max_recoveries,
            problems,
            spent,
        })
    }

    /// The counter with this recovery spent on the task (the executor writes it).
    fn spend(
        &self,
        trauma: &Trauma,
        diagnosis: &Diagnosis,
        prescription: &Prescription,
        counter: &Counter,
    ) -> Counter {
        let mut history = if counter.task.as_deref() == trauma.original_prompt.as_deref() {
            counter.history.clone()
        } else {
            Vec::new()
        };
        history.push(json!({
            "ts": state::now_rfc3339(), "root_cause": diagnosis.root_cause,
            "action": prescription.action,
        }));
        Counter {
            task: trauma.original_prompt.clone(),
            recoveries: trauma.recoveries + 1,
            updated: Some(state::now_rfc3339()),
            history,
        }
    }
}

/// A policy's decision and who made it, with why the policy's answer was not used (if it
/// was not) noted in `problems`.
fn noted<T>(decided: Decided<T>, problems: &mut Vec<String>) -> (T, String) {
    if let Some(e) = &decided.error {
        problems.push(e.to_string());
    }
    (decided.value, decided.by)
}

/// Where the steps of one recovery are written: the agent's ops.jsonl and the fleet's
/// critical events, or nowhere at all in a dry run.
struct Chart<'a> {
    fleet: &'a FleetDir,
    dir: &'a AgentDir,
    agent: &'a str,
    apply: bool,
}

impl Chart<'_> {
    fn record(&self, step: state::op::Make, reason: &str, action: &str, details: Value) {
        if !self.apply {
            return;
        }
        let _ = self.dir.ensure();
        let op = step(details.as_object().cloned().unwrap_or_default());
        let _ = self
            .fleet
            .record_critical(op.name(), self.agent, reason, action, details);
        let _ = self.dir.record(op);
    }

    /// The first step: what triage found.
    fn triaged(&self, trauma: &Trauma) {
        self.record(
            Op::ClinicTriage,
            &format!(
                "{}: {}",
                trauma.error_type,
                crate::text::shorten(&trauma.error_message, 200)
            ),
            "diagnosing",
            json!({
                "error_type": trauma.error_type, "error_message": trauma.error_message,
                "original_prompt": trauma.original_prompt, "exit": trauma.exit,
                "tool_calls": trauma.tool_calls.len(), "recoveries": trauma.recoveries,
            }),
        );
    }
}

impl Rehab {
    /// What the next start does, in the words of the critical event.
    fn action_taken(&self) -> &'static str {
        match self.start {
            Start::Resume if self.inject.is_some() => "resume with injected reminder",
            Start::Resume => "resume after backoff",
            Start::Fresh if self.inject.is_some() => "fresh session with injected context",
            Start::Fresh => "fresh session",
            Start::SafeMode => "safe_mode",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_turn_or_a_new_task_resets_the_counter() {
        let counter = Counter {
            task: Some("t".into()),
            recoveries: 2,
            updated: Some("2026-01-01T00:00:00Z".into()),
            history: Vec::new(),
        };
        assert_eq!(counter.spent_on(Some("t"), &[]), 2);
        assert_eq!(counter.spent_on(Some("other"), &[]), 0);
        let ops = |text: &str| state::op::parse(text);
        let done = ops(r#"{"event": "turn_complete", "ts": "2026-01-01T00:01:00Z"}"#);
        assert_eq!(counter.spent_on(Some("t"), &done), 0);
        let old = ops(r#"{"event": "turn_complete", "ts": "2025-12-31T00:00:00Z"}"#);
        assert_eq!(counter.spent_on(Some("t"), &old), 2);
        // What an older build wrote for the end of a turn.
        let legacy = ops(r#"{"event": "hook_stop", "ts": "2026-01-01T00:01:00Z"}"#);
        assert_eq!(counter.spent_on(Some("t"), &legacy), 0);
        // Neither a failed turn nor a name nothing writes is a finished one.
        let failed = ops(r#"{"event": "turn_failed", "ts": "2026-01-01T00:01:00Z"}"#);
        assert_eq!(counter.spent_on(Some("t"), &failed), 2);
    }
}
