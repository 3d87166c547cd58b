//! Health assessment: a pure function from what the watchdog observed about one agent to its
//! findings. No files, no clock, no tmux: `observe.rs` gathers the inputs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One check of the assessment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    Process,
    Silence,
    ErrorCascade,
    Runaway,
    Repetition,
    Spend,
    Screen,
    /// The CLI said the last turn failed (an API error it gave up on) and waits for input.
    TurnFailed,
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::Process => "process",
            Check::Silence => "silence",
            Check::ErrorCascade => "error_cascade",
            Check::Runaway => "runaway",
            Check::Repetition => "repetition",
            Check::Spend => "spend",
            Check::Screen => "screen",
            Check::TurnFailed => "turn_failed",
        }
    }
}

/// Is the agent's CLI there?
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Process {
    Alive {
        pid: u32,
    },
    /// No pane, a dead pane, or a pane without the CLI under its wrapper.
    Gone {
        why: String,
    },
}

/// One tool call as tool_use.jsonl recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Call {
    pub tool: String,
    pub ok: bool,
    /// Digest of the call's input (hooks record it); `None` for older lines.
    pub input: Option<String>,
}

/// What the watchdog saw of one agent. Times are seconds since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inputs {
    pub now: i64,
    pub process: Option<Process>,
    /// state.json's status: `working`, `idle`, `stopped`.
    pub status: Option<String>,
    pub last_tool_call: Option<i64>,
    /// state.json's `last_active`: the fallback when tool_use.jsonl is missing or unreadable.
    pub last_active: Option<i64>,
    /// The latest tool calls, oldest first.
    pub recent_calls: Vec<Call>,
    /// All the tool calls in the readable log (progress between two passes).
    pub tool_count: u64,
    /// The last completion signal (turn finished) or session start, whichever is later.
    pub working_since: Option<i64>,
    /// Tokens the current session has used, from its transcript.
    pub tokens: Option<u64>,
    /// The error of the last turn, when the CLI reported it failed (status `failed`).
    pub turn_error: Option<String>,
    /// The pane's visible text.
    pub screen: Option<String>,
    /// The screen did not change since the previous pass.
    pub screen_unchanged: bool,
    /// Why a check could not run (missing or corrupt logs).
    pub notes: Vec<String>,
}

/// The limits an agent is held to.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub silence: Duration,
    pub error_cascade: u32,
    pub runaway: Duration,
    pub repeat: u32,
    pub max_tokens: Option<u64>,
    /// Lowercase phrases that mean a wedged screen for this agent's CLI.
    pub screen_patterns: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub check: Check,
    /// Machine-friendly, e.g. `silent_for_15_minutes`.
    pub reason: String,
    /// For people.
    pub summary: String,
    /// Evidence that needs no second look (a dead process, a spend limit passed).
    pub unambiguous: bool,
}

/// Phrases of wedged screens every CLI shows in some form: API error banners, rate limits,
/// expired logins, permission prompts nobody answers.
pub const SCREEN_PATTERNS: &[&str] = &[
    "api error: 5",
    "overloaded_error",
    "rate_limit_error",
    "rate limit reached",
    "usage limit reached",
    "please run /login",
    "invalid api key",
    "oauth token has expired",
    "do you want to proceed?",
    "do you want to make this edit",
    "allow command?",
    "allow execution",
    "apply this change?",
    "waiting for approval",
];

fn minutes(secs: i64) -> String {
    let m = secs / 60;
    if m >= 1 {
        format!("{m}_minute{}", if m == 1 { "" } else { "s" })
    } else {
        format!("{secs}_seconds")
    }
}

fn human(secs: i64) -> String {
    crate::spec::duration::format(Duration::from_secs(secs.max(0) as u64))
}

