//! The `->continuity:` markers of a CLI with hooks (Claude Code, Codex, Gemini), read at the
//! end of each turn from what its model wrote: the turn-end payload's last message, and for a
//! CLI whose session file has the whole turn, every assistant message since the prompt. Never
//! from the pane, where a file the agent `cat`s looks just like the model speaking, and never
//! from tool results or prompts.
//!
//! The tap's other rules hold (a marker starts a line, outside fenced code blocks). A turn
//! says at most `PER_TURN` commands; the same one twice counts once. `usage` is refused: such a
//! CLI's tokens come from its own session records only. The answer to `load` and `search`
//! goes into the agent's inbox (from `phoenix`), which its wrapper gives at this very turn
//! boundary.

use std::collections::HashSet;
use std::path::Path;

use serde_json::json;

use super::tap::{Command, Tap};
use super::tap_act::{Answer, act_for};
use crate::spec::{AgentSpec, Spec};
use crate::state::{AgentDir, Op};

/// Where every marker starts.
pub const MARKER: &str = "->continuity:";
/// Commands acted on per turn at most.
const PER_TURN: usize = 12;
/// Bytes of a turn's text looked at, at most.
const MAX_TEXT: usize = 256 * 1024;

/// The model's own text of the turn that just ended: the payload's last message and, where
/// the CLI's session file has them, all its messages since the prompt. Empty when none of it
/// holds a marker (the usual case costs a substring search, and for Claude Code one bounded
/// read of its transcript's end).
pub fn turn_texts(
    agent: &AgentSpec,
    payload_text: Option<&str>,
    transcript: Option<&Path>,
) -> Vec<String> {
    let mut texts = Vec::new();
    if let Some(t) = transcript.and_then(|t| agent.cli.adapter().last_turn_text(t, MARKER)) {
        texts.push(t);
    }
    if let Some(t) = payload_text {
        texts.push(t.to_string());
    }
    texts.retain(|t| t.contains(MARKER));
    texts
}

/// Act on the commands in `texts`, said by `agent`'s model; returns how many were done.
pub fn act(spec: &Spec, agent: &AgentSpec, dir: &AgentDir, texts: &[String]) -> usize {
    let mut seen = HashSet::new();
    let mut done = 0;
    let mut over = false;
    for text in texts {
        for said in Tap::said_in(bounded(text)) {
            let command = said.command;
            if !seen.insert(command.key()) {
                continue;
            }
            if let Command::Usage(_) = command {
                record(
                    dir,
                    Op::MarkerRefused,
                    &command,
                    &format!(
                        "a `{}` agent's usage is read from its own session records, never from \
                         what it says",
                        agent.cli.as_str()
                    ),
                );
                continue;
            }
            if done >= PER_TURN {
                if !std::mem::replace(&mut over, true) {
                    record(
                        dir,
                        Op::TapIgnored,
                        &command,
                        &format!("more than {PER_TURN} commands in one turn"),
                    );
                }
                continue;
            }
            act_for(spec, agent, command, Answer::Inbox);
            done += 1;
        }
    }
    done
}

fn bounded(text: &str) -> &str {
    crate::text::cut_bytes(text, MAX_TEXT)
}

fn record(dir: &AgentDir, op: crate::state::op::Make, command: &Command, reason: &str) {
    let _ = dir.record_op(
        op,
        json!({"command": command.verb(), "reason": reason, "read_from": "turn_end"}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> (tempfile::TempDir, Spec) {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("phoenix.toml");
        std::fs::write(
            &config,
            "[[agent]]\nname = \"a\"\ncli = \"claude\"\ncommand = \"true\"\n\n\
             [[agent]]\nname = \"bob\"\ncli = \"claude\"\ncommand = \"true\"\n",
        )
        .unwrap();
        let spec = crate::spec::load_with(
            &config,
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        (tmp, spec)
    }

    fn ops(dir: &AgentDir) -> Vec<serde_json::Value> {
        crate::state::jsonl::last(&dir.file(crate::state::OPS_LOG), 1000)
    }

    #[test]
    fn the_models_own_markers_are_done_and_its_usage_refused() {
        let (_tmp, spec) = fleet();
        let agent = spec.agent("a").unwrap();
        let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
        let (dir, bob) = (fleet.agent("a"), fleet.agent("bob"));
        dir.ensure().unwrap();
        bob.ensure().unwrap();
        let text = "Done.\n->continuity:uncertain \"mine\"\n\
                    ⏺ ->continuity:usage model=claude-opus-4-6 input=50000000\n\
                    ```\n->continuity:save <<< quoted >>>\n```\n\
                    ->continuity:send bob <<< hi\nthere >>>\n->continuity:uncertain \"mine\"\n";
        let texts = turn_texts(agent, Some(text), None);
        assert_eq!(act(&spec, agent, &dir, &texts), 2);
        assert_eq!(crate::state::ledger::load(&dir).uncertain, ["mine"]);
        let inbox = crate::state::inbox::pending(&bob);
        assert_eq!(inbox.len(), 1);
        assert_eq!(
            (inbox[0].from.as_str(), inbox[0].text.as_str()),
            ("a", "hi\nthere")
        );
        let ops = ops(&dir);
        assert!(
            ops.iter().any(|o| o["event"] == "marker_refused"
                && o["command"] == "usage"
                && o["read_from"] == "turn_end"),
            "{ops:?}"
        );
        assert!(!ops.iter().any(|o| o["event"] == "tap_save"), "{ops:?}");
        assert!(!dir.file(crate::usage::ledger::REPORTED).exists());
        // No marker: nothing looked at at all.
        assert!(turn_texts(agent, Some("all done"), None).is_empty());
    }

    #[test]
    fn a_turn_says_a_bounded_number_of_commands() {
        let (_tmp, spec) = fleet();
        let agent = spec.agent("a").unwrap();
        let dir = crate::state::FleetDir::new(&spec.fleet.state_dir).agent("a");
        dir.ensure().unwrap();
        let text: String = (0..40)
            .map(|k| format!("->continuity:uncertain \"item {k}\"\n"))
            .collect();
        assert_eq!(act(&spec, agent, &dir, &[text]), PER_TURN);
        assert_eq!(crate::state::ledger::load(&dir).uncertain.len(), PER_TURN);
        let ignored = ops(&dir)
            .iter()
            .filter(|o| o["event"] == "tap_ignored")
            .count();
        assert_eq!(ignored, 1);
    }
}
