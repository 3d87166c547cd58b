//! Handoffs: `handoffs/<time>-<slug>.md` in the agent's state dir, a metadata header (one
//! `key: value` line each, values in JSON so any text survives) and a markdown body rendered
//! from `templates/handoff.md.j2`.

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ledger::{self, SaveText};
use crate::render::Templates;
use crate::spec::AgentSpec;
use crate::state::Op;
use crate::state::jsonl::tail_jsonl;
use crate::state::{self, AgentDir};
use crate::text::shorten;

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
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::AutoRestart => "auto_restart",
            Trigger::ContextLimit => "context_limit",
            Trigger::Crash => "crash",
            Trigger::PreCompact => "pre_compact",
        }
    }

    pub fn parse(s: &str) -> Option<Trigger> {
        serde_json::from_value(Value::String(s.to_string())).ok()
    }

    pub const NAMES: [&'static str; 5] = [
        "manual",
        "auto_restart",
        "context_limit",
        "crash",
        "pre_compact",
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

fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let s = out.trim_end_matches('-').to_string();
    if s.is_empty() { "handoff".into() } else { s }
}

/// Gather what the agent knows and render the handoff (not written yet).
pub fn build(
    dir: &AgentDir,
    agent: &AgentSpec,
    trigger: Trigger,
    text: &SaveText,
    templates: &Templates,
) -> crate::error::Result<Handoff> {
    let state = dir.peek_state().unwrap_or_default();
    let ledger = ledger::load(dir);
    // The agent's own words for this handoff, else the task it is on now (state.json holds
    // the last prompt), else the ledger's: that one is only as new as the last save, and an
    // automatic handoff titled with it would name a task the agent finished long ago.
    let task = text
        .task
        .clone()
        .or_else(|| state.current_task.clone())
        .or_else(|| ledger.current_task.clone());
    let open_loops = &state.open_loops;
    let calls: Vec<Value> = tail_jsonl(&dir.file(state::TOOL_USE))
        .into_iter()
        .rev()
        .take(10)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let facts = super::transcript_facts(&state);
    let last_words = facts.last_words(3, 600);
    let notes: Vec<String> = facts.note.clone().into_iter().collect();
    let previous = list_ids(dir).pop();
    let now = jiff::Timestamp::now();
    let created_at = now.to_string();
    let summary = task
        .clone()
        .unwrap_or_else(|| format!("{} handoff", trigger.as_str()));
    let stamp = now.strftime("%Y%m%dT%H%M%S%3fZ").to_string();
    let mut id = format!("{stamp}-{}", slug(&summary));
    let mut n = 2;
    while path(dir, &id).exists() {
        id = format!("{stamp}-{}-{n}", slug(&summary));
        n += 1;
    }
    let ctx = json!({
        "agent": agent.name, "cli": agent.cli.to_string(), "trigger": trigger.as_str(),
        "created_at": created_at, "task": task, "text": text, "ledger": ledger,
        "open_loops": open_loops, "tool_calls": calls, "last_words": last_words,
        "last_prompt": facts.last_prompt.map(|p| shorten(&p, 1000)),
        "previous": previous,
    });
    let (body, broken) = templates.render_or_builtin("handoff.md.j2", &ctx);
    // A handoff is pasted into panes later: it is saved under the paste rule, whatever the
    // template, the agent's last words or the operator's text contained.
    let body = crate::world::inert::keyboard_text(&body.map_err(crate::error::Error::msg)?);
    if let Some(e) = broken {
        let _ = dir.record_op(
            Op::TemplateError,
            json!({"template": "handoff.md.j2", "error": e.to_string()}),
        );
    }
    Ok(Handoff {
        id,
        agent: agent.name.clone(),
        cli: agent.cli.to_string(),
        created_at,
        trigger,
        related: previous.into_iter().collect(),
        summary: shorten(&crate::world::inert::keyboard_text(&summary), 200),
        body,
        notes,
    })
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
            super::is_handoff_file(&p)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_round_trips_through_its_file_text() {
        let h = Handoff {
            id: "20261123T170000000Z-auth".into(),
            agent: "a".into(),
            cli: "claude".into(),
            created_at: "2026-11-23T17:00:00Z".into(),
            trigger: Trigger::Crash,
            related: vec!["20261122T100000000Z-x".into()],
            summary: "auth: \"quotes\" and\nnewlines".into(),
            body: "# Handoff\n\n---\nnot a header\n".into(),
            notes: Vec::new(),
        };
        let back = parse(&to_text(&h)).unwrap();
        assert_eq!(back.summary, h.summary);
        assert_eq!(back.trigger, Trigger::Crash);
        assert_eq!(back.related, h.related);
        assert!(back.body.contains("not a header"));
        assert!(parse("no header").is_none());
    }

    /// A manual save set the ledger's task long ago; the agent has had a new prompt since.
    #[test]
    fn an_automatic_handoff_is_titled_with_the_current_task_not_the_last_saved_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        ledger::update(&dir, |l| l.merge(&SaveText::parse("Task: the old task\n"))).unwrap();
        std::fs::write(
            dir.file("state.json"),
            r#"{"agent": "a", "current_task": "the new task"}"#,
        )
        .unwrap();
        let spec = crate::spec::parse(
            "[[agent]]\nname = \"a\"\ncli = \"custom\"\ncommand = \"true\"\n",
            &tmp.path().join("phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        let agent = spec.agent("a").unwrap();
        let templates = Templates::new(None);
        let auto = build(
            &dir,
            agent,
            Trigger::Crash,
            &SaveText::default(),
            &templates,
        )
        .unwrap();
        assert_eq!(auto.summary, "the new task");
        assert!(
            auto.body.starts_with("# Handoff: the new task\n"),
            "{}",
            auto.body
        );
        // The agent's own words for a handoff still win.
        let own = SaveText::parse("Task: what I say\n");
        let manual = build(&dir, agent, Trigger::Manual, &own, &templates).unwrap();
        assert_eq!(manual.summary, "what I say");
    }

    #[test]
    fn slugs_are_short_and_plain() {
        assert_eq!(
            slug("Implementing the Auth module (v2)!"),
            "implementing-the-auth-module-v2"
        );
        assert_eq!(slug("///"), "handoff");
    }
}
