//! Brief generation (Phoenix Protocol v2.0): from the previous state.json, resolved.jsonl, the
//! ledger and the tail of the CLI's transcript, a new `brief.md` — by the built-in generator
//! (`templates/brief.md.j2`: changed, open loops, next, risk, numbers) or by `[brief] command`
//! (an LLM CLI in print mode, say), which gets a prompt (`templates/brief_prompt.md.j2`) and
//! answers with the brief, a line `===STATE_JSON===` and a JSON object merged into state.json.
//! The resolved entries a brief took in are archived. A bad answer changes nothing.

use std::process::Command;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::ledger;
use crate::error::Error;
use crate::process::RunError;
use crate::render::Templates;
use crate::spec::{AgentSpec, Spec};
use crate::state::Op;
use crate::state::jsonl::tail_jsonl;
use crate::state::{self, AgentDir, AgentState, FleetDir, Retention};
use crate::text::shorten;

pub const MARKER: &str = "===STATE_JSON===";
pub const ARCHIVE: &str = "resolved.archive.jsonl";

/// What a generation did.
#[derive(Debug, Clone, Serialize)]
pub struct Generated {
    pub agent: String,
    /// `built-in` or the command.
    pub by: String,
    pub chars: usize,
    /// state.json fields the command's JSON changed.
    pub state_fields: Vec<String>,
    /// resolved.jsonl entries moved to the archive.
    pub archived: usize,
    /// What could not be read (e.g. a transcript that is not a regular file).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Everything a brief is written from, and notes on what could not be read.
fn context(
    spec: &Spec,
    agent: &AgentSpec,
    dir: &AgentDir,
    resolved: &[Value],
) -> (Value, Vec<String>) {
    let mut state = dir
        .read_state()
        .unwrap_or_else(|_| AgentState::new(&agent.name));
    state.normalize(jiff::Timestamp::now(), Retention::from(&spec.thresholds));
    let ledger = ledger::load(dir);
    let facts = super::transcript_facts(&state);
    let last_words = facts.last_words(5, 800);
    let day_ago = jiff::Timestamp::now().as_second() - 86_400;
    let events: Vec<Value> =
        tail_jsonl(&FleetDir::new(&spec.fleet.state_dir).critical_events_path())
            .into_iter()
            .filter(|e| e["agent"] == agent.name.as_str())
            .filter(|e| {
                e["ts"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| t.as_second() >= day_ago)
            })
            .collect();
    let previous = read(dir);
    let ctx = json!({
        "agent": agent.name, "date": jiff::Timestamp::now().strftime("%Y-%m-%d").to_string(),
        "state": state, "ledger": ledger, "resolved": resolved, "last_words": last_words,
        "last_prompt": facts.last_prompt.map(|p| shorten(&p, 1000)),
        "events": events, "previous_brief": shorten(&previous, 6000),
        "marker": MARKER,
    });
    (ctx, facts.note.into_iter().collect())
}

/// The agent's current brief (`brief.md`); empty when it has none.
pub fn read(dir: &AgentDir) -> String {
    dir.brief().unwrap_or_default()
}

/// Generate `agent`'s brief now.
pub fn generate(spec: &Spec, agent: &AgentSpec) -> crate::error::Result<Generated> {
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(&agent.name);
    dir.ensure().map_err(Error::msg)?;
    let resolved = tail_jsonl(&dir.file(state::RESOLVED_LOG));
    let (ctx, notes) = context(spec, agent, &dir, &resolved);
    let templates = Templates::for_spec(spec);
    let result = match &spec.brief.command {
        None => templates
            .render_or_builtin("brief.md.j2", &ctx)
            .0
            .map(|text| (text, None, "built-in".to_string()))
            .map_err(|e| e.to_string()),
        Some(argv) => run_command(spec, argv, &templates, &ctx),
    };
    let (brief, state_json, by) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = dir.record_op(Op::BriefFailed, json!({"error": e}));
            let _ = FleetDir::new(&spec.fleet.state_dir).record_critical(
                "brief_failed",
                &agent.name,
                &e,
                "kept the previous brief and state",
                json!({}),
            );
            return Err(Error::msg(e));
        }
    };
    // The brief is part of what a session start pastes into a CLI without hooks: the paste
    // rule, whatever the template or the brief command wrote.
    let brief = crate::world::inert::keyboard_text(&brief);
    // The state first: if it cannot be merged, the brief is not written either.
    let retention = Retention::from(&spec.thresholds);
    let mut state_fields = Vec::new();
    let archived = dir
        .update_state(retention, |s| {
            if let Some(fields) = &state_json {
                state_fields = merge(s, fields)?;
            }
            Ok(archive(&dir, resolved.len()))
        })
        .map_err(Error::msg)?;
    state::atomic_write(&dir.file("brief.md"), brief.as_bytes()).map_err(Error::msg)?;
    let generated = Generated {
        agent: agent.name.clone(),
        by,
        chars: brief.chars().count(),
        state_fields,
        archived,
        notes,
    };
    let _ = dir.record_op(Op::BriefGenerated, json!(generated));
    Ok(generated)
}

type Answer = (String, Option<Map<String, Value>>, String);

