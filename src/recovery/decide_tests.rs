//! Table tests of `recovery::decide`: every incident kind, with the built-in policies and the
//! Clinic's real prescriptions and templates.

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
        resume_refused: false,
        worked: false,
        requested: None,
        fresh_requested: false,
        trust_question: None,
        now: NOW,
    }
}

fn requested(reason: EndReason, fresh: bool) -> ExitFacts {
    ExitFacts {
        requested: Some(StopRequest {
            reason,
            ts: NOW,
            delay_ms: 0,
        }),
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
        spent: Default::default(),
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
        spent: None,
    }
}

fn no_clinic(_: Option<&ExitInfo>) -> Option<crate::clinic::Recovery> {
    None
}

/// What the built-in policies answer, without the Clinic.
fn builtin(incident: Incident, facts: &Facts) -> Recovery {
    decide(&incident, facts, None, no_clinic)
}

/// A crash after a long run, as most crashes are.
fn long_run_crash() -> Incident {
    Incident::Exit(exit(1, Start::Fresh, 600_000))
}

/// Policies with `policies/custom.lua` holding `lua`, and the facts of an agent that uses it.
fn custom_policy(lua: &str) -> (tempfile::TempDir, Policies, Facts) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("policies");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("custom.lua"), lua).unwrap();
    let policies = Policies::new(Some(&dir));
    let mut f = facts(5, vec![]);
    f.info.policy = Some("policies/custom.lua".into());
    (tmp, policies, f)
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

impl Row {
    /// A row for an agent with the usual facts, answered with no start, no injection, no
    /// crash and no quarantine until said otherwise.
    fn new(name: &'static str, incident: Incident) -> Row {
        Row {
            name,
            incident,
            facts: facts(5, vec![]),
            clinic: None,
            start: None,
            reason: EndReason::WatchdogKill,
            crash: false,
            quarantine: None,
            inject: "nothing",
        }
    }

    fn exit(name: &'static str, exit: ExitFacts) -> Row {
        Row::new(name, Incident::Exit(exit))
    }

    /// Findings of the watchdog; a failed turn is an error the Clinic can read.
    fn unhealthy(name: &'static str, check: &str) -> Row {
        Row::new(name, unhealthy(&[check], check == "turn_failed"))
    }

    fn facts(self, facts: Facts) -> Row {
        Row { facts, ..self }
    }

    /// What the Clinic makes of the error, when it is asked.
    fn clinic(self, cause: RootCause, error: &'static str) -> Row {
        Row {
            clinic: Some((cause, error)),
            ..self
        }
    }

    /// The expected start (`None`: nothing starts) and end reason.
    fn answers(self, start: impl Into<Option<Start>>, reason: EndReason) -> Row {
        Row {
            start: start.into(),
            reason,
            ..self
        }
    }

    fn crash(self) -> Row {
        Row {
            crash: true,
            ..self
        }
    }

    /// Safe mode shows a reason that contains `why`.
    fn quarantined(self, why: &'static str) -> Row {
        Row {
            quarantine: Some(why),
            ..self
        }
    }

    /// `text` (the Clinic's) or `revival` (the watchdog's context).
    fn injects(self, inject: &'static str) -> Row {
        Row { inject, ..self }
    }
}

