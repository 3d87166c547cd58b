//! The tools: their names, descriptions and JSON schemas (what `tools/list` says), and each
//! one's work as a plain function over the library calls the CLI and the API make. None
//! checks a permission: [`super::authorize`] did, once, before.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{Authorized, Caller, ToolError};
use crate::spec::Spec;
use crate::state::FleetDir;

/// One tool as `tools/list` shows it.
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    /// The arguments it takes (anything else a call passes is ignored).
    pub arguments: &'static [&'static str],
    /// `agent` is required.
    pub needs_agent: bool,
    /// Read-only (MCP's `readOnlyHint`).
    pub read_only: bool,
}

pub const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "list_agents",
        description: "The fleet's agents and their status (running, idle, working, waiting for a person, crashed, stopped), on this machine and on every host: what `phoenix status --json` prints.",
        arguments: &[],
        needs_agent: false,
        read_only: true,
    },
    ToolDef {
        name: "agent_status",
        description: "One agent's status row: its state, pane, pid, session, current task, last activity and supervision record.",
        arguments: &["agent"],
        needs_agent: true,
        read_only: true,
    },
    ToolDef {
        name: "send_message",
        description: "Put a message in another agent's inbox. phoenix gives it to that agent at its next turn boundary (when it is idle at its prompt, or with its next prompt), signed with your name: the sender is who you are, never what the arguments say.",
        arguments: &["agent", "text"],
        needs_agent: true,
        read_only: false,
    },
    ToolDef {
        name: "wait_for",
        description: "Wait until an agent's turn ends (`turn_end`, the default), it is idle at its prompt (`idle`), its CLI exits (`exit`) or starts again (`revival`), or `timeout_seconds` pass. A wait survives the agent being killed and resumed: a turn that ends after the resume ends the wait. With a client that declares MCP tasks it runs as a task (poll `tasks/get`).",
        arguments: &["agent", "until", "timeout_seconds"],
        needs_agent: true,
        read_only: true,
    },
    ToolDef {
        name: "read_handoff",
        description: "A handoff note in full (task, what is done, what is next, decisions): the one with `id`, or the latest of `agent`.",
        arguments: &["agent", "id"],
        needs_agent: false,
        read_only: true,
    },
    ToolDef {
        name: "search_handoffs",
        description: "Full-text search of the fleet's handoffs, briefs, decisions and events, best match first.",
        arguments: &["query", "agent", "kind", "limit"],
        needs_agent: false,
        read_only: true,
    },
    ToolDef {
        name: "save_handoff",
        description: "Save a handoff note now: your own (no `agent`), or another agent's (needs `control`). `body` is `Current task: … / Completed: … / Next: …`; without it phoenix writes what it knows.",
        arguments: &["agent", "body"],
        needs_agent: false,
        read_only: false,
    },
    ToolDef {
        name: "restart",
        description: "Restart an agent (resuming its session; `fresh` starts a new one), as `phoenix restart` does. Needs `control`.",
        arguments: &["agent", "fresh"],
        needs_agent: true,
        read_only: false,
    },
    ToolDef {
        name: "stop",
        description: "Stop an agent; it stays down until `start`. Needs `control`.",
        arguments: &["agent"],
        needs_agent: true,
        read_only: false,
    },
    ToolDef {
        name: "start",
        description: "Start an agent that was stopped (or has exited), as `phoenix start` does. Needs `control`.",
        arguments: &["agent"],
        needs_agent: true,
        read_only: false,
    },
];

pub const NAMES: [&str; 10] = [
    "list_agents",
    "agent_status",
    "send_message",
    "wait_for",
    "read_handoff",
    "search_handoffs",
    "save_handoff",
    "restart",
    "stop",
    "start",
];

/// The longest wait one call may ask for.
pub const MAX_WAIT_SECONDS: u64 = 24 * 3600;
pub const DEFAULT_WAIT_SECONDS: u64 = 600;