fn run_command(
    spec: &Spec,
    argv: &[String],
    templates: &Templates,
    ctx: &Value,
) -> Result<Answer, String> {
    let prompt = templates
        .render_or_builtin("brief_prompt.md.j2", ctx)
        .0
        .map_err(|e| e.to_string())?;
    let program = argv[0].clone();
    let mut command = Command::new(&program);
    command.args(&argv[1..]);
    let done = match crate::process::run(command, prompt.as_bytes(), spec.brief.timeout) {
        Ok(done) => done,
        Err(RunError::Timeout) => {
            return Err(format!(
                "`{program}` took longer than {} and was killed",
                crate::spec::duration::format(spec.brief.timeout)
            ));
        }
        Err(RunError::Spawn(e)) => return Err(format!("cannot start `{program}`: {e}")),
    };
    if !done.status.success() {
        return Err(format!(
            "`{program}` failed ({}): {}",
            done.describe_status(),
            done.stderr_line()
        ));
    }
    let (brief, fields) = parse_answer(&done.stdout).map_err(|e| format!("`{program}`: {e}"))?;
    Ok((brief, Some(fields), format!("command `{}`", argv.join(" "))))
}

/// Split an answer into the brief and the state JSON object.
pub fn parse_answer(answer: &str) -> Result<(String, Map<String, Value>), String> {
    let Some((brief, rest)) = answer.split_once(MARKER) else {
        return Err(format!("the answer has no `{MARKER}` line"));
    };
    let brief = brief.trim();
    if brief.is_empty() {
        return Err("the brief before the marker is empty".into());
    }
    let Some(Value::Object(fields)) = crate::text::json_object(rest) else {
        return Err(format!("no JSON object after `{MARKER}`"));
    };
    // It must read as a state: the types of the known fields are checked here.
    serde_json::from_value::<AgentState>(Value::Object(fields.clone()))
        .map_err(|e| format!("the state JSON is not a valid state.json: {e}"))?;
    Ok((format!("{brief}\n"), fields))
}

/// Fields the generator may set. `last_active`, the session and the agent's name stay
/// phoenix's: the hooks own them.
const MERGED: [&str; 5] = [
    "current_task",
    "open_loops",
    "resolved",
    "numbers",
    "status",
];

fn merge(
    state: &mut AgentState,
    fields: &Map<String, Value>,
) -> Result<Vec<String>, state::StateError> {
    let mut value =
        serde_json::to_value(&*state).map_err(|e| state::StateError::Rejected(e.to_string()))?;
    let mut changed = Vec::new();
    for key in MERGED {
        if let Some(v) = fields.get(key) {
            if value.get(key) != Some(v) {
                changed.push(key.to_string());
            }
            value[key] = v.clone();
        }
    }
    let merged: AgentState =
        serde_json::from_value(value).map_err(|e| state::StateError::Rejected(e.to_string()))?;
    *state = merged;
    Ok(changed)
}

/// Move the first `n` lines of resolved.jsonl (those the brief took in) to the archive.
/// Runs under the agent's lock (inside `update_state`), like `phoenix resolve`'s appends.
fn archive(dir: &AgentDir, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let path = dir.file(state::RESOLVED_LOG);
    let Some(text) = state::file::read_text(&path) else {
        return 0;
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let n = n.min(lines.len());
    let archive = dir.file(ARCHIVE);
    let moved: String = lines[..n].iter().map(|l| format!("{l}\n")).collect();
    let kept: String = lines[n..].iter().map(|l| format!("{l}\n")).collect();
    let appended = state::file::append(&archive, moved.as_bytes());
    if appended.is_err() || state::atomic_write(&path, kept.as_bytes()).is_err() {
        return 0;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_split_and_checked() {
        let (brief, fields) =
            parse_answer("# Brief\nall good\n===STATE_JSON===\n{\"current_task\": \"x\", \"numbers\": {\"a\": \"1\"}}").unwrap();
        assert_eq!(brief, "# Brief\nall good\n");
        assert_eq!(fields["current_task"], "x");
        assert!(
            parse_answer("no marker here")
                .unwrap_err()
                .contains("no `===STATE_JSON===`")
        );
        assert!(parse_answer("brief\n===STATE_JSON===\n{not json").is_err());
        assert!(
            parse_answer("brief\n===STATE_JSON===\n{\"open_loops\": 3}")
                .unwrap_err()
                .contains("not a valid state.json")
        );
        assert!(parse_answer("\n===STATE_JSON===\n{}").is_err());
    }

    #[test]
    fn merging_keeps_last_active_and_the_session() {
        let mut s = AgentState::new("a");
        s.last_active = Some("2026-01-01T00:00:00Z".into());
        s.session_id = Some("sess".into());
        let fields: Map<String, Value> = serde_json::from_str(
            r#"{"last_active": "1999-01-01T00:00:00Z", "session_id": "evil", "current_task": "t", "numbers": {"k": "v"}}"#,
        )
        .unwrap();
        let changed = merge(&mut s, &fields).unwrap();
        assert_eq!(changed, ["current_task", "numbers"]);
        assert_eq!(s.last_active.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(s.session_id.as_deref(), Some("sess"));
        assert_eq!(s.numbers["k"], "v");
    }
}
