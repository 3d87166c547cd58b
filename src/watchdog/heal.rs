//! Healing an unhealthy agent: the recovery pipeline decides what to do (the `on_unhealthy`
//! policy, and the Clinic for an error the session showed); this carries it out: the
//! investigation report, what the next start gets, then the revival, the report, or the stop
//! for a person, and the records of it (ops.jsonl, a `session_unhealthy` critical event).

use serde_json::{Value, json};

use super::Watchdog;
use super::health::{self, Finding};
use super::memory::Memory;
use super::observe::Observed;
use super::report::AgentReport;
use crate::notify::{Kind, Message, Notifier, Sent};
use crate::policy::{AgentInfo, Policies, UnhealthyAction, UnhealthyDecision};
use crate::recovery::{
    self, EndReason, Facts, Incident, Inject, Notify, Recovery, Start, Unhealthy,
};
use crate::spec::AgentSpec;
use crate::state::{self, AgentDir, Op};

/// One agent whose findings are confirmed: what the pass saw of it.
pub(super) struct Case<'c> {
    pub agent: &'c AgentSpec,
    pub dir: &'c AgentDir,
    pub seen: &'c Observed,
    /// The confirmed findings.
    pub findings: &'c [Finding],
    pub now: i64,
    /// Revivals already spent on the session's task.
    pub revivals: u32,
}

impl<'c> Case<'c> {
    pub fn new(
        agent: &'c AgentSpec,
        dir: &'c AgentDir,
        seen: &'c Observed,
        findings: &'c [Finding],
        now: i64,
    ) -> Case<'c> {
        // Spent revivals live in the restart ledger, with the agent's other budgets.
        let revivals = recovery::record::load(dir)
            .revivals
            .for_task(seen.task.as_deref());
        Case {
            agent,
            dir,
            seen,
            findings,
            now,
            revivals,
        }
    }
}

