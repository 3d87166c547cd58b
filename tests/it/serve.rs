//! The HTTP API end to end: `phoenix serve` on a free loopback port in front of a real fleet
//! (private tmux server, demo agents, real state files and SQLite). Every endpoint, the token,
//! bad input refused with a hint and nothing changed, the live stream, and a clean stop.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::serve::Server;
use support::{Fleet, read_jsonl, wait_until};

const FAST: &str = "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = 100\n\n";

fn agent(name: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 300ms\"\n\
         resume_command = \"phoenix demo-agent --interval 300ms --resume {{session_id}}\"\n"
    )
}

/// Two running demo agents, `alpha` and `beta`.
fn fleet() -> Fleet {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}\n{}", agent("alpha"), agent("beta")));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    fleet
}

fn screen(fleet: &Fleet, agent: &str) -> String {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap_or("")
        .to_string();
    fleet
        .tmux(&["capture-pane", "-p", "-J", "-S", "-300", "-t", &pane])
        .unwrap_or_default()
}

/// Make the demo agent stop printing, so that it looks ready for input.
fn quiet(fleet: &Fleet, agent: &str) {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap()
        .to_string();
    fleet
        .tmux(&["send-keys", "-t", &pane, "-l", "silent"])
        .unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
}

fn handoff_files(fleet: &Fleet, agent: &str) -> usize {
    std::fs::read_dir(fleet.agent_dir(agent).join("handoffs"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
                .count()
        })
        .unwrap_or(0)
}

