//! Agents waiting for a person, as a watchdog pass sees them: an approval prompt of its CLI on
//! a screen that stays put, or an agent idle at its prompt with open loops for longer than
//! `thresholds.waiting`. Pure: `observe.rs` gathers the inputs, `needs_input.rs` records and
//! notifies. Conservative on purpose: a false "needs a human" wakes someone for nothing.

use std::time::Duration;

use super::health::Inputs;
use crate::agent_cli::ApprovalPrompt;

/// How many non-empty lines at the bottom of the screen are searched for an approval prompt:
/// the CLI shows it where it waits; one further up is history.
const PROMPT_LINES: usize = 20;

/// A wait the pass found, before it is given a start time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// `approval_prompt` or `idle_with_open_loops`.
    pub reason: &'static str,
    /// For people: the question on the screen, or the loops and how long.
    pub message: String,
}

/// The approval prompt at the bottom of `screen`: one of the CLI's questions with one of its
/// answers below it. Answers the question's line.
pub fn approval_on_screen(screen: &str, prompts: &[ApprovalPrompt]) -> Option<String> {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let bottom: Vec<String> = lines[lines.len().saturating_sub(PROMPT_LINES)..]
        .iter()
        .map(|l| l.to_lowercase())
        .collect();
    for prompt in prompts {
        let question = bottom
            .iter()
            .position(|l| prompt.questions.iter().any(|q| l.contains(q)));
        let Some(at) = question else { continue };
        let answered_below = bottom[at..]
            .iter()
            .any(|l| prompt.answers.iter().any(|a| l.contains(a)));
        if answered_below {
            let start = lines.len().saturating_sub(PROMPT_LINES);
            return Some(clean_line(lines[start + at]));
        }
    }
    None
}

/// A screen line without box-drawing borders and padding.
fn clean_line(line: &str) -> String {
    let trimmed = line.trim_matches(|c: char| c.is_whitespace() || "│┃|╭╮╰╯─".contains(c));
    crate::text::shorten(trimmed, 200)
}