/// Every check of one agent.
pub fn assess(i: &Inputs, limits: &Limits) -> Vec<Finding> {
    let mut found = Vec::new();
    let mut add = |check, reason: String, summary: String, unambiguous| {
        found.push(Finding {
            check,
            reason,
            summary,
            unambiguous,
        })
    };
    let alive = matches!(i.process, Some(Process::Alive { .. }));
    if let Some(Process::Gone { why }) = &i.process {
        add(
            Check::Process,
            "process_dead".into(),
            format!("the CLI process is gone: {why}"),
            true,
        );
    }
    let working = i.status.as_deref() == Some("working");

    // Nothing will happen after a failed turn unless someone types: unambiguous.
    if alive && i.status.as_deref() == Some("failed") {
        let error = i.turn_error.as_deref().unwrap_or("no error text");
        add(
            Check::TurnFailed,
            "turn_failed".into(),
            format!(
                "the last turn ended in an API error and the CLI waits for input: {}",
                error.chars().take(200).collect::<String>()
            ),
            true,
        );
    }

    // A finished turn waiting for input is idle, not silent.
    if alive && working {
        if let Some(last) = i.last_tool_call.or(i.last_active) {
            let quiet = i.now - last;
            if quiet > limits.silence.as_secs() as i64 {
                add(
                    Check::Silence,
                    format!("silent_for_{}", minutes(quiet)),
                    format!(
                        "no tool call for {} while working (silence = {})",
                        human(quiet),
                        human(limits.silence.as_secs() as i64)
                    ),
                    false,
                );
            }
        }
        if let Some(since) = i.working_since {
            let busy = i.now - since;
            if busy > limits.runaway.as_secs() as i64 {
                add(
                    Check::Runaway,
                    format!("working_for_{}", minutes(busy)),
                    format!(
                        "working for {} without finishing a turn (runaway = {})",
                        human(busy),
                        human(limits.runaway.as_secs() as i64)
                    ),
                    false,
                );
            }
        }
    }

    let failing = i.recent_calls.iter().rev().take_while(|c| !c.ok).count() as u32;
    if alive && failing > limits.error_cascade {
        let tool = &i.recent_calls[i.recent_calls.len() - 1].tool;
        add(
            Check::ErrorCascade,
            format!("{failing}_consecutive_tool_errors"),
            format!(
                "{failing} failed tool calls in a row, the last one `{tool}` (error_cascade = {})",
                limits.error_cascade
            ),
            false,
        );
    }

    if alive && let Some(summary) = repetition(&i.recent_calls, limits.repeat as usize) {
        add(Check::Repetition, "repetition_loop".into(), summary, false);
    }

    if let (Some(tokens), Some(max)) = (i.tokens, limits.max_tokens)
        && alive
        && tokens > max
    {
        add(
            Check::Spend,
            "token_limit_exceeded".into(),
            format!("the session used {tokens} tokens (max_tokens = {max})"),
            true,
        );
    }

    if let (true, true, Some(screen)) = (alive, i.screen_unchanged, &i.screen) {
        let lower = screen.to_lowercase();
        if let Some(p) = limits
            .screen_patterns
            .iter()
            .find(|p| lower.contains(p.as_str()))
        {
            add(
                Check::Screen,
                "stuck_on_screen".into(),
                format!("the screen shows \"{p}\" and has not changed since the last pass"),
                false,
            );
        }
    }
    found
}

