//! A scripted Anthropic Messages API server on 127.0.0.1 for driving the real Claude Code CLI
//! without a network: it plays a script of turns (tool calls, text, errors, a hang) and records
//! every request so tests can assert on what the CLI sent.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One answer to a `POST /v1/messages`.
#[derive(Debug, Clone)]
pub enum Turn {
    /// Ask the CLI to run a tool, e.g. `Bash` with `{"command": "echo hi"}`.
    ToolUse { name: String, input: Value },
    /// A plain text answer that ends the turn.
    Text(String),
    /// An HTTP error with an Anthropic-style error body.
    Error {
        status: u16,
        kind: String,
        message: String,
    },
    /// Accept the request and never answer.
    Hang,
}

impl Turn {
    pub fn bash(command: &str) -> Turn {
        Turn::ToolUse {
            name: "Bash".into(),
            input: json!({"command": command, "description": "scripted"}),
        }
    }

    pub fn text(text: &str) -> Turn {
        Turn::Text(text.into())
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

/// A recorded request: method, path and the JSON body (Null when there was none).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Value,
}

impl Request {
    /// All text the request carries (system prompt and messages), for "did X reach the model".
    pub fn text(&self) -> String {
        self.body.to_string()
    }
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Turn>>,
    requests: Mutex<Vec<Request>>,
    stop: AtomicBool,
    ids: AtomicUsize,
}

/// The server; stops accepting when dropped.
pub struct ModelServer {
    pub port: u16,
    shared: Arc<Shared>,
}

impl ModelServer {
    pub fn start(script: Vec<Turn>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            ..Default::default()
        });
        let accept_shared = shared.clone();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            while !accept_shared.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let s = accept_shared.clone();
                        std::thread::spawn(move || {
                            let _ = serve(stream, &s);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        ModelServer { port, shared }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Append turns to the script.
    pub fn push(&self, turns: impl IntoIterator<Item = Turn>) {
        self.shared.script.lock().unwrap().extend(turns);
    }

    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Requests to the Messages API only.
    pub fn message_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.starts_with("/v1/messages"))
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        shared.requests.lock().unwrap().push(Request {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
        });

        if method == "HEAD" || method == "GET" {
            write_response(&mut writer, 200, "application/json", b"{}")?;
            continue;
        }
        if !path.starts_with("/v1/messages") {
            write_response(&mut writer, 404, "application/json", b"{}")?;
            continue;
        }
        if path.starts_with("/v1/messages/count_tokens") {
            write_response(
                &mut writer,
                200,
                "application/json",
                br#"{"input_tokens":100}"#,
            )?;
            continue;
        }
        let turn = choose_turn(&body, shared);
        let id = shared.ids.fetch_add(1, Ordering::SeqCst);
        let streaming = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        match turn {
            Turn::Hang => loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(100));
            },
            Turn::Error {
                status,
                kind,
                message,
            } => {
                let body = json!({"type": "error", "error": {"type": kind, "message": message}});
                write_response(
                    &mut writer,
                    status,
                    "application/json",
                    body.to_string().as_bytes(),
                )?;
            }
            turn if streaming => write_sse(&mut writer, &turn, id)?,
            turn => {
                let msg = message_json(&turn, id);
                write_response(
                    &mut writer,
                    200,
                    "application/json",
                    msg.to_string().as_bytes(),
                )?;
            }
        }
    }
}

/// Compaction and other side requests get a canned text; everything else takes the next
/// scripted turn (or a closing text when the script is exhausted).
fn choose_turn(body: &Value, shared: &Shared) -> Turn {
    // Side requests (session titles and the like) carry no tools; they must not eat the script.
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    if !has_tools {
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
    shared
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| Turn::text("Done."))
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

fn write_response(w: &mut TcpStream, status: u16, kind: &str, body: &[u8]) -> std::io::Result<()> {
    write!(
        w,
        "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nrequest-id: req_1\r\n\r\n",
        body.len()
    )?;
    w.write_all(body)?;
    w.flush()
}

fn write_sse(w: &mut TcpStream, turn: &Turn, id: usize) -> std::io::Result<()> {
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
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
            ));
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

    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    write!(
        w,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\nrequest-id: req_1\r\n\r\n",
        body.len()
    )?;
    w.write_all(body.as_bytes())?;
    w.flush()
}