/// What this pass finds the agent waiting for, if anything. Only a live CLI waits: the
/// caller asks only for agents whose process is there.
///
/// - an approval prompt in the CLI's own dialog (`dialog.rs`: while a turn runs, at the
///   bottom of the visible screen, not the model's words) on a screen that did not change
///   since the previous pass;
/// - idle (its last turn finished) with open loops, and no hook for `waiting`.
pub fn assess(
    i: &Inputs,
    open_loops: usize,
    prompts: &[ApprovalPrompt],
    waiting: Duration,
) -> Option<Waiting> {
    let running = super::dialog::Turn::of_inputs(i) != super::dialog::Turn::Ended;
    if let Some(dialog) = i
        .dialog
        .as_deref()
        .filter(|_| i.screen_unchanged && running)
        && let Some(question) = approval_on_screen(dialog, prompts)
    {
        return Some(Waiting {
            reason: "approval_prompt",
            message: format!("the screen asks: {question}"),
        });
    }
    if i.status.as_deref() != Some("idle") || open_loops == 0 {
        return None;
    }
    let idle = i.now - i.last_active?;
    (idle >= waiting.as_secs() as i64).then(|| Waiting {
        reason: "idle_with_open_loops",
        message: format!(
            "idle at its prompt for {} with {}",
            crate::spec::duration::format(Duration::from_secs(idle.max(0) as u64)),
            crate::text::counted(open_loops, "open loop")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_cli::{CLAUDE_APPROVAL, CODEX_APPROVAL, GEMINI_APPROVAL};

    const CODEX: &str = "\
› run the tests

• I'll run the test suite.

  Would you like to run the following command?

  $ cargo test --workspace

› 1. Yes, just this once
  2. Yes, and don't ask again for commands that start with `cargo test`
  3. No, and tell Codex what to do differently (esc)

  Press enter to confirm or esc to cancel
";

    const GEMINI: &str = "\
╭──────────────────────────────────────────────────────────╮
│ ?  Shell rm -rf build [current working directory /repo]   │
│                                                          │
│ rm -rf build                                             │
│                                                          │
│ Allow execution of [Shell]?                              │
│                                                          │
│ ● 1. Allow once                                          │
│   2. Allow for this session                              │
│   3. No, suggest changes (esc)                           │
╰──────────────────────────────────────────────────────────╯
";

    #[test]
    fn the_clis_own_approval_prompts_are_recognised() {
        assert_eq!(
            approval_on_screen(CODEX, &[CODEX_APPROVAL]).as_deref(),
            Some("Would you like to run the following command?")
        );
        assert_eq!(
            approval_on_screen(GEMINI, &[GEMINI_APPROVAL]).as_deref(),
            Some("Allow execution of [Shell]?")
        );
        // Each CLI knows its own; a custom program is checked against all of them.
        assert_eq!(approval_on_screen(GEMINI, &[CODEX_APPROVAL]), None);
        assert!(
            approval_on_screen(CODEX, &[CLAUDE_APPROVAL, CODEX_APPROVAL, GEMINI_APPROVAL])
                .is_some()
        );
    }

    #[test]
    fn ordinary_output_is_never_a_prompt() {
        let all = [CLAUDE_APPROVAL, CODEX_APPROVAL, GEMINI_APPROVAL];
        for screen in [
            "working: step 4\nthe reviewer will approve the change once CI passes\nplease approve\n",
            // The question quoted in output, with no answers offered.
            "grep found: \"Would you like to run the following command?\" in tui/src/approval.rs\n$ ",
            // Answers without the question (a changelog, say).
            "- No, and tell Codex what to do differently: renamed\n- Allow once: new option\n",
            // An answer above the question is not its prompt.
            "3. No, and tell Codex what to do differently\nlater: would you like to run the following command?\n",
        ] {
            assert_eq!(approval_on_screen(screen, &all), None, "{screen}");
        }
        // A prompt scrolled far up is history.
        let mut old = CODEX.to_string();
        for k in 0..30 {
            old.push_str(&format!("working: step {k}\n"));
        }
        assert_eq!(approval_on_screen(&old, &all), None);
    }

    fn idle(now: i64, last_active: i64) -> Inputs {
        Inputs {
            now,
            status: Some("idle".into()),
            last_active: Some(last_active),
            ..Inputs::default()
        }
    }

    #[test]
    fn idle_with_open_loops_past_the_threshold_waits_for_a_person() {
        let wait = Duration::from_secs(1800);
        let found = assess(&idle(10_000, 10_000 - 1800), 2, &[], wait).unwrap();
        assert_eq!(found.reason, "idle_with_open_loops");
        assert!(found.message.contains("2 open loops"), "{}", found.message);
        // Not yet, no loops, or working: nothing.
        assert_eq!(assess(&idle(10_000, 10_000 - 1799), 2, &[], wait), None);
        assert_eq!(assess(&idle(10_000, 0), 0, &[], wait), None);
        let mut working = idle(10_000, 0);
        working.status = Some("working".into());
        assert_eq!(assess(&working, 2, &[], wait), None);
    }

    #[test]
    fn a_prompt_counts_only_once_the_screen_stays_put() {
        let mut i = Inputs {
            dialog: Some(CODEX.into()),
            ..Inputs::default()
        };
        let wait = Duration::from_secs(60);
        assert_eq!(assess(&i, 0, &[CODEX_APPROVAL], wait), None);
        i.screen_unchanged = true;
        assert_eq!(
            assess(&i, 0, &[CODEX_APPROVAL], wait).map(|w| w.reason),
            Some("approval_prompt")
        );
        // Mid-turn too; but never once the turn ended, and never from the raw screen.
        i.status = Some("working".into());
        assert!(assess(&i, 0, &[CODEX_APPROVAL], wait).is_some());
        i.status = Some("idle".into());
        i.last_active = Some(0);
        assert_eq!(assess(&i, 0, &[CODEX_APPROVAL], wait), None);
        let raw = Inputs {
            screen: Some(CODEX.into()),
            screen_unchanged: true,
            ..Inputs::default()
        };
        assert_eq!(assess(&raw, 0, &[CODEX_APPROVAL], wait), None);
    }
}