pub fn find(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The JSON Schema of a tool's arguments (`inputSchema`).
pub fn input_schema(name: &str) -> Value {
    let agent = json!({"type": "string", "description": "An agent of the fleet, as `list_agents` names it."});
    let (properties, required): (Value, &[&str]) = match name {
        "list_agents" => (json!({}), &[]),
        "agent_status" | "stop" | "start" => (json!({"agent": agent}), &["agent"]),
        "send_message" => (
            json!({
                "agent": agent,
                "text": {"type": "string", "maxLength": crate::state::inbox::MAX_TEXT_BYTES,
                         "description": "The message: plain text; control characters are dropped."},
            }),
            &["agent", "text"],
        ),
        "wait_for" => (
            json!({
                "agent": agent,
                "until": {"type": "string", "enum": super::wait::Until::NAMES, "default": "turn_end",
                          "description": "turn_end: its current (or next) turn ends; idle: it sits at its prompt (now or later); exit: its CLI is not running; revival: its CLI starts again."},
                "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECONDS,
                                    "default": DEFAULT_WAIT_SECONDS,
                                    "description": "Give up after this long: the result says `reached: false`."},
            }),
            &["agent"],
        ),
        "read_handoff" => (
            json!({
                "agent": agent,
                "id": {"type": "string", "description": "A handoff id, as `search_handoffs` or `list_agents` give it; without it, the agent's latest."},
            }),
            &[],
        ),
        "search_handoffs" => (
            json!({
                "query": {"type": "string", "maxLength": 1000, "description": "Words to look for."},
                "agent": agent,
                "kind": {"type": "string", "enum": ["handoff", "brief", "decision", "event"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            }),
            &["query"],
        ),
        "save_handoff" => (
            json!({
                "agent": {"type": "string", "description": "Whose handoff (default: yours)."},
                "body": {"type": "string", "description": "`Current task: … / Completed: … / Next: …`."},
            }),
            &[],
        ),
        "restart" => (
            json!({
                "agent": agent,
                "fresh": {"type": "boolean", "default": false, "description": "A new session instead of resuming."},
            }),
            &["agent"],
        ),
        _ => (json!({}), &[]),
    };
    json!({"type": "object", "properties": properties, "required": required})
}

/// A string argument, `None` when absent or null.
pub fn string_arg(args: &Map<String, Value>, key: &str) -> Result<Option<String>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ToolError::bad(
            format!("`{key}` must be a string, not {other}"),
            "see the tool's inputSchema in tools/list",
        )),
    }
}

fn required_string(args: &Map<String, Value>, key: &str) -> Result<String, ToolError> {
    string_arg(args, key)?.ok_or_else(|| {
        ToolError::bad(
            format!("`{key}` is required"),
            "see the tool's inputSchema in tools/list",
        )
    })
}

fn bool_arg(args: &Map<String, Value>, key: &str) -> Result<bool, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ToolError::bad(
            format!("`{key}` must be true or false, not {other}"),
            "see the tool's inputSchema in tools/list",
        )),
    }
}

pub fn integer_arg(args: &Map<String, Value>, key: &str) -> Result<Option<u64>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ToolError::bad(
                format!("`{key}` must be a whole number, not {v}"),
                "see the tool's inputSchema in tools/list",
            )
        }),
    }
}

/// Run an authorized call (any tool but `wait_for`, which waits: [`super::wait`]). Blocking:
/// tmux, SQLite, files, a host over ssh.
pub fn run(
    spec: &Spec,
    config: &std::path::Path,
    caller: &Caller,
    call: &Authorized,
) -> Result<Value, ToolError> {
    let args = &call.args;
    let target = call.target.as_deref().unwrap_or_default();
    match call.tool {
        "list_agents" => status(spec, None),
        "agent_status" => {
            let doc = status(spec, Some(target))?;
            Ok(doc["agents"][0].clone())
        }
        "send_message" => send_message(spec, caller, target, &required_string(args, "text")?),
        "read_handoff" => read_handoff(spec, call.target.as_deref(), string_arg(args, "id")?),
        "search_handoffs" => search(spec, args, call.target.as_deref()),
        "save_handoff" => save_handoff(spec, target, string_arg(args, "body")?),
        "restart" => {
            let mut words = vec!["restart"];
            if bool_arg(args, "fresh")? {
                words.push("--fresh");
            }
            control(config, &words, target)
        }
        "stop" => control(config, &["stop"], target),
        "start" => control(config, &["start"], target),
        other => Err(ToolError::UnknownTool(other.to_string())),
    }
}

