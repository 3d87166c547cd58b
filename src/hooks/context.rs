//! The text injected at session start: a recovery block when the agent was interrupted, the
//! externalized state, then the brief (source of truth: state.json > brief.md > transcript).

use std::fmt::Write as _;

use serde_json::Value;

use crate::state::AgentState;

/// Claude Code truncates hook context past ~10,000 characters; stay under it.
pub const MAX_CONTEXT_CHARS: usize = 9_500;

/// Why a session is starting, as far as injection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The last session stopped mid-task without a clean exit.
    Recovery,
    /// The context was just compacted: the details are gone, the state is not.
    Compacted,
    /// A fresh context (startup, clear).
    Fresh,
    /// The transcript was resumed after a clean stop: it already has everything.
    Resumed,
}

pub struct Inputs<'a> {
    pub state: &'a AgentState,
    pub brief: Option<&'a str>,
    /// The last few lines of tool_use.jsonl, oldest first.
    pub recent_tools: &'a [Value],
    /// How the agent resolves a loop, e.g. `'/usr/bin/phoenix' --config … resolve NAME`.
    pub resolve_command: &'a str,
    /// The latest handoff: `(id, trigger, body)`.
    pub handoff: Option<(&'a str, &'a str, &'a str)>,
}

/// Room for the handoff, so the brief still fits after it.
const MAX_HANDOFF_CHARS: usize = 4_000;

/// The context for `start`, or `None` when there is nothing worth injecting.
pub fn render(start: Start, inputs: &Inputs<'_>) -> Option<String> {
    let state = inputs.state;
    let brief = inputs.brief.map(str::trim).filter(|b| !b.is_empty());
    let mut out = String::new();
    match start {
        Start::Resumed => return None,
        Start::Recovery => {
            out.push_str("=== PHOENIX: RECOVERY DETECTED ===\n");
            out.push_str(
                "You were interrupted mid-task: the last session stopped without finishing its turn or exiting cleanly.\n",
            );
            let _ = writeln!(
                out,
                "Last active: {}",
                state.last_active.as_deref().unwrap_or("unknown")
            );
            let _ = writeln!(
                out,
                "Task: {}",
                state.current_task.as_deref().unwrap_or("unknown")
            );
            if !inputs.recent_tools.is_empty() {
                out.push_str("Last tool calls (oldest first):\n");
                for t in inputs.recent_tools {
                    let tool = t.get("tool").and_then(Value::as_str).unwrap_or("?");
                    let result = match t.get("error").and_then(Value::as_str) {
                        Some(e) => format!("error: {e}"),
                        None => "ok".to_string(),
                    };
                    let _ = writeln!(out, "  - {tool} ({result})");
                }
            }
            loops(&mut out, state);
            out.push_str(
                "What to do: check what the interrupted work left behind (e.g. `git status`, `git diff`), \
                 do not redo finished steps, and continue the task where it stopped. The brief below is your \
                 externalized memory; state.json outranks it, and both outrank anything you remember.\n",
            );
            resolve_hint(&mut out, state, inputs.resolve_command);
            out.push_str("===================================\n");
        }
        Start::Compacted => {
            out.push_str("=== PHOENIX: CONTEXT COMPACTED ===\n");
            out.push_str(
                "Your context was just compacted. The externalized state below is exact; trust it over the summary.\n",
            );
            if let Some(task) = &state.current_task {
                let _ = writeln!(out, "Task: {task}");
            }
            loops(&mut out, state);
            resolve_hint(&mut out, state, inputs.resolve_command);
            out.push_str("==================================\n");
        }
        Start::Fresh => {
            if state.open_loops.is_empty()
                && state.numbers.is_empty()
                && brief.is_none()
                && inputs.handoff.is_none()
            {
                return None;
            }
            let _ = writeln!(out, "=== PHOENIX: STATE OF AGENT `{}` ===", state.agent);
            loops(&mut out, state);
            resolve_hint(&mut out, state, inputs.resolve_command);
            out.push_str("=====================================\n");
        }
    }
    if !state.numbers.is_empty() {
        let numbers: Vec<String> = state
            .numbers
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "Numbers: {}", numbers.join(" | "));
    }
    if let Some((id, trigger, body)) = inputs.handoff {
        let _ = writeln!(out, "\n--- latest handoff ({id}, {trigger}) ---");
        let body = body.trim();
        if body.chars().count() > MAX_HANDOFF_CHARS {
            out.extend(body.chars().take(MAX_HANDOFF_CHARS));
            let _ = writeln!(
                out,
                "\n… (handoff truncated; `phoenix handoff show {id}` has the rest)"
            );
        } else {
            out.push_str(body);
            out.push('\n');
        }
    }
    if let Some(brief) = brief {
        out.push_str("\n--- brief.md ---\n");
        let room = MAX_CONTEXT_CHARS.saturating_sub(out.chars().count() + 80);
        if brief.chars().count() > room {
            out.extend(brief.chars().take(room));
            out.push_str("\n… (brief truncated; read brief.md in the state dir for the rest)\n");
        } else {
            out.push_str(brief);
            out.push('\n');
        }
    }
    Some(out)
}