/// The same call `n` times in a row, or the same failing call alternating with the same
/// other call `n` times: busy, never silent, and still going nowhere.
fn repetition(calls: &[Call], n: usize) -> Option<String> {
    let keyed: Vec<(&str, &str, bool)> = calls
        .iter()
        .map(|c| (c.tool.as_str(), c.input.as_deref().unwrap_or(""), c.ok))
        .collect();
    if n >= 2 && keyed.len() >= n {
        let tail = &keyed[keyed.len() - n..];
        // Calls without a recorded input cannot be told apart: never call them a loop.
        if !tail[0].1.is_empty() && tail.iter().all(|c| (c.0, c.1) == (tail[0].0, tail[0].1)) {
            return Some(format!("the same `{}` call {n} times in a row", tail[0].0));
        }
    }
    if n >= 2 && keyed.len() >= 2 * n {
        let tail = &keyed[keyed.len() - 2 * n..];
        let (a, b) = (tail[0], tail[1]);
        let alternates = !a.1.is_empty()
            && !b.1.is_empty()
            && (a.0, a.1) != (b.0, b.1)
            && tail.iter().enumerate().all(|(k, c)| {
                let want = if k % 2 == 0 { a } else { b };
                (c.0, c.1) == (want.0, want.1)
            });
        let one_fails =
            tail.iter().step_by(2).all(|c| !c.2) || tail.iter().skip(1).step_by(2).all(|c| !c.2);
        if alternates && one_fails {
            return Some(format!(
                "the same failing call alternating with the same fix {n} times (`{}` / `{}`)",
                a.0, b.0
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            silence: Duration::from_secs(600),
            error_cascade: 5,
            runaway: Duration::from_secs(7200),
            repeat: 3,
            max_tokens: Some(1000),
            screen_patterns: SCREEN_PATTERNS.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn working(now: i64) -> Inputs {
        Inputs {
            now,
            process: Some(Process::Alive { pid: 1 }),
            status: Some("working".into()),
            last_tool_call: Some(now - 5),
            working_since: Some(now - 60),
            ..Inputs::default()
        }
    }

    fn call(tool: &str, input: &str, ok: bool) -> Call {
        Call {
            tool: tool.into(),
            ok,
            input: Some(input.into()),
        }
    }

    fn checks(i: &Inputs) -> Vec<Check> {
        assess(i, &limits()).iter().map(|f| f.check).collect()
    }

    #[test]
    fn a_failed_turn_is_found_at_once_while_the_cli_waits() {
        let mut i = working(10_000);
        i.status = Some("failed".into());
        i.turn_error = Some("invalid_request: prompt is too long".into());
        let found = assess(&i, &limits());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].check, Check::TurnFailed);
        assert!(found[0].unambiguous);
        assert!(found[0].summary.contains("prompt is too long"));
        i.process = None;
        assert!(!checks(&i).contains(&Check::TurnFailed));
    }

    #[test]
    fn a_busy_agent_is_healthy() {
        assert!(checks(&working(10_000)).is_empty());
    }

    #[test]
    fn silence_only_while_working_and_alive() {
        let mut i = working(10_000);
        i.last_tool_call = Some(10_000 - 900);
        let found = assess(&i, &limits());
        assert_eq!(found[0].check, Check::Silence);
        assert_eq!(found[0].reason, "silent_for_15_minutes");
        i.status = Some("idle".into());
        assert!(checks(&i).is_empty(), "a finished turn waiting is idle");
    }

    #[test]
    fn missing_tool_log_falls_back_to_last_active() {
        let mut i = working(10_000);
        i.last_tool_call = None;
        i.last_active = Some(10_000 - 700);
        assert_eq!(checks(&i), [Check::Silence]);
        i.last_active = None;
        assert!(checks(&i).is_empty());
    }

    #[test]
    fn error_cascade_needs_more_than_the_threshold() {
        let mut i = working(10_000);
        i.recent_calls = (0..5)
            .map(|k| call("Bash", &k.to_string(), false))
            .collect();
        assert!(checks(&i).is_empty());
        i.recent_calls.push(call("Bash", "x", false));
        assert_eq!(checks(&i), [Check::ErrorCascade]);
        i.recent_calls.push(call("Bash", "y", true));
        assert!(checks(&i).is_empty());
    }

    #[test]
    fn runaway_after_the_threshold_without_a_completion() {
        let mut i = working(100_000);
        i.working_since = Some(100_000 - 7300);
        assert_eq!(checks(&i), [Check::Runaway]);
    }

    #[test]
    fn repetition_same_call_or_fail_fix_alternation() {
        let mut i = working(10_000);
        i.recent_calls = vec![call("Read", "a", true); 3];
        assert_eq!(checks(&i), [Check::Repetition]);
        i.recent_calls = vec![
            call("Read", "a", true),
            call("Read", "b", true),
            call("Read", "a", true),
        ];
        assert!(checks(&i).is_empty());
        i.recent_calls = (0..6)
            .map(|k| {
                if k % 2 == 0 {
                    call("Bash", "test", false)
                } else {
                    call("Edit", "fix", true)
                }
            })
            .collect();
        assert_eq!(checks(&i), [Check::Repetition]);
        // Without recorded inputs, identical-looking calls are not a loop.
        i.recent_calls = vec![
            Call {
                tool: "Read".into(),
                ok: true,
                input: None
            };
            3
        ];
        assert!(checks(&i).is_empty());
    }

    #[test]
    fn dead_process_and_spend_are_unambiguous() {
        let mut i = working(10_000);
        i.process = Some(Process::Gone {
            why: "pane is dead".into(),
        });
        let found = assess(&i, &limits());
        assert_eq!(found.len(), 1);
        assert!(found[0].unambiguous);
        let mut i = working(10_000);
        i.tokens = Some(5000);
        let found = assess(&i, &limits());
        assert_eq!(found[0].check, Check::Spend);
        assert!(found[0].unambiguous);
    }

    #[test]
    fn a_wedged_screen_counts_only_when_it_did_not_change() {
        let mut i = working(10_000);
        i.screen = Some("API Error: 529 {\"type\":\"overloaded_error\"}".into());
        assert!(checks(&i).is_empty());
        i.screen_unchanged = true;
        assert_eq!(checks(&i), [Check::Screen]);
    }
}