fn rows() -> Vec<Row> {
    let mut missing = exit(127, Start::Fresh, 3);
    missing.showed_life = false;
    missing.session_id = None;
    let mut not_executable = missing.clone();
    not_executable.code = Some(126);
    use EndReason::{Crash, NoLife, WatchdogKill};
    use RootCause::*;
    use Start::{Fresh, Resume, SafeMode};
    vec![
        Row::exit("crash", exit(1, Fresh, 600_000))
            .answers(Resume, Crash)
            .crash(),
        Row::exit("clean exit", exit(0, Resume, 1)).answers(SafeMode, EndReason::CleanExit),
        Row::exit("planned cycle", requested(EndReason::PlannedCycle, true))
            .answers(Fresh, EndReason::PlannedCycle),
        Row::exit(
            "operator restart",
            requested(EndReason::OperatorRestart, false),
        )
        .answers(Resume, EndReason::OperatorRestart),
        Row::exit("crash with a full context", exit(1, Resume, 600_000))
            .clinic(ContextLengthExceeded, "prompt is too long")
            .answers(Fresh, Crash)
            .crash()
            .injects("text"),
        Row::exit("crash with a bad key", exit(1, Resume, 600_000))
            .clinic(InvalidCredentials, "401 invalid x-api-key")
            .answers(SafeMode, Crash)
            .crash()
            .quarantined("clinic: invalid_credentials"),
        Row::exit("missing binary 127", missing)
            .answers(SafeMode, NoLife)
            .crash()
            .quarantined("cannot be run (exit 127: not found)"),
        Row::exit("not executable 126", not_executable)
            .answers(SafeMode, NoLife)
            .crash()
            .quarantined("cannot be run (exit 126"),
        Row::exit("crash-loop limit", exit(1, Fresh, 600_000))
            .facts(facts(3, vec![NOW - 100, NOW - 50]))
            .answers(SafeMode, Crash)
            .crash()
            .quarantined("crashed 3 times within 1h (max_crashes = 3)"),
        Row::unhealthy("failed turn: prompt too long", "turn_failed")
            .clinic(ContextLengthExceeded, "Prompt is too long")
            .answers(Fresh, EndReason::PlannedCycle)
            .injects("text"),
        Row::unhealthy("failed turn: auth", "turn_failed")
            .clinic(InvalidCredentials, "401 authentication_error")
            .answers(SafeMode, WatchdogKill)
            .quarantined("clinic: invalid_credentials")
            .injects("revival"),
        Row::unhealthy("failed turn: quota", "turn_failed")
            .clinic(QuotaExhausted, "429 quota exceeded")
            .answers(SafeMode, WatchdogKill)
            .quarantined("clinic: quota_exhausted")
            .injects("revival"),
        Row::unhealthy("failed turn: model not found", "turn_failed")
            .clinic(ModelUnavailable, "model: claude-nope-4 not_found")
            .answers(SafeMode, WatchdogKill)
            .quarantined("fix the model the agent's `command` in phoenix.toml gives")
            .injects("revival"),
        Row::unhealthy("failed turn: transient", "turn_failed")
            .clinic(TransientError, "529 overloaded")
            .answers(Resume, WatchdogKill)
            .injects("revival"),
        // Not asked: a silent session showed no error to read.
        Row::unhealthy("silence", "silence")
            .clinic(ContextLengthExceeded, "unused")
            .answers(Resume, WatchdogKill)
            .injects("revival"),
        Row::unhealthy("loop", "repetition")
            .answers(Resume, WatchdogKill)
            .injects("revival"),
        Row::unhealthy("long-running work", "runaway").answers(None, WatchdogKill),
        Row::unhealthy("revivals spent on the task", "silence")
            .facts(Facts {
                revivals_for_task: 1,
                ..facts(5, vec![])
            })
            .answers(SafeMode, WatchdogKill)
            .quarantined("watchdog: already revived for this task"),
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
        // What safe mode shows names the cause once ("clinic: quota_exhausted:
        // quota_exhausted: …" said nothing twice over).
        if let (Some(q), Some(t)) = (&r.quarantine, &r.clinic) {
            assert_eq!(q.matches(t.root_cause.as_str()).count(), 1, "{name}: {q}");
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
    let r = builtin(long_run_crash(), &facts(5, vec![]));
    assert_eq!(r.start, Some(Start::Resume));
    assert_eq!(r.delay_ms(), 10_000);
    assert!(r.counts_as_crash && !r.clear_session);
    assert_eq!(r.reason, EndReason::Crash);
}

/// The resumed session took a turn and died seconds later: it is the conversation, and
/// it is resumed again (a resume failed only when it never showed life).
#[test]
fn quick_crash_of_a_resumed_run_that_showed_life_resumes_it_again() {
    let r = builtin(
        Incident::Exit(exit(1, Start::Resume, 2_000)),
        &facts(5, vec![]),
    );
    assert_eq!(r.start, Some(Start::Resume));
    assert!(!r.clear_session);
    assert_eq!(r.explain, "exit code 1; crash 1 of 5 within 1h: resuming");
}

/// A resume that showed no life because it was killed (kill -9, the operator's SIGTERM, the
/// machine) or ran out of its life deadline is no proof it cannot be resumed: its transcript
/// is intact, and the conversation is resumed again, the id kept.
#[test]
fn resumed_run_killed_before_it_showed_life_is_resumed_again_and_keeps_its_id() {
    for (code, signal, runtime_ms) in [
        (None, Some(9), 500),
        (None, Some(15), 120_000),
        (Some(1), None, 2_000),
    ] {
        let mut e = exit(1, Start::Resume, runtime_ms);
        (e.code, e.signal) = (code, signal);
        e.showed_life = false;
        let r = builtin(Incident::Exit(e), &facts(5, vec![]));
        assert_eq!(r.start, Some(Start::Resume), "{code:?} {signal:?}");
        assert_eq!(r.reason, EndReason::NoLife);
        assert!(r.counts_as_crash && !r.clear_session, "{r:?}");
        assert!(r.explain.ends_with(": resuming"), "{}", r.explain);
    }
}

/// The CLI's own refusal ("No conversation found", a transcript gone) gives the id up after
/// one try: a fresh start, the id never resumed again, whatever the session's hooks did.
#[test]
fn resume_the_cli_refused_starts_fresh_and_gives_the_id_up_after_one_try() {
    for showed_life in [false, true] {
        let mut e = exit(1, Start::Resume, 1_500);
        e.showed_life = showed_life;
        e.resume_refused = true;
        let r = builtin(Incident::Exit(e), &facts(5, vec![]));
        assert_eq!(r.start, Some(Start::Fresh));
        assert!(r.clear_session && r.counts_as_crash);
        assert!(
            r.explain.contains("the CLI cannot resume the session"),
            "{}",
            r.explain
        );
    }
    // Even when that try was the last the crash limit allows: safe mode, and the id is given
    // up, so `phoenix restart` starts fresh instead of resuming it again.
    let mut e = exit(1, Start::Resume, 1_500);
    e.resume_refused = true;
    let r = builtin(Incident::Exit(e), &facts(3, vec![NOW - 100, NOW - 50]));
    assert_eq!(r.start, Some(Start::SafeMode));
    assert!(r.clear_session);
    // A fresh start's "refusal" is nothing: there was no id to refuse.
    let mut e = exit(1, Start::Fresh, 1_500);
    e.resume_refused = true;
    let r = builtin(Incident::Exit(e), &facts(5, vec![]));
    assert_eq!(r.start, Some(Start::Resume));
    assert!(!r.clear_session);
}

/// Claude Code 2.1.332's trust dialog has "No, exit" selected: a key there exits 1. That is a
/// person's answer, asked again by every start: it waits for a person, counted as no crash,
/// whatever the policy or the crash count would say, however often it happens.
#[test]
fn an_exit_at_the_folder_trust_question_waits_for_a_person_and_is_no_crash() {
    let policies = Policies::new(None);
    for lua in [None, Some(&policies)] {
        let mut e = exit(1, Start::Fresh, 4_000);
        e.showed_life = false;
        e.session_id = None;
        e.trust_question = Some("Claude Code asks whether to trust `/w`".into());
        let incident = Incident::Exit(e);
        assert!(!incident.is_crash());
        let r = decide(&incident, &facts(5, vec![NOW - 5, NOW - 3]), lua, |_| {
            panic!("no Clinic for an answer")
        });
        assert_eq!(r.start, Some(Start::SafeMode));
        assert_eq!(r.reason, EndReason::TrustDeclined);
        assert!(!r.counts_as_crash && !r.clean_exit_marker && !r.clear_session);
        assert!(r.quarantine.is_none() && r.critical.is_none());
        assert_eq!(r.decided_by, "trust_dialog");
        assert!(
            r.explain
                .starts_with("Claude Code asks whether to trust `/w`, and it exited"),
            "{}",
            r.explain
        );
        assert!(r.explain.contains("phoenix restart"), "{}", r.explain);
    }
}

/// A missing binary (the shell's 127, or the wrapper's own spawn failure): safe mode on
/// the first exit, with the reason, and no word of resuming.
#[test]
fn a_command_that_cannot_run_goes_to_safe_mode_on_the_first_exit() {
    let mut e = exit(127, Start::Fresh, 3);
    e.showed_life = false;
    e.session_id = None;
    let r = builtin(Incident::Exit(e), &facts(5, vec![]));
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
    let r = builtin(Incident::Exit(exit(0, Start::Resume, 1)), &facts(5, vec![]));
    assert_eq!(r.start, Some(Start::SafeMode));
    assert!(r.clean_exit_marker && !r.counts_as_crash);
    assert_eq!((r.quarantine, r.critical), (None, None));
}

#[test]
fn backoff_doubles_up_to_the_maximum() {
    let delays: Vec<u64> = (0..8)
        .map(|n| {
            let recent = (0..n).map(|i| NOW - 10 - i).collect();
            builtin(long_run_crash(), &facts(100, recent)).delay_ms()
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
    let r = builtin(long_run_crash(), &facts(3, vec![NOW - 7200, NOW - 50]));
    assert_eq!(r.start, Some(Start::Resume));
}

#[test]
fn requested_stops_are_not_crashes_and_fresh_comes_from_the_marker_only() {
    let r = builtin(
        Incident::Exit(requested(EndReason::OperatorRestart, true)),
        &facts(1, vec![]),
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
    let (_tmp, policies, f) = custom_policy(
        "function on_exit(agent, exit) error('boom') end\n\
         function on_unhealthy(agent, health) error('boom') end\n",
    );
    let r = decide(&long_run_crash(), &f, Some(&policies), no_clinic);
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
fn a_day_past_the_budget_stops_for_a_person_whatever_the_policy_says() {
    let (_tmp, policies, f) = custom_policy(
        "function on_unhealthy(agent, health) return {action = 'revive', reason = 'always'} end\n",
    );
    let r = decide(
        &unhealthy(&["silence", "budget"], false),
        &f,
        Some(&policies),
        no_clinic,
    );
    assert_eq!(r.start, Some(Start::SafeMode));
    assert_eq!(r.decided_by, "budget");
    assert_eq!(r.quarantine.as_deref(), Some("budget: budget found"));
    assert_eq!(r.notify, Some(Notify::Failure(None)));
    assert_eq!(r.reason, EndReason::WatchdogKill);
    assert!(!r.spends_revival);
}

#[test]
fn a_policy_asking_for_no_delay_still_waits_the_shortest_cooldown() {
    let (_tmp, policies, f) =
        custom_policy("function on_exit(agent, exit) return {action = 'resume', delay = 0} end\n");
    let r = decide(&long_run_crash(), &f, Some(&policies), no_clinic);
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
    let r = builtin(unhealthy(&["silence"], false), &f);
    assert_eq!(r.start, Some(Start::Resume));
    assert!(r.held.is_some() && !r.spends_revival);
}

#[test]
fn recoveries_round_trip_through_json() {
    let r = builtin(long_run_crash(), &facts(5, vec![]));
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["start"], "resume");
    assert_eq!(v["reason"], "crash");
}

/// A failed turn the Clinic retries (429, 529) is revived after the Clinic's backoff, and the
/// wrapper that carries the stop out waits it: the delay travels in the stop request.
#[test]
fn a_transient_failed_turn_is_retried_after_the_clinics_delay() {
    let policies = Policies::new(None);
    let f = facts(5, vec![]);
    let r = decide(
        &unhealthy(&["turn_failed"], true),
        &f,
        Some(&policies),
        |_| {
            Some(clinic_says(
                RootCause::TransientError,
                "API Error: 529 overloaded_error",
            ))
        },
    );
    assert_eq!(r.start, Some(Start::Resume));
    assert!(r.delay > Duration::ZERO, "{r:?}");
    let mut stop = requested(EndReason::WatchdogKill, false);
    stop.requested.as_mut().unwrap().delay_ms = r.delay_ms();
    let carried = builtin(Incident::Exit(stop), &f);
    assert_eq!(carried.delay, r.delay);
    // A stop without a delay (a person's restart) starts again at once.
    let now = builtin(
        Incident::Exit(requested(EndReason::OperatorRestart, false)),
        &f,
    );
    assert_eq!(now.delay, Duration::ZERO);
}

/// A session that did work (a finished turn, a tool call) starts the backoff over: kill after
/// kill of a resumed session that worked each time waits the first cooldown, not a doubled
/// one; crashes after the last work double it again, with the built-ins and the Lua policy.
#[test]
fn the_backoff_starts_over_after_a_session_that_did_work() {
    let policies = Policies::new(None);
    let recent = vec![NOW - 30, NOW - 20];
    let killed = |worked: bool| {
        Incident::Exit(ExitFacts {
            signal: Some(9),
            code: None,
            worked,
            ..exit(1, Start::Resume, 600_000)
        })
    };
    let mut f = facts(100, recent);
    for lua in [None, Some(&policies)] {
        let delay = |incident: Incident, f: &Facts| decide(&incident, f, lua, no_clinic).delay_ms();
        // The third crash in the window, none after work: doubled twice.
        assert_eq!(delay(killed(false), &f), 40_000);
        // This session worked before it was killed: the first cooldown.
        assert_eq!(delay(killed(true), &f), 10_000);
        // Work ended between the two earlier crashes: one crash since, and this one.
        f.last_work = Some(NOW - 25);
        assert_eq!(delay(killed(false), &f), 20_000);
        f.last_work = None;
    }
}
