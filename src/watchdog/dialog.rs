//! The CLI's own dialog on an agent's screen, the one thing on a pane a screen verdict
//! (wedged, waiting for a person) may rest on. Pure: `observe.rs` gathers the screen, the
//! turn and the transcript's words.
//!
//! A pane shows whatever the agent puts there: the model's answers, tool output, a resumed
//! session's replay of old turns. None of it is a dialog, even when it reads like one ("Do
//! you want to proceed?" at the end of an answer). A dialog is what the CLI draws:
//!
//! - only while a turn runs (the hooks recorded a prompt and no end of it since). An agent
//!   whose turn ended sits at its prompt: whatever its screen shows is history, and it is
//!   never wedged nor waiting for it. Only a CLI no hook ever reported on (a program without
//!   hooks) has nothing but its screen to go by;
//! - at the bottom of the visible screen, where the CLI draws its dialogs in place of its
//!   input box: text with the CLI's input box below it is conversation, not a dialog;
//! - never words the transcript holds: the model's messages and the tools' results are
//!   written there, and the CLI's own dialogs are not.

use crate::agent_cli::AgentCli;

/// Where the agent's turn stands, as its hooks recorded it (state.json's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// A prompt was submitted (or a tool ran) and no end of the turn came since: `working`.
    Running,
    /// The turn ended (`idle`, `failed`), the session ended (`stopped`), or something else
    /// wrote the status: nothing is running that a dialog could hold up.
    Ended,
    /// No hook ever wrote a status (no state.json): a CLI without hooks.
    Unrecorded,
}

impl Turn {
    /// The turn of an agent as a pass saw it: a status only a hook wrote counts. A state.json
    /// that no hook ever wrote to (no `last_active`: `phoenix loop add` created it for a CLI
    /// without hooks) holds the default status, which says nothing about a turn.
    pub fn of_inputs(i: &super::health::Inputs) -> Turn {
        if i.last_active.is_none() {
            return Turn::Unrecorded;
        }
        Turn::of(i.status.as_deref())
    }

    /// The turn a status written by the hooks says.
    pub fn of(status: Option<&str>) -> Turn {
        match status {
            Some("working") => Turn::Running,
            Some(_) => Turn::Ended,
            None => Turn::Unrecorded,
        }
    }
}

/// How many non-empty lines at the bottom of the visible screen a CLI's dialog may take:
/// Claude Code's permission box with a short command, Codex's approval overlay, Gemini's
/// confirmation. Further up is conversation.
pub const DIALOG_LINES: usize = 20;

/// Lines shorter than this (without marks and borders) are kept even when the transcript
/// has them: an answer like `1. Yes` could be anyone's.
const OWN_WORDS_CHARS: usize = 12;

/// The part of `screen` (the visible screen) where `cli` draws its dialogs: its bottom
/// `DIALOG_LINES` non-empty lines, below the last input box line among them (empty when the
/// input box is the last thing drawn: no dialog takes its place).
pub fn region<'a>(screen: &'a str, cli: &dyn AgentCli) -> Vec<&'a str> {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let bottom = &lines[lines.len().saturating_sub(DIALOG_LINES)..];
    let below_input = bottom
        .iter()
        .rposition(|l| is_input_line(l, cli.input_prompts()))
        .map_or(0, |k| k + 1);
    bottom[below_input..].to_vec()
}

/// A line without box borders, the CLI's marks before a message (`● `, `⎿ `) and padding.
pub fn bare(line: &str) -> &str {
    line.trim_matches(|c: char| c.is_whitespace() || "│┃|╭╮╰╯─●⎿⏺".contains(c))
}

/// Is `line` the CLI's input box, its prompt glyph (one of `prompts`) first, where the person
/// types? An answer of a dialog under the selection cursor (`❯ 1. Yes`, `› 2. No`) is not.
pub fn is_input_line(line: &str, prompts: &[&str]) -> bool {
    let line = line.trim_matches(|c: char| c.is_whitespace() || "│┃|".contains(c));
    prompts.iter().any(|p| {
        line.strip_prefix(p).is_some_and(|rest| {
            let rest = rest.trim_start();
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            !(digits > 0 && rest[digits..].starts_with('.'))
        })
    })
}

/// The CLI's dialog on `screen`, as the lines of its region (see [`region`]) that are not
/// the model's or a tool's words (`own_words`: the transcript's text, lowercase), while the
/// turn is `turn`. `None`: there is no dialog to go by.
pub fn dialog(screen: &str, turn: Turn, cli: &dyn AgentCli, own_words: &str) -> Option<String> {
    if turn == Turn::Ended {
        return None;
    }
    let lines: Vec<&str> = region(screen, cli)
        .into_iter()
        .filter(|l| !said_in_transcript(l, own_words))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// Does the transcript (`own_words`, lowercase) hold `line`: the model wrote it, or a tool
/// printed it?
fn said_in_transcript(line: &str, own_words: &str) -> bool {
    let words = bare(line);
    words.chars().count() >= OWN_WORDS_CHARS
        && !own_words.is_empty()
        && own_words.contains(&words.to_lowercase())
}

/// The words of a transcript's tail, lowercase, for [`dialog`]: the text as written, and
/// every string of each JSON line (unescaped), one per line.
pub fn transcript_words(tail: &str) -> String {
    fn walk(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            serde_json::Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = tail.to_string();
    out.push('\n');
    for line in tail.lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            walk(&v, &mut out);
        }
    }
    out.to_lowercase()
}

#[cfg(test)]
#[path = "dialog_tests.rs"]
mod tests;
