//! Continuity: "clear, don't compact". What an agent knows is kept outside its transcript — a
//! ledger (`ledger.json`: the current state of its work) and handoffs (`handoffs/*.md`: one
//! per session end or checkpoint) — and given back to the next session.
//!
//! Files are the truth; the SQLite index (`store`) is a cache over them.

pub mod brief;
pub mod handoff;
pub mod inject;
pub mod marker_key;
pub mod messages;
pub use crate::state::ledger;
pub mod startup;
pub mod tap;
mod tap_act;
pub mod tap_host;
pub mod tap_usage;
pub mod turn_markers;

pub use handoff::{Handoff, Trigger};
pub use ledger::{Ledger, SaveText};

use std::path::Path;

use serde_json::{Value, json};

use crate::error::Error;
use crate::render::Templates;
use crate::spec::{AgentSpec, Spec};
use crate::state::Op;
use crate::state::{AgentDir, AgentState, FleetDir};

/// What the transcript the agent's hooks last reported says (nothing without one).
fn transcript_facts(state: &AgentState) -> crate::clinic::triage::TranscriptFacts {
    state
        .transcript_path
        .as_deref()
        .map(|p| crate::clinic::triage::TranscriptFacts::read(Path::new(p)))
        .unwrap_or_default()
}

/// Save a handoff for `agent` from what phoenix knows (state.json, the ledger, the last tool
/// calls, the transcript's last words), before a restart, after a crash, before a compaction,
/// or when the Clinic clears a full context. `extra` is the agent's own text, if it wrote one.
/// Never fails the caller: a problem is returned for logging.
pub fn auto_handoff(
    spec: &Spec,
    agent: &AgentSpec,
    trigger: Trigger,
    extra: Option<&str>,
) -> crate::error::Result<Handoff> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(&agent.name);
    let templates = Templates::for_spec(spec);
    // Saved text is pasted into panes later (handoff bodies, ledger fields): the paste rule.
    let text = match extra {
        Some(t) => SaveText::parse(&crate::world::inert::keyboard_text(t)),
        None => SaveText::default(),
    };
    let handoff = handoff::build(&dir, agent.into(), trigger, &text, &templates)?;
    handoff::write(&dir, &handoff)
        .map_err(|e| Error::msg(format!("cannot write the handoff: {e}")))?;
    if extra.is_some() {
        ledger::update(&dir, |l| l.merge(&text)).map_err(Error::msg)?;
    }
    let _ = dir.record_op(
        Op::HandoffSaved,
        json!({"id": handoff.id, "trigger": trigger, "path": handoff::path(&dir, &handoff.id)}),
    );
    crate::store::note_pending(&fleet, &dir, &handoff.id);
    Ok(handoff)
}

/// Save the handoff of an agent whose work item left its `[[agent_set]]`'s source (it is no
/// longer declared): what phoenix knows of it, and why it ends.
pub fn retire_handoff(
    spec: &Spec,
    name: &str,
    cli: crate::spec::Cli,
    why: &str,
) -> crate::error::Result<Handoff> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(name);
    let templates = Templates::for_spec(spec);
    let text = SaveText::parse(&crate::world::inert::keyboard_text(why));
    let who = handoff::Who { name, cli };
    let handoff = handoff::build(&dir, who, Trigger::Retired, &text, &templates)?;
    handoff::write(&dir, &handoff)
        .map_err(|e| Error::msg(format!("cannot write the handoff: {e}")))?;
    let _ = dir.record_op(
        Op::HandoffSaved,
        json!({"id": handoff.id, "trigger": Trigger::Retired, "path": handoff::path(&dir, &handoff.id)}),
    );
    crate::store::note_pending(&fleet, &dir, &handoff.id);
    Ok(handoff)
}

/// Save a handoff on an operator's request (`phoenix handoff save`, the HTTP API): like
/// `auto_handoff`, then indexed at once so that a search right after finds it.
pub fn save(
    spec: &Spec,
    agent: &AgentSpec,
    trigger: Trigger,
    body: Option<&str>,
) -> crate::error::Result<Handoff> {
    let h = auto_handoff(spec, agent, trigger, body)?;
    if let Ok(store) = crate::store::Store::open(&FleetDir::new(&spec.fleet.state_dir)) {
        let _ = store.catch_up();
    }
    Ok(h)
}

