//! Messages between agents end to end: `phoenix send` (and the tap's `->continuity:send`, and
//! `POST /api/agents/{agent}/messages`) put a message in the recipient's inbox; it arrives at
//! the recipient's next turn boundary as one block, is marked delivered only when confirmed,
//! survives a restart into the next session's startup context, interrupts at once when urgent,
//! and arrives sanitized. Real tmux, the demo agent standing in for a hooked CLI.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{Fleet, wait_until_explained};

const WAIT: Duration = Duration::from_secs(30);

/// A hooked demo agent that does nothing until told (`run-turn CMD` is one turn).
fn fleet_with(agents: &[&str]) -> Fleet {
    let fleet = Fleet::new();
    let mut toml = String::from(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"10s\"\n\n",
    );
    for name in agents {
        toml.push_str(&format!(
            "[[agent]]\nname = \"{name}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\
             resume_command = \"phoenix demo-agent --interval 1h --resume {{session_id}}\"\n"
        ));
    }
    fleet.toml(&toml);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(agents);
    for name in agents {
        wait_idle(&fleet, name);
    }
    fleet
}

fn pane(fleet: &Fleet, agent: &str) -> String {
    fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap_or_else(|| panic!("no pane for `{agent}`"))
        .to_string()
}

fn screen(fleet: &Fleet, agent: &str) -> String {
    fleet
        .tmux(&[
            "capture-pane",
            "-p",
            "-J",
            "-S",
            "-500",
            "-t",
            &pane(fleet, agent),
        ])
        .unwrap_or_default()
}

fn type_into(fleet: &Fleet, agent: &str, text: &str) {
    let pane = pane(fleet, agent);
    fleet.tmux(&["send-keys", "-t", &pane, "-l", text]).unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
}

fn explain(fleet: &Fleet, agent: &str) -> String {
    format!(
        "screen:\n{}\nops:\n{}",
        screen(fleet, agent),
        fleet
            .ops(agent)
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    )
}

fn wait_status(fleet: &Fleet, agent: &str, status: &str) {
    wait_until_explained(
        WAIT,
        &format!("the agent {status}"),
        || {
            std::fs::read_to_string(fleet.agent_dir(agent).join("state.json"))
                .is_ok_and(|s| s.contains(&format!("\"status\": \"{status}\"")))
        },
        || explain(fleet, agent),
    );
}

fn wait_idle(fleet: &Fleet, agent: &str) {
    wait_status(fleet, agent, "idle");
}

fn inbox(fleet: &Fleet, agent: &str) -> Value {
    fleet.run(&["inbox", agent, "--json"]).status(0).json()
}

fn wait_delivered(fleet: &Fleet, agent: &str, count: usize) -> Value {
    wait_until_explained(
        WAIT,
        "the messages delivered",
        || inbox(fleet, agent)["delivered"].as_array().map(Vec::len) == Some(count),
        || explain(fleet, agent),
    );
    inbox(fleet, agent)
}

/// The position of the first op named `event` at or after `from`.
fn op_at(ops: &[Value], event: &str, from: usize) -> Option<usize> {
    ops.iter()
        .skip(from)
        .position(|o| o["event"] == event)
        .map(|i| i + from)
}

