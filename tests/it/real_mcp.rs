//! phoenix's MCP server inside the real CLIs: the server entry `apply` wrote into each CLI's own
//! config, started by the CLI itself, called by the model (the scripted model server) as one of
//! its tools. The other agent is a demo agent whose turns the test drives. Runs only with
//! `PHOENIX_TEST_REAL_CLIS=1`, like real_cli.rs and real_codex.rs.

use crate::mcp::inbox_texts;
use crate::real_cli::{claude_agent, claude_bin, prepared_home, type_prompt};
use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Turn};
use support::wait_until;

const WAIT: Duration = Duration::from_secs(60);

/// A demo agent `worker` that does nothing until told (`run-turn CMD` is one turn).
fn worker() -> String {
    "[[agent]]\nname = \"worker\"\ncommand = \"phoenix demo-agent --interval 1h\"\n".to_string()
}

/// A forged `from`: the model says it is the worker itself.
fn forged_send(text: &str) -> Value {
    json!({"agent": "worker", "text": text, "from": "worker"})
}

/// Type `line` into the worker's pane (`run-turn CMD` is one turn); its pane.
fn type_into_worker(fleet: &support::Fleet, line: &str) -> String {
    let pane = fleet.agent_status("worker")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    fleet.tmux(&["send-keys", "-t", &pane, "-l", line]).unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
    pane
}

/// Start a turn of the worker that lasts until `gate` exists.
fn busy_worker(fleet: &support::Fleet, gate: &Path) {
    let cmd = format!(
        "run-turn while [ ! -e '{}' ]; do sleep 0.2; done",
        gate.display()
    );
    let pane = type_into_worker(fleet, &cmd);
    support::wait_for_screen(fleet, &pane, "demo-agent: turn running", WAIT);
}

/// `(from, text)` of each message of an inbox.
type Messages = Vec<(String, String)>;

