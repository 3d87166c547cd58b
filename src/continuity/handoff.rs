//! Building a handoff: what the agent knows (ledger, open loops, recent tools), rendered from
//! `templates/handoff.md.j2`. The file format itself is `state::handoff` (re-exported here).

use serde_json::{Value, json};

use super::ledger::{self, SaveText};
use crate::render::Templates;
use crate::spec::{AgentSpec, Cli};

/// Whose handoff: a declared agent, or one no longer declared (a retired item's).
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub name: &'a str,
    pub cli: Cli,
}

impl<'a> From<&'a AgentSpec> for Who<'a> {
    fn from(agent: &'a AgentSpec) -> Who<'a> {
        Who {
            name: &agent.name,
            cli: agent.cli,
        }
    }
}
use crate::state::Op;
use crate::state::jsonl::tail_jsonl;
use crate::state::{self, AgentDir};
use crate::text::shorten;

pub use crate::state::handoff::*;

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
    agent: Who<'_>,
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
        agent: agent.name.to_string(),
        cli: agent.cli.to_string(),
        created_at,
        trigger,
        related: previous.into_iter().collect(),
        summary: shorten(&crate::world::inert::keyboard_text(&summary), 200),
        body,
        notes,
    })
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
            agent.into(),
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
        let manual = build(&dir, agent.into(), Trigger::Manual, &own, &templates).unwrap();
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
