//! What the wrapper does after an agent exits. The choice itself (resume, fresh, safe mode,
//! how long to wait) is the `on_exit` policy's, Lua or the built-in default
//! (`policy::builtin::on_exit`); this module classifies the exit, builds what the policy is
//! shown, and derives the bookkeeping from its answer. Pure: no files, no clock.

use serde::{Deserialize, Serialize};

pub use crate::policy::ExitAction;
use crate::policy::{self, AgentInfo, ExitInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartMode {
    /// Started with the CLI's resume form and the recorded session id.
    Resume,
    Fresh,
}

impl StartMode {
    pub fn as_str(self) -> &'static str {
        match self {
            StartMode::Resume => "resume",
            StartMode::Fresh => "fresh",
        }
    }
}

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

/// An intentional stop announced before the agent was killed (`stop_request.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    pub reason: EndReason,
    /// Start the next run fresh instead of resuming.
    #[serde(default)]
    pub fresh: bool,
    /// Seconds since the epoch; old requests are ignored.
    pub ts: i64,
}

/// What the decision knows about the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFacts {
    /// As a policy sees it (restart settings, thresholds, its policy file).
    pub info: AgentInfo,
    /// Earlier crashes (seconds since the epoch), from crashes.json; older ones are ignored.
    pub recent_crashes: Vec<i64>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitFacts {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub runtime_ms: u64,
    /// How the run was started; a resume that came back as another session counts as fresh.
    pub mode: StartMode,
    pub session_id: Option<String>,
    /// The run showed life (a hook, or pane output for custom CLIs) before it ended.
    pub showed_life: bool,
    pub requested: Option<StopRequest>,
    /// A `.fresh` marker asks for a clean slate.
    pub fresh_requested: bool,
    /// Seconds since the epoch.
    pub now: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitDecision {
    pub action: ExitAction,
    /// Wait this long before starting again.
    pub delay_ms: u64,
    pub reason: EndReason,
    pub counts_as_crash: bool,
    /// Forget the session id: it did not resume.
    pub clear_session: bool,
    /// Write `.clean-exit` so that no reconciler restarts it.
    pub clean_exit_marker: bool,
    /// A critical event to record (and notify), if any.
    pub critical: Option<String>,
    /// For people: why this decision.
    pub explain: String,
}

/// The decision with the built-in `on_exit` (what a broken or absent policy falls back to).
pub fn decide_on_exit(agent: &AgentFacts, exit: &ExitFacts) -> ExitDecision {
    decide_with(agent, exit, |info| {
        policy::builtin::on_exit(&agent.info, info)
    })
}

/// Classify the exit, ask `on_exit` what next, and derive the bookkeeping from its answer.
/// Stops announced on purpose (operator restart, drift replacement) are not the policy's to
/// judge: they are carried out as requested.
pub fn decide_with(
    agent: &AgentFacts,
    exit: &ExitFacts,
    on_exit: impl FnOnce(&ExitInfo) -> policy::ExitDecision,
) -> ExitDecision {
    if let Some(req) = &exit.requested {
        return ExitDecision {
            action: if req.fresh {
                ExitAction::Fresh
            } else {
                ExitAction::Resume
            },
            delay_ms: 0,
            reason: req.reason,
            counts_as_crash: false,
            clear_session: req.fresh,
            clean_exit_marker: false,
            critical: None,
            explain: format!("stopped on purpose ({})", req.reason.as_str()),
        };
    }
    let clean = exit.code == Some(0) && exit.signal.is_none();
    let reason = match (clean, exit.showed_life) {
        (true, _) => EndReason::CleanExit,
        (false, true) => EndReason::Crash,
        (false, false) => EndReason::NoLife,
    };
    let restart = &agent.info.restart;
    let window_start_ms = i128::from(exit.now) * 1000 - restart.crash_window.as_millis() as i128;
    let earlier = agent
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
        resumed: exit.mode == StartMode::Resume,
        showed_life: exit.showed_life,
        crashes_in_window: crashes,
        fresh_requested: exit.fresh_requested,
        session_id: exit.session_id.clone(),
    };
    let answer = on_exit(&info);
    let why = answer
        .reason
        .clone()
        .unwrap_or_else(|| format!("the policy chose {}", action_name(answer.action)));
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
    let safe = answer.action == ExitAction::SafeMode;
    let critical = (safe && !clean).then(|| {
        if crashes >= restart.max_crashes {
            let window = crate::spec::duration::format(restart.crash_window);
            format!(
                "agent `{}` crashed {crashes} times within {window} (max_crashes = {}): safe mode",
                agent.info.name, restart.max_crashes
            )
        } else {
            format!("agent `{}`: {why}: safe mode", agent.info.name)
        }
    });
    ExitDecision {
        action: answer.action,
        // A restart never comes sooner than the shortest allowed cooldown, whatever the
        // policy said: a policy answering `delay = 0` forever would otherwise busy-loop starts.
        delay_ms: if safe {
            answer.delay
        } else {
            answer.delay.max(crate::spec::floors::COOLDOWN.min)
        }
        .as_millis()
        .min(u128::from(u64::MAX)) as u64,
        reason,
        counts_as_crash: !clean,
        clear_session: answer.action == ExitAction::Fresh,
        clean_exit_marker: clean && safe,
        critical,
        explain: format!("{what}{why}"),
    }
}

