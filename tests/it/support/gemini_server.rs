//! A scripted Gemini API for driving the real Gemini CLI without a network. The CLI reaches it
//! through `GOOGLE_GEMINI_BASE_URL`; per prompt it first asks `…:generateContent` to route the
//! request (answered with a JSON `complexity_score`), then streams the turn from
//! `…:streamGenerateContent?alt=sse`. Its shell tool is `run_shell_command`.
#![allow(dead_code)]

use serde_json::{Value, json};

use super::scripted::{Answer, Protocol, Request, Script, ScriptedServer, Turn};

/// The Gemini API wire format.
pub struct Gemini;

pub type GeminiServer = ScriptedServer<Gemini>;

pub fn start(script: Vec<Turn>) -> GeminiServer {
    ScriptedServer::serve(Gemini, script)
}

/// Ask Gemini CLI to run a shell command with its `run_shell_command` tool.
pub fn shell(command: &str) -> Turn {
    Turn::ToolUse {
        name: "run_shell_command".into(),
        input: json!({ "command": command, "description": "scripted" }),
    }
}

/// The Gemini API's answer to a prompt past the model's token limit: HTTP 400,
/// `INVALID_ARGUMENT`.
pub fn token_limit_exceeded() -> Turn {
    Turn::Error {
        status: 400,
        kind: "INVALID_ARGUMENT".into(),
        message: "The input token count (1300000) exceeds the maximum number of tokens allowed (1048576).".into(),
    }
}

impl GeminiServer {
    /// The streamed model calls that offer tools: the ones that play the script.
    pub fn turn_requests(&self) -> Vec<Request> {
        self.requests().into_iter().filter(is_turn).collect()
    }
}

fn is_turn(r: &Request) -> bool {
    r.method == "POST"
        && r.path.contains(":streamGenerateContent")
        && r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

impl Protocol for Gemini {
    fn answer(&self, request: &Request, script: &Script) -> Answer {
        let path = request.path.as_str();
        if request.method != "POST" {
            return Answer::Json(
                404,
                json!({"error": {"code": 404, "message": "not scripted"}}),
            );
        }
        if path.contains(":countTokens") {
            return Answer::Json(200, json!({"totalTokens": 100}));
        }
        if path.contains(":generateContent") {
            return Answer::Json(200, candidate(side_answer(&request.body), &request.body));
        }
        if !path.contains(":streamGenerateContent") {
            return Answer::Json(
                404,
                json!({"error": {"code": 404, "message": "not scripted"}}),
            );
        }
        let turn = if is_turn(request) {
            script.next()
        } else {
            Turn::text("Scripted summary")
        };
        match turn {
            Turn::Hang => Answer::Hang,
            Turn::Error {
                status,
                kind,
                message,
            } => Answer::Json(
                status,
                json!({"error": {"code": status, "status": kind, "message": message}}),
            ),
            Turn::ToolUse { name, input } => sse(candidate(
                json!({"functionCall": {"name": name, "args": input}}),
                &request.body,
            )),
            Turn::Text(text) => sse(candidate(json!({"text": text}), &request.body)),
        }
    }
}

/// What the scripted model says when the CLI compresses its history (`/compress`).
pub const SUMMARY: &str = "<state_snapshot>scripted summary of the session</state_snapshot>";

/// The CLI's own JSON side calls: model routing wants a complexity score (≥ 1 picks the main
/// model), the next-speaker check wants `user` (the turn is over), a compression a snapshot.
fn side_answer(body: &Value) -> Value {
    let asked = body.to_string();
    let text = if asked.contains("complexity_score") {
        json!({"complexity_reasoning": "scripted", "complexity_score": 10}).to_string()
    } else if asked.contains("next_speaker") {
        json!({"reasoning": "scripted", "next_speaker": "user"}).to_string()
    } else if asked.contains("<state_snapshot>") {
        SUMMARY.to_string()
    } else {
        "Scripted".to_string()
    };
    json!({ "text": text })
}

/// One candidate with `part`. The prompt's size is reported as a real API would, about a
/// token per four bytes of the request: Gemini CLI compresses only a history that shrinks.
fn candidate(part: Value, request: &Value) -> Value {
    let prompt = request.to_string().len() / 4;
    json!({
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": 5, "totalTokenCount": prompt + 5}
    })
}

fn sse(chunk: Value) -> Answer {
    Answer::Sse(vec![format!("data: {chunk}\n\n")])
}
