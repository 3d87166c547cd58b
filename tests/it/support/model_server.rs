//! A scripted Anthropic Messages API server on 127.0.0.1 for driving the real Claude Code CLI
//! without a network: it plays a script of turns (tool calls, text, errors, a hang) and records
//! every request so tests can assert on what the CLI sent. The server itself is the shared
//! engine in scripted.rs; this file is the Messages API's wire format.
#![allow(dead_code)]

use serde_json::{Value, json};

use super::scripted::{Answer, Protocol, Script, ScriptedServer};
pub use super::scripted::{Request, Turn};

impl Turn {
    pub fn bash(command: &str) -> Turn {
        Turn::ToolUse {
            name: "Bash".into(),
            input: json!({"command": command, "description": "scripted"}),
        }
    }

    /// Start a Claude Code subagent (the Agent tool) with `prompt`.
    pub fn agent(prompt: &str) -> Turn {
        Turn::ToolUse {
            name: "Agent".into(),
            input: json!({"description": "scripted subagent", "prompt": prompt,
                          "subagent_type": "general-purpose"}),
        }
    }

    pub fn prompt_too_long() -> Turn {
        Turn::Error {
            status: 400,
            kind: "invalid_request_error".into(),
            message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
        }
    }

    pub fn overloaded() -> Turn {
        Turn::Error {
            status: 529,
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
        }
    }
}

/// The Messages API wire format; with a second script, the requests `aside_of` picks (by
/// default Claude Code's subagents, the Agent tool's workers) play that script instead of the
/// main one.
pub struct Messages {
    subagent: Option<std::sync::Mutex<std::collections::VecDeque<Turn>>>,
    aside_of: fn(&Value) -> bool,
}

impl Default for Messages {
    fn default() -> Self {
        Messages {
            subagent: None,
            aside_of: is_subagent_request,
        }
    }
}

/// The server; stops accepting when dropped.
pub type ModelServer = ScriptedServer<Messages>;

impl ModelServer {
    pub fn start(script: Vec<Turn>) -> ModelServer {
        ScriptedServer::serve(Messages::default(), script)
    }

    /// A server whose main thread plays `main` and whose subagents' requests play `subagent`
    /// (a closing text once it is exhausted): the two run at the same time in Claude Code
    /// 2.1.332, whose Agent tool runs its worker in the background.
    pub fn start_with_subagents(main: Vec<Turn>, subagent: Vec<Turn>) -> ModelServer {
        ModelServer::start_with_aside(main, subagent, is_subagent_request)
    }

    /// A server whose requests `aside_of` picks play `aside` (a closing text once it is
    /// exhausted) and all others `main`: another Claude Code talking to the same server, such
    /// as an agent team's teammate.
    pub fn start_with_aside(
        main: Vec<Turn>,
        aside: Vec<Turn>,
        aside_of: fn(&Value) -> bool,
    ) -> ModelServer {
        let protocol = Messages {
            subagent: Some(std::sync::Mutex::new(aside.into())),
            aside_of,
        };
        ScriptedServer::serve(protocol, main)
    }

    /// Requests to the Messages API only.
    pub fn message_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.starts_with("/v1/messages"))
            .collect()
    }
}

impl Protocol for Messages {
    fn answer(&self, request: &Request, script: &Script) -> Answer {
        let (method, path) = (request.method.as_str(), request.path.as_str());
        if method == "HEAD" || method == "GET" {
            return Answer::Json(200, json!({}));
        }
        if !path.starts_with("/v1/messages") {
            return Answer::Json(404, json!({}));
        }
        if path.starts_with("/v1/messages/count_tokens") {
            return Answer::Json(200, json!({"input_tokens": 100}));
        }
        let turn = match &self.subagent {
            Some(turns) if (self.aside_of)(&request.body) => turns
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Turn::text("Subagent done.")),
            _ => choose_turn(&request.body, script),
        };
        let id = script.id();
        let streaming = request.body["stream"].as_bool().unwrap_or(false);
        match turn {
            Turn::Hang => Answer::Hang,
            Turn::Error {
                status,
                kind,
                message,
            } => Answer::Json(
                status,
                json!({"type": "error", "error": {"type": kind, "message": message}}),
            ),
            // Only a scripted answer (a turn's request offers tools) takes the pace: side
            // requests such as the session title are not the turn.
            Turn::Text(_) if streaming && offers_tools(&request.body) => {
                match (sse(&turn, id), script.take_pace()) {
                    (Answer::Sse(events), Some(pause)) => Answer::PacedSse(events, pause),
                    (answer, _) => answer,
                }
            }
            turn if streaming => sse(&turn, id),
            turn => Answer::Json(200, message_json(&turn, id)),
        }
    }
}

/// The tool only the main thread is given: a subagent never asks the user (2.1.332 gives its
/// subagents the Agent tool too, but not this one).
const MAIN_THREAD_ONLY_TOOL: &str = "AskUserQuestion";

/// Is this a request of a Claude Code subagent: a turn (it offers tools) without the tool
/// only the main thread has.
pub fn is_subagent_request(body: &Value) -> bool {
    let Some(tools) = body["tools"].as_array().filter(|t| !t.is_empty()) else {
        return false;
    };
    !tools.iter().any(|t| t["name"] == MAIN_THREAD_ONLY_TOOL)
}

fn offers_tools(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

/// Compaction and other side requests get a canned text; everything else takes the next
/// scripted turn (or a closing text when the script is exhausted).
fn choose_turn(body: &Value, script: &Script) -> Turn {
    // Side requests (session titles and the like) carry no tools; they must not eat the script.
    if !offers_tools(body) {
        return Turn::text("Scripted session");
    }
    let last_user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    if last_user.contains("summary")
        && last_user.contains("conversation")
        && !last_user.contains("tool_result")
    {
        return Turn::text("Summary: the scripted session ran tools as asked.");
    }
    script.next()
}

fn message_json(turn: &Turn, id: usize) -> Value {
    let (content, stop) = match turn {
        Turn::ToolUse { name, input } => (
            json!([{"type": "tool_use", "id": format!("toolu_{id:04}"), "name": name, "input": input}]),
            "tool_use",
        ),
        Turn::Text(t) => (json!([{"type": "text", "text": t}]), "end_turn"),
        _ => (json!([]), "end_turn"),
    };
    json!({
        "id": format!("msg_{id:04}"), "type": "message", "role": "assistant",
        "model": "claude-scripted", "content": content, "stop_reason": stop,
        "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 5}
    })
}

fn sse(turn: &Turn, id: usize) -> Answer {
    let mut events: Vec<(&str, Value)> = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_{id:04}"), "type": "message", "role": "assistant",
            "model": "claude-scripted", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    )];
    let stop = match turn {
        Turn::ToolUse { name, input } => {
            events.push(("content_block_start", json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": format!("toolu_{id:04}"), "name": name, "input": {}}})));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            "tool_use"
        }
        Turn::Text(text) => {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ));
            // A word at a time, as a model streams (a paced answer shows each one).
            for word in text.split_inclusive(' ') {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": word}}),
                ));
            }
            "end_turn"
        }
        _ => "end_turn",
    };
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    Answer::Sse(
        events
            .into_iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect(),
    )
}
