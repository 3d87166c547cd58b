//! What the wrapper does after an agent exits: one pure function over plain serde structs, so
//! the Lua policy issue can offer it as `on_exit(agent, exit)` and keep these rules as the
//! default.

use serde::{Deserialize, Serialize};

use crate::spec::{AgentSpec, Cli};

/// A resumed run that dies within this long did not really resume: start fresh next time.
pub const QUICK_FAILURE_MS: u64 = 30_000;

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

/// What the policy knows about the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFacts {
    pub name: String,
    pub cli: Cli,
    pub cooldown_ms: u64,
    pub backoff_max_ms: u64,
    pub max_crashes: u32,
    pub crash_window_ms: u64,
    /// Earlier crashes (seconds since the epoch), from crashes.json; older ones are ignored.
    pub recent_crashes: Vec<i64>,
}

impl AgentFacts {
    pub fn new(agent: &AgentSpec, recent_crashes: Vec<i64>) -> AgentFacts {
        let ms = |d: std::time::Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
        AgentFacts {
            name: agent.name.clone(),
            cli: agent.cli,
            cooldown_ms: ms(agent.restart.cooldown),
            backoff_max_ms: ms(agent.restart.backoff_max),
            max_crashes: agent.restart.max_crashes,
            crash_window_ms: ms(agent.restart.crash_window),
            recent_crashes,
        }
    }
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
    /// Seconds since the epoch.
    pub now: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitAction {
    /// Start again, resuming the recorded session if there is one.
    Resume,
    Fresh,
    /// Stop starting it; the pane shows a read loop that accepts `restart`, `fresh`, `quit`.
    SafeMode,
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

/// The built-in rules (Phoenix Protocol v2.0 wrapper, hybrid resume).
pub fn decide_on_exit(agent: &AgentFacts, exit: &ExitFacts) -> ExitDecision {
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
    if exit.code == Some(0) && exit.signal.is_none() {
        return ExitDecision {
            action: ExitAction::SafeMode,
            delay_ms: 0,
            reason: EndReason::CleanExit,
            counts_as_crash: false,
            clear_session: false,
            clean_exit_marker: true,
            critical: None,
            explain: "exited cleanly: left stopped until `phoenix restart`".into(),
        };
    }

    let reason = if exit.showed_life {
        EndReason::Crash
    } else {
        EndReason::NoLife
    };
    let window_start_ms = i128::from(exit.now) * 1000 - i128::from(agent.crash_window_ms);
    let earlier = agent
        .recent_crashes
        .iter()
        .filter(|&&t| i128::from(t) * 1000 > window_start_ms)
        .count();
    let crashes = u32::try_from(earlier + 1).unwrap_or(u32::MAX);
    let what = match (exit.code, exit.signal) {
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(code), None) => format!("exit code {code}"),
        (None, None) => "unknown exit".to_string(),
    };
    let what = if exit.showed_life {
        what
    } else {
        format!("{what}, never showed life")
    };
    let window =
        crate::spec::duration::format(std::time::Duration::from_millis(agent.crash_window_ms));
    if crashes >= agent.max_crashes {
        let message = format!(
            "agent `{}` crashed {crashes} times within {window} (max_crashes = {}): safe mode",
            agent.name, agent.max_crashes
        );
        return ExitDecision {
            action: ExitAction::SafeMode,
            delay_ms: 0,
            reason,
            counts_as_crash: true,
            clear_session: false,
            clean_exit_marker: false,
            critical: Some(message),
            explain: format!(
                "{what}; crash {crashes} of {} within {window}",
                agent.max_crashes
            ),
        };
    }

    let resume_failed =
        exit.mode == StartMode::Resume && (!exit.showed_life || exit.runtime_ms < QUICK_FAILURE_MS);
    let shift = (crashes - 1).min(32);
    let delay_ms = agent
        .cooldown_ms
        .saturating_mul(1u64 << shift)
        .min(agent.backoff_max_ms.max(agent.cooldown_ms));
    let (action, clear_session, next) = if resume_failed {
        (ExitAction::Fresh, true, "; the resume failed quickly")
    } else {
        (ExitAction::Resume, false, "")
    };
    ExitDecision {
        action,
        delay_ms,
        reason,
        counts_as_crash: true,
        clear_session,
        clean_exit_marker: false,
        critical: None,
        explain: format!(
            "{what}; crash {crashes} of {} within {window}{next}",
            agent.max_crashes
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(max: u32, recent: Vec<i64>) -> AgentFacts {
        AgentFacts {
            name: "a".into(),
            cli: Cli::Claude,
            cooldown_ms: 10_000,
            backoff_max_ms: 300_000,
            max_crashes: max,
            crash_window_ms: 3_600_000,
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

    #[test]
    fn quick_crash_of_a_resumed_run_starts_fresh_and_clears_the_id() {
        let d = decide_on_exit(&agent(5, vec![]), &exit(1, StartMode::Resume, 2_000));
        assert_eq!(d.action, ExitAction::Fresh);
        assert!(d.clear_session);
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
    fn zero_cooldown_restarts_at_once() {
        let mut a = agent(5, vec![]);
        a.cooldown_ms = 0;
        let d = decide_on_exit(&a, &exit(1, StartMode::Fresh, 600_000));
        assert_eq!(d.delay_ms, 0);
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