#[test]
fn a_message_sent_mid_turn_arrives_after_the_turn_not_before() {
    let fleet = fleet_with(&["bob"]);
    let marker = fleet.path().join("turn-may-end");
    type_into(
        &fleet,
        "bob",
        &format!(
            "run-turn while [ ! -e '{}' ]; do sleep 0.1; done",
            marker.display()
        ),
    );
    support::wait_for_screen(&fleet, &pane(&fleet, "bob"), "turn running", WAIT);
    wait_status(&fleet, "bob", "working");
    fleet
        .run(&[
            "send",
            "bob",
            "please review src/parse.rs",
            "--from",
            "alice",
        ])
        .status(0)
        .stdout_has("at the end of its current turn");
    // Mid-turn: it waits, however long the turn takes.
    std::thread::sleep(Duration::from_secs(2));
    let doc = inbox(&fleet, "bob");
    assert_eq!(doc["pending"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(doc["pending"][0]["from"], "alice");
    assert!(
        !screen(&fleet, "bob").contains("[phoenix] 1 message"),
        "{}",
        explain(&fleet, "bob")
    );
    let row = fleet.agent_status("bob");
    assert_eq!(row["messages_pending"], 1, "{row}");

    std::fs::write(&marker, "").unwrap();
    let doc = wait_delivered(&fleet, "bob", 1);
    assert_eq!(doc["pending"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["delivered"][0]["confirmed_by"], "prompt hook", "{doc}");
    let text = screen(&fleet, "bob");
    let done = text.find("turn done").expect("turn done");
    let given = text
        .find("prompt received: [phoenix] 1 message for agent `bob`")
        .unwrap_or_else(|| panic!("no block in\n{text}"));
    assert!(done < given, "{text}");
    assert!(text.contains("--- from alice at "), "{text}");
    assert!(text.contains("please review src/parse.rs"), "{text}");
    // In ops.jsonl: received mid-turn, the turn ends, then the block is submitted.
    let ops = fleet.ops("bob");
    let received = op_at(&ops, "message_received", 0).expect("message_received");
    let ended = op_at(&ops, "turn_complete", received).expect("turn_complete after it");
    let prompt = op_at(&ops, "prompt", ended).expect("the block submitted after the turn");
    let delivered = op_at(&ops, "messages_delivered", prompt).expect("messages_delivered");
    assert!(op_at(&ops, "prompt", received).unwrap() == prompt && delivered > prompt);
    assert_eq!(fleet.agent_status("bob")["messages_pending"], 0);
}

#[test]
fn a_restart_in_between_loses_nothing_and_the_new_session_gets_it() {
    let fleet = fleet_with(&["bob"]);
    type_into(&fleet, "bob", "run-turn sleep 600");
    support::wait_for_screen(&fleet, &pane(&fleet, "bob"), "turn running", WAIT);
    wait_status(&fleet, "bob", "working");
    fleet
        .run(&["send", "bob", "the build is green again", "--from", "ci"])
        .status(0);
    fleet.run(&["restart", "bob", "--fresh"]).status(0);
    let doc = wait_delivered(&fleet, "bob", 1);
    assert_eq!(
        doc["delivered"][0]["confirmed_by"], "session start",
        "{doc}"
    );
    let text = screen(&fleet, "bob");
    assert!(text.contains("--- messages for you (1) ---"), "{text}");
    assert!(text.contains("from ci at "), "{text}");
    assert!(text.contains("the build is green again"), "{text}");

    // Stopped: kept until the agent starts again.
    fleet.run(&["stop", "bob"]).status(0);
    fleet
        .run(&["send", "bob", "welcome back", "--from", "alice"])
        .status(0)
        .stdout_has("when it starts");
    assert_eq!(inbox(&fleet, "bob")["pending"][0]["text"], "welcome back");
    fleet.run(&["start", "bob"]).status(0);
    let doc = wait_delivered(&fleet, "bob", 2);
    assert_eq!(doc["delivered"][1]["text"], "welcome back", "{doc}");
}

#[test]
fn an_urgent_message_interrupts_the_turn_at_once() {
    let fleet = fleet_with(&["bob"]);
    // A prompt whose turn never ends: `working`, never at a turn boundary.
    type_into(&fleet, "bob", "refactor the parser please");
    wait_status(&fleet, "bob", "working");
    fleet
        .run(&["send", "bob", "stop: the release is frozen", "--urgent"])
        .status(0)
        .stdout_has("interrupted");
    let doc = wait_delivered(&fleet, "bob", 1);
    assert_eq!(doc["delivered"][0]["from"], "operator", "{doc}");
    assert_eq!(doc["delivered"][0]["urgent"], true, "{doc}");
    let text = screen(&fleet, "bob");
    let interrupted = text.find("demo-agent: interrupted").expect("interrupted");
    let given = text
        .find("prompt received: [phoenix] 1 message for agent `bob` (urgent):")
        .expect("the urgent block");
    assert!(interrupted < given, "{text}");
    // No turn ended between: it was interrupted, not waited for.
    let ops = fleet.ops("bob");
    let received = op_at(&ops, "message_received", 0).unwrap();
    let delivered = op_at(&ops, "messages_delivered", received).unwrap();
    assert!(
        ops[received..delivered]
            .iter()
            .all(|o| o["event"] != "turn_complete"),
        "{ops:?}"
    );
}

#[test]
fn hostile_text_arrives_inert_and_oversize_or_unknown_is_refused() {
    let fleet = fleet_with(&["bob"]);
    let hostile = "title\x1b]0;pwned\x07 end\x1b[201~\rcrash\r\nsafe\u{9b}31m";
    fleet.run(&["send", "bob", hostile]).status(0);
    let doc = wait_delivered(&fleet, "bob", 1);
    let stored = doc["delivered"][0]["text"].as_str().unwrap();
    assert_eq!(stored, "title]0;pwned end[201~\ncrash\nsafe31m");
    let text = screen(&fleet, "bob");
    // The paste ended where phoenix ended it: `crash` was a line of the message, not a word
    // typed to the agent (which would have crashed it).
    assert!(text.contains("title]0;pwned end[201~"), "{text}");
    assert!(!text.contains("crashing as asked"), "{text}");
    assert_eq!(fleet.agent_status("bob")["state"], "running");

    let big = "x".repeat(16 * 1024 + 1);
    fleet
        .run(&["send", "bob", &big])
        .status(1)
        .stderr_has("more than the 16384 a message may have");
    let run = fleet.run(&["send", "bob", &big, "--json"]);
    run.status(1);
    assert!(
        run.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("16385 bytes")
    );
    fleet
        .run(&["send", "nobody", "hi"])
        .status(1)
        .stderr_has("no agent `nobody`");
    fleet
        .run(&["send", "bob", "hi", "--from", "../etc"])
        .status(1)
        .stderr_has("sender name `../etc` is not valid");
    assert_eq!(inbox(&fleet, "bob")["pending"], serde_json::json!([]));
}

#[test]
fn an_agent_sends_through_its_output_and_its_shell() {
    let fleet = fleet_with(&["alice", "bob"]);
    // The tap: `->continuity:send` said by alice, a custom CLI, with its session's marker key
    // (typed apart so its echo is no command).
    let key = fleet.marker_key("alice");
    type_into(
        &fleet,
        "alice",
        &format!("say ->conti{{}}nuity:send#{key} bob <<< lunch\\nat noon >>>"),
    );
    let doc = wait_delivered(&fleet, "bob", 1);
    assert_eq!(doc["delivered"][0]["from"], "alice", "{doc}");
    assert_eq!(doc["delivered"][0]["text"], "lunch\nat noon", "{doc}");
    // Bob answers (a turn that ends), and is between turns again.
    type_into(&fleet, "bob", "turn true");
    wait_idle(&fleet, "bob");
    // Its shell: `phoenix send` with the environment phoenix gives every agent.
    type_into(
        &fleet,
        "alice",
        &format!("run-turn '{}' send bob 'from my shell'", support::PHOENIX),
    );
    wait_until_explained(
        WAIT,
        "alice's turn done",
        || screen(&fleet, "alice").contains("turn done"),
        || explain(&fleet, "alice"),
    );
    let doc = wait_delivered(&fleet, "bob", 2);
    assert_eq!(doc["delivered"][1]["from"], "alice", "{doc}");
    assert_eq!(doc["delivered"][1]["text"], "from my shell", "{doc}");
    fleet
        .run(&["inbox", "bob"])
        .status(0)
        .stdout_has("agent `bob`: 0 pending, 2 delivered")
        .stdout_has("from alice");
}

#[test]
fn the_api_takes_a_message_with_the_rules_of_every_action() {
    let fleet = fleet_with(&["bob"]);
    let token = "tok-0123456789abcdef-secret";
    let server = support::serve::Server::start(&fleet, &[("PHOENIX_TOKEN", token)]);
    let body = serde_json::json!({"text": "from the dashboard", "from": "ops"});
    let (code, _) = server.post_as("/api/agents/bob/messages", &body, None);
    assert_eq!(code, 401, "an action needs the token");
    assert_eq!(inbox(&fleet, "bob")["pending"], serde_json::json!([]));
    let (code, message) = server.post_as("/api/agents/bob/messages", &body, Some(token));
    assert_eq!(code, 201, "{message}");
    assert_eq!(message["from"], "ops");
    let doc = wait_delivered(&fleet, "bob", 1);
    assert_eq!(doc["delivered"][0]["id"], message["id"], "{doc}");
    let (code, listed) = server.get("/api/agents/bob/messages");
    assert_eq!(code, 200);
    assert_eq!(listed["delivered"][0]["text"], "from the dashboard");

    let big = serde_json::json!({"text": "x".repeat(16 * 1024 + 1)});
    let (code, err) = server.post_as("/api/agents/bob/messages", &big, Some(token));
    assert_eq!(code, 400, "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("16385 bytes"),
        "{err}"
    );
    let (code, _) = server.post_as(
        "/api/agents/nobody/messages",
        &serde_json::json!({"text": "hi"}),
        Some(token),
    );
    assert_eq!(code, 404);
    let (_, doc) = server.get("/openapi.json");
    assert!(doc["paths"]["/api/agents/{agent}/messages"]["post"].is_object());
}

/// A custom REPL without hooks and without echo, whose last screen line is `> ` before and
/// after Enter: one that prints its prompt again on a line of its own (`newline`), and one that
/// redraws it in place, so the screen after Enter is the screen before (`in-place`). Each
/// line it takes goes to `taken.log` in its workdir.
fn repl_fleet() -> Fleet {
    let fleet = Fleet::new();
    let script = fleet.path().join("repl.sh");
    std::fs::write(
        &script,
        "stty -echo 2>/dev/null\n\
         printf 'repl ready\\n> '\n\
         while IFS= read -r line; do\n\
           printf '%s\\n' \"$line\" >> \"taken-$1.log\"\n\
           if [ \"$1\" = newline ]; then printf '\\n> '; else printf '\\r\\033[K> '; fi\n\
         done\n",
    )
    .unwrap();
    let mut toml = String::from(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"10s\"\n\n",
    );
    for kind in ["newline", "in-place"] {
        toml.push_str(&format!(
            "[[agent]]\nname = \"{kind}\"\ncli = \"custom\"\nworkdir = \"{}\"\n\
             command = \"sh {} {kind}\"\n",
            fleet.path().display(),
            script.display()
        ));
    }
    fleet.toml(&toml);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["newline", "in-place"]);
    for kind in ["newline", "in-place"] {
        support::wait_for_screen(&fleet, &pane(&fleet, kind), "repl ready", WAIT);
        wait_until_explained(
            WAIT,
            "the REPL shows life",
            || fleet.ops(kind).iter().any(|o| o["event"] == "agent_alive"),
            || explain(&fleet, kind),
        );
    }
    // A CLI without hooks is given its startup context a few seconds after it shows life:
    // past that, a message comes only as a block of its own.
    std::thread::sleep(Duration::from_secs(4));
    fleet
}

/// A message block is typed once, whatever the screen shows after Enter: a REPL whose last
/// line reads `> ` before and after got each block two or three times (the unchanged line
/// read as a swallowed Enter, the failed delivery pasted the block again at the next try).
#[test]
fn a_repl_whose_prompt_looks_the_same_after_enter_gets_each_block_once() {
    let fleet = repl_fleet();
    for kind in ["newline", "in-place"] {
        fleet
            .run(&[
                "send",
                kind,
                "please review src/parse.rs",
                "--from",
                "alice",
            ])
            .status(0);
    }
    for kind in ["newline", "in-place"] {
        let doc = wait_delivered(&fleet, kind, 1);
        assert_eq!(doc["pending"], serde_json::json!([]), "{doc}");
        let how = doc["delivered"][0]["confirmed_by"]
            .as_str()
            .unwrap()
            .to_string();
        let expected = if kind == "newline" {
            "screen changed"
        } else {
            "typed, unconfirmed"
        };
        assert_eq!(how, expected, "{kind}: {doc}");
    }
    // Longer than a delivery's Enter presses and its retry after a failure take.
    std::thread::sleep(Duration::from_secs(12));
    for kind in ["newline", "in-place"] {
        let taken = std::fs::read_to_string(fleet.path().join(format!("taken-{kind}.log")))
            .unwrap_or_default();
        let blocks = taken.matches("please review src/parse.rs").count();
        assert_eq!(
            blocks,
            1,
            "{kind} took the block {blocks} times:\n{taken}\n{}",
            explain(&fleet, kind)
        );
        let headers = taken.matches("--- from alice at ").count();
        assert_eq!(headers, 1, "{kind}:\n{taken}");
    }
    // The REPL that moved on after Enter got one Enter: no empty line submitted after it.
    let taken = std::fs::read_to_string(fleet.path().join("taken-newline.log")).unwrap();
    assert!(!taken.ends_with("\n\n"), "{taken:?}");
    // The one it never showed is recorded as typed, not confirmed, once.
    let failed: Vec<Value> = fleet
        .ops("in-place")
        .into_iter()
        .filter(|o| o["event"] == "messages_delivery_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["typed"], true, "{failed:?}");
}

/// A sandboxed agent gets messages (typed into its pane from outside) and sends them through
/// its output (read by the tap, outside): neither needs anything inside its sandbox.
#[test]
fn a_sandboxed_agent_gets_messages_and_sends_them_through_its_output() {
    if !std::path::Path::new("/usr/bin/bwrap").exists() {
        eprintln!("skipped: bubblewrap (bwrap) is not installed");
        return;
    }
    let fleet = Fleet::new();
    let mut toml = String::from(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"10s\"\n\n[sandbox.box]\n\n",
    );
    for (name, sandbox) in [("alice", "sandbox = \"box\"\n"), ("bob", "")] {
        toml.push_str(&format!(
            "[[agent]]\nname = \"{name}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\
             resume_command = \"phoenix demo-agent --interval 1h --resume {{session_id}}\"\n{sandbox}"
        ));
    }
    fleet.toml(&toml);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alice", "bob"]);
    wait_idle(&fleet, "alice");
    wait_idle(&fleet, "bob");
    assert!(
        fleet
            .ops("alice")
            .iter()
            .any(|o| o["event"] == "sandbox_entered"),
        "{}",
        explain(&fleet, "alice")
    );
    fleet
        .run(&["send", "alice", "hello in there", "--from", "bob"])
        .status(0);
    let doc = wait_delivered(&fleet, "alice", 1);
    assert_eq!(doc["delivered"][0]["text"], "hello in there", "{doc}");
    assert!(screen(&fleet, "alice").contains("hello in there"));
    let key = fleet.marker_key("alice");
    type_into(
        &fleet,
        "alice",
        &format!("say ->conti{{}}nuity:send#{key} bob <<< from the sandbox >>>"),
    );
    let doc = wait_delivered(&fleet, "bob", 1);
    assert_eq!(doc["delivered"][0]["from"], "alice", "{doc}");
    assert_eq!(doc["delivered"][0]["text"], "from the sandbox", "{doc}");
}

/// An agent sends as itself: `--from` naming someone else is refused under its wrapper, and
/// unsetting `PHOENIX_AGENT` does not make its message the operator's.
#[test]
fn an_agent_cannot_send_in_another_name() {
    let fleet = Fleet::new();
    let forged = fleet.path().join("forged.out");
    let plain = fleet.path().join("plain.out");
    let script = fleet.path().join("send.sh");
    std::fs::write(
        &script,
        format!(
            "'{phoenix}' --config \"$PHOENIX_CONFIG\" send worker forged --from operator > '{forged}' 2>&1; echo \"rc=$?\" >> '{forged}'\n\
             env -u PHOENIX_AGENT '{phoenix}' --config \"$PHOENIX_CONFIG\" send worker plain > '{plain}' 2>&1; echo \"rc=$?\" >> '{plain}'\n\
             exec sleep 1000\n",
            phoenix = crate::support::PHOENIX,
            forged = forged.display(),
            plain = plain.display(),
        ),
    )
    .unwrap();
    fleet.toml(&format!(
        "[[agent]]\nname = \"lead\"\ncommand = \"sh {}\"\n\n{}",
        script.display(),
        Fleet::demo_agent("worker", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    crate::support::wait_until(std::time::Duration::from_secs(30), "both sends", || {
        std::fs::read_to_string(&plain).is_ok_and(|t| t.contains("rc="))
    });
    let refused = std::fs::read_to_string(&forged).unwrap();
    assert!(
        refused.contains("rc=1") && refused.contains("an agent sends as itself"),
        "{refused}"
    );
    let sent = std::fs::read_to_string(&plain).unwrap();
    assert!(
        sent.contains("rc=0") && sent.contains("from `lead`"),
        "{sent}"
    );
    // Pending, or already taken by the worker's session.
    assert_eq!(
        crate::mcp::inbox_texts(&fleet, "worker"),
        [("lead".to_string(), "plain".to_string())]
    );
    // The operator's own terminal still names a sender.
    fleet
        .run(&["send", "worker", "relayed", "--from", "ci"])
        .status(0)
        .stdout_has("from `ci`");
    fleet.run(&["down"]).status(0);
}
