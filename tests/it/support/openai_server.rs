//! A scripted OpenAI Responses API (`POST /v1/responses`, streamed as server-sent events) for
//! driving the real Codex CLI without a network. Codex reaches it through a model provider in
//! `$CODEX_HOME/config.toml` (`base_url = "http://127.0.0.1:PORT/v1"`, `wire_api =
//! "responses"`); its shell tool is `exec_command` with `{"cmd": …}`.
#![allow(dead_code)]

use serde_json::{Value, json};

use super::scripted::{Answer, Protocol, Request, Script, ScriptedServer, Turn};

/// The Responses API wire format.
pub struct Responses;

pub type OpenAiServer = ScriptedServer<Responses>;

pub fn start(script: Vec<Turn>) -> OpenAiServer {
    ScriptedServer::serve(Responses, script)
}

/// Ask Codex to run a shell command with its `exec_command` tool.
pub fn exec(cmd: &str) -> Turn {
    Turn::ToolUse {
        name: "exec_command".into(),
        input: json!({ "cmd": cmd }),
    }
}

/// The Responses API's answer to an input larger than the model's context window: HTTP 400,
/// `code: context_length_exceeded`.
pub fn context_length_exceeded() -> Turn {
    Turn::Error {
        status: 400,
        kind: "context_length_exceeded".into(),
        message: "Your input exceeds the context window of this model. Please adjust your input and try again.".into(),
    }
}

impl OpenAiServer {
    /// The requests that played (or would have played) a scripted turn: model calls that
    /// offer tools. Side requests (the TUI's task title) are left out.
    pub fn turn_requests(&self) -> Vec<Request> {
        self.requests().into_iter().filter(is_turn).collect()
    }
}

fn is_turn(r: &Request) -> bool {
    r.method == "POST"
        && r.path.starts_with("/v1/responses")
        && r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

impl Protocol for Responses {
    fn answer(&self, request: &Request, script: &Script) -> Answer {
        if request.method != "POST" || !request.path.starts_with("/v1/responses") {
            return Answer::Json(404, json!({"error": {"message": "not scripted"}}));
        }
        let id = script.id();
        // Side requests (a title for the thread) carry no tools and must not eat the script.
        let turn = if is_turn(request) {
            script.next()
        } else {
            Turn::text("Scripted task")
        };
        match turn {
            Turn::Hang => Answer::Hang,
            Turn::Error {
                status,
                kind,
                message,
            } => Answer::Json(
                status,
                json!({"error": {"type": kind, "code": kind, "message": message}}),
            ),
            Turn::ToolUse { name, input } => {
                let mut call = json!({"type": "function_call", "id": format!("fc_{id}"),
                    "name": name, "arguments": input.to_string(), "call_id": format!("call_{id}")});
                // Codex offers an MCP server's tools as a namespace (`mcp__phoenix`) of plain
                // names: a call to one names both.
                if let Some((namespace, tool)) = name
                    .strip_prefix("mcp__")
                    .and_then(|rest| rest.split_once("__"))
                {
                    call["namespace"] = json!(format!("mcp__{namespace}"));
                    call["name"] = json!(tool);
                }
                events(id, call)
            }
            Turn::Text(text) => events(
                id,
                json!({"type": "message", "role": "assistant", "id": format!("msg_{id}"),
                       "content": [{"type": "output_text", "text": text, "annotations": []}]}),
            ),
        }
    }
}

/// `response.created`, one finished output item, `response.completed`.
fn events(id: usize, item: Value) -> Answer {
    let response = format!("resp_{id}");
    let list = [
        json!({"type": "response.created", "response": {"id": response}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": response, "usage": {
            "input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
            "output_tokens_details": null, "total_tokens": 15}}}),
    ];
    Answer::Sse(
        list.iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect(),
    )
}