fn action_name(action: ExitAction) -> &'static str {
    match action {
        ExitAction::Resume => "resume",
        ExitAction::Fresh => "fresh",
        ExitAction::SafeMode => "safe_mode",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn agent(max: u32, recent: Vec<i64>) -> AgentFacts {
        let mut info = AgentInfo {
            name: "a".into(),
            ..AgentInfo::default()
        };
        info.restart.cooldown = Duration::from_secs(10);
        info.restart.backoff_max = Duration::from_secs(300);
        info.restart.max_crashes = max;
        info.restart.crash_window = Duration::from_secs(3600);
        AgentFacts {
            info,
            recent_crashes: recent,
        }
    }

    fn exit(code: i32, mode: StartMode, runtime_ms: u64) -> ExitFacts {
        ExitFacts {
            code: Some(code),
            signal: None,
            runtime_ms,
            mode,
            session_id: Some("s1".into()),
            showed_life: true,
            requested: None,
            fresh_requested: false,
            now: 1_000_000,
        }
    }

    #[test]
    fn crash_of_a_long_run_resumes_after_cooldown() {
        let d = decide_on_exit(&agent(5, vec![]), &exit(1, StartMode::Fresh, 600_000));
        assert_eq!(d.action, ExitAction::Resume);
        assert_eq!(d.delay_ms, 10_000);
        assert!(d.counts_as_crash && !d.clear_session);
        assert_eq!(d.reason, EndReason::Crash);
    }

    /// The resumed session took a turn and died seconds later: it is the conversation, and
    /// it is resumed again (a resume failed only when it never showed life).
    #[test]
    fn quick_crash_of_a_resumed_run_that_showed_life_resumes_it_again() {
        let d = decide_on_exit(&agent(5, vec![]), &exit(1, StartMode::Resume, 2_000));
        assert_eq!(d.action, ExitAction::Resume);
        assert!(!d.clear_session);
        assert_eq!(d.explain, "exit code 1; crash 1 of 5 within 1h: resuming");
    }

    #[test]
    fn resumed_run_without_life_starts_fresh_and_clears_the_id_however_long_it_ran() {
        for runtime_ms in [500, 120_000] {
            let mut e = exit(1, StartMode::Resume, runtime_ms);
            e.showed_life = false;
            let d = decide_on_exit(&agent(5, vec![]), &e);
            assert_eq!(d.action, ExitAction::Fresh);
            assert!(d.clear_session);
        }
    }

    /// A missing binary (the shell's 127, or the wrapper's own spawn failure): safe mode on
    /// the first exit, with the reason, and no word of resuming.
    #[test]
    fn a_command_that_cannot_run_goes_to_safe_mode_on_the_first_exit() {
        let mut e = exit(127, StartMode::Fresh, 3);
        e.showed_life = false;
        e.session_id = None;
        let d = decide_on_exit(&agent(5, vec![]), &e);
        assert_eq!(d.action, ExitAction::SafeMode);
        assert!(d.counts_as_crash && !d.clean_exit_marker);
        assert!(
            d.explain.contains("cannot be run (exit 127: not found)"),
            "{}",
            d.explain
        );
        assert!(!d.explain.contains("resum"), "{}", d.explain);
        assert!(d.critical.as_deref().unwrap().contains("fix `command`"));
    }

    #[test]
    fn resumed_run_without_life_starts_fresh() {
        let mut e = exit(1, StartMode::Resume, 120_000);
        e.showed_life = false;
        let d = decide_on_exit(&agent(5, vec![]), &e);
        assert_eq!(d.action, ExitAction::Fresh);
        assert_eq!(d.reason, EndReason::NoLife);
    }

    #[test]
    fn clean_exit_enters_safe_mode_with_marker() {
        let d = decide_on_exit(&agent(5, vec![]), &exit(0, StartMode::Resume, 1));
        assert_eq!(d.action, ExitAction::SafeMode);
        assert!(d.clean_exit_marker && !d.counts_as_crash);
        assert_eq!(d.reason, EndReason::CleanExit);
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let now = 1_000_000;
        let delays: Vec<u64> = (0..8)
            .map(|n| {
                let recent = (0..n).map(|i| now - 10 - i).collect();
                decide_on_exit(&agent(100, recent), &exit(1, StartMode::Fresh, 600_000)).delay_ms
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
    fn max_crashes_in_the_window_enter_safe_mode_with_a_critical_event() {
        let now = 1_000_000;
        let d = decide_on_exit(
            &agent(3, vec![now - 100, now - 50]),
            &exit(1, StartMode::Fresh, 600_000),
        );
        assert_eq!(d.action, ExitAction::SafeMode);
        assert!(d.critical.as_deref().unwrap().contains("crashed 3 times"));
        // Crashes outside the window do not count.
        let d = decide_on_exit(
            &agent(3, vec![now - 7200, now - 50]),
            &exit(1, StartMode::Fresh, 600_000),
        );
        assert_eq!(d.action, ExitAction::Resume);
    }

    #[test]
    fn requested_stops_are_not_crashes() {
        let mut e = exit(143, StartMode::Resume, 10);
        e.requested = Some(StopRequest {
            reason: EndReason::OperatorRestart,
            fresh: true,
            ts: 0,
        });
        let d = decide_on_exit(&agent(1, vec![]), &e);
        assert_eq!(d.action, ExitAction::Fresh);
        assert_eq!(d.delay_ms, 0);
        assert!(!d.counts_as_crash);
        assert_eq!(d.reason, EndReason::OperatorRestart);
    }

    #[test]
    fn a_policy_asking_for_no_delay_still_waits_the_shortest_cooldown() {
        let d = decide_with(
            &agent(5, vec![]),
            &exit(1, StartMode::Fresh, 600_000),
            |_: &ExitInfo| policy::ExitDecision {
                action: ExitAction::Resume,
                delay: Duration::ZERO,
                reason: None,
            },
        );
        assert_eq!(d.delay_ms, 100);
    }

    #[test]
    fn the_policy_decides_and_the_bookkeeping_follows() {
        let policy_says = |action| {
            move |_: &ExitInfo| policy::ExitDecision {
                action,
                delay: Duration::from_secs(7),
                reason: Some("my policy".into()),
            }
        };
        let d = decide_with(
            &agent(5, vec![]),
            &exit(1, StartMode::Fresh, 600_000),
            policy_says(ExitAction::Fresh),
        );
        assert_eq!((d.action, d.delay_ms), (ExitAction::Fresh, 7_000));
        assert!(d.clear_session && d.counts_as_crash);
        assert_eq!(d.explain, "exit code 1; my policy");
        // A policy that stops a crashing agent early raises a critical event saying why.
        let d = decide_with(
            &agent(5, vec![]),
            &exit(1, StartMode::Fresh, 600_000),
            policy_says(ExitAction::SafeMode),
        );
        assert_eq!(
            d.critical.as_deref(),
            Some("agent `a`: my policy: safe mode")
        );
        // A policy that restarts after a clean exit leaves no `.clean-exit` behind.
        let d = decide_with(
            &agent(5, vec![]),
            &exit(0, StartMode::Fresh, 600_000),
            policy_says(ExitAction::Resume),
        );
        assert!(!d.clean_exit_marker && !d.counts_as_crash && d.critical.is_none());
    }

    #[test]
    fn the_policy_is_shown_the_crash_count_with_this_crash() {
        let now = 1_000_000;
        let mut seen = None;
        decide_with(
            &agent(5, vec![now - 100, now - 7200]),
            &exit(1, StartMode::Resume, 600_000),
            |info| {
                seen = Some(info.clone());
                policy::builtin::on_exit(&AgentInfo::default(), info)
            },
        );
        let seen = seen.unwrap();
        assert_eq!(seen.crashes_in_window, 2);
        assert!(seen.resumed && seen.showed_life);
    }

    #[test]
    fn decisions_round_trip_through_json() {
        let d = decide_on_exit(&agent(5, vec![]), &exit(1, StartMode::Fresh, 600_000));
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["action"], "resume");
        assert_eq!(v["reason"], "crash");
        let back: ExitDecision = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
    }
}