#[track_caller]
fn assert_error(got: &(u16, Value), status: u16, needle: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    let error = got.1["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(needle),
        "error `{error}` lacks `{needle}`: {}",
        got.1
    );
    assert!(
        got.1["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "no hint: {}",
        got.1
    );
}

/// Every read endpoint answers with what the CLI would show.
#[test]
fn every_read_endpoint_shows_the_fleet() {
    let fleet = fleet();
    fleet
        .run(&[
            "loop",
            "add",
            "alpha",
            "schwab-oauth",
            "Schwab OAuth not set up",
        ])
        .status(0);
    let mut save = fleet.command(&["handoff", "save", "alpha", "--json"]);
    save.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = save.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Current task: Wire the payment webhooks\nNext: retry queue\nKey decision: idempotency keys per event\n")
        .unwrap();
    let saved: Value = serde_json::from_slice(&child.wait_with_output().unwrap().stdout).unwrap();
    let id = saved["id"].as_str().unwrap().to_string();
    fleet.run(&["brief", "alpha", "--generate"]).status(0);
    // One recent and one old critical event.
    let now = jiff::Timestamp::now();
    let old = now - jiff::SignedDuration::from_hours(48);
    std::fs::write(
        fleet.state_dir().join("critical_events.jsonl"),
        format!(
            "{}\n{}\n",
            json!({"ts": old.to_string(), "event": "crash_loop", "agent": "beta", "reason": "old"}),
            json!({"ts": now.to_string(), "event": "session_unhealthy", "agent": "alpha", "reason": "silent_for_15_minutes"})
        ),
    )
    .unwrap();
    let server = Server::start(&fleet, &[]);

    // Status: every agent, with what an operator needs at a glance.
    let (code, status) = server.get("/api/status");
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["fleet"], "test");
    assert_eq!(status["server_running"], true);
    let agents = status["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    let alpha = agents.iter().find(|a| a["agent"] == "alpha").unwrap();
    assert_eq!(alpha["state"], "running");
    assert_eq!(alpha["health"], "healthy");
    assert!(alpha["pid"].as_u64().is_some());
    assert!(alpha["uptime_secs"].as_i64().is_some());
    assert!(alpha["last_activity"].is_string());
    assert_eq!(alpha["open_loops"], 1);
    assert_eq!(alpha["crashes"], 0);
    assert_eq!(alpha["context"]["handoffs"], 1);
    assert_eq!(alpha["context"]["last_handoff_id"], id.as_str());
    assert!(alpha["context"]["last_brief"].is_string());
    assert_eq!(alpha["context"]["level"], "fresh", "{}", alpha["context"]);
    let beta = agents.iter().find(|a| a["agent"] == "beta").unwrap();
    assert_eq!(beta["context"]["level"], "none");
    // The CLI's JSON is the same document.
    let cli = fleet.status();
    assert_eq!(cli[0]["context"]["handoffs"], alpha["context"]["handoffs"]);

    let (code, one) = server.get("/api/agents/alpha");
    assert_eq!(code, 200, "{one}");
    assert_eq!(one["agent"], "alpha");
    assert!(one["supervision"].is_object(), "{one}");

    let (code, state) = server.get("/api/agents/alpha/state");
    assert_eq!(code, 200, "{state}");
    assert_eq!(state["open_loops"][0]["id"], "schwab-oauth");

    let (code, ledger) = server.get("/api/agents/alpha/ledger");
    assert_eq!(code, 200, "{ledger}");
    assert_eq!(ledger["current_task"], "Wire the payment webhooks");
    assert_eq!(ledger["decisions"][0]["text"], "idempotency keys per event");

    let (code, list) = server.get("/api/agents/alpha/handoffs");
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["handoffs"][0]["id"], id.as_str());
    assert_eq!(list["handoffs"][0]["trigger_reason"], "manual");
    let (_, all) = server.get("/api/handoffs");
    assert_eq!(all["handoffs"].as_array().unwrap().len(), 1);
    let (_, none) = server.get("/api/handoffs?agent=beta");
    assert_eq!(none["handoffs"].as_array().unwrap().len(), 0);

    let (code, h) = server.get(&format!("/api/handoffs/{id}"));
    assert_eq!(code, 200, "{h}");
    assert!(h["body"].as_str().unwrap().contains("retry queue"), "{h}");
    let (code, _) = server.get(&format!("/api/handoffs/{id}?agent=beta"));
    assert_eq!(code, 404, "another agent's handoff is not found under beta");

    let (code, found) = server.get("/api/search?q=idempotency");
    assert_eq!(code, 200, "{found}");
    let hits = found["results"].as_array().unwrap();
    assert!(
        hits.iter()
            .any(|h| h["kind"] == "handoff" && h["reference"] == id.as_str()),
        "{found}"
    );
    let (_, only_beta) = server.get("/api/search?q=idempotency&agent=beta");
    assert_eq!(only_beta["results"].as_array().unwrap().len(), 0);

    let (code, brief) = server.get("/api/agents/alpha/brief");
    assert_eq!(code, 200, "{brief}");
    assert!(
        !brief["brief"].as_str().unwrap().trim().is_empty(),
        "{brief}"
    );
    assert!(brief["updated_at"].is_string());

    let (code, events) = server.get("/api/events?since=1h");
    assert_eq!(code, 200, "{events}");
    let events = events["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "session_unhealthy");
    let (_, all) = server.get("/api/events");
    assert_eq!(all["events"].as_array().unwrap().len(), 2);
    let (_, beta_events) = server.get("/api/events?agent=beta&since=7d");
    assert!(
        beta_events["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["agent"] == "beta"),
        "{beta_events}"
    );

    let (code, plan) = server.get("/api/plan");
    assert_eq!(code, 200, "{plan}");
    assert_eq!(plan["changes"].as_array().unwrap().len(), 0, "{plan}");
    assert!(plan["text"].as_str().unwrap().contains("No changes"));
    // phoenix.toml is read on every request: a new agent shows up in the plan and the status.
    fleet.toml(&format!(
        "{FAST}{}\n{}\n{}",
        agent("alpha"),
        agent("beta"),
        agent("gamma")
    ));
    let (_, plan) = server.get("/api/plan");
    assert_eq!(plan["changes"][0]["agent"], "gamma", "{plan}");
    let (_, status) = server.get("/api/status");
    assert!(
        status["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["agent"] == "gamma" && a["state"] == "declared"),
        "{status}"
    );

    // The description names every endpoint; the dashboard is served with a strict policy.
    let (code, doc) = server.get("/openapi.json");
    assert_eq!(code, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/api/status",
        "/api/agents/{agent}/inject",
        "/api/events",
        "/api/watchdog",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} not in /openapi.json"
        );
    }
    let (code, html, headers) = server.get_text("/");
    assert_eq!(code, 200);
    assert!(html.contains("<title>phoenix</title>"));
    let csp = headers
        .iter()
        .find(|(k, _)| k == "content-security-policy")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    let (code, js, _) = server.get_text("/assets/app.js");
    assert_eq!(code, 200);
    assert!(js.contains("/api/stream"));
}

/// The actions do what the CLI does: a handoff is saved and searchable, text and handoffs
/// reach the running agent, a restart replaces its process, a loop is resolved, the
/// watchdog runs a pass.
#[test]
fn actions_change_the_fleet() {
    let fleet = fleet();
    let server = Server::start(&fleet, &[]);

    let (code, saved) = server.post(
        "/api/agents/alpha/handoffs",
        &json!({"reason": "manual", "body": "Current task: Migrate the zebra tables\nNext: drop the old columns\n"}),
    );
    assert_eq!(code, 201, "{saved}");
    let id = saved["id"].as_str().unwrap().to_string();
    assert_eq!(saved["summary"], "Migrate the zebra tables");
    assert_eq!(handoff_files(&fleet, "alpha"), 1);
    fleet
        .run(&["handoff", "list", "alpha"])
        .status(0)
        .stdout_has(&id);
    let (_, found) = server.get("/api/search?q=zebra");
    assert_eq!(found["results"][0]["reference"], id.as_str(), "{found}");

    quiet(&fleet, "alpha");
    quiet(&fleet, "beta");
    let (code, injected) = server.post(
        "/api/agents/beta/inject",
        &json!({"text": "please rebase onto main"}),
    );
    assert_eq!(code, 200, "{injected}");
    assert_eq!(injected["handoff_id"], Value::Null);
    wait_until(Duration::from_secs(5), "the text in beta's pane", || {
        screen(&fleet, "beta").contains("prompt received: please rebase onto main")
    });

    let (code, injected) = server.post("/api/agents/alpha/inject", &json!({}));
    assert_eq!(code, 200, "{injected}");
    assert_eq!(injected["handoff_id"], id.as_str());
    wait_until(
        Duration::from_secs(5),
        "the handoff in alpha's pane",
        || screen(&fleet, "alpha").contains(&format!("[phoenix] handoff {id}")),
    );

    let before = fleet.agent_status("alpha")["pid"].as_u64().unwrap();
    let (code, restarted) = server.post("/api/agents/alpha/restart", &json!({}));
    assert_eq!(code, 200, "{restarted}");
    assert_eq!(restarted["fresh"], false);
    assert_eq!(restarted["via"], "wrapper");
    let after = fleet.wait_running(&["alpha"])[0];
    assert_ne!(u64::from(after), before, "a new process");
    assert!(
        fleet
            .ops("alpha")
            .iter()
            .any(|o| o["event"] == "operator_restart" && o["fresh"] == false)
    );
    let (code, fresh) = server.post("/api/agents/beta/restart", &json!({"fresh": true}));
    assert_eq!(code, 200, "{fresh}");
    assert_eq!(fresh["fresh"], true);
    assert!(
        fleet
            .ops("beta")
            .iter()
            .any(|o| o["event"] == "operator_restart" && o["fresh"] == true)
    );
    fleet.wait_running(&["beta"]);

    fleet
        .run(&[
            "loop",
            "add",
            "beta",
            "flaky-test",
            "The login test is flaky",
        ])
        .status(0);
    let (code, resolved) = server.post(
        "/api/agents/beta/resolve",
        &json!({"id": "flaky-test", "reason": "quarantined the test"}),
    );
    assert_eq!(code, 200, "{resolved}");
    assert_eq!(resolved["resolved"]["id"], "flaky-test");
    let log = read_jsonl(&fleet.agent_dir("beta").join("resolved.jsonl"));
    assert_eq!(log[0]["reason"], "quarantined the test");
    let (_, state) = server.get("/api/agents/beta/state");
    assert_eq!(state["open_loops"].as_array().unwrap().len(), 0, "{state}");

    let (code, pass) = server.post("/api/watchdog", &json!({}));
    assert_eq!(code, 200, "{pass}");
    assert_eq!(pass["agents"].as_array().unwrap().len(), 2, "{pass}");
    assert!(fleet.agent_dir("alpha").join("watchdog.json").exists());
    assert!(
        server.stderr().contains("restarted agent `alpha`"),
        "actions are logged: {}",
        server.stderr()
    );
}

/// With a token, actions need it (reads on loopback do not); a wrong or missing token changes
/// nothing.
#[test]
fn a_token_is_required_for_actions_when_set() {
    let fleet = fleet();
    let token = "tok-0123456789abcdef-secret";
    let server = Server::start(&fleet, &[("PHOENIX_TOKEN", token)]);
    let pid = fleet.agent_status("alpha")["pid"].as_u64().unwrap();

    let (code, _) = server.get("/api/status");
    assert_eq!(code, 200, "reads on loopback are open");
    let missing = server.post_as("/api/agents/alpha/restart", &json!({}), None);
    assert_error(&missing, 401, "needs the token");
    let wrong = server.post_as(
        "/api/agents/alpha/restart",
        &json!({}),
        Some("tok-0123456789abcdef-secreT"),
    );
    assert_error(&wrong, 401, "wrong token");
    let save = server.post_as("/api/agents/alpha/handoffs", &json!({}), None);
    assert_error(&save, 401, "token");
    for path in [
        "/api/agents/alpha/inject",
        "/api/agents/alpha/resolve",
        "/api/watchdog",
    ] {
        assert_eq!(server.post_as(path, &json!({}), None).0, 401, "{path}");
    }
    // Every handler acts before it answers: a refusal, once answered, has done nothing.
    assert_eq!(
        fleet.agent_status("alpha")["pid"].as_u64().unwrap(),
        pid,
        "not restarted"
    );
    assert!(
        !fleet
            .ops("alpha")
            .iter()
            .any(|o| o["event"] == "operator_restart")
    );
    assert_eq!(handoff_files(&fleet, "alpha"), 0);
    assert!(!fleet.agent_dir("alpha").join("watchdog.json").exists());

    let (code, body) = server.post_as("/api/agents/alpha/restart", &json!({}), Some(token));
    assert_eq!(code, 200, "{body}");
    // That restart is the only one: none of the refused ones came after all.
    let restarts = |ops: Vec<serde_json::Value>| {
        ops.iter()
            .filter(|o| o["event"] == "operator_restart")
            .count()
    };
    assert_eq!(restarts(fleet.ops("alpha")), 1);
    wait_until(Duration::from_secs(10), "the restarted agent", || {
        fleet.agent_status("alpha")["pid"]
            .as_u64()
            .is_some_and(|p| p != pid)
    });
    assert_eq!(restarts(fleet.ops("alpha")), 1);
}

/// Anything but loopback needs a token, and then every API call needs it.
#[test]
fn listening_beyond_loopback_needs_a_token() {
    let fleet = Fleet::new();
    fleet.toml(&agent("alpha"));
    fleet
        .run(&["serve", "--listen", "0.0.0.0:0"])
        .status(1)
        .stderr_has("refusing to listen on 0.0.0.0:0 without a token")
        .stderr_has("PHOENIX_TOKEN");
    fleet
        .command(&["serve", "--listen", "127.0.0.1:0"])
        .env("PHOENIX_TOKEN", "short")
        .output()
        .map(|o| {
            assert_eq!(o.status.code(), Some(1));
            assert!(String::from_utf8_lossy(&o.stderr).contains("too short"));
        })
        .unwrap();
    fleet
        .run(&["serve", "--listen", "nowhere"])
        .status(1)
        .stderr_has("is not an address");

    let token = "lan-token-0123456789abcdef";
    let mut server = Server::start_on(&fleet, "0.0.0.0:0", &[("PHOENIX_TOKEN", token)]);
    let port = server.addr.rsplit(':').next().unwrap().to_string();
    server.url = format!("http://127.0.0.1:{port}");
    server.addr = format!("127.0.0.1:{port}");
    assert_eq!(server.get("/api/status").0, 200, "with the token");
    server.token = None;
    let (code, body) = server.get("/api/status");
    assert_eq!(code, 401, "reads need the token too: {body}");
    assert!(body["hint"].as_str().unwrap().contains("Authorization"));
    // The page itself carries no data: it loads and asks for the token.
    assert_eq!(server.get_text("/").0, 200);
}

/// Bad input gets a 4xx with an error and a hint, and changes nothing.
#[test]
fn bad_input_is_refused_with_a_hint_and_changes_nothing() {
    let fleet = fleet();
    fleet
        .run(&["loop", "add", "alpha", "real-loop", "Something open"])
        .status(0);
    let server = Server::start(&fleet, &[]);
    let ops_before = |a: &str| fleet.ops(a).len();
    let (alpha_ops, beta_ops) = (ops_before("alpha"), ops_before("beta"));
    // The running agent's own hooks write `state.json` too (a heartbeat in `last_active`), so
    // what the API must not change is compared: the open and resolved loops.
    let loops = || {
        let state: Value = serde_json::from_slice(
            &std::fs::read(fleet.agent_dir("alpha").join("state.json")).unwrap(),
        )
        .unwrap();
        json!([state["open_loops"], state["resolved"]])
    };
    let state_before = loops();
    assert_eq!(state_before[0][0]["id"], "real-loop", "{state_before}");

    // Unknown agents.
    assert_error(
        &server.get("/api/agents/nobody/ledger"),
        404,
        "no agent `nobody`",
    );
    let got = server.post("/api/agents/nobody/restart", &json!({}));
    assert_error(&got, 404, "no agent `nobody`");
    assert!(
        got.1["hint"].as_str().unwrap().contains("`alpha`"),
        "{}",
        got.1
    );
    assert_error(
        &server.post("/api/agents/nobody/handoffs", &json!({"body": "x"})),
        404,
        "no agent",
    );
    assert!(!fleet.agent_dir("nobody").exists(), "no state dir for it");

    // Path traversal in names and ids.
    assert_error(
        &server.get("/api/agents/..%2F..%2Fetc/state"),
        400,
        "not a valid agent name",
    );
    assert_error(
        &server.post("/api/agents/..%2Fbeta/handoffs", &json!({"body": "x"})),
        400,
        "not a valid agent name",
    );
    assert_error(
        &server.get("/api/handoffs/..%2F..%2F..%2Fphoenix.toml"),
        400,
        "not a valid handoff id",
    );
    assert_error(
        &server.get("/api/handoffs?agent=..%2Falpha"),
        400,
        "not a valid agent name",
    );
    assert_error(
        &server.post(
            "/api/agents/alpha/inject",
            &json!({"handoff_id": "../../../phoenix"}),
        ),
        400,
        "not a valid handoff id",
    );
    let (code, body) = server.raw(
        &format!(
            "GET /api/agents/../../../etc/passwd HTTP/1.1\nHost: {}\nConnection: close\n",
            server.addr
        ),
        b"",
    );
    assert!((400..500).contains(&code), "{code} {body}");
    assert!(!body.contains("root:"), "{body}");

    // A huge body.
    let huge = "A".repeat(200 * 1024);
    let (code, body) = server.raw(
        &format!(
            "POST /api/agents/alpha/handoffs HTTP/1.1\nHost: {}\nContent-Type: application/json\nContent-Length: {}\nConnection: close\n",
            server.addr,
            huge.len() + 12
        ),
        format!("{{\"body\":\"{huge}\"}}").as_bytes(),
    );
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("\"hint\""), "{body}");

    // Malformed bodies, fields and queries.
    let (code, body) = server.raw(
        &format!(
            "POST /api/agents/alpha/restart HTTP/1.1\nHost: {}\nContent-Type: application/json\nContent-Length: 9\nConnection: close\n",
            server.addr
        ),
        b"{\"fresh\":",
    );
    assert_eq!(code, 400, "{body}");
    let (code, body) = server.raw(
        &format!(
            "POST /api/agents/alpha/restart HTTP/1.1\nHost: {}\nContent-Type: text/plain\nContent-Length: 2\nConnection: close\n",
            server.addr
        ),
        b"{}",
    );
    assert_eq!(code, 415, "{body}");
    assert_error(
        &server.post("/api/agents/alpha/restart", &json!({"fersh": true})),
        400,
        "unknown field",
    );
    assert_error(
        &server.post("/api/agents/alpha/handoffs", &json!({"reason": "whim"})),
        400,
        "unknown reason",
    );
    assert_error(
        &server.post(
            "/api/agents/alpha/inject",
            &json!({"text": "hi\u{1b}[201~rm -rf /\r"}),
        ),
        400,
        "control characters",
    );
    assert_error(
        &server.post(
            "/api/agents/alpha/resolve",
            &json!({"id": "no-such-loop", "reason": "done"}),
        ),
        404,
        "no open loop `no-such-loop`",
    );
    assert_error(
        &server.post(
            "/api/agents/alpha/resolve",
            &json!({"id": "real-loop", "reason": "  "}),
        ),
        400,
        "`reason` is empty",
    );
    assert_error(&server.get("/api/events?since=soonish"), 400, "since");
    assert_error(&server.get("/api/search"), 400, "nothing to search");
    assert_error(
        &server.get("/api/search?q=x&kind=tweet"),
        400,
        "unknown kind",
    );
    assert_error(&server.get("/api/nothing"), 404, "no such endpoint");
    let (code, body) = server.raw(
        &format!(
            "DELETE /api/status HTTP/1.1\nHost: {}\nConnection: close\n",
            server.addr
        ),
        b"",
    );
    assert_eq!(code, 405, "{body}");

    // A page elsewhere (DNS rebinding, a foreign origin) cannot act.
    let (code, body) = server.raw(
        "GET /api/status HTTP/1.1\nHost: attacker.example:80\nConnection: close\n",
        b"",
    );
    assert_eq!(code, 403, "{body}");
    let (code, body) = server.raw(
        &format!(
            "POST /api/agents/alpha/restart HTTP/1.1\nHost: {}\nOrigin: https://attacker.example\nContent-Type: application/json\nContent-Length: 2\nConnection: close\n",
            server.addr
        ),
        b"{}",
    );
    assert_eq!(code, 403, "{body}");

    // Nothing changed: every handler acts before it answers, so the refusals above are done.
    assert_eq!(handoff_files(&fleet, "alpha"), 0);
    assert_eq!(handoff_files(&fleet, "beta"), 0);
    let restarted = |a: &str| {
        fleet
            .ops(a)
            .iter()
            .any(|o| o["event"] == "operator_restart" || o["event"] == "context_injected")
    };
    assert!(!restarted("alpha") && !restarted("beta"));
    assert_eq!(loops(), state_before, "the open loop is still open");
    assert!(fleet.ops("alpha").len() >= alpha_ops && fleet.ops("beta").len() >= beta_ops);
    assert!(!fleet.agent_dir("alpha").join("resolved.jsonl").exists());
}

