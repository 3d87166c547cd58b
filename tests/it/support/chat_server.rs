//! A scripted OpenAI chat-completions API (`POST /v1/chat/completions`, streamed as
//! server-sent events) for driving a real CLI that speaks it (Copilot CLI through
//! `COPILOT_PROVIDER_BASE_URL`) without a network. A tool call streams as `delta.tool_calls`
//! (its arguments in two pieces, as real servers split them), then `finish_reason:
//! "tool_calls"`; every answer ends with a usage chunk and `data: [DONE]`.
#![allow(dead_code)]

use serde_json::{Value, json};

use super::scripted::{Answer, Protocol, Request, Script, ScriptedServer, Turn};

/// The chat-completions wire format.
pub struct ChatCompletions;

pub type ChatServer = ScriptedServer<ChatCompletions>;

pub fn start(script: Vec<Turn>) -> ChatServer {
    ScriptedServer::serve(ChatCompletions, script)
}

/// The model every answer names.
pub const MODEL: &str = "gpt-4.1";

/// The tokens each answer reports: `prompt_tokens` (2 of them cached) and
/// `completion_tokens`.
pub const PROMPT_TOKENS: u64 = 10;
pub const COMPLETION_TOKENS: u64 = 5;

/// A call of the tool `name` with these arguments.
pub fn tool(name: &str, input: Value) -> Turn {
    Turn::ToolUse {
        name: name.into(),
        input,
    }
}

/// The API's answer to a prompt larger than the model's context window: HTTP 400,
/// `code: context_length_exceeded`, in OpenAI's words.
pub fn context_length_exceeded() -> Turn {
    Turn::Error {
        status: 400,
        kind: "context_length_exceeded".into(),
        message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.".into(),
    }
}

impl ChatServer {
    /// The requests that played (or would have played) a scripted turn: model calls that
    /// offer tools. Side requests (a session title) are left out.
    pub fn turn_requests(&self) -> Vec<Request> {
        self.requests().into_iter().filter(is_turn).collect()
    }
}

fn is_turn(r: &Request) -> bool {
    r.method == "POST"
        && r.path.contains("/chat/completions")
        && r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

impl Protocol for ChatCompletions {
    fn answer(&self, request: &Request, script: &Script) -> Answer {
        if request.method != "POST" || !request.path.contains("/chat/completions") {
            return Answer::Json(404, json!({"error": {"message": "not scripted"}}));
        }
        let id = script.id();
        // Side requests carry no tools and must not eat the script.
        let turn = if is_turn(request) {
            script.next()
        } else {
            Turn::text("Scripted task")
        };
        let chunks = match turn {
            Turn::Hang => return Answer::Hang,
            Turn::Error {
                status,
                kind,
                message,
            } => {
                return Answer::Json(
                    status,
                    json!({"error": {"message": message, "type": "invalid_request_error",
                                     "param": "messages", "code": kind}}),
                );
            }
            Turn::ToolUse { name, input } => {
                let arguments = input.to_string();
                let (first, rest) = arguments.split_at(arguments.len() / 2);
                vec![
                    json!({"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
                        {"index": 0, "id": format!("call_{id}"), "type": "function",
                         "function": {"name": name, "arguments": first}}]}, "finish_reason": null}),
                    json!({"index": 0, "delta": {"tool_calls": [
                        {"index": 0, "function": {"arguments": rest}}]}, "finish_reason": null}),
                    json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
                ]
            }
            Turn::Text(text) => vec![
                json!({"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}),
                json!({"index": 0, "delta": {}, "finish_reason": "stop"}),
            ],
        };
        let chunk = |choices: Value, usage: Value| {
            let mut c = json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk",
                               "created": 1_700_000_000, "model": MODEL, "choices": choices});
            if !usage.is_null() {
                c["usage"] = usage;
            }
            format!("data: {c}\n\n")
        };
        let mut events: Vec<String> = chunks
            .into_iter()
            .map(|c| chunk(json!([c]), Value::Null))
            .collect();
        events.push(chunk(
            json!([]),
            json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                   "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
                   "prompt_tokens_details": {"cached_tokens": 2}}),
        ));
        events.push("data: [DONE]\n\n".into());
        match script.take_pace() {
            Some(pause) => Answer::PacedSse(events, pause),
            None => Answer::Sse(events),
        }
    }
}
