//! The CLI's own dialog versus text that reads like one: the pure decision.

use super::*;
use crate::spec::Cli;

/// Claude Code mid-turn, its permission dialog in place of its input box.
const CLAUDE_DIALOG: &str = "\
> clean the build

● I'll remove the build directory.

● Bash(rm -rf build)

╭──────────────────────────────────────────────────────────╮
│ Bash command                                             │
│                                                          │
│   rm -rf build                                           │
│   Remove the build directory                             │
│                                                          │
│ Do you want to proceed?                                  │
│ ❯ 1. Yes                                                 │
│   2. Yes, and don't ask again for rm commands in /repo   │
│   3. No, and tell Claude what to do differently (esc)    │
╰──────────────────────────────────────────────────────────╯
";

/// Claude Code whose answer ends with the question, its input box below.
const CLAUDE_ANSWER: &str = "\
> plan the migration

● Here is the plan: move the tables, then the readers.
  Do you want to proceed?

╭──────────────────────────────────────────────────────────╮
│ >                                                        │
╰──────────────────────────────────────────────────────────╯
  ? for shortcuts
";

fn claude() -> &'static dyn AgentCli {
    Cli::Claude.adapter()
}

#[test]
fn the_turn_is_what_the_hooks_recorded() {
    assert_eq!(Turn::of(Some("working")), Turn::Running);
    for ended in ["idle", "failed", "stopped", "blocked"] {
        assert_eq!(Turn::of(Some(ended)), Turn::Ended, "{ended}");
    }
    assert_eq!(Turn::of(None), Turn::Unrecorded);
    // A status no hook wrote (a state.json `phoenix loop add` created) says nothing.
    let mut i = crate::watchdog::health::Inputs {
        status: Some("idle".into()),
        ..Default::default()
    };
    assert_eq!(Turn::of_inputs(&i), Turn::Unrecorded);
    i.last_active = Some(1);
    assert_eq!(Turn::of_inputs(&i), Turn::Ended);
}

#[test]
fn the_clis_dialog_mid_turn_is_a_dialog() {
    let found = dialog(CLAUDE_DIALOG, Turn::Running, claude(), "").unwrap();
    assert!(found.contains("Do you want to proceed?"), "{found}");
    assert!(
        found.contains("tell Claude what to do differently"),
        "{found}"
    );
    assert!(!found.contains("clean the build"), "{found}");
    // A hookless CLI has only its screen to go by.
    assert!(dialog(CLAUDE_DIALOG, Turn::Unrecorded, claude(), "").is_some());
}

#[test]
fn an_idle_agents_screen_is_never_a_dialog() {
    assert_eq!(dialog(CLAUDE_DIALOG, Turn::Ended, claude(), ""), None);
    assert_eq!(dialog(CLAUDE_ANSWER, Turn::Ended, claude(), ""), None);
}

#[test]
fn the_models_words_above_the_input_box_are_not_a_dialog() {
    let found = dialog(CLAUDE_ANSWER, Turn::Running, claude(), "").unwrap_or_default();
    assert!(!found.to_lowercase().contains("proceed"), "{found}");
    // The newer input box between two rules, the prompt glyph `❯`.
    let ruled = "● Shall I? Do you want to proceed?\n\n────────────\n❯ \n────────────\n  ⏵⏵ accept edits on\n";
    let found = dialog(ruled, Turn::Running, claude(), "").unwrap_or_default();
    assert!(!found.contains("proceed"), "{found}");
    // A replay of earlier turns above the input box, likewise.
    let replay = format!("{CLAUDE_ANSWER}{CLAUDE_ANSWER}");
    let found = dialog(&replay, Turn::Running, claude(), "").unwrap_or_default();
    assert!(!found.contains("proceed"), "{found}");
}

#[test]
fn words_the_transcript_holds_are_the_models_or_a_tools() {
    // A screen without an input box (a CLI that hides it while it works): the transcript
    // says the model wrote the question.
    let screen =
        "● Here is the plan: move the tables, then the readers.\n  Do you want to proceed?\n";
    let words = transcript_words(
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Here is the plan: move the tables, then the readers.\nDo you want to proceed?"}]}}"#,
    );
    assert_eq!(dialog(screen, Turn::Running, claude(), &words), None);
    // What the transcript does not hold stays: the CLI's own dialog.
    let found = dialog(CLAUDE_DIALOG, Turn::Running, claude(), &words).unwrap();
    assert!(
        found.contains("tell Claude what to do differently"),
        "{found}"
    );
    // Short lines could be anyone's: an answer of the dialog stays even if the model said it.
    assert!(found.contains("1. Yes"), "{found}");
}

#[test]
fn a_dialog_answer_under_the_cursor_is_not_the_input_box() {
    for cli in [Cli::Claude, Cli::Codex, Cli::Gemini, Cli::Custom] {
        let prompts = cli.adapter().input_prompts();
        for answer in ["❯ 1. Yes", "› 2. Yes, and don't ask again", "│ > 3. No │"] {
            assert!(!is_input_line(answer, prompts), "{cli}: {answer}");
        }
    }
    assert!(is_input_line(
        "│ >                 │",
        claude().input_prompts()
    ));
    assert!(is_input_line("❯ ", claude().input_prompts()));
    assert!(is_input_line(
        "› Ask Codex",
        Cli::Codex.adapter().input_prompts()
    ));
    assert!(is_input_line(
        "│ > Type your message or @path/to/file │",
        Cli::Gemini.adapter().input_prompts()
    ));
    assert!(!is_input_line("$ cargo test", claude().input_prompts()));
}

#[test]
fn only_the_bottom_of_the_screen_is_where_a_dialog_sits() {
    let mut screen = CLAUDE_DIALOG.to_string();
    for k in 0..DIALOG_LINES {
        screen.push_str(&format!("● working: step {k}\n"));
    }
    let found = dialog(&screen, Turn::Running, claude(), "").unwrap();
    assert!(!found.contains("proceed"), "{found}");
}