/// Every readable handoff of `agents`, each agent's oldest first.
pub fn handoffs<'a>(spec: &Spec, agents: impl IntoIterator<Item = &'a str>) -> Vec<Handoff> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    agents
        .into_iter()
        .flat_map(|n| handoff::list(&fleet.agent(n)))
        .collect()
}

/// The handoff `id` of `agent`, or of any declared agent. `id` must be a plain file stem
/// (`valid_handoff_id`): it becomes a path.
pub fn find_handoff(spec: &Spec, id: &str, agent: Option<&str>) -> Option<Handoff> {
    if !valid_handoff_id(id) {
        return None;
    }
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    match agent {
        Some(a) => handoff::load(&fleet.agent(a), id),
        None => spec
            .agent_names()
            .iter()
            .find_map(|n| handoff::load(&fleet.agent(n), id)),
    }
}

/// A handoff id as phoenix writes them: letters, digits, `-`, `_`, `.` (not first), at most
/// 200 characters; never a path.
pub fn valid_handoff_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The startup context for a CLI without a session-start hook (`templates/startup.md.j2`,
/// the same text the hook gives), or `None` when there is nothing to give. The inbox's
/// messages it carries are held (no other delivery gives them meanwhile) until the caller
/// says whether the paste was confirmed (`StartupText::delivered`).
pub fn startup_text(spec: &Spec, dir: &AgentDir) -> Option<StartupText> {
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let state = dir
        .read_state()
        .unwrap_or_else(|_| crate::state::AgentState::new(&dir.name));
    let start = if startup::was_interrupted(dir, &state) {
        startup::Start::Recovery
    } else {
        startup::Start::Fresh
    };
    let gathered = startup::Gathered::read(&fleet, dir, state, start);
    let resolve = resolve_command(spec, &dir.name);
    let messages = messages::ForContext::take(dir);
    let key = pane_marker_key(spec, dir);
    let (text, problem) = startup::render(
        &Templates::for_spec(spec),
        start,
        &startup::Inputs {
            marker_key: key.as_deref(),
            work_item: spec
                .agent(&dir.name)
                .and_then(|a| a.origin.as_ref())
                .map(|o| o.context.as_str()),
            ..gathered.inputs(&[], &resolve, messages.as_ref())
        },
    );
    if text.is_some() && gathered.interrupted_tool.is_some() {
        let _ = std::fs::remove_file(dir.file(crate::state::INTERRUPTED_TOOL));
    }
    if let Some(problem) = problem {
        let _ = dir.record_op(
            Op::TemplateError,
            json!({"template": "startup.md.j2", "error": problem}),
        );
    }
    text.map(|text| StartupText { text, messages })
}

/// The marker key of the agent's session, for a custom CLI whose pane the tap reads (the
/// key its wrapper issued when the CLI started; `marker_key`); `None` for any other.
pub fn pane_marker_key(spec: &Spec, dir: &AgentDir) -> Option<String> {
    spec.agent(&dir.name)
        .filter(|a| a.tap && !a.cli.adapter().markers_at_turn_end())
        .and_then(|_| marker_key::current(dir))
}

/// A startup context to paste, and the messages it carries.
pub struct StartupText {
    pub text: String,
    messages: Option<messages::ForContext>,
}

impl StartupText {
    /// The paste was confirmed: the messages it carried are delivered.
    pub fn delivered(self, dir: &AgentDir, how: &str) {
        if let Some(m) = self.messages {
            m.delivered(dir, how);
        }
    }
}

/// How an agent resolves an open loop from its shell: phoenix's own path (not the hook-only
/// `phoenix-hook`, which cannot resolve) and config, quoted.
pub fn resolve_command(spec: &Spec, agent: &str) -> String {
    let exe = crate::process::main_binary().unwrap_or_else(|_| std::path::PathBuf::from("phoenix"));
    [
        exe.to_string_lossy().as_ref(),
        "--config",
        spec.file.to_string_lossy().as_ref(),
        "resolve",
        agent,
    ]
    .map(crate::text::sh_quote)
    .join(" ")
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

pub use crate::state::handoff::is_handoff_file;
