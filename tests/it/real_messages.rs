//! Messages between agents with the real Claude Code CLI, driven by the scripted model server:
//! what the model receives, request by request. Runs only with `PHOENIX_TEST_REAL_CLIS=1`.

use crate::real_cli::{
    claude_agent, claude_bin, enabled, prepared_home, turn_requests, type_prompt,
};
use crate::support;

use std::time::Duration;

use support::model_server::{ModelServer, Turn};

const WAIT: Duration = Duration::from_secs(60);

/// Claude Code `cc` in `<fleet>/work` against `server`, running, with its pane.
fn start(fleet: &support::Fleet, server: &ModelServer) -> String {
    let bin = claude_bin();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    fleet.toml(&claude_agent("cc", &bin, &home, server, key));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Where in the turn requests `needle` first appears.
fn first_with(server: &ModelServer, needle: &str) -> Option<usize> {
    turn_requests(server)
        .iter()
        .position(|r| r.text().contains(needle))
}

/// A message sent while Claude Code runs a tool call is in none of that turn's requests; the
/// turn ends, and the next request carries it, with its sender.
#[test]
fn real_claude_gets_a_message_sent_mid_turn_in_the_next_request_after_the_turn() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let gate = fleet.path().join("turn-may-end");
    let server = ModelServer::start(vec![
        Turn::bash(&format!(
            "while [ ! -e '{}' ]; do sleep 0.2; done; echo waited",
            gate.display()
        )),
        Turn::text("The long job is done."),
        Turn::text("Noted the review request."),
    ]);
    let pane = start(&fleet, &server);
    type_prompt(&fleet, &pane, "run the long job");
    let dir = fleet.agent_dir("cc");
    support::wait_until(WAIT, "the tool call in flight", || {
        dir.join("in_flight.json").exists()
    });
    fleet
        .run(&[
            "send",
            "cc",
            "please review src/parse.rs",
            "--from",
            "alice",
        ])
        .status(0);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(first_with(&server, "please review src/parse.rs"), None);
    std::fs::write(&gate, "").unwrap();
    support::wait_until(WAIT, "the message in a request", || {
        first_with(&server, "please review src/parse.rs").is_some()
    });
    let requests = turn_requests(&server);
    let with_message = first_with(&server, "please review src/parse.rs").unwrap();
    // The turn's own requests (the prompt, the tool result) came first and lack it.
    let tool_result = requests
        .iter()
        .position(|r| r.text().contains("waited"))
        .expect("the tool result went to the model");
    assert!(tool_result < with_message, "{tool_result} {with_message}");
    let text = requests[with_message].text();
    assert!(
        text.contains("[phoenix] 1 message for agent `cc`"),
        "{text}"
    );
    assert!(text.contains("--- from alice at "), "{text}");
    support::wait_until(WAIT, "marked delivered", || {
        let doc = fleet.run(&["inbox", "cc", "--json"]).json();
        doc["delivered"][0]["confirmed_by"] == "prompt hook"
    });
}

/// An urgent message does not wait for a long tool call: Escape interrupts it and the message
/// reaches the model while the call would still be running.
#[test]
fn real_claude_is_interrupted_by_an_urgent_message() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![
        Turn::bash("echo started; sleep 90; echo slept-$((6*7))"),
        Turn::text("Stopped, as asked."),
    ]);
    let pane = start(&fleet, &server);
    type_prompt(&fleet, &pane, "run the slow job");
    let dir = fleet.agent_dir("cc");
    support::wait_until(WAIT, "the tool call in flight", || {
        dir.join("in_flight.json").exists()
    });
    fleet
        .run(&["send", "cc", "stop: the release is frozen", "--urgent"])
        .status(0);
    support::wait_until(WAIT, "the urgent message in a request", || {
        first_with(&server, "stop: the release is frozen").is_some()
    });
    // Its output (`slept-42`; the command itself says `$((6*7))`) never came back.
    assert_eq!(
        first_with(&server, "slept-42"),
        None,
        "the call was not waited for"
    );
    support::wait_until(WAIT, "marked delivered", || {
        let doc = fleet.run(&["inbox", "cc", "--json"]).json();
        doc["delivered"][0]["urgent"] == true
    });
}

/// A message that waited through a restart reaches the new session's first request, even when
/// the stopped Claude, still shutting down, starts a session of its own and is handed it first
/// (that session never prompts, so the message is reopened for the next one).
#[test]
fn real_claude_gets_a_message_kept_through_a_restart_at_session_start() {
    if !enabled() {
        return;
    }
    let fleet = support::Fleet::new();
    let server = ModelServer::start(vec![Turn::text("Read it.")]);
    let _pane = start(&fleet, &server);
    fleet.run(&["stop", "cc"]).status(0);
    fleet
        .run(&["send", "cc", "the build is green again", "--from", "ci"])
        .status(0);
    fleet.run(&["start", "cc"]).status(0);
    fleet.wait_running(&["cc"]);
    support::wait_until(WAIT, "delivered at session start", || {
        let doc = fleet.run(&["inbox", "cc", "--json"]).json();
        doc["delivered"][0]["confirmed_by"] == "session start"
    });
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "what is new?");
    support::wait_until(WAIT, "the message in the first request", || {
        first_with(&server, "the build is green again").is_some()
    });
    let text =
        turn_requests(&server)[first_with(&server, "the build is green again").unwrap()].text();
    assert!(text.contains("from ci at "), "{text}");
    // The prompt confirmed it: delivered, and no longer waiting on any session.
    support::wait_until(WAIT, "the delivery confirmed by the prompt", || {
        let doc = fleet.run(&["inbox", "cc", "--json"]).json();
        doc["delivered"][0]["confirmed_by"] == "session start"
            && doc["delivered"][0].get("handed_to").is_none()
            && doc["pending"].as_array().is_some_and(Vec::is_empty)
    });
}
