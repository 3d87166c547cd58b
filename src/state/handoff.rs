//! The handoff file format: `handoffs/<time>-<slug>.md` in the agent's state dir, a metadata
//! header (one `key: value` line each, values in JSON so any text survives) and a markdown
//! body. Building a handoff is `continuity::handoff`'s; reading and writing the files is here,
//! below everything that reads them (the continuity verbs, the search index).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::state::{self, AgentDir};

pub const DIR: &str = "handoffs";

/// Why a handoff was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Manual,
    AutoRestart,
    ContextLimit,
    Crash,
    PreCompact,
    /// Saved on the source machine as the operator moves the agent to another (`phoenix move`).
    Move,
    /// Saved as the agent's work item left its `[[agent_set]]`'s source.
    Retired,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::AutoRestart => "auto_restart",
            Trigger::ContextLimit => "context_limit",
            Trigger::Crash => "crash",
            Trigger::PreCompact => "pre_compact",
            Trigger::Move => "move",
            Trigger::Retired => "retired",
        }
    }

    pub fn parse(s: &str) -> Option<Trigger> {
        serde_json::from_value(Value::String(s.to_string())).ok()
    }

    pub const NAMES: [&'static str; 7] = [
        "manual",
        "auto_restart",
        "context_limit",
        "crash",
        "pre_compact",
        "move",
        "retired",
    ];
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handoff {
    pub id: String,
    pub agent: String,
    pub cli: String,
    pub created_at: String,
    pub trigger: Trigger,
    #[serde(default)]
    pub related: Vec<String>,
    /// One line: the task, or what the handoff is about.
    pub summary: String,
    /// The markdown body.
    pub body: String,
    /// What could not be read while it was built (not saved with it).
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// A handoff file larger than this is not read (phoenix writes a page or two).
const MAX_HANDOFF_BYTES: u64 = 4 * 1024 * 1024;

pub fn path(dir: &AgentDir, id: &str) -> PathBuf {
    dir.file(DIR).join(format!("{id}.md"))
}

fn header_line(out: &mut String, key: &str, value: &Value) {
    out.push_str(key);
    out.push_str(": ");
    out.push_str(&value.to_string());
    out.push('\n');
}

pub fn to_text(h: &Handoff) -> String {
    let mut out = String::from("---\n");
    header_line(&mut out, "id", &json!(h.id));
    header_line(&mut out, "agent", &json!(h.agent));
    header_line(&mut out, "cli", &json!(h.cli));
    header_line(&mut out, "created_at", &json!(h.created_at));
    header_line(&mut out, "trigger_reason", &json!(h.trigger));
    header_line(&mut out, "related", &json!(h.related));
    header_line(&mut out, "summary", &json!(h.summary));
    out.push_str("---\n\n");
    out.push_str(h.body.trim_end());
    out.push('\n');
    out
}

/// Read a handoff file; `None` if it is not one.
pub fn parse(text: &str) -> Option<Handoff> {
    let rest = text.strip_prefix("---\n")?;
    let (header, body) = rest.split_once("\n---\n")?;
    let mut fields = serde_json::Map::new();
    for line in header.lines() {
        let (k, v) = line.split_once(": ")?;
        fields.insert(k.trim().to_string(), serde_json::from_str(v.trim()).ok()?);
    }
    if let Some(t) = fields.remove("trigger_reason") {
        fields.insert("trigger".into(), t);
    }
    fields.insert(
        "body".into(),
        Value::String(body.trim_start_matches('\n').to_string()),
    );
    serde_json::from_value(Value::Object(fields)).ok()
}

/// Write atomically (a handoff is never half there).
pub fn write(dir: &AgentDir, h: &Handoff) -> io::Result<()> {
    let d = dir.file(DIR);
    state::create_private_dir(&d)?;
    state::atomic_write(&path(dir, &h.id), to_text(h).as_bytes())
}

/// The ids of the agent's handoffs, oldest first (ids start with their time).
pub fn list_ids(dir: &AgentDir) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir.file(DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            is_handoff_file(&p)
                .then(|| p.file_stem()?.to_str().map(String::from))
                .flatten()
        })
        .collect();
    ids.sort();
    ids
}

pub fn load(dir: &AgentDir, id: &str) -> Option<Handoff> {
    use crate::state::bounded::{self, Links};
    parse(&bounded::read_string(&path(dir, id), MAX_HANDOFF_BYTES, Links::Refuse).ok()?)
}

/// Every readable handoff of the agent, oldest first.
pub fn list(dir: &AgentDir) -> Vec<Handoff> {
    list_ids(dir)
        .iter()
        .filter_map(|id| load(dir, id))
        .collect()
}

/// Does `path` look like a handoff file name phoenix wrote?
pub fn is_handoff_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.len() > 17 && n.as_bytes()[8] == b'T')
}