fn observe_failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::failed(
        format!("cannot observe the fleet: {e}"),
        "run `phoenix doctor` on this machine",
    )
}

/// The status document, of the fleet or of one agent, from wherever it runs.
fn status(spec: &Spec, agent: Option<&str>) -> Result<Value, ToolError> {
    let runtime = crate::world::runtime_for(spec);
    crate::hosts::reads::fleet_status(spec, &*runtime, agent).map_err(observe_failed)
}

fn send_message(spec: &Spec, caller: &Caller, to: &str, text: &str) -> Result<Value, ToolError> {
    let from = caller.name();
    if let Some(host) = crate::hosts::reads::host_of(spec, to) {
        let from_flag = format!("--from={from}");
        let words = ["send", from_flag.as_str(), "--json", "--", to, text];
        let mut doc = on_host(spec, host, &words, crate::hosts::actions::ACTION_TIMEOUT)?;
        doc["message"]["host"] = json!(host);
        return Ok(
            json!({"agent": to, "message": doc["message"], "delivered": "at its next turn boundary"}),
        );
    }
    let message = crate::continuity::messages::send(spec, to, from, text, false).map_err(|e| {
        use crate::continuity::messages::Error;
        match &e {
            Error::UnknownAgent { hint, .. } => ToolError::UnknownAgent {
                message: e.to_string(),
                hint: hint.clone(),
            },
            Error::Inbox { .. } => ToolError::failed(
                e.to_string(),
                format!(
                    "plain text of at most {} bytes; a full inbox empties as the agent takes its messages",
                    crate::state::inbox::MAX_TEXT_BYTES
                ),
            ),
        }
    })?;
    Ok(json!({
        "agent": to,
        "message": message,
        "delivered": "at its next turn boundary",
    }))
}

fn read_handoff(spec: &Spec, agent: Option<&str>, id: Option<String>) -> Result<Value, ToolError> {
    use crate::continuity;
    if let Some(id) = &id
        && !continuity::valid_handoff_id(id)
    {
        return Err(ToolError::bad(
            format!("`{}` is not a handoff id", crate::text::shorten(id, 80)),
            "handoff ids are letters, digits, `-`, `_` and `.`, as `search_handoffs` gives them",
        ));
    }
    if let Some(agent) = agent
        && let Some(host) = crate::hosts::reads::host_of(spec, agent)
    {
        let Some(id) = &id else {
            return Err(ToolError::bad(
                format!("agent `{agent}` runs on host `{host}`: its latest handoff is read by id"),
                "`search_handoffs` with `agent` gives the ids",
            ));
        };
        let agent_flag = format!("--agent={agent}");
        let words = ["handoff", "show", "--json", agent_flag.as_str(), "--", id];
        return on_host(spec, host, &words, crate::hosts::reads::READ_TIMEOUT);
    }
    let found = match (&id, agent) {
        (Some(id), agent) => continuity::find_handoff(spec, id, agent),
        (None, Some(agent)) => continuity::handoffs(spec, [agent]).pop(),
        (None, None) => {
            return Err(ToolError::bad(
                "`read_handoff` needs `id` or `agent`",
                "`agent` alone reads that agent's latest handoff",
            ));
        }
    };
    let handoff = found.ok_or_else(|| {
        ToolError::failed(
            match (&id, agent) {
                (Some(id), _) => format!("no handoff `{id}`"),
                (None, Some(agent)) => format!("agent `{agent}` has no handoff yet"),
                (None, None) => "no handoff".to_string(),
            },
            "`search_handoffs` finds them; `save_handoff` saves one",
        )
    })?;
    Ok(serde_json::to_value(&handoff).unwrap_or_default())
}

