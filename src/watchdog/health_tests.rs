//! Table tests of `health::assess`: healthy agents that look odd stay healthy, unhealthy ones
//! are found, and the turn and retry-banner rules.

use super::*;

fn limits() -> Limits {
    Limits {
        silence: Duration::from_secs(600),
        error_cascade: 5,
        runaway: Duration::from_secs(7200),
        repeat: 3,
        max_tokens: Some(1000),
        budget: None,
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

/// Issue 32: a quiet tool call (a build printing nothing, Copilot CLI's shell call that
/// records nothing) is work, not a hung model: no silence while it runs, but runaway holds.
#[test]
fn a_tool_call_under_way_is_not_silence_but_can_run_away() {
    let mut i = working(10_000);
    i.last_tool_call = Some(10_000 - 900);
    i.working_since = Some(10_000 - 1000);
    i.tool_running_since = Some(10_000 - 800);
    assert!(checks(&i).is_empty(), "{:?}", checks(&i));
    i.working_since = Some(10_000 - 3 * 3600);
    assert_eq!(checks(&i), [Check::Runaway]);
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
fn a_day_past_its_budget_is_unambiguous_and_unpriced_models_do_not_count_as_dollars() {
    use crate::usage::{Prices, Spent, Tokens};
    let spent = |model: &str, input: u64| {
        let mut by_model = std::collections::BTreeMap::new();
        let t = Tokens {
            input,
            ..Tokens::default()
        };
        by_model.insert(model.to_string(), t);
        Spent::of(&by_model, &Prices::default())
    };
    let budget = |tokens_per_day, usd_per_day| Limits {
        budget: Some(crate::spec::Budget {
            tokens_per_day,
            usd_per_day,
        }),
        ..limits()
    };
    let mut i = working(10_000);
    i.status = Some("idle".into());
    i.spent_today = Some(spent("claude-opus-4-6", 2_000_000));
    let found = assess(&i, &budget(Some(1_000_000), None));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].check, Check::Budget);
    assert!(found[0].unambiguous);
    assert_eq!(
        found[0].summary,
        "2,000,000 tokens used today (budget tokens_per_day = 1,000,000)"
    );
    // $10 of Opus input against $5.
    let found = assess(&i, &budget(None, Some(5.0)));
    assert_eq!(found[0].reason, "daily_cost_budget_exceeded");
    assert!(found[0].summary.contains("$10.00"), "{}", found[0].summary);
    assert!(assess(&i, &budget(Some(2_000_000), Some(10.0))).is_empty());
    // A model without a price has no known cost: the dollar budget cannot see it.
    i.spent_today = Some(spent("claude-scripted", 2_000_000));
    assert!(assess(&i, &budget(None, Some(0.01))).is_empty());
    assert_eq!(assess(&i, &budget(Some(10), None)).len(), 1);
    assert!(assess(&i, &limits()).is_empty(), "no budget, no finding");
}

/// What a pass sees of `screen`: the screen, and the CLI's dialog on it for an agent whose
/// turn is `turn` (`observe.rs` does the same).
fn showing(mut i: Inputs, screen: &str) -> Inputs {
    let turn = crate::watchdog::dialog::Turn::of_inputs(&i);
    let cli = crate::spec::Cli::Claude.adapter();
    i.dialog = crate::watchdog::dialog::dialog(screen, turn, cli, "");
    i.screen = Some(screen.into());
    i.screen_unchanged = true;
    i
}

#[test]
fn usage_the_agent_reported_itself_warns_and_never_stops_it() {
    use crate::usage::{Prices, Spent, Tokens};
    let spent = |model: &str, input: u64| {
        let mut by_model = std::collections::BTreeMap::new();
        by_model.insert(
            model.to_string(),
            Tokens {
                input,
                ..Tokens::default()
            },
        );
        Spent::of(&by_model, &Prices::default())
    };
    let budget = Limits {
        budget: Some(crate::spec::Budget {
            tokens_per_day: Some(1_000_000),
            usd_per_day: Some(5.0),
        }),
        ..limits()
    };
    let mut i = working(10_000);
    i.status = Some("idle".into());
    // What the break saw: a line on the screen worth $553 trillion.
    i.reported_today = Some(spent("claude-opus-4-6", u64::MAX));
    assert!(
        assess(&i, &budget).is_empty(),
        "reported usage stops nothing"
    );
    let warning = reported_over_budget(&i, &budget).unwrap();
    assert!(
        warning.contains("counting usage the agent reported itself"),
        "{warning}"
    );
    // The CLI's own records past the budget: a finding, and no second warning about it.
    i.spent_today = Some(spent("claude-opus-4-6", 2_000_000));
    assert_eq!(assess(&i, &budget).len(), 1);
    assert_eq!(reported_over_budget(&i, &budget), None);
    // Within the budget with what is reported counted: nothing to say.
    i.spent_today = Some(spent("claude-opus-4-6", 10));
    i.reported_today = Some(spent("claude-opus-4-6", 10));
    assert_eq!(reported_over_budget(&i, &budget), None);
}

#[test]
fn a_wedged_screen_counts_only_when_it_did_not_change() {
    let mut i = showing(
        working(10_000),
        "API Error: 529 {\"type\":\"overloaded_error\"}",
    );
    i.screen_unchanged = false;
    assert!(checks(&i).is_empty());
    i.screen_unchanged = true;
    assert_eq!(checks(&i), [Check::Screen]);
}

/// Only the CLI's own dialog, mid-turn, is read: never an idle agent's screen, never the
/// model's words above the input box, never the screen when no dialog was found.
#[test]
fn a_wedge_phrase_the_model_wrote_or_an_idle_screen_shows_is_no_wedge() {
    let answer = "● Here is the plan. Do you want to proceed?\n\n╭────╮\n│ >  │\n╰────╯\n";
    let dialog =
        "● Bash(rm -rf build)\n╭────╮\n│ Do you want to proceed? │\n│ ❯ 1. Yes │\n╰────╯\n";
    let banner = "API Error: 529 overloaded_error";
    assert!(checks(&showing(working(10_000), answer)).is_empty());
    assert_eq!(checks(&showing(working(10_000), dialog)), [Check::Screen]);
    for screen in [answer, dialog, banner] {
        for status in ["idle", "failed", "stopped"] {
            let mut i = working(10_000);
            i.status = Some(status.into());
            i.last_active = Some(10_000 - 60);
            let mut i = showing(i, screen);
            // Whatever the screen says, an idle agent's is history.
            i.dialog = Some(screen.into());
            let found: Vec<Check> = checks(&i)
                .into_iter()
                .filter(|c| *c == Check::Screen)
                .collect();
            assert!(found.is_empty(), "{status}: {screen}");
        }
        // The raw screen is no verdict: only a dialog found on it is.
        let mut i = working(10_000);
        i.screen = Some(screen.into());
        i.screen_unchanged = true;
        assert!(checks(&i).is_empty(), "{screen}");
    }
}

#[test]
fn gemini_waiting_for_a_choice_after_a_404_is_a_wedged_screen() {
    let i = showing(
        working(10_000),
        " > summarise the changelog\n│ It seems like you don't have access to gemini-3.8-flash.      │\n\
         │ Your admin might have disabled the access.        │\n│ ● 1. Keep trying   │\n│   2. Stop  │\n",
    );
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
                i.screen =
                    Some("■ stream error: connection reset; retrying 2/5 in 400ms…\n\n› ".into());
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
