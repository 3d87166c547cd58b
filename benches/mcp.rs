//! phoenix's MCP server: what one tool call costs, beside floors measured in the same run.
//!
//! A fleet of `AGENTS` live demo agents. Over one `phoenix mcp` (stdio, as agent `a0`):
//! `tools/list` (the protocol's round trip and nothing else: the floor of any call),
//! `tools/call agent_status` (the same request as `GET /api/agents/a0`, which `phoenix serve`
//! answers from the same fleet in the same run) and `tools/call send_message` (an inbox
//! append; its floor is the bare round trip). Over `/mcp` on `phoenix serve`, `agent_status`
//! again, beside `GET /api/agents/a0` and `GET /api/status`. p50 / p99 / max of `CALLS`
//! sequential calls each. Run with `cargo bench --bench mcp`.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Fleet;
use support::serve::Server;

const AGENTS: usize = 20;
const CALLS: usize = 300;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut times: Vec<Duration>) -> Duration {
    times.sort();
    let p50 = percentile(&times, 0.5);
    println!(
        "{what:<58} p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}  ({} calls)",
        p50,
        percentile(&times, 0.99),
        times[times.len() - 1],
        times.len()
    );
    p50
}

/// One `phoenix mcp` spoken to over its pipes.
struct Stdio2 {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    id: u64,
}

impl Stdio2 {
    fn start(fleet: &Fleet, agent: &str) -> Stdio2 {
        let mut child = fleet
            .command(&["mcp"])
            .env("PHOENIX_AGENT", agent)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("phoenix mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Stdio2 {
            child,
            stdin,
            stdout,
            id: 0,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        writeln!(
            s.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        s
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "phoenix mcp closed"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == self.id {
                assert!(v.get("error").is_none(), "{v}");
                assert_ne!(v["result"]["isError"], true, "{v}");
                return v;
            }
        }
    }

    fn time(&mut self, method: &str, params: Value) -> Vec<Duration> {
        (0..CALLS)
            .map(|_| {
                let t = Instant::now();
                self.request(method, params.clone());
                t.elapsed()
            })
            .collect()
    }
}

impl Drop for Stdio2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let fleet = Fleet::new();
    let mut toml = String::from("[defaults]\nenabled = true\n");
    for i in 0..AGENTS {
        toml.push_str(&Fleet::demo_agent(&format!("a{i}"), ""));
    }
    fleet.toml(&toml);
    fleet.run(&["apply", "--yes"]).status(0);
    let names: Vec<String> = (0..AGENTS).map(|i| format!("a{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    fleet.wait_running(&refs);
    println!("{AGENTS} live agents, {CALLS} sequential calls each\n");

    let mut mcp = Stdio2::start(&fleet, "a0");
    // Warm both sides (page cache, the first observation) before timing.
    for _ in 0..10 {
        mcp.request("tools/list", json!({}));
        mcp.request(
            "tools/call",
            json!({"name": "agent_status", "arguments": {"agent": "a1"}}),
        );
    }
    let floor = report(
        "stdio tools/list (the round trip alone: floor)",
        mcp.time("tools/list", json!({})),
    );
    // Round the agents: an inbox holds at most 100 pending messages.
    let mut n = 0;
    let send: Vec<Duration> = (0..CALLS)
        .map(|_| {
            n += 1;
            let to = format!("a{}", 1 + n % (AGENTS - 1));
            let t = Instant::now();
            mcp.request(
                "tools/call",
                json!({"name": "send_message", "arguments": {"agent": to, "text": "bench"}}),
            );
            t.elapsed()
        })
        .collect();
    let send = report("stdio tools/call send_message", send);
    let status = report(
        "stdio tools/call agent_status",
        mcp.time(
            "tools/call",
            json!({"name": "agent_status", "arguments": {"agent": "a1"}}),
        ),
    );
    drop(mcp);

    let server = Server::start(&fleet, &[]);
    for _ in 0..10 {
        server.get("/api/agents/a1");
    }
    let api: Vec<Duration> = (0..CALLS)
        .map(|_| {
            let t = Instant::now();
            let (code, _) = server.get("/api/agents/a1");
            assert_eq!(code, 200);
            t.elapsed()
        })
        .collect();
    let api = report("GET /api/agents/a1 (the same request on the API)", api);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}/mcp", server.url);
    let post = |body: Value, session: Option<&str>| {
        let mut req = agent
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(s) = session {
            req = req
                .header("Mcp-Session-Id", s)
                .header("Mcp-Protocol-Version", "2025-06-18");
        }
        let mut res = req.send(body.to_string()).expect("POST /mcp");
        let session = res
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = res.body_mut().read_to_string().unwrap_or_default();
        assert!(!text.contains("\"isError\":true"), "{text}");
        session
    };
    let session = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "bench", "version": "1"}}}),
        None,
    )
    .expect("a session");
    post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&session),
    );
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "agent_status", "arguments": {"agent": "a1"}}});
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let time_post = |body: &Value| -> Vec<Duration> {
        (0..CALLS)
            .map(|_| {
                let t = Instant::now();
                post(body.clone(), Some(&session));
                t.elapsed()
            })
            .collect()
    };
    let http_floor = report("POST /mcp tools/list (floor over HTTP)", time_post(&list));
    let http = report("POST /mcp tools/call agent_status", time_post(&call));
    println!(
        "\noverhead per call, p50: stdio send_message {:.2?} over its round trip; \
         agent_status {:.2?} (stdio) and {:.2?} (HTTP) beside the API's {:.2?}; \
         HTTP round trip {:.2?}",
        send.saturating_sub(floor),
        status,
        http,
        api,
        http_floor
    );
}