const KINDS: [&str; 4] = ["handoff", "brief", "decision", "event"];

fn search(spec: &Spec, args: &Map<String, Value>, agent: Option<&str>) -> Result<Value, ToolError> {
    let query = required_string(args, "query")?;
    if query.trim().is_empty() || query.len() > 1000 {
        return Err(ToolError::bad(
            "`query` must be a few words (1 to 1000 bytes)",
            "e.g. \"refresh tokens\"",
        ));
    }
    let kind = string_arg(args, "kind")?;
    if let Some(k) = &kind
        && !KINDS.contains(&k.as_str())
    {
        return Err(ToolError::bad(
            format!("unknown kind `{}`", crate::text::shorten(k, 40)),
            crate::diag::suggest(k, &KINDS),
        ));
    }
    let limit = integer_arg(args, "limit")?.unwrap_or(20).clamp(1, 100) as usize;
    let hits = crate::store::search(
        &FleetDir::new(&spec.fleet.state_dir),
        &query,
        agent,
        kind.as_deref(),
        limit,
    )
    .map_err(|e| ToolError::failed(format!("cannot search: {e}"), "run `phoenix doctor`"))?;
    Ok(json!({"query": query, "results": hits}))
}

fn save_handoff(spec: &Spec, agent: &str, body: Option<String>) -> Result<Value, ToolError> {
    let body = body.filter(|b| !b.trim().is_empty());
    if let Some(host) = crate::hosts::reads::host_of(spec, agent) {
        if body.is_some() {
            return Err(ToolError::bad(
                format!("agent `{agent}` runs on host `{host}`: a body cannot be sent there yet"),
                "save without `body`: phoenix adds what it knows",
            ));
        }
        let words = ["handoff", "save", "--no-input", "--json", "--", agent];
        return on_host(spec, host, &words, crate::hosts::actions::ACTION_TIMEOUT);
    }
    let spec_agent = spec
        .agent(agent)
        .ok_or_else(|| ToolError::failed(format!("no agent `{agent}`"), ""))?;
    let h = crate::continuity::save(
        spec,
        spec_agent,
        crate::continuity::Trigger::Manual,
        body.as_deref(),
    )
    .map_err(|e| ToolError::failed(format!("cannot save the handoff: {e}"), ""))?;
    Ok(crate::continuity::summary_json(&h))
}

/// `phoenix restart|stop|start --json -- AGENT`, run by this binary: the same locks, plan and
/// hosts as the command, and its JSON document as the answer.
fn control(config: &std::path::Path, words: &[&str], agent: &str) -> Result<Value, ToolError> {
    let exe = crate::process::main_binary()
        .map_err(|e| ToolError::failed(format!("cannot find the phoenix binary: {e}"), ""))?;
    let output = std::process::Command::new(exe)
        .arg("--config")
        .arg(config)
        .args(words)
        .args(["--json", "--", agent])
        // The command acts for the caller, who is already recorded; it is not an agent.
        .env_remove(super::AGENT_ENV)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| ToolError::failed(format!("cannot run phoenix {}: {e}", words[0]), ""))?;
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    if output.status.success() {
        return Ok(doc);
    }
    let message = doc["error"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(&output.stderr).trim().to_string());
    Err(ToolError::failed(
        format!("phoenix {} {agent} failed: {message}", words[0]),
        doc["hint"].as_str().unwrap_or_default(),
    ))
}

/// `words` run by `host`'s phoenix; its JSON document.
pub(super) fn on_host(
    spec: &Spec,
    host: &str,
    words: &[&str],
    timeout: Duration,
) -> Result<Value, ToolError> {
    let link = crate::hosts::reads::link_to(spec, host)
        .ok_or_else(|| ToolError::failed(format!("host `{host}` is not declared"), ""))?;
    link.run(words, timeout)
        .and_then(|ran| crate::hosts::reads::document_of(host, &ran))
        .map_err(|e| {
            ToolError::failed(
                format!("host `{host}`: {e}"),
                format!("`phoenix doctor` checks the link to `{host}`"),
            )
        })
}
