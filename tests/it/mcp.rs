//! phoenix's MCP server end to end, spoken to as a client speaks to it: JSON-RPC over the real
//! `phoenix mcp`'s stdin and stdout (the caller being the agent whose environment phoenix
//! set), and over HTTP at `/mcp` on `phoenix serve`. Real tmux; the demo agent stands in for a
//! hooked CLI whose turns the tests drive.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Fleet, wait_until};

const WAIT: Duration = Duration::from_secs(30);

/// A client of one `phoenix mcp` process.
pub struct Client {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    /// Messages read while waiting for another id.
    seen: Vec<Value>,
    next_id: u64,
}

impl Client {
    /// `phoenix mcp` for `fleet`, as the agent `agent` (its environment as phoenix sets it) or
    /// as the operator.
    pub fn start(fleet: &Fleet, agent: Option<&str>) -> Client {
        let mut cmd = fleet.command(&["mcp"]);
        if let Some(agent) = agent {
            cmd.env("PHOENIX_AGENT", agent)
                .env("PHOENIX_STATE_DIR", fleet.agent_dir(agent));
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start phoenix mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Client {
            child,
            stdin,
            lines,
            seen: Vec::new(),
            next_id: 1,
        }
    }

    /// `initialize` (declaring MCP tasks when `tasks`) and `notifications/initialized`.
    pub fn initialize(&mut self, tasks: bool) -> Value {
        let capabilities = if tasks {
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        } else {
            json!({})
        };
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
                   "clientInfo": {"name": "phoenix-test", "version": "1"}}),
        );
        self.notify("notifications/initialized", json!({}));
        init
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
        id
    }

    /// The response to request `id` (notifications meanwhile are kept in `seen`).
    pub fn response(&mut self, id: u64, timeout: Duration) -> Value {
        if let Some(i) = self.seen.iter().position(|m| m["id"] == id) {
            return self.seen.remove(i);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self.lines.recv_timeout(left).unwrap_or_else(|e| {
                panic!("no response to request {id} ({e}); seen {:?}", self.seen)
            });
            if msg["id"] == id && msg.get("method").is_none() {
                return msg;
            }
            self.seen.push(msg);
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.response(id, WAIT)
    }

    /// `tools/call`: its result (a tool's error is a result with `isError`).
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert!(r.get("error").is_none(), "{tool}: {r}");
        r["result"].clone()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Hooked demo agents that do nothing until told (`run-turn CMD` is one turn); `lead` may
/// control the others.
fn fleet_with(agents: &[&str], apply: bool) -> Fleet {
    let fleet = Fleet::new();
    let mut toml = String::from(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"10s\"\n\n",
    );
    for name in agents {
        toml.push_str(&format!(
            "[[agent]]\nname = \"{name}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\
             resume_command = \"phoenix demo-agent --interval 1h --resume {{session_id}}\"\n"
        ));
        if *name == "lead" {
            toml.push_str("mcp = { allow = [\"read\", \"message\", \"control\"] }\n");
        }
    }
    fleet.toml(&toml);
    if apply {
        fleet.run(&["apply", "--yes"]).status(0);
        fleet.wait_running(agents);
        for name in agents {
            wait_status(&fleet, name, "idle");
        }
    }
    fleet
}

fn wait_status(fleet: &Fleet, agent: &str, status: &str) {
    wait_until(WAIT, &format!("`{agent}` {status}"), || {
        std::fs::read_to_string(fleet.agent_dir(agent).join("state.json"))
            .is_ok_and(|s| s.contains(&format!("\"status\": \"{status}\"")))
    });
}

fn type_into(fleet: &Fleet, agent: &str, text: &str) {
    let row = fleet.agent_status(agent);
    let pane = row["pane"].as_str().unwrap();
    fleet.tmux(&["send-keys", "-t", pane, "-l", text]).unwrap();
    fleet.tmux(&["send-keys", "-t", pane, "Enter"]).unwrap();
}

fn mcp_calls(fleet: &Fleet, agent: &str) -> Vec<Value> {
    fleet
        .ops(agent)
        .into_iter()
        .filter(|o| o["event"] == "mcp_call")
        .collect()
}

#[test]
fn stdio_lists_the_tools_stamps_the_sender_and_refuses_what_it_must() {
    let fleet = fleet_with(&["lead", "worker"], false);
    let mut worker = Client::start(&fleet, Some("worker"));
    let init = worker.initialize(false);
    assert_eq!(init["result"]["serverInfo"]["name"], "phoenix", "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );

    let list = worker.request("tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for tool in [
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
    ] {
        assert!(names.contains(&tool), "{tool} not in {names:?}");
    }
    let wait = &list["result"]["tools"][3];
    assert_eq!(wait["inputSchema"]["required"], json!(["agent"]), "{wait}");

    // A forged `from` is ignored: the sender is the agent phoenix started.
    let sent = worker.call(
        "send_message",
        json!({"agent": "lead", "text": "tests pass", "from": "lead"}),
    );
    assert_eq!(sent["isError"], false, "{sent}");
    assert_eq!(
        sent["structuredContent"]["message"]["from"], "worker",
        "{sent}"
    );
    assert_eq!(
        sent["structuredContent"]["ignored_arguments"],
        json!(["from"])
    );
    let inbox = fleet.run(&["inbox", "lead", "--json"]).status(0).json();
    assert_eq!(inbox["pending"][0]["from"], "worker", "{inbox}");
    assert_eq!(inbox["pending"][0]["text"], "tests pass", "{inbox}");

    // The status of the fleet and of one agent.
    let all = worker.call("list_agents", json!({}));
    let rows = all["structuredContent"]["agents"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{all}");
    let one = worker.call("agent_status", json!({"agent": "lead"}));
    assert_eq!(one["structuredContent"]["agent"], "lead", "{one}");
    assert_eq!(one["structuredContent"]["messages_pending"], 1, "{one}");

    // Errors a caller can act on: an unknown agent (with the names), a denied permission.
    let unknown = worker.call("agent_status", json!({"agent": "leda"}));
    assert_eq!(unknown["isError"], true, "{unknown}");
    assert_eq!(unknown["structuredContent"]["code"], "unknown_agent");
    assert!(
        unknown["structuredContent"]["hint"]
            .as_str()
            .unwrap()
            .contains("lead"),
        "{unknown}"
    );
    for tool in ["restart", "stop", "start"] {
        let denied = worker.call(tool, json!({"agent": "lead"}));
        assert_eq!(denied["isError"], true, "{denied}");
        assert_eq!(denied["structuredContent"]["code"], "denied", "{denied}");
        assert!(
            denied["structuredContent"]["hint"]
                .as_str()
                .unwrap()
                .contains("\"control\""),
            "{denied}"
        );
    }
    // A tool that does not exist is a protocol error.
    let none = worker.request("tools/call", json!({"name": "fly", "arguments": {}}));
    assert_eq!(none["error"]["code"], -32602, "{none}");

    // Handoffs: its own saved, read back, found.
    let saved = worker.call(
        "save_handoff",
        json!({"body": "Current task: parse the zebra format\nNext: the tests\n"}),
    );
    assert_eq!(saved["isError"], false, "{saved}");
    let id = saved["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let read = worker.call("read_handoff", json!({"agent": "worker"}));
    assert_eq!(read["structuredContent"]["id"], id, "{read}");
    assert!(
        read["structuredContent"]["body"]
            .as_str()
            .unwrap()
            .contains("zebra"),
        "{read}"
    );
    let by_id = worker.call("read_handoff", json!({"id": id}));
    assert_eq!(by_id["structuredContent"]["agent"], "worker", "{by_id}");
    let found = worker.call("search_handoffs", json!({"query": "zebra"}));
    assert_eq!(found["isError"], false, "{found}");
    assert!(
        found["structuredContent"]["results"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{found}"
    );
    let theirs = worker.call("save_handoff", json!({"agent": "lead"}));
    assert_eq!(theirs["structuredContent"]["code"], "denied", "{theirs}");

    // Every call is in the caller's ops log, denied ones too; texts stay out.
    let calls = mcp_calls(&fleet, "worker");
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert!(
        tools.starts_with(&["send_message", "list_agents", "agent_status"]),
        "{tools:?}"
    );
    let denied: Vec<&Value> = calls.iter().filter(|c| c["error"] == "denied").collect();
    assert_eq!(denied.len(), 4, "{calls:?}");
    assert_eq!(denied[0]["target"], "lead");
    assert!(!calls.iter().any(|c| c.to_string().contains("tests pass")));
    assert!(
        calls
            .iter()
            .any(|c| c["tool"] == "fly" && c["error"] == "unknown_tool")
    );
}

#[test]
fn an_identity_phoenix_did_not_give_is_refused_at_the_start() {
    let fleet = fleet_with(&["lead"], false);
    let mut cmd = fleet.command(&["mcp"]);
    cmd.env("PHOENIX_AGENT", "intruder");
    let out = cmd.output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PHOENIX_AGENT=`intruder` names no agent"),
        "{err}"
    );
    let mut cmd = fleet.command(&["mcp"]);
    cmd.env("PHOENIX_AGENT", "lead")
        .env("PHOENIX_STATE_DIR", "/tmp/another-fleet/agents/lead");
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another fleet"), "{err}");
}

#[test]
fn wait_for_ends_at_the_turn_end_as_a_call_and_as_a_task_across_a_kill_9() {
    let fleet = fleet_with(&["lead", "worker"], true);
    let mut lead = Client::start(&fleet, Some("lead"));
    lead.initialize(false);

    // As a plain call: the answer comes when the worker's turn ends, not before.
    let id = lead.send(
        "tools/call",
        json!({"name": "wait_for", "arguments": {"agent": "worker", "timeout_seconds": 60}}),
    );
    std::thread::sleep(Duration::from_millis(500));
    type_into(&fleet, "worker", "run-turn sleep 1");
    let started = Instant::now();
    let r = lead.response(id, WAIT);
    assert_eq!(r["result"]["structuredContent"]["reached"], true, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["how"], "turn_complete",
        "{r}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900), "{r}");

    // Idle already: at once. A deadline: `reached: false`, not an error.
    let idle = lead.call("wait_for", json!({"agent": "worker", "until": "idle"}));
    assert_eq!(idle["structuredContent"]["reached"], true, "{idle}");
    let late = lead.call("wait_for", json!({"agent": "worker", "timeout_seconds": 1}));
    assert_eq!(late["isError"], false, "{late}");
    assert_eq!(late["structuredContent"]["reached"], false, "{late}");
    let bad = lead.call("wait_for", json!({"agent": "worker", "until": "dnoe"}));
    assert_eq!(bad["structuredContent"]["code"], "bad_arguments", "{bad}");

    // As a task: created at once, working while the worker is killed and revived, completed
    // by the first turn end after the resume.
    let mut tasks = Client::start(&fleet, Some("lead"));
    tasks.initialize(true);
    let created = tasks.call(
        "wait_for",
        json!({"agent": "worker", "timeout_seconds": 120}),
    );
    let task_id = created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {created}"))
        .to_string();
    let get = |c: &mut Client| {
        let r = c.request("tasks/get", json!({"taskId": task_id}));
        assert!(r.get("error").is_none(), "{r}");
        r["result"].clone()
    };
    assert_eq!(get(&mut tasks)["status"], "working");
    let pid = fleet.agent_status("worker")["pid"].as_u64().unwrap() as u32;
    support::kill9(pid);
    wait_until(WAIT, "the worker revived", || {
        let row = fleet.agent_status("worker");
        row["state"] == "running" && row["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    wait_status(&fleet, "worker", "idle");
    assert_eq!(get(&mut tasks)["status"], "working", "no turn ended yet");
    type_into(&fleet, "worker", "run-turn true");
    let mut done = Value::Null;
    wait_until(WAIT, "the task completed", || {
        done = get(&mut tasks);
        done["status"] == "completed"
    });
    assert_eq!(
        done["result"]["structuredContent"]["reached"], true,
        "{done}"
    );

    // A task cancelled is cancelled.
    let created = tasks.call(
        "wait_for",
        json!({"agent": "worker", "timeout_seconds": 120}),
    );
    let other = created["taskId"].as_str().unwrap().to_string();
    let r = tasks.request("tasks/cancel", json!({"taskId": other}));
    assert!(r.get("error").is_none(), "{r}");
    wait_until(WAIT, "the task cancelled", || {
        tasks.request("tasks/get", json!({"taskId": other}))["result"]["status"] == "cancelled"
    });
    let calls = mcp_calls(&fleet, "lead");
    assert!(
        calls.iter().filter(|c| c["tool"] == "wait_for").count() >= 5,
        "{calls:?}"
    );
}

#[test]
fn a_lead_with_control_restarts_stops_and_starts_a_worker() {
    let fleet = fleet_with(&["lead", "worker"], true);
    let mut lead = Client::start(&fleet, Some("lead"));
    lead.initialize(false);
    let pid = fleet.agent_status("worker")["pid"].as_u64().unwrap();
    let stopped = lead.call("stop", json!({"agent": "worker"}));
    assert_eq!(stopped["isError"], false, "{stopped}");
    wait_until(WAIT, "the worker stopped", || {
        fleet.agent_status("worker")["state"] != "running"
    });
    let started = lead.call("start", json!({"agent": "worker"}));
    assert_eq!(started["isError"], false, "{started}");
    fleet.wait_running(&["worker"]);
    let now = fleet.agent_status("worker")["pid"].as_u64().unwrap();
    assert_ne!(now, pid);
    let restarted = lead.call("restart", json!({"agent": "worker"}));
    assert_eq!(restarted["isError"], false, "{restarted}");
    let calls = mcp_calls(&fleet, "lead");
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["stop", "start", "restart"], "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|c| c["ok"] == true && c["target"] == "worker")
    );
}

/// The body of an MCP response over HTTP: JSON, or the `data:` of its server-sent events.
fn http_message(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or(Value::Null)
}

#[test]
fn http_at_mcp_has_the_same_tools_behind_the_api_token() {
    let fleet = fleet_with(&["lead", "worker"], false);
    let token = "an-mcp-test-token-of-some-length";
    let server = support::serve::Server::start(&fleet, &[("PHOENIX_TOKEN", token)]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let url = format!("{}/mcp", server.url);
    let post = |body: Value, token: Option<&str>, session: Option<&str>| {
        let mut req = agent
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(s) = session {
            req = req
                .header("Mcp-Session-Id", s)
                .header("Mcp-Protocol-Version", "2025-06-18");
        }
        let mut res = req.send(body.to_string()).expect("POST /mcp");
        let status = res.status().as_u16();
        let session = res
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = res.body_mut().read_to_string().unwrap_or_default();
        (status, session, text)
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "t", "version": "1"}}});
    let (status, _, body) = post(init.clone(), None, None);
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = post(init.clone(), Some("wrong-token-wrong-token-wrong"), None);
    assert_eq!(status, 401, "{body}");
    let (status, session, body) = post(init, Some(token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        http_message(&body)["result"]["serverInfo"]["name"],
        "phoenix",
        "{body}"
    );
    let session = session.expect("a session id");
    let (status, _, _) = post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(token),
        Some(&session),
    );
    assert!(status == 202 || status == 200, "{status}");
    let (_, _, body) = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        Some(token),
        Some(&session),
    );
    assert_eq!(
        http_message(&body)["result"]["tools"]
            .as_array()
            .map(Vec::len),
        Some(10),
        "{body}"
    );
    let (_, _, body) = post(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "send_message",
                          "arguments": {"agent": "worker", "text": "from the dashboard's owner", "from": "lead"}}}),
        Some(token),
        Some(&session),
    );
    let sent = http_message(&body);
    assert_eq!(
        sent["result"]["structuredContent"]["message"]["from"], "operator",
        "{body}"
    );
    let (_, _, body) = post(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
               "params": {"name": "agent_status", "arguments": {"agent": "nobody"}}}),
        Some(token),
        Some(&session),
    );
    assert_eq!(
        http_message(&body)["result"]["structuredContent"]["code"],
        "unknown_agent",
        "{body}"
    );
    // The operator's calls are recorded in the fleet's operator log.
    let log = support::read_jsonl(&fleet.state_dir().join("mcp_operator.jsonl"));
    assert!(
        log.iter()
            .any(|l| l["tool"] == "send_message" && l["via"] == "http"),
        "{log:?}"
    );
}

