//! Continuity: "clear, don't compact". What an agent knows is kept outside its transcript — a
//! ledger (`ledger.json`: the current state of its work) and handoffs (`handoffs/*.md`: one
//! per session end or checkpoint) — and given back to the next session.
//!
//! Files are the truth; the SQLite index (`store`) is a cache over them.

pub mod brief;
pub mod handoff;
pub mod inject;
pub mod ledger;
pub mod tap;

pub use handoff::{Handoff, Trigger};
pub use ledger::{Ledger, SaveText};

use std::path::Path;

use serde_json::{Value, json};

use crate::render::Templates;
use crate::spec::{AgentSpec, Spec};
use crate::state::{AgentDir, FleetDir};

/// Save a handoff for `agent` from what phoenix knows (state.json, the ledger, the last tool
/// calls, the transcript's last words), before a restart, after a crash, before a compaction,
/// or when the Clinic clears a full context. `extra` is the agent's own text, if it wrote one.
/// Never fails the caller: a problem is returned for logging.
pub fn auto_handoff(
    spec: &Spec,
    agent: &AgentSpec,
    trigger: Trigger,
    extra: Option<&str>,
) -> Result<Handoff, String> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(&agent.name);
    let templates = Templates::for_spec(spec);
    let text = match extra {
        Some(t) => SaveText::parse(t),
        None => SaveText::default(),
    };
    let handoff = handoff::build(&dir, agent, trigger, &text, &templates)?;
    handoff::write(&dir, &handoff).map_err(|e| format!("cannot write the handoff: {e}"))?;
    if extra.is_some() {
        ledger::update(&dir, |l| l.merge(&text)).map_err(|e| e.to_string())?;
    }
    let _ = dir.record_op(
        "handoff_saved",
        json!({"id": handoff.id, "trigger": trigger, "path": handoff::path(&dir, &handoff.id)}),
    );
    crate::store::note_pending(&fleet, &dir, &handoff.id);
    Ok(handoff)
}

/// The startup context for a CLI without a session-start hook (`templates/startup.md.j2`), or
/// `None` when there is nothing to give (no handoff, no ledger task, no open loop).
pub fn startup_text(spec: &Spec, dir: &AgentDir) -> Option<String> {
    let handoff = latest_for_startup(dir);
    let ledger = ledger::load(dir);
    let state: Value = std::fs::read_to_string(dir.file("state.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let open_loops = state["open_loops"].as_array().cloned().unwrap_or_default();
    if handoff.is_none() && ledger.current_task.is_none() && open_loops.is_empty() {
        return None;
    }
    let brief = std::fs::read_to_string(dir.file("brief.md"))
        .ok()
        .filter(|b| !b.trim().is_empty());
    let ctx = json!({
        "agent": dir.name, "handoff": handoff, "ledger": ledger, "open_loops": open_loops,
        "brief": brief,
    });
    let (text, _) = Templates::for_spec(spec).render_or_builtin("startup.md.j2", &ctx);
    text.ok()
}

/// The latest readable handoff, for a new session. Names sort by time, so only the newest
/// file is read (the session-start hook runs this; an agent may have thousands).
pub fn latest_for_startup(dir: &AgentDir) -> Option<Handoff> {
    handoff::list_ids(dir)
        .iter()
        .rev()
        .find_map(|id| handoff::load(dir, id))
}

/// What `phoenix handoff list --json` prints for one handoff.
pub fn summary_json(h: &Handoff) -> Value {
    json!({
        "id": h.id, "agent": h.agent, "cli": h.cli, "created_at": h.created_at,
        "trigger_reason": h.trigger, "related": h.related, "summary": h.summary,
    })
}

/// Does `path` look like a handoff file name phoenix wrote?
pub fn is_handoff_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.len() > 17 && n.as_bytes()[8] == b'T')
}
