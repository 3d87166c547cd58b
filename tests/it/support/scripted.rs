//! The protocol-independent part of the scripted model servers: a loopback HTTP/1.1 server on
//! a free port that records every request, plays a queue of scripted turns (tool calls, text,
//! errors, a hang) and leaves the wire format to a `Protocol` (model_server.rs: Anthropic
//! Messages API, openai_server.rs: OpenAI Responses API, gemini_server.rs: Gemini API).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One scripted answer to a model call.
#[derive(Debug, Clone)]
pub enum Turn {
    /// Ask the CLI to run a tool, e.g. Claude's `Bash` with `{"command": "echo hi"}`.
    ToolUse { name: String, input: Value },
    /// A plain text answer that ends the turn.
    Text(String),
    /// An HTTP error with the API's error body.
    Error {
        status: u16,
        kind: String,
        message: String,
    },
    /// Accept the request and never answer.
    Hang,
}

impl Turn {
    pub fn text(text: &str) -> Turn {
        Turn::Text(text.into())
    }
}

/// A recorded request: method, path and the JSON body (Null when there was none).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Value,
    /// When the request was read: how long a recovery took, as the model sees it.
    pub at: std::time::Instant,
}

impl Request {
    /// All text the request carries (system prompt and messages), for "did X reach the model".
    pub fn text(&self) -> String {
        self.body.to_string()
    }
}

/// What to send back for one request.
pub enum Answer {
    /// A JSON body with this status.
    Json(u16, Value),
    /// A `text/event-stream` body: each item is one event, already framed (`data: …\n\n`).
    Sse(Vec<String>),
    /// Accept the request and never answer (until the server is dropped).
    Hang,
    /// Like `Sse`, but streamed one event at a time with this pause before each: a model
    /// that is slow yet visibly at work.
    PacedSse(Vec<String>, Duration),
}

/// One model API's wire format.
pub trait Protocol: Send + Sync + 'static {
    /// Answer `request`; `script.next()` takes the next scripted turn.
    fn answer(&self, request: &Request, script: &Script) -> Answer;
}

/// The turns still to play, and a counter for ids.
pub struct Script {
    turns: Mutex<VecDeque<Turn>>,
    ids: AtomicUsize,
    /// How long the next scripted turn takes to come (a slow model), once.
    delay: Mutex<Option<Duration>>,
    /// The pause between the streamed events of the next scripted text answer, once.
    pace: Mutex<Option<Duration>>,
}

impl Script {
    /// The next scripted turn, or a closing text once the script is exhausted.
    pub fn next(&self) -> Turn {
        let delay = self.delay.lock().unwrap().take();
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        self.turns
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Turn::text("Done."))
    }

    /// The pause set by `pace_next`, once (a protocol that streams takes it with a turn).
    pub fn take_pace(&self) -> Option<Duration> {
        self.pace.lock().unwrap().take()
    }

    /// A fresh number for response and call ids.
    pub fn id(&self) -> usize {
        self.ids.fetch_add(1, Ordering::SeqCst)
    }
}

struct Shared<P> {
    protocol: P,
    script: Script,
    requests: Mutex<Vec<Request>>,
    stop: AtomicBool,
}

/// A scripted server speaking `P`; stops accepting (and ends hung requests) when dropped.
pub struct ScriptedServer<P: Protocol> {
    pub port: u16,
    shared: Arc<Shared<P>>,
}

impl<P: Protocol> ScriptedServer<P> {
    pub fn serve(protocol: P, script: Vec<Turn>) -> ScriptedServer<P> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            protocol,
            script: Script {
                turns: Mutex::new(script.into()),
                ids: AtomicUsize::new(1),
                delay: Mutex::new(None),
                pace: Mutex::new(None),
            },
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let accept_shared = shared.clone();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            while !accept_shared.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let s = accept_shared.clone();
                        std::thread::spawn(move || {
                            let _ = serve_connection(stream, &s);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        ScriptedServer { port, shared }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Append turns to the script.
    pub fn push(&self, turns: impl IntoIterator<Item = Turn>) {
        self.shared.script.turns.lock().unwrap().extend(turns);
    }

    /// Turns not played yet.
    pub fn remaining(&self) -> usize {
        self.shared.script.turns.lock().unwrap().len()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The next scripted text answer is streamed with `pause` before each event (a word at a
    /// time): slow, but visibly at work (protocols that stream it: the Messages API).
    pub fn pace_next(&self, pause: Duration) {
        *self.shared.script.pace.lock().unwrap() = Some(pause);
    }

    /// The next scripted turn comes only after `delay`, as from a slow model.
    pub fn delay_next(&self, delay: Duration) {
        *self.shared.script.delay.lock().unwrap() = Some(delay);
    }
}

impl<P: Protocol> Drop for ScriptedServer<P> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

/// Read one request: method, path, JSON body (Null when there is none or it is not JSON).
/// `None` at the end of the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        return Ok(None);
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
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
    Ok(Some(Request {
        method,
        path,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: std::time::Instant::now(),
    }))
}

fn serve_connection<P: Protocol>(stream: TcpStream, shared: &Shared<P>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(request) = read_request(&mut reader)? {
        shared.requests.lock().unwrap().push(request.clone());
        match shared.protocol.answer(&request, &shared.script) {
            Answer::Hang => {
                while !shared.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                return Ok(());
            }
            Answer::Json(status, body) => write_response(
                &mut writer,
                status,
                "application/json",
                body.to_string().as_bytes(),
            )?,
            Answer::PacedSse(events, pause) => {
                write!(
                    writer,
                    "HTTP/1.1 200 X\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                     transfer-encoding: chunked\r\nrequest-id: req_1\r\n\r\n"
                )?;
                writer.flush()?;
                for event in events {
                    std::thread::sleep(pause);
                    write!(writer, "{:x}\r\n{event}\r\n", event.len())?;
                    writer.flush()?;
                }
                write!(writer, "0\r\n\r\n")?;
                writer.flush()?;
            }
            Answer::Sse(events) => write_response(
                &mut writer,
                200,
                "text/event-stream",
                events.concat().as_bytes(),
            )?,
        }
    }
    Ok(())
}

pub fn write_response(
    w: &mut TcpStream,
    status: u16,
    kind: &str,
    body: &[u8],
) -> std::io::Result<()> {
    write!(
        w,
        "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\n{}content-length: {}\r\nrequest-id: req_1\r\n\r\n",
        if kind == "text/event-stream" {
            "cache-control: no-cache\r\n"
        } else {
            ""
        },
        body.len()
    )?;
    w.write_all(body)?;
    w.flush()
}