/// Injecting into an agent that is not running is a conflict, with what to do.
#[test]
fn injecting_into_a_stopped_agent_is_a_conflict() {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("idle")));
    let server = Server::start(&fleet, &[]);
    let got = server.post("/api/agents/idle/inject", &json!({"text": "hello there"}));
    assert_error(&got, 409, "not running");
    assert!(got.1["hint"].as_str().unwrap().contains("restart"));
    let got = server.post("/api/agents/idle/inject", &json!({}));
    assert_error(&got, 404, "no handoff yet");
    // Without a tmux server the status still answers: every agent down.
    let (code, status) = server.get("/api/status");
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["server_running"], false);
    assert_eq!(status["agents"][0]["health"], "down");
}

/// The live stream sends the status at once and again when it changes; SIGTERM ends the
/// stream and the server.
#[test]
fn the_live_stream_follows_the_fleet_and_sigterm_stops_the_server() {
    let fleet = fleet();
    let mut server = Server::start(&fleet, &[]);
    let mut stream = server.stream();
    let first = stream
        .next_matching("status", Duration::from_secs(10), |_| true)
        .expect("a first status event");
    let pid = first["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "alpha")
        .and_then(|a| a["pid"].as_u64())
        .expect("alpha's pid");
    fleet.run(&["restart", "alpha"]).status(0);
    let changed = stream.next_matching("status", Duration::from_secs(15), |s| {
        s["agents"].as_array().is_some_and(|agents| {
            agents.iter().any(|a| {
                a["agent"] == "alpha"
                    && a["state"] == "running"
                    && a["pid"].as_u64().is_some_and(|p| p != pid)
            })
        })
    });
    assert!(changed.is_some(), "no status event with alpha's new pid");

    // A new critical event is announced.
    let events = fleet.state_dir().join("critical_events.jsonl");
    let line = json!({"ts": jiff::Timestamp::now().to_string(), "event": "crash_loop", "agent": "beta", "reason": "test"});
    std::fs::write(&events, format!("{line}\n")).unwrap();
    assert!(
        stream
            .next_matching("events", Duration::from_secs(10), |v| v.as_u64() > Some(0))
            .is_some(),
        "no `events` event"
    );

    assert_eq!(
        server.terminate(Duration::from_secs(10)),
        Some(0),
        "SIGTERM with a client connected: exit 0; stderr:\n{}",
        server.stderr()
    );
}

/// A fleet that can be read (nothing needs to run for these).
fn declared() -> Fleet {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("alpha")));
    fleet
}