impl Watchdog<'_> {
    /// Confirmed findings are an incident: decide, then carry the decision out.
    pub(super) fn heal(
        &self,
        case: &Case,
        memory: &mut Memory,
        policies: &Policies,
        report: &mut AgentReport,
    ) {
        let r = self.decide(case, policies);
        report.problems.extend(r.problems.iter().cloned());
        let decision = r
            .unhealthy
            .clone()
            .expect("an unhealthy incident's decision");
        report.action = Some(decision.action);
        report.reason = decision.reason.clone();
        report.decided_by = Some(r.decided_by.clone());

        let mut ctx = self.context(case, &r, &decision);
        let reported_recently = self.investigate(case, decision.action, &mut ctx, memory, report);
        self.prepare_start(case, &r, decision.action, &ctx, report);
        let action_taken = self.act(case, &r, decision.action, reported_recently, report);
        report.action_taken = Some(action_taken.clone());
        self.record(case, &r, &decision, &ctx, &action_taken, report);
    }

    /// The findings as an incident, through the recovery pipeline's one decision.
    fn decide(&self, case: &Case, policies: &Policies) -> Recovery {
        let incident = Incident::Unhealthy(Unhealthy {
            findings: case
                .findings
                .iter()
                .map(|f| crate::policy::Finding {
                    check: f.check.as_str().to_string(),
                    reason: f.reason.clone(),
                    summary: f.summary.clone(),
                })
                .collect(),
            task: case.seen.task.clone(),
            // An error the CLI showed or reported is the Clinic's to treat.
            erred: case
                .findings
                .iter()
                .any(|f| matches!(f.check, health::Check::TurnFailed | health::Check::Screen)),
        });
        let facts = Facts {
            revivals_for_task: case.revivals,
            max_revivals: self.spec.watchdog.max_revivals,
            stopping: self.is_stopping(),
            ..Facts::new(AgentInfo::from_spec(self.spec, case.agent))
        };
        recovery::decide(&incident, &facts, Some(policies), |_| {
            self.treat(case.agent, case.dir, case.seen, policies)
        })
    }

    /// What the templates (the investigation report, the revival context, the failure
    /// message) are given.
    fn context(&self, case: &Case, r: &Recovery, decision: &UnhealthyDecision) -> Value {
        let inputs = &case.seen.inputs;
        let last_tool_call = inputs.last_tool_call.map(|t| {
            jiff::Timestamp::from_second(t)
                .map(|t| t.to_string())
                .unwrap_or_default()
        });
        json!({
            "agent": case.agent.name, "fleet": self.spec.fleet.name, "cli": case.agent.cli.to_string(),
            "findings": case.findings, "decision": decision, "decided_by": r.decided_by,
            "task": case.seen.task, "revivals": case.revivals,
            // This revival's own number: the revival context is read inside it.
            "revival": case.revivals + 1,
            "max_revivals": self.spec.watchdog.max_revivals,
            "last_tool_call": last_tool_call, "tool_count": inputs.tool_count,
            "recent_calls": inputs.recent_calls.iter().rev().take(10).rev().collect::<Vec<_>>(),
            "notes": inputs.notes, "ts": state::now_rfc3339(), "issue_url": Value::Null,
        })
    }

    /// The investigation report, unless this very problem was reported recently: then it
    /// answers `true` and sends nothing.
    fn investigate(
        &self,
        case: &Case,
        action: UnhealthyAction,
        ctx: &mut Value,
        memory: &mut Memory,
        report: &mut AgentReport,
    ) -> bool {
        let task = case.seen.task.as_deref().unwrap_or("");
        let key = format!("{}|{task}", reason_key(case.findings));
        let cooldown = self.spec.notify.issue_cooldown.as_secs() as i64;
        let reported_recently = memory.notified_key.as_deref() == Some(key.as_str())
            && memory.notified_at.is_some_and(|t| case.now - t < cooldown);
        if action != UnhealthyAction::Ignore && !reported_recently {
            let title = case
                .findings
                .iter()
                .map(|f| f.check.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let body = self.render("investigation.md.j2", ctx, report);
            report.notifications = self.notify(Kind::Investigation, case.agent, &title, &body);
            report.issue_url = report
                .notifications
                .iter()
                .find_map(|s| s.url.clone().filter(|_| s.channel == "github"));
            ctx["issue_url"] = json!(report.issue_url);
            memory.notified_key = Some(key);
            memory.notified_at = Some(case.now);
        }
        reported_recently
    }

    /// What the next start gets (the Clinic's context, else the revival context), the
    /// revival spent, and the failure message when the agent is not revived.
    fn prepare_start(
        &self,
        case: &Case,
        r: &Recovery,
        action: UnhealthyAction,
        ctx: &Value,
        report: &mut AgentReport,
    ) {
        if action == UnhealthyAction::Revive {
            let revival = (r.inject == Inject::RevivalContext)
                .then(|| self.render("revival_context.md.j2", ctx, report));
            if let Err(e) = recovery::execute::prepare_start(case.dir, r, revival.as_deref()) {
                report
                    .problems
                    .push(format!("cannot save the revival context: {e}"));
            }
        }
        if r.spends_revival
            && let Err(e) = recovery::execute::spend_revival(case.dir, case.seen.task.as_deref())
        {
            report
                .problems
                .push(format!("cannot record the revival: {e}"));
        }
        if let Some(Notify::Failure(text)) = &r.notify {
            let text = match text {
                Some(text) => text.clone(),
                None => self.render("failure_message.md.j2", ctx, report),
            };
            let sent = self.notify(Kind::Failure, case.agent, "couldn't recover", &text);
            report.notifications.extend(sent);
        }
    }

    /// Carry the decision out: nothing, the report (already sent), the stop for a person or
    /// the revival. Answers what was done, e.g. `revival_attempted (pane restarted)`.
    fn act(
        &self,
        case: &Case,
        r: &Recovery,
        action: UnhealthyAction,
        reported_recently: bool,
        report: &mut AgentReport,
    ) -> String {
        let process = &case.seen.inputs.process;
        match (action, r.start) {
            (UnhealthyAction::Ignore, _) => "ignored".to_string(),
            (UnhealthyAction::Notify, _) if reported_recently => "already reported".to_string(),
            (UnhealthyAction::Notify, _) => "notified".to_string(),
            (action, Some(Start::SafeMode)) => {
                let why = r.quarantine.as_deref().unwrap_or("watchdog");
                match self.stop_for_a_person(case.dir, why, process) {
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
            (_, start) => match self.revive(case.agent, case.dir, process, start, r) {
                Ok(how) => format!("revival_attempted ({how})"),
                Err(e) => {
                    report.problems.push(format!("revival failed: {e:#}"));
                    "revival_failed".to_string()
                }
            },
        }
    }

    /// What was done, in the agent's ops.jsonl and as a `session_unhealthy` critical event.
    fn record(
        &self,
        case: &Case,
        r: &Recovery,
        decision: &UnhealthyDecision,
        ctx: &Value,
        action_taken: &str,
        report: &mut AgentReport,
    ) {
        let findings = case.findings;
        let _ = case.dir.record_op(
            Op::Watchdog,
            json!({"findings": findings, "action": decision.action, "reason": decision.reason,
                   "action_taken": action_taken, "issue_url": report.issue_url}),
        );
        let reason = findings
            .iter()
            .map(|f| f.reason.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let event = json!({
            "ts": state::now_rfc3339(), "event": "session_unhealthy", "agent": case.agent.name,
            "project": self.spec.fleet.name, "reason": reason, "action_taken": action_taken,
            "github_issue": report.issue_url,
            "details": {
                "findings": findings, "decided_by": r.decided_by, "policy_reason": decision.reason,
                "last_tool_call": ctx["last_tool_call"], "tool_count": case.seen.inputs.tool_count,
                "task": case.seen.task, "revivals_for_task": case.revivals,
                "notifications": report.notifications, "problems": report.problems,
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
        r: &Recovery,
    ) -> crate::error::Result<&'static str> {
        let fresh = start == Some(Start::Fresh);
        match process {
            Some(health::Process::Alive { pid }) => {
                // One owner of a restart: a person's or the daemon's under way is left to it.
                let claim = crate::restart::claim(dir, crate::restart::By::Watchdog)?;
                if let Err(e) =
                    crate::restart::stop_under_wrapper(dir, *pid, r.reason, fresh, r.delay)
                {
                    claim.release();
                    return Err(e);
                }
                claim.starting();
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
        seen: &Observed,
        policies: &Policies,
    ) -> Option<crate::clinic::Recovery> {
        let clinic = crate::clinic::Clinic {
            policies,
            templates: &self.templates,
            settings: &self.spec.clinic,
            fleet: self.fleet.clone(),
            spent: recovery::record::load(dir).recoveries,
        };
        // The screen's part is the CLI's own dialog only: an error line the model wrote or a
        // tool printed ("the build failed", "prompt is too long") must not pick the treatment.
        let output = [seen.inputs.turn_error.clone(), seen.inputs.dialog.clone()]
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
        // Claimed first: a restart someone else has under way is not stopped under them.
        let claim = crate::restart::claim(dir, crate::restart::By::Watchdog)?;
        let stopped = recovery::execute::quarantine(dir, why)
            .map_err(crate::Error::from)
            .and_then(|()| match process {
                Some(health::Process::Alive { pid }) => crate::restart::stop_under_wrapper(
                    dir,
                    *pid,
                    EndReason::WatchdogKill,
                    false,
                    std::time::Duration::ZERO,
                ),
                _ => Ok(()),
            });
        match &stopped {
            // The wrapper ends the claim as it shows safe mode.
            Ok(()) => claim.starting(),
            Err(_) => claim.release(),
        }
        stopped
    }
}

fn reason_key(findings: &[Finding]) -> String {
    let mut checks: Vec<&str> = findings.iter().map(|f| f.check.as_str()).collect();
    checks.sort_unstable();
    checks.join(",")
}
