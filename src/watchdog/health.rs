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
    /// Made in the current turn (see `in_current_turn`): only those can form a loop or a
    /// cascade. Calls of earlier turns or sessions are history.
    pub this_turn: bool,
}

/// When nothing says where the current turn began (a CLI without a prompt hook), calls this
/// close to the latest one count as one stretch of work.
pub const TURN_WINDOW_MS: i64 = 10 * 60 * 1000;

/// Was a call made at `call_ms` part of the current turn? The turn began at `turn_started_ms`
/// (its prompt, or the session start) when known; otherwise calls within `TURN_WINDOW_MS` of
/// the latest call (`latest_ms`) are. A call without a time is never part of it. All times
/// in milliseconds since the epoch.
pub fn in_current_turn(
    call_ms: Option<i64>,
    turn_started_ms: Option<i64>,
    latest_ms: Option<i64>,
) -> bool {
    let Some(call) = call_ms else {
        return false;
    };
    match (turn_started_ms, latest_ms) {
        (Some(start), _) => call >= start,
        (None, Some(latest)) => latest - call <= TURN_WINDOW_MS,
        (None, None) => false,
    }
}

/// Lowercase phrases a CLI shows while it retries a failed API call by itself (Claude Code:
/// "API Error (…) · Retrying in 5 seconds… (attempt 2/10)"; Codex: "Reconnecting... 2/5",
/// "stream error: …; retrying 1/5 in 200ms…"; Gemini CLI: "Retrying with backoff"). Such a CLI
/// is busy, not silent and not stuck.
pub const RETRY_PATTERNS: &[&str] = &[
    "retrying in ",
    "reconnecting...",
    "retrying with backoff",
    "retrying after ",
    "; retrying ",
];

/// How many lines at the bottom of the screen are searched for a retry banner: the CLI shows
/// it where it is working now, and an old one further up is history.
const RETRY_BANNER_LINES: usize = 12;

/// The retry banner at the bottom of `screen`, if the CLI shows one.
pub fn retry_banner(screen: &str) -> Option<&'static str> {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let bottom = lines[lines.len().saturating_sub(RETRY_BANNER_LINES)..]
        .join("\n")
        .to_lowercase();
    RETRY_PATTERNS.iter().copied().find(|p| bottom.contains(p))
}