/// Idle sockets once took every file descriptor the server had: it accepted no one after
/// that (and could not open its own files either).
#[test]
fn a_thousand_idle_sockets_do_not_lock_out_a_real_client() {
    use std::io::Write;
    let fleet = declared();
    // 256 descriptors: a thousand connections would exhaust them four times over.
    let server = Server::start_with(&fleet, "127.0.0.1:0", &[], Some(256));
    let mut idle: Vec<std::net::TcpStream> = (0..1000)
        .map(|_| std::net::TcpStream::connect(&server.addr).expect("connect"))
        .collect();
    // Some of them trickle a request line, a byte at a time (slowloris).
    for s in idle.iter_mut().take(50) {
        let _ = s.write_all(b"GET /api/status HTTP/1.1\r\nHo");
    }
    let started = std::time::Instant::now();
    let (status, body) = server.get("/api/status");
    assert_eq!(status, 200, "{body}\n{}", server.stderr());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered after {:?}",
        started.elapsed()
    );
    assert!(body["agents"].is_array(), "{body}");
    drop(idle);
}

/// Read from `s` until it is closed; how long that took (`None`: still open after `limit`).
fn closed_within(s: &mut std::net::TcpStream, limit: Duration) -> Option<Duration> {
    use std::io::Read;
    let started = std::time::Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while started.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

#[test]
fn connections_that_send_no_complete_request_are_closed_after_the_timeout() {
    use std::io::{Read, Write};
    let fleet = declared();
    let server = Server::start(&fleet, &[("PHOENIX_SERVE_TIMEOUT", "1s")]);
    let connect = || std::net::TcpStream::connect(&server.addr).expect("connect");

    // Nothing at all.
    let mut silent = connect();
    let took = closed_within(&mut silent, Duration::from_secs(6)).expect("closed");
    assert!(took >= Duration::from_millis(800), "closed after {took:?}");

    // A header byte every 300ms: the deadline is for the whole head, not between bytes (a
    // deadline between bytes would never close it). No upper bound on the clock: under load
    // the close comes late, and only never closing is the bug.
    let mut trickle = connect();
    let started = std::time::Instant::now();
    trickle.write_all(b"GET /api/status HTTP/1.1\r\n").unwrap();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(30) {
        if trickle.write_all(b"X").is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        trickle
            .set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        if matches!(trickle.read(&mut [0u8; 64]), Ok(0)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled header kept the connection open");

    // Kept alive after an answer, then idle: closed too.
    let mut kept = connect();
    write!(
        kept,
        "GET /api/status HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    assert!(
        closed_within(&mut kept, Duration::from_secs(6)).is_some(),
        "an idle kept-alive connection stayed open"
    );

    // A body trickled a byte at a time: its request is in progress, but not for ever.
    let mut body = connect();
    write!(
        body,
        "POST /api/agents/alpha/inject HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        server.addr
    )
    .unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    body.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    // Read before each byte written: a byte written after the server answered and closed
    // could reset the connection and lose the answer still unread (seen under load).
    while started.elapsed() < Duration::from_secs(6) {
        let mut buf = [0u8; 4096];
        match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        if !answer.is_empty() || body.write_all(b" ").is_err() {
            break;
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");

    // A normal client is not bothered.
    assert_eq!(server.get("/api/status").0, 200);
}

#[test]
fn two_host_headers_are_a_bad_request() {
    let fleet = declared();
    let server = Server::start(&fleet, &[]);
    let (status, body) = server.raw(
        "GET /api/status HTTP/1.1\nHost: 127.0.0.1\nHost: evil.example\nConnection: close\n",
        b"",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("more than one `Host` header"), "{body}");
    let (status, body) = server.raw(
        "GET /api/status HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n",
        b"",
    );
    assert_eq!(status, 200, "{body}");
}

/// Live streams hold their connections for as long as the client likes: a limit keeps them
/// from filling the server.
#[test]
fn live_streams_are_limited_and_the_api_still_answers() {
    let fleet = declared();
    let server = Server::start(&fleet, &[]);
    let streams: Vec<_> = (0..32)
        .map(|_| {
            let mut s = server.stream();
            assert!(
                s.next_matching("status", Duration::from_secs(10), |_| true)
                    .is_some(),
                "{}",
                server.stderr()
            );
            s
        })
        .collect();
    let refused = server.get("/api/stream");
    assert_error(&refused, 503, "32 live streams are open already");
    assert_eq!(server.get("/api/status").0, 200);
    drop(streams);
}

/// Status reads share one observation of the fleet and say how old it is; a restart through
/// the API shows in the very next read: the write makes the shared observation stale.
#[test]
fn a_restart_through_the_api_shows_in_the_next_status_read() {
    let fleet = fleet();
    let server = Server::start(&fleet, &[]);
    let pid_of = |doc: &Value, name: &str| {
        doc["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent"] == name)
            .map(|a| a["pid"].clone())
            .unwrap()
    };
    let (code, first) = server.get("/api/status");
    assert_eq!(code, 200, "{first}");
    assert!(first["observed_age_ms"].is_u64(), "{first}");
    let before = pid_of(&first, "alpha");
    assert!(before.is_u64(), "{first}");
    let (code, restarted) = server.post("/api/agents/alpha/restart", &json!({}));
    assert_eq!(code, 200, "{restarted}");
    assert!(
        restarted["pid"].is_u64(),
        "the restart waits for the new process: {restarted}"
    );
    let (_, next) = server.get("/api/status");
    assert_eq!(pid_of(&next, "alpha"), restarted["pid"], "{next}");
    assert_ne!(pid_of(&next, "alpha"), before);
    // One agent's read comes from the same observation.
    let (_, alpha) = server.get("/api/agents/alpha");
    assert_eq!(alpha["pid"], restarted["pid"], "{alpha}");
}

/// `GET /api/status` returns what `phoenix status --json` prints: one function renders both
/// (they once differed: a bare array on the command line, an object over HTTP). Only what
/// moves between two reads (the time, uptimes, activity, tokens used today) is set aside.
#[test]
fn api_status_is_exactly_what_status_json_prints() {
    let fleet = fleet();
    let server = Server::start(&fleet, &[]);
    let steady = |mut doc: Value| {
        doc["observed_at"] = Value::Null;
        doc["observed_age_ms"] = Value::Null;
        for a in doc["agents"].as_array_mut().unwrap() {
            for moving in [
                "uptime_secs",
                "last_activity",
                "context",
                "watchdog",
                "health",
                "usage_today",
            ] {
                a[moving] = Value::Null;
            }
        }
        doc
    };
    let (code, api) = server.get("/api/status");
    assert_eq!(code, 200, "{api}");
    let cli = fleet.run(&["status", "--json"]).status(0).json();
    assert_eq!(cli["format_version"], 1, "{cli}");
    assert_eq!(
        api.as_object().unwrap().keys().collect::<Vec<_>>(),
        cli.as_object().unwrap().keys().collect::<Vec<_>>()
    );
    assert_eq!(steady(api), steady(cli));
}

/// The operator's everyday actions and views of one agent through the API: stop (it stays
/// down, `status` says stopped and why) and start again, its pane's last lines, its day
/// (tokens and cost per hour, today's crashes); a stop from another machine needs the token.
#[test]
fn stop_start_pane_and_day_of_an_agent_through_the_api() {
    let fleet = support::worker_and_flaky_fleet();
    let server = Server::start(&fleet, &[]);

    // Its pane, as it shows it now.
    let (code, pane) = server.get("/api/agents/worker/pane?lines=5");
    assert_eq!(code, 200, "{pane}");
    assert_eq!(pane["running"], true);
    let text = pane["text"].as_str().unwrap();
    assert!(
        !text.trim().is_empty() && text.lines().count() <= 5,
        "{pane}"
    );

    // Its day: tokens and a cost in this hour; flaky's crashes today.
    let (code, day) = server.get("/api/agents/worker/day");
    assert_eq!(code, 200, "{day}");
    let hours = day["hours"].as_array().unwrap();
    assert!(
        hours
            .iter()
            .any(|h| h["tokens"].as_u64().unwrap() > 0 && h["cost_usd"].as_f64().unwrap() > 0.0),
        "{day}"
    );
    let (_, flaky) = server.get("/api/agents/flaky/day");
    assert!(flaky["crashes"].as_array().unwrap().len() >= 2, "{flaky}");
    // Why flaky is down: its supervision record says safe mode.
    let (_, row) = server.get("/api/agents/flaky");
    assert!(
        row["supervision"]["safe_mode"]["reason"].is_string(),
        "{row}"
    );

    // Stop: recorded, the pane gone, and it stays down.
    let (code, stopped) = server.post("/api/agents/worker/stop", &json!({}));
    assert_eq!(code, 200, "{stopped}");
    assert_eq!(stopped["agent"], "worker");
    assert_eq!(stopped["ok"], true);
    wait_until(Duration::from_secs(10), "worker stopped", || {
        fleet.agent_status("worker")["state"] == "stopped"
    });
    assert_eq!(server.get("/api/agents/worker/pane").1["running"], false);
    // Start: running again.
    let (code, started) = server.post("/api/agents/worker/start", &json!({}));
    assert_eq!(code, 200, "{started}");
    fleet.wait_running(&["worker"]);
    // An unknown agent: 404, nothing run.
    assert_error(
        &server.post("/api/agents/nobody/stop", &json!({})),
        404,
        "no agent `nobody`",
    );
    drop(server);

    // From another machine the API needs the token for a stop, as for every action.
    let token = "lan-token-0123456789abcdef";
    let mut server = Server::start_on(&fleet, "0.0.0.0:0", &[("PHOENIX_TOKEN", token)]);
    let port = server.addr.rsplit(':').next().unwrap().to_string();
    server.url = format!("http://127.0.0.1:{port}");
    server.addr = format!("127.0.0.1:{port}");
    server.token = None;
    let (code, body) = server.post("/api/agents/worker/stop", &json!({}));
    assert_eq!(code, 401, "{body}");
    fleet.wait_running(&["worker"]);
    assert_ne!(fleet.agent_status("worker")["state"], "stopped");
}