/// Every message in `agent`'s inbox, pending or delivered.
/// `(from, text)` of each message in `agent`'s inbox, pending or already delivered.
pub fn inbox_texts(fleet: &Fleet, agent: &str) -> Vec<(String, String)> {
    let doc = fleet.run(&["inbox", agent, "--json"]).status(0).json();
    ["pending", "delivered"]
        .iter()
        .flat_map(|k| doc[k].as_array().cloned().unwrap_or_default())
        .map(|m| {
            (
                m["from"].as_str().unwrap_or_default().to_string(),
                m["text"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The "done when": a lead fans work out to two workers through MCP alone, one worker
/// is killed mid-task and revived, and the lead still gets both answers. The workers' turns
/// are driven by the test (the demo agent runs `run-turn CMD`); the lead is an MCP client
/// with tasks, as phoenix started it.
#[test]
fn a_lead_fans_out_to_two_workers_and_gets_both_answers_across_a_kill_9() {
    let fleet = fleet_with(&["lead", "w1", "w2"], true);
    let mut lead = Client::start(&fleet, Some("lead"));
    lead.initialize(true);
    for w in ["w1", "w2"] {
        let sent = lead.call(
            "send_message",
            json!({"agent": w, "text": format!("task for {w}: answer with send to lead")}),
        );
        assert_eq!(sent["isError"], false, "{sent}");
    }
    // Idle workers take their message at once, as their next prompt.
    for w in ["w1", "w2"] {
        wait_until(WAIT, "the task delivered", || {
            fleet.run(&["inbox", w, "--json"]).json()["delivered"]
                .as_array()
                .is_some_and(|d| d.len() == 1)
        });
    }
    let wait = |c: &mut Client, w: &str| -> String {
        let created = c.call("wait_for", json!({"agent": w, "timeout_seconds": 120}));
        created["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{created}"))
            .to_string()
    };
    let mut tasks = vec![("w1", wait(&mut lead, "w1")), ("w2", wait(&mut lead, "w2"))];

    // w2 answers at once; w1 works long and is killed in the middle.
    type_into(&fleet, "w1", "run-turn sleep 60");
    // The worker's own `phoenix send`: signed with the name its environment carries.
    let send = |text: &str| format!("run-turn {} send lead '{text}'", support::PHOENIX);
    type_into(&fleet, "w2", &send("w2: 42"));
    let pane = fleet.agent_status("w1")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &pane, "turn running `sleep 60`", WAIT);
    let pid = fleet.agent_status("w1")["pid"].as_u64().unwrap() as u32;
    let sessions = |f: &Fleet| {
        f.ops("w1")
            .iter()
            .filter(|o| o["event"] == "session_start")
            .count()
    };
    let before = sessions(&fleet);
    support::kill9(pid);
    wait_until(WAIT, "w1 revived", || {
        let row = fleet.agent_status("w1");
        row["state"] == "running" && row["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    // The resumed session has started (its hook ran): it reads its prompt again.
    wait_until(WAIT, "w1's resumed session", || sessions(&fleet) > before);
    std::thread::sleep(Duration::from_millis(500));
    type_into(&fleet, "w1", &send("w1: 7"));

    // The lead polls its tasks; a turn that ended without its answer (the revived session's
    // first) is waited past, as a lead would.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !tasks.is_empty() {
        assert!(Instant::now() < deadline, "tasks left: {tasks:?}");
        std::thread::sleep(Duration::from_millis(300));
        let mut next = Vec::new();
        for (w, id) in tasks {
            let r = lead.request("tasks/get", json!({"taskId": id}));
            match r["result"]["status"].as_str() {
                Some("working") => next.push((w, id)),
                Some("completed") => {
                    let answered = inbox_texts(&fleet, "lead")
                        .iter()
                        .any(|(from, text)| from == w && text.starts_with(&format!("{w}: ")));
                    if !answered {
                        next.push((w, wait(&mut lead, w)));
                    }
                }
                _ => panic!("{w}: {r}"),
            }
        }
        tasks = next;
    }
    let answers = inbox_texts(&fleet, "lead");
    assert!(
        answers.contains(&("w1".into(), "w1: 7".into())),
        "{answers:?}"
    );
    assert!(
        answers.contains(&("w2".into(), "w2: 42".into())),
        "{answers:?}"
    );
}

/// A CLI that starts its MCP servers with only some of its variables (Codex passes a short
/// list), or an agent that unsets them itself, does not make its calls the operator's: the
/// server is under the agent's wrapper, and that is who calls.
#[test]
fn an_agent_without_phoenixs_variables_is_still_itself_to_phoenix_mcp() {
    let fleet = Fleet::new();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "phoenix-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "send_message",
                          "arguments": {"agent": "worker", "text": "from below"}}}),
    ];
    let requests_file = fleet.path().join("requests.jsonl");
    let mut text = String::new();
    for r in &requests {
        text.push_str(&format!("{r}\n"));
    }
    std::fs::write(&requests_file, text).unwrap();
    let responses = fleet.path().join("responses.jsonl");
    let script = fleet.path().join("call.sh");
    std::fs::write(
        &script,
        format!(
            "(cat '{}'; sleep 10) | env -u PHOENIX_AGENT -u PHOENIX_STATE_DIR '{}' --config \"$PHOENIX_CONFIG\" mcp > '{}' 2> '{}.err'\nexec sleep 1000\n",
            requests_file.display(),
            support::PHOENIX,
            responses.display(),
            responses.display()
        ),
    )
    .unwrap();
    fleet.toml(&format!(
        "[[agent]]\nname = \"lead\"\ncommand = \"sh {}\"\n\n{}",
        script.display(),
        Fleet::demo_agent("worker", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(WAIT, "the call's answer", || {
        std::fs::read_to_string(&responses).is_ok_and(|t| t.contains("\"id\":2"))
    });
    let answer = std::fs::read_to_string(&responses).unwrap();
    assert!(answer.contains("\"from\":\"lead\""), "{answer}");
    // Pending, or already taken by the worker's session.
    assert_eq!(
        inbox_texts(&fleet, "worker"),
        [("lead".to_string(), "from below".to_string())]
    );
    // Recorded as the agent's call, not the operator's.
    assert!(
        !fleet.state_dir().join("mcp_operator.jsonl").exists(),
        "the call was taken for the operator's"
    );
    assert!(
        fleet
            .ops("lead")
            .iter()
            .any(|o| o["event"] == "mcp_call" && o["tool"] == "send_message"),
        "{:?}",
        fleet.ops("lead")
    );
    fleet.run(&["down"]).status(0);
}

/// `phoenix wait`: the same wait for a script. It returns when the turn ends (exit 0), says
/// at once that an idle agent is idle, and exits 124 at its timeout.
#[test]
fn phoenix_wait_returns_at_the_turn_end_and_exits_124_at_its_timeout() {
    let fleet = fleet_with(&["worker"], true);
    let mut waiting = fleet
        .command(&["wait", "worker", "--timeout", "60s", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "it waits for the turn"
    );
    type_into(&fleet, "worker", "run-turn sleep 1");
    let started = Instant::now();
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["how"], "turn_complete", "{doc}");
    assert!(started.elapsed() >= Duration::from_millis(900), "{doc}");

    fleet
        .run_within(&["wait", "worker", "--until", "idle"], WAIT)
        .status(0)
        .stdout_has("agent `worker`: idle (idle when the wait began");
    let started = Instant::now();
    fleet
        .run_within(&["wait", "worker", "--timeout", "1s"], WAIT)
        .status(124)
        .stdout_has("agent `worker`: no turn_end within 1s");
    assert!(started.elapsed() >= Duration::from_secs(1));
    fleet
        .run_within(&["wait", "nobody", "--timeout", "1s"], WAIT)
        .status(1)
        .stderr_has("no agent `nobody`");
    fleet
        .run(&["wait", "worker", "--until", "dnoe"])
        .status(64)
        .stderr_has("turn_end");
}
