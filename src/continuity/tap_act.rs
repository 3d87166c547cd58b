//! What the tap does with a command it found: save a handoff, note an uncertain item, load
//! the latest handoff or search results into the agent, send a message to another agent.

use super::tap::Command;
use crate::state::Op;
use crate::state::op::Make;

pub(super) fn act(config: &std::path::Path, name: &str, command: Command, log: fn(&str)) {
    use serde_json::json;

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
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(name);
    let ((done, failed), result): ((Make, Make), Result<serde_json::Value, String>) = match command {
        Command::Save(text) => (
            (Op::TapSave, Op::TapSaveFailed),
            super::auto_handoff(&spec, agent, super::Trigger::Manual, Some(&text))
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
                    super::inject::to_agent(&spec, agent, &text)
                        .map(|r| json!({"handoff": h.id, "confirmed_by": r.confirmed_by}))
                        .map_err(|e| format!("{e:#}"))
                }
                None => super::inject::to_agent(
                    &spec,
                    agent,
                    "[phoenix] continuity:load — no handoff saved yet for this agent",
                )
                .map(|_| json!({"handoff": null}))
                .map_err(|e| format!("{e:#}")),
            },
        ),
        // Recorded by the gate as it is read: never queued.
        Command::Usage(_) => return,
        // Signed by this agent: the tap knows whose pane it reads.
        Command::Send { to, text } => (
            (Op::TapSend, Op::TapSendFailed),
            super::messages::send(&spec, &to, name, &text, false)
                .map(|m| json!({"to": to, "id": m.id}))
                .map_err(|e| e.to_string()),
        ),
        Command::Search(query) => (
            (Op::TapSearch, Op::TapSearchFailed),
            crate::store::search(&fleet, &query, None, None, 5)
                .map_err(|e| e.to_string())
                .and_then(|hits| {
                    let mut text = format!("[phoenix] continuity:search \"{query}\": {} result(s)", hits.len());
                    for h in &hits {
                        text.push_str(&format!(
                            "\n- {} {} {}: {}",
                            h.kind,
                            h.agent,
                            h.reference,
                            h.snippet.replace('\n', " ")
                        ));
                    }
                    super::inject::to_agent(&spec, agent, &text)
                        .map(|r| json!({"query": query, "results": hits.len(), "confirmed_by": r.confirmed_by}))
                        .map_err(|e| format!("{e:#}"))
                }),
        ),
    };
    let _ = match result {
        Ok(details) => dir.record_op(done, details),
        Err(error) => dir.record_op(failed, json!({"error": error})),
    };
}