fn loops(out: &mut String, state: &AgentState) {
    if state.open_loops.is_empty() {
        out.push_str("Open loops: none\n");
        return;
    }
    let _ = writeln!(out, "Open loops ({}):", state.open_loops.len());
    for lp in &state.open_loops {
        let stale = if lp.stale { ", STALE" } else { "" };
        let _ = writeln!(
            out,
            "  - [{}] {} (added {}{stale})",
            lp.id, lp.text, lp.added
        );
    }
}

fn resolve_hint(out: &mut String, state: &AgentState, command: &str) {
    if !state.open_loops.is_empty() {
        let _ = writeln!(out, "When a loop is done: {command} <loop-id> \"<why>\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{OpenLoop, Status};

    fn state() -> AgentState {
        let mut s = AgentState::new("trades");
        s.status = Status::Working;
        s.current_task = Some("rebalance the portfolio".into());
        s.last_active = Some("2026-02-17T02:12:53Z".into());
        s.open_loops.push(OpenLoop {
            id: "schwab-oauth".into(),
            text: "Schwab OAuth not set up".into(),
            added: "2026-02-01".into(),
            stale: true,
            extra: Default::default(),
        });
        s
    }

    #[test]
    fn recovery_block_has_task_loops_tools_and_brief() {
        let s = state();
        let tools = [serde_json::json!({"tool": "Bash", "ok": false, "error": "exit code 1"})];
        let text = render(
            Start::Recovery,
            &Inputs {
                state: &s,
                brief: Some("trades — 2026-02-16\n**Next:** snapshot"),
                recent_tools: &tools,
                resolve_command: "phoenix resolve trades",
                handoff: None,
            },
        )
        .unwrap();
        assert!(text.starts_with("=== PHOENIX: RECOVERY DETECTED ==="));
        for needle in [
            "Task: rebalance the portfolio",
            "[schwab-oauth] Schwab OAuth not set up (added 2026-02-01, STALE)",
            "Bash (error: exit code 1)",
            "phoenix resolve trades <loop-id>",
            "**Next:** snapshot",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        assert!(text.find("RECOVERY").unwrap() < text.find("brief.md").unwrap());
    }

    #[test]
    fn nothing_to_say_is_none() {
        let s = AgentState::new("a");
        let inputs = Inputs {
            state: &s,
            brief: Some("  \n"),
            recent_tools: &[],
            resolve_command: "x",
            handoff: None,
        };
        assert_eq!(render(Start::Fresh, &inputs), None);
        assert_eq!(render(Start::Resumed, &inputs), None);
        assert!(render(Start::Compacted, &inputs).is_some());
    }

    #[test]
    fn huge_brief_is_truncated_under_the_limit() {
        let s = state();
        let brief = "word ".repeat(10_000);
        let text = render(
            Start::Fresh,
            &Inputs {
                state: &s,
                brief: Some(&brief),
                recent_tools: &[],
                resolve_command: "x",
                handoff: None,
            },
        )
        .unwrap();
        assert!(text.chars().count() <= MAX_CONTEXT_CHARS, "{}", text.len());
        assert!(text.contains("brief truncated"));
    }
}

#[cfg(test)]
mod handoff_tests {
    use super::*;

    #[test]
    fn a_fresh_session_gets_the_latest_handoff_even_without_state() {
        let state = AgentState::new("a");
        let text = render(
            Start::Fresh,
            &Inputs {
                state: &state,
                brief: None,
                recent_tools: &[],
                resolve_command: "x",
                handoff: Some(("20261123T-auth", "crash", "# Handoff: auth\n- login next")),
            },
        )
        .expect("something to inject");
        assert!(
            text.contains("--- latest handoff (20261123T-auth, crash) ---"),
            "{text}"
        );
        assert!(text.contains("- login next"));
        let resumed = render(
            Start::Resumed,
            &Inputs {
                state: &state,
                brief: None,
                recent_tools: &[],
                resolve_command: "x",
                handoff: Some(("x", "crash", "y")),
            },
        );
        assert_eq!(resumed, None);
    }
}
