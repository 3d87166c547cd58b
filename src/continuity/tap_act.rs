//! What is done with a command the agent said: save a handoff, note an uncertain item, load
//! the latest handoff or search results into the agent, send a message to another agent. The
//! tap's commands (a custom CLI's pane) and the model's own at the end of a turn (a CLI with
//! hooks, `super::turn_markers`) are done alike; only where the answer to a load or a search
//! goes differs (`Answer`).

use super::tap::Command;
use crate::spec::{AgentSpec, Spec};
use crate::state::Op;
use crate::state::op::Make;

/// Where the answer to `load` and `search` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Pasted into the pane now (the tap: the agent printed the marker and waits).
    Pane,
    /// Into the agent's inbox, from `phoenix`: the turn just ended, and its wrapper gives the
    /// inbox at this turn boundary, confirmed by the prompt hook.
    Inbox,
}

impl Answer {
    fn read_from(self) -> &'static str {
        match self {
            Answer::Pane => "pane",
            Answer::Inbox => "turn_end",
        }
    }
}

/// The inbox's limit on one message, less room for the block around it.
const INBOX_ANSWER_CHARS: usize = 12_000;

/// The tap's worker: the spec read again for each command (it may have changed since the
/// pane opened), then `act_for`.
pub(super) fn act(config: &std::path::Path, name: &str, command: Command, log: fn(&str)) {
    let spec = match crate::spec::load_with(
        config,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    ) {
        Ok(s) => s,
        Err(e) => {
            log(&format!("phoenix tap: {e}"));
            return;
        }
    };
    let Some(agent) = spec.agent(name) else {
        return;
    };
    act_for(&spec, agent, command, Answer::Pane);
}

/// Do `command`, said by `agent`, and record it in its ops.jsonl.
pub(super) fn act_for(spec: &Spec, agent: &AgentSpec, command: Command, answer: Answer) {
    use serde_json::json;

    let name = agent.name.as_str();
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(name);
    let ((done, failed), result): ((Make, Make), Result<serde_json::Value, String>) = match command
    {
        Command::Save(text) => (
            (Op::TapSave, Op::TapSaveFailed),
            super::auto_handoff(spec, agent, super::Trigger::Manual, Some(&text))
                .map(|h| json!({"handoff": h.id}))
                .map_err(|e| e.to_string()),
        ),
        Command::Uncertain(item) => (
            (Op::TapUncertain, Op::TapUncertainFailed),
            super::ledger::update(&dir, |l| {
                if !l.uncertain.contains(&item) {
                    l.uncertain.push(item.clone());
                }
            })
            .map(|_| json!({"item": item}))
            .map_err(|e| e.to_string()),
        ),
        Command::Load => (
            (Op::TapLoad, Op::TapLoadFailed),
            match super::latest_for_startup(&dir) {
                Some(h) => {
                    // The task the agent is on now (its last prompt), else the last saved one.
                    let task = dir
                        .read_state()
                        .ok()
                        .and_then(|s| s.current_task)
                        .or_else(|| super::ledger::load(&dir).current_task);
                    let text = format!(
                        "[phoenix] continuity:load — latest handoff {} ({}){}\n{}",
                        h.id,
                        h.trigger.as_str(),
                        task.map(|t| format!("; current task: {t}"))
                            .unwrap_or_default(),
                        h.body.trim()
                    );
                    give(spec, agent, &text, answer)
                        .map(|by| json!({"handoff": h.id, "confirmed_by": by}))
                }
                None => give(
                    spec,
                    agent,
                    "[phoenix] continuity:load — no handoff saved yet for this agent",
                    answer,
                )
                .map(|_| json!({"handoff": null})),
            },
        ),
        // Recorded by the gate as it is read: never queued.
        Command::Usage(_) => return,
        // Once per task: an agent that says it twice has its set told once.
        Command::Done => (
            (Op::TapDone, Op::TapDoneFailed),
            match crate::intake::hooks::run_once(spec, agent, crate::intake::hooks::Hook::Done) {
                None => Ok(json!({"on_done": null})),
                Some(Ok(ran)) => Ok(json!({"on_done": ran})),
                Some(Err(e)) => Err(e),
            },
        ),
        // Signed by this agent: the tap knows whose pane it reads.
        Command::Send { to, text } => (
            (Op::TapSend, Op::TapSendFailed),
            super::messages::send(&whole_fleet(spec, &to), &to, name, &text, false)
                .map(|m| json!({"to": to, "id": m.id}))
                .map_err(|e| e.to_string()),
        ),
        Command::Search(query) => (
            (Op::TapSearch, Op::TapSearchFailed),
            crate::store::search(&fleet, &query, None, None, 5)
                .map_err(|e| e.to_string())
                .and_then(|hits| {
                    let mut text = format!(
                        "[phoenix] continuity:search \"{query}\": {} result(s)",
                        hits.len()
                    );
                    for h in &hits {
                        text.push_str(&format!(
                            "\n- {} {} {}: {}",
                            h.kind,
                            h.agent,
                            h.reference,
                            h.snippet.replace('\n', " ")
                        ));
                    }
                    give(spec, agent, &text, answer).map(
                        |by| json!({"query": query, "results": hits.len(), "confirmed_by": by}),
                    )
                }),
        ),
    };
    let from = answer.read_from();
    let _ = match result {
        Ok(mut details) => {
            details["read_from"] = json!(from);
            dir.record_op(done, details)
        }
        Err(error) => dir.record_op(failed, json!({"error": error, "read_from": from})),
    };
}

/// The spec that declares `to`: a hook reads only its agent's own part of phoenix.toml
/// (`spec::narrow`), the recipient of a send is in the whole file.
fn whole_fleet<'a>(spec: &'a Spec, to: &str) -> std::borrow::Cow<'a, Spec> {
    if spec.agent(to).is_some() {
        return std::borrow::Cow::Borrowed(spec);
    }
    match crate::spec::load_for_hook(&spec.file) {
        Ok(whole) => std::borrow::Cow::Owned(whole),
        Err(_) => std::borrow::Cow::Borrowed(spec),
    }
}

/// Give the agent `text` the way `answer` says; the confirmation, or why it failed.
fn give(spec: &Spec, agent: &AgentSpec, text: &str, answer: Answer) -> Result<String, String> {
    match answer {
        Answer::Pane => super::inject::to_agent(spec, agent, text)
            .map(|r| r.confirmed_by.to_string())
            .map_err(|e| format!("{e:#}")),
        Answer::Inbox => {
            let cut = text.chars().count() > INBOX_ANSWER_CHARS;
            let mut text: String = text.chars().take(INBOX_ANSWER_CHARS).collect();
            if cut {
                text.push_str("\n… (cut short)");
            }
            super::messages::send(spec, &agent.name, "phoenix", &text, false)
                .map(|m| format!("inbox {}", m.id))
                .map_err(|e| e.to_string())
        }
    }
}