/// What the watchdog saw of one agent. Times are seconds since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inputs {
    pub now: i64,
    pub process: Option<Process>,
    /// state.json's status: `working`, `idle`, `stopped`.
    pub status: Option<String>,
    pub last_tool_call: Option<i64>,
    /// state.json's `last_active`: the latest hook that wrote state (a prompt, a session
    /// start, a tool call at most `HEARTBEAT_WRITE_INTERVAL` old, a turn's end).
    pub last_active: Option<i64>,
    /// When the session's transcript was last written (the CLI records messages, and Claude
    /// Code its API retries, there).
    pub transcript_written: Option<i64>,
    /// The CLI wrote in its transcript that it retries a failed API call: when it said it
    /// would try again.
    pub retry_at: Option<i64>,
    /// The latest pass that saw the pane's text change.
    pub screen_changed_at: Option<i64>,
    /// The latest tool calls, oldest first.
    pub recent_calls: Vec<Call>,
    /// All the tool calls in the readable log (progress between two passes).
    pub tool_count: u64,
    /// When the current turn began: its prompt, the start of the session, or the end of the
    /// turn before, whichever is latest.
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
    // Gemini CLI's dialog after a 404 for its model ("It seems like you don't have access to
    // gemini-x", then "1. Keep trying / 2. Stop"): no hook fires and nothing changes until a
    // person chooses. The same choice follows its quota errors.
    "you don't have access to gemini",
    "1. keep trying",
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

    // A finished turn waiting for input is idle, not silent. A working agent is silent only
    // when no sign of life of its current turn is recent, and never while its CLI says it is
    // retrying an API call.
    if alive && working {
        let retrying = i.screen.as_deref().and_then(retry_banner);
        if let (None, Some((last, what))) = (retrying, last_sign_of_life(i)) {
            let quiet = i.now - last;
            if quiet > limits.silence.as_secs() as i64 {
                add(
                    Check::Silence,
                    format!("silent_for_{}", minutes(quiet)),
                    format!(
                        "no sign of life for {} while working, the last one {what} (silence = {})",
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

    // Loops and cascades are made of the calls of one turn (the latest, also once it ended):
    // the same successful command at the end of every turn is a habit, and failures of
    // earlier turns or sessions are history.
    let turn: Vec<&Call> = {
        let first = i.recent_calls.iter().rposition(|c| !c.this_turn);
        i.recent_calls[first.map_or(0, |k| k + 1)..]
            .iter()
            .collect()
    };
    let failing = turn.iter().rev().take_while(|c| !c.ok).count() as u32;
    if alive && failing > limits.error_cascade {
        let tool = &turn[turn.len() - 1].tool;
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

    // A loop is going on: only while the agent works.
    if alive
        && working
        && let Some(summary) = repetition(&turn, limits.repeat as usize)
    {
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

    // A CLI that shows it is retrying is waiting on purpose: its banner names an API error
    // that it handles itself.
    if let (true, true, Some(screen)) = (alive, i.screen_unchanged, &i.screen)
        && retry_banner(screen).is_none()
    {
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

/// The latest sign of life of the current turn and what it was: a tool call, a hook (prompt,
/// session start), the start of the turn or session, a transcript write, the time the CLI said it would
/// retry, or the pane's text changing. Signs from before the turn are older than its start, so
/// the latest one is always of the current turn.
fn last_sign_of_life(i: &Inputs) -> Option<(i64, &'static str)> {
    [
        (i.last_tool_call, "a tool call"),
        (i.last_active, "a hook (prompt, session start or tool call)"),
        (i.working_since, "the start of the turn or session"),
        (i.transcript_written, "a transcript write"),
        (i.retry_at, "an API retry the CLI announced"),
        (i.screen_changed_at, "the screen changing"),
    ]
    .into_iter()
    .filter_map(|(t, what)| t.map(|t| (t, what)))
    .max_by_key(|(t, _)| *t)
}

/// The same call `n` times in a row, or the same failing call alternating with the same
/// other call `n` times: busy, never silent, and still going nowhere.
fn repetition(calls: &[&Call], n: usize) -> Option<String> {
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
            this_turn: true,
        }
    }

    /// The same call made in an earlier turn or session.
    fn earlier(c: Call) -> Call {
        Call {
            this_turn: false,
            ..c
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
        i.working_since = Some(10_000 - 1000);
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
        i.working_since = None;
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
                input: None,
                this_turn: true,
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

    #[test]
    fn gemini_waiting_for_a_choice_after_a_404_is_a_wedged_screen() {
        let mut i = working(10_000);
        i.screen = Some(
            " > summarise the changelog\n│ It seems like you don't have access to gemini-3.8-flash.      │\n\
             │ Your admin might have disabled the access.        │\n│ ● 1. Keep trying   │\n│   2. Stop  │\n"
                .into(),
        );
        i.screen_unchanged = true;
        assert_eq!(checks(&i), [Check::Screen]);
    }

    const NOW: i64 = 1_000_000;
    const RETRY_BANNER: &str = "● Running the tests\n  ⎿  API Error (429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}) · Retrying in 32 seconds… (attempt 5/10)\n\n✻ Thinking… (esc to interrupt)\n\n> \n";

    /// An agent in the middle of a turn that began `turn_age` seconds ago, whose last tool
    /// call was `quiet` seconds ago.
    fn turn(turn_age: i64, quiet: i64) -> Inputs {
        Inputs {
            now: NOW,
            process: Some(Process::Alive { pid: 1 }),
            status: Some("working".into()),
            last_tool_call: Some(NOW - quiet),
            last_active: Some(NOW - turn_age),
            working_since: Some(NOW - turn_age),
            ..Inputs::default()
        }
    }

    fn idle(since: i64) -> Inputs {
        Inputs {
            status: Some("idle".into()),
            ..turn(since, since)
        }
    }

    fn with(mut i: Inputs, f: impl FnOnce(&mut Inputs)) -> Inputs {
        f(&mut i);
        i
    }

    /// Healthy agents that look odd: every check must leave each of them alone.
    #[test]
    fn healthy_agents_that_look_odd_stay_healthy() {
        let cargo_test = || call("Bash", "cargo test", true);
        let failing_test = || call("Bash", "cargo test", false);
        let cases: Vec<(&str, Inputs)> = vec![
            (
                "a turn started 2 s ago after 15 minutes idle (its last tool call is older)",
                turn(2, 900),
            ),
            (
                "a turn started 2 s ago after 3 hours idle: not a runaway either",
                turn(2, 3 * 3600),
            ),
            (
                "a new session after a long idle, its session start 5 s ago",
                with(turn(5, 5 * 3600), |i| {
                    i.last_active = Some(NOW - 5 * 3600);
                    i.recent_calls = vec![earlier(failing_test()); 8];
                }),
            ),
            (
                "long reasoning: no tool call for 20 minutes, the spinner moved at this pass",
                with(turn(1500, 1200), |i| {
                    i.screen_changed_at = Some(NOW);
                    i.screen = Some("✻ Thinking… (1200s · ↓ 8k tokens)".into());
                }),
            ),
            (
                "long reasoning: no tool call for 20 minutes, the transcript written 1 minute ago",
                with(turn(1500, 1200), |i| i.transcript_written = Some(NOW - 60)),
            ),
            (
                "API retry backoff: the CLI's retry banner on a screen that did not change",
                with(turn(1500, 1200), |i| {
                    i.screen = Some(RETRY_BANNER.into());
                    i.screen_unchanged = true;
                }),
            ),
            (
                "API retry backoff: the transcript says the next attempt is due in 30 s",
                with(turn(1500, 1200), |i| {
                    i.transcript_written = Some(NOW - 900);
                    i.retry_at = Some(NOW + 30);
                }),
            ),
            (
                "Codex reconnecting after a dropped stream",
                with(turn(1500, 1200), |i| {
                    i.screen = Some(
                        "■ stream error: connection reset; retrying 2/5 in 400ms…\n\n› ".into(),
                    );
                    i.screen_unchanged = true;
                }),
            ),
            ("idle at the prompt for 3 hours", idle(3 * 3600)),
            (
                "idle at the prompt of a new session, the one before ended with failures",
                with(idle(3600), |i| {
                    i.recent_calls = vec![earlier(failing_test()); 8]
                }),
            ),
            (
                "idle at the prompt after running the same command 5 times in one turn",
                with(idle(3600), |i| i.recent_calls = vec![cargo_test(); 5]),
            ),
            (
                "the same command at the end of each of 5 turns, working on the 6th",
                with(turn(30, 10), |i| {
                    i.recent_calls = vec![earlier(cargo_test()); 5];
                    i.recent_calls.push(cargo_test());
                }),
            ),
            (
                "tests that failed in each of 6 earlier turns, one more failure now",
                with(turn(30, 10), |i| {
                    i.recent_calls = vec![earlier(failing_test()); 6];
                    i.recent_calls.push(failing_test());
                }),
            ),
        ];
        for (name, inputs) in cases {
            let found = assess(&inputs, &limits());
            assert!(found.is_empty(), "{name}: {found:#?}");
        }
    }

    /// The unhealthy cases still fire.
    #[test]
    fn unhealthy_agents_are_still_found() {
        let quiet_screen = "● Reading the code\n\n✻ Thinking…\n\n> \n";
        let cases: Vec<(&str, Inputs, &[Check])> = vec![
            (
                "a working turn silent for 15 minutes, screen unchanged",
                with(turn(1200, 900), |i| {
                    i.last_active = Some(NOW - 900);
                    i.screen = Some(quiet_screen.into());
                    i.screen_unchanged = true;
                    i.screen_changed_at = Some(NOW - 1000);
                    i.transcript_written = Some(NOW - 900);
                }),
                &[Check::Silence],
            ),
            (
                "a retry the transcript announced long ago, nothing since",
                with(turn(3000, 2000), |i| i.retry_at = Some(NOW - 1200)),
                &[Check::Silence],
            ),
            (
                "a retry banner far above the bottom of a screen that stopped",
                with(turn(1200, 900), |i| {
                    let filler = "log line\n".repeat(20);
                    i.screen = Some(format!("{RETRY_BANNER}{filler}> "));
                }),
                &[Check::Silence],
            ),
            (
                "the same failing call 6 times within one turn",
                with(turn(60, 5), |i| {
                    i.recent_calls = vec![call("Bash", "cargo build", false); 6]
                }),
                &[Check::ErrorCascade, Check::Repetition],
            ),
            (
                "the same call repeated within the turn after earlier turns ran it too",
                with(turn(60, 5), |i| {
                    i.recent_calls = vec![earlier(call("Read", "a", true)); 2];
                    i.recent_calls.extend(vec![call("Read", "a", true); 3]);
                }),
                &[Check::Repetition],
            ),
            (
                "6 failed calls in the turn that just ended, idle at the prompt",
                with(idle(60), |i| {
                    i.recent_calls = (0..6)
                        .map(|k| call("Bash", &k.to_string(), false))
                        .collect()
                }),
                &[Check::ErrorCascade],
            ),
            (
                "working for 3 hours without finishing a turn",
                turn(3 * 3600, 5),
                &[Check::Runaway],
            ),
        ];
        for (name, inputs, want) in cases {
            let found: Vec<Check> = assess(&inputs, &limits()).iter().map(|f| f.check).collect();
            assert_eq!(found, want, "{name}");
        }
    }

    #[test]
    fn the_current_turn_is_from_its_start_or_else_a_window() {
        assert!(in_current_turn(Some(1000), Some(1000), Some(5000)));
        assert!(!in_current_turn(Some(999), Some(1000), Some(5000)));
        // No turn start on record: calls close to the latest one.
        assert!(in_current_turn(
            Some(5000 - TURN_WINDOW_MS),
            None,
            Some(5000)
        ));
        assert!(!in_current_turn(
            Some(4999 - TURN_WINDOW_MS),
            None,
            Some(5000)
        ));
        assert!(!in_current_turn(None, Some(0), Some(5000)));
    }

    #[test]
    fn a_retry_banner_counts_only_near_the_bottom() {
        assert_eq!(retry_banner(RETRY_BANNER), Some("retrying in "));
        assert_eq!(
            retry_banner("⠏ Reconnecting... 2/5"),
            Some("reconnecting...")
        );
        let old = format!("{RETRY_BANNER}{}> ", "line\n".repeat(20));
        assert_eq!(retry_banner(&old), None);
        assert_eq!(retry_banner("✻ Thinking…"), None);
    }
}