/// The worker's inbox: `(pending, delivered)`.
fn worker_inbox(fleet: &support::Fleet) -> (Messages, Messages) {
    let doc = fleet.run(&["inbox", "worker", "--json"]).status(0).json();
    let of = |k: &str| -> Messages {
        doc[k]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["from"].as_str().unwrap_or_default().to_string(),
                    m["text"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    (of("pending"), of("delivered"))
}

/// The tool results Claude Code sent back to the model, as text.
fn claude_tool_results(server: &ModelServer) -> String {
    server
        .message_requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["type"] == "tool_result")
        .map(|c| c["content"].to_string())
        .collect()
}

/// Does any request the model got hold `needle`?
fn model_saw(server: &ModelServer, needle: &str) -> bool {
    server
        .message_requests()
        .iter()
        .any(|r| r.text().contains(needle))
}

/// Claude Code's model calls `mcp__phoenix__send_message` for the busy worker, saying it is
/// the worker: the message waits in the worker's inbox, signed `cc` (phoenix knows its caller
/// from the wrapper Claude Code runs under, not from the arguments), until the worker's turn
/// ends; and `mcp__phoenix__wait_for` that turn end answers once it ends.
#[test]
fn real_claude_sends_through_phoenixs_mcp_server_as_itself_and_waits_for_the_turn_end() {
    if !crate::real_cli::enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![
        // Claude Code defers MCP tools behind its tool search: the model loads them first.
        Turn::ToolUse {
            name: "ToolSearch".into(),
            input: json!({"query": "select:mcp__phoenix__send_message,mcp__phoenix__wait_for",
                          "max_results": 5}),
        },
        Turn::ToolUse {
            name: "mcp__phoenix__send_message".into(),
            input: forged_send("please rebase onto main"),
        },
        Turn::ToolUse {
            name: "mcp__phoenix__wait_for".into(),
            input: json!({"agent": "worker", "until": "turn_end", "timeout_seconds": 120}),
        },
        Turn::text("The worker finished its turn."),
    ]);
    fleet.toml(&format!(
        "{}\n{}",
        claude_agent("cc", &bin, &home, &server, key),
        worker()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let mcp_json = std::fs::read_to_string(work.join(".mcp.json")).unwrap();
    assert!(mcp_json.contains("\"phoenix\""), "{mcp_json}");
    fleet.wait_running(&["cc", "worker"]);
    let gate = fleet.path().join("worker-turn-may-end");
    busy_worker(&fleet, &gate);

    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "tell the worker to rebase, then wait for it");
    // The model is offered phoenix's tools, under the names Claude Code gives MCP tools.
    wait_until(WAIT, "a turn request", || {
        !crate::real_cli::turn_requests(&server).is_empty()
    });
    let first = crate::real_cli::turn_requests(&server)[0].text();
    assert!(first.contains("mcp__phoenix__send_message"), "{first}");

    wait_until(WAIT, "the message in the worker's inbox", || {
        let (pending, delivered) = worker_inbox(&fleet);
        !pending.is_empty() || !delivered.is_empty()
    });
    // Signed by phoenix as the caller; the forged `from` was ignored, and the model told so.
    let (pending, delivered) = worker_inbox(&fleet);
    assert_eq!(
        pending,
        [("cc".to_string(), "please rebase onto main".to_string())]
    );
    assert!(delivered.is_empty(), "not while the worker is busy");
    wait_until(WAIT, "the send_message result back at the model", || {
        claude_tool_results(&server).contains("ignored_arguments")
    });
    let results = claude_tool_results(&server);
    assert!(results.contains(r#"\"from\":\"cc\""#), "{results}");
    // Claude Code runs `wait_for` as an MCP task (it declares the tasks extension): the model
    // is told the task runs in the background, and it goes on until the worker's turn ends.
    wait_until(WAIT, "the wait_for task started", || {
        claude_tool_results(&server).contains("started server-side task")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !model_saw(&server, "(phoenix/wait_for) completed"),
        "the wait ended before the turn did"
    );
    assert_eq!(worker_inbox(&fleet).1, [], "not while the worker is busy");

    std::fs::write(&gate, "").unwrap();
    // At the worker's turn boundary the message is given to it, as its next prompt.
    wait_until(WAIT, "the message delivered", || {
        worker_inbox(&fleet).1 == [("cc".to_string(), "please rebase onto main".to_string())]
    });
    let worker_pane = fleet.agent_status("worker")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &worker_pane, "please rebase onto main", WAIT);
    assert!(
        inbox_texts(&fleet, "worker")
            .iter()
            .all(|(from, _)| from == "cc")
    );
    // And the wait answered: reached at the turn's end.
    wait_until(WAIT, "the wait_for result back at the model", || {
        model_saw(&server, "(phoenix/wait_for) completed")
    });
    // The task's result reaches the model in a task notification: reached, at the turn end.
    let notified = crate::real_cli::turn_requests(&server)
        .iter()
        .map(|r| r.text())
        .find(|t| t.contains("(phoenix/wait_for) completed"))
        .unwrap();
    assert!(
        notified.contains(r#"\"reached\":true,\"how\":\"turn_complete\""#),
        "{notified}"
    );
    support::wait_for_screen(&fleet, &pane, "The worker finished its turn.", WAIT);
    // Both calls are the agent's own, in its ops log; none is the operator's.
    let calls: Vec<String> = fleet
        .ops("cc")
        .iter()
        .filter(|o| o["event"] == "mcp_call")
        .map(|o| format!("{} {}", o["tool"], o["ok"]))
        .collect();
    assert_eq!(
        calls,
        ["\"send_message\" true", "\"wait_for\" true"],
        "{calls:?}"
    );
    assert!(!fleet.state_dir().join("mcp_operator.jsonl").exists());
}

/// Real Claude Code waits on the worker through `mcp__phoenix__wait_for` (an MCP task), and the
/// worker is killed -9 and resumed meanwhile: the wait goes on across the kill and the resume
/// (neither is a turn end) and completes at the resumed session's first turn end.
#[test]
fn real_claudes_wait_for_goes_on_across_the_workers_kill_9_and_resume() {
    if !crate::real_cli::enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![
        Turn::ToolUse {
            name: "ToolSearch".into(),
            input: json!({"query": "select:mcp__phoenix__wait_for", "max_results": 5}),
        },
        Turn::ToolUse {
            name: "mcp__phoenix__wait_for".into(),
            input: json!({"agent": "worker", "until": "turn_end", "timeout_seconds": 120}),
        },
        Turn::text("The worker finished its turn."),
    ]);
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"10s\"\n\n\
         {}\n[[agent]]\nname = \"worker\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 1h\"\n\
         resume_command = \"phoenix demo-agent --interval 1h --resume {{session_id}}\"\n",
        claude_agent("cc", &bin, &home, &server, key),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["cc", "worker"])[1];
    // One turn first: a session that took a prompt is one phoenix resumes.
    let run_turn = |fleet: &support::Fleet| {
        type_into_worker(fleet, "run-turn true");
    };
    let turns = |fleet: &support::Fleet| {
        fleet
            .ops("worker")
            .iter()
            .filter(|o| o["event"] == "turn_complete")
            .count()
    };
    run_turn(&fleet);
    wait_until(WAIT, "the worker's first turn", || turns(&fleet) == 1);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    type_prompt(&fleet, &pane, "wait for the worker's turn");
    wait_until(WAIT, "the wait_for task started", || {
        claude_tool_results(&server).contains("started server-side task")
    });

    support::kill9(pid);
    // Its wrapper records the new start a moment after the process exists.
    let restart = |fleet: &support::Fleet| {
        fleet.ops("worker").into_iter().rfind(|o| {
            o["event"] == "agent_start" && o["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
        })
    };
    wait_until(WAIT, "the worker started again", || {
        restart(&fleet).is_some()
    });
    wait_until(WAIT, "the worker running again", || {
        fleet.agent_status("worker")["state"] == "running"
    });
    let start = restart(&fleet).unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !model_saw(&server, "(phoenix/wait_for) completed"),
        "a kill and a resume are not a turn end"
    );

    assert_eq!(turns(&fleet), 1);
    run_turn(&fleet);
    wait_until(WAIT, "the wait_for result back at the model", || {
        model_saw(&server, "(phoenix/wait_for) completed")
    });
    let notified = crate::real_cli::turn_requests(&server)
        .iter()
        .map(|r| r.text())
        .find(|t| t.contains("(phoenix/wait_for) completed"))
        .unwrap();
    assert!(
        notified.contains(r#"\"reached\":true,\"how\":\"turn_complete\""#),
        "{notified}"
    );
    support::wait_for_screen(&fleet, &pane, "The worker finished its turn.", WAIT);
}

/// Codex's model calls phoenix's `send_message` for the busy worker, saying it is the worker:
/// Codex started `phoenix mcp` from the `[mcp_servers.phoenix]` that `apply` merged into the
/// project's `.codex/config.toml` (beside the user's own settings), phoenix signs the message
/// `cx` (Codex passes its MCP servers no `PHOENIX_AGENT`: the wrapper says who calls), and the
/// worker gets it at its turn boundary.
#[test]
fn real_codex_sends_through_phoenixs_mcp_server_from_its_project_config_as_itself() {
    use crate::real_codex::{CodexLeftovers, codex_agent, codex_bin, codex_home, tool_output};
    use support::openai_server;
    if !crate::real_codex::enabled() {
        return;
    }
    let bin = codex_bin();
    let fleet = support::Fleet::new();
    let work = crate::real_codex::workdir(&fleet);
    // The user's own project config: it stays as written.
    std::fs::create_dir_all(work.join(".codex")).unwrap();
    let user = "# the team's settings\nmodel_reasoning_effort = \"low\"\n";
    std::fs::write(work.join(".codex/config.toml"), user).unwrap();
    let server = openai_server::start(vec![
        Turn::ToolUse {
            name: "mcp__phoenix__send_message".into(),
            input: forged_send("please rebase onto main"),
        },
        Turn::text("Told the worker."),
    ]);
    let home = codex_home(fleet.path(), &server);
    let _leftovers = CodexLeftovers(home.clone());
    fleet.toml(&format!(
        "{}\n{}",
        codex_agent(&fleet, &bin, &home),
        worker()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let config = std::fs::read_to_string(work.join(".codex/config.toml")).unwrap();
    assert!(config.starts_with(user), "{config}");
    assert!(config.contains("[mcp_servers.phoenix]"), "{config}");
    fleet.wait_running(&["cx", "worker"]);
    let gate = fleet.path().join("worker-turn-may-end");
    busy_worker(&fleet, &gate);

    let pane = fleet.agent_status("cx")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &pane, "for shortcuts", WAIT);
    support::submit(&fleet, &pane, "tell the worker to rebase", WAIT);
    wait_until(WAIT, "a turn request", || {
        !server.turn_requests().is_empty()
    });
    // Offered as Codex offers an MCP server's tools: a namespace `mcp__phoenix`.
    let tools = server.turn_requests()[0].body["tools"].clone();
    let phoenix = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "namespace" && t["name"] == "mcp__phoenix")
        .unwrap_or_else(|| panic!("{tools}"));
    assert!(
        phoenix["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "send_message"),
        "{phoenix}"
    );

    wait_until(WAIT, "the message in the worker's inbox", || {
        let (pending, delivered) = worker_inbox(&fleet);
        !pending.is_empty() || !delivered.is_empty()
    });
    let (pending, delivered) = worker_inbox(&fleet);
    assert_eq!(
        pending,
        [("cx".to_string(), "please rebase onto main".to_string())]
    );
    assert!(delivered.is_empty(), "not while the worker is busy");
    // The model is told who sent it, and that its `from` was ignored.
    wait_until(WAIT, "the tool's result back at the model", || {
        server.turn_requests().len() >= 2
    });
    let output = tool_output(&server.turn_requests()[1]);
    assert!(output.contains("ignored_arguments"), "{output}");
    assert!(output.contains(r#"\"from\":\"cx\""#), "{output}");
    support::wait_for_screen(&fleet, &pane, "Told the worker.", WAIT);

    std::fs::write(&gate, "").unwrap();
    wait_until(WAIT, "the message delivered", || {
        worker_inbox(&fleet).1 == [("cx".to_string(), "please rebase onto main".to_string())]
    });
    // The agent's own call, not the operator's.
    assert!(
        fleet
            .ops("cx")
            .iter()
            .any(|o| o["event"] == "mcp_call" && o["tool"] == "send_message" && o["ok"] == true),
        "{:?}",
        fleet.ops("cx")
    );
    assert!(!fleet.state_dir().join("mcp_operator.jsonl").exists());
}
