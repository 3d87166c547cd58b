//! One routing path: every subcommand of the CLI definition that takes an agent, run by the
//! operator against an agent of a host (a real sshd on loopback, a real phoenix and tmux
//! there), reaches that agent; a subcommand added later without a case here fails the walk.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::CommandFactory;
use phoenix::cli::Cli;

use crate::support::hosts::{Host, HostedFleet};
use crate::support::{Run, wait_until};

const WITHIN: Duration = Duration::from_secs(120);
/// In a case's arguments: the id of the handoff `handoff save` made on the host.
const HANDOFF: &str = "{handoff}";

/// Every subcommand (its path, `loop add`) with an argument naming an agent: id `agent` or
/// `agents`, or value name `AGENT`.
fn taking_an_agent(command: &clap::Command, path: &str, found: &mut BTreeSet<String>) {
    for sub in command.get_subcommands() {
        let path = format!("{path} {}", sub.get_name()).trim().to_string();
        let names_agent = sub.get_arguments().any(|a| {
            matches!(a.get_id().as_str(), "agent" | "agents")
                || a.get_value_names()
                    .is_some_and(|v| v.iter().any(|n| n.as_str() == "AGENT"))
        });
        if names_agent {
            found.insert(path.clone());
        }
        taking_an_agent(sub, &path, found);
    }
}

/// How a subcommand's case is checked: what the operator's phoenix printed, and the host.
type Check = Box<dyn Fn(&Run, &Host)>;

enum Case {
    /// Run on the operator's machine; `stdin` given; `check`ed.
    Run {
        args: Vec<String>,
        stdin: Vec<u8>,
        check: Check,
    },
    /// `--follow`: runs until interrupted; its first lines are checked.
    Follow { args: Vec<String>, shows: String },
    /// Not an operator's command about an agent of another machine, and why.
    Not(&'static str),
}

fn run(args: &[&str], check: impl Fn(&Run, &Host) + 'static) -> Case {
    Case::Run {
        args: args.iter().map(|a| a.to_string()).collect(),
        stdin: Vec::new(),
        check: Box::new(check),
    }
}

fn has(run: &Run, needle: &str) {
    let all = format!("{}{}", run.stdout(), run.stderr());
    assert!(
        all.contains(needle),
        "phoenix {:?} did not say {needle:?}:\n--- stdout\n{}\n--- stderr\n{}",
        run.args,
        run.stdout(),
        run.stderr()
    );
}

/// The id of `far`'s newest handoff on `host` (empty: none yet).
fn newest_handoff(host: &Host) -> String {
    let dir = host.agent_dir("far").join("handoffs");
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| Some(e.path().file_stem()?.to_str()?.to_string()))
        .collect();
    ids.sort();
    ids.pop().unwrap_or_default()
}

#[test]
fn every_subcommand_that_takes_an_agent_reaches_an_agent_of_a_host() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&format!(
        "{}\n{}",
        HostedFleet::demo_agent("here", None),
        HostedFleet::demo_agent("far", Some("gpu-1"))
    ));
    net.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(30), "far runs on gpu-1", || {
        net.host("gpu-1")
            .status()
            .iter()
            .any(|r| r["agent"] == "far" && r["state"] == "running")
    });
    let body = net.fleet.path().join("handoff.txt");
    std::fs::write(
        &body,
        "Current task: routed-task\nCompleted: nothing\nNext: routed-next\n",
    )
    .unwrap();
    let output = net.fleet.path().join("output.txt");
    std::fs::write(
        &output,
        "Error: prompt is too long: 210000 tokens > 200000 maximum (context_length_exceeded)\n",
    )
    .unwrap();
    let body = body.display().to_string();
    let output = output.display().to_string();
    let on_host = |host: &Host| host.agent_dir("far").display().to_string();

    // In the order run: what one case writes, the next one reads.
    let cases: Vec<(&str, Case)> = vec![
        (
            "status",
            run(&["status", "far"], |r, h| {
                assert!(matches!(r.code(), Some(0 | 3)), "{}", r.stderr());
                // As the host describes it: its workdir there.
                has(r, "Agent:          far");
                has(r, &format!("Workdir:        {}", h.dir.display()));
            }),
        ),
        (
            "usage",
            run(&["usage", "far", "--json"], |r, _| {
                r.status(0);
                has(r, "far");
            }),
        ),
        (
            "apply",
            run(&["apply", "--yes", "far"], |r, _| {
                r.status(0);
            }),
        ),
        (
            "hooks show",
            run(&["hooks", "show", "--agent", "far"], |r, _| {
                r.status(0);
                has(r, "agent `far` uses cli `custom`");
            }),
        ),
        (
            "loop add",
            run(
                &["loop", "add", "far", "routed-loop", "a", "loop"],
                |r, h| {
                    r.status(0);
                    has(r, "added loop `routed-loop` to agent `far`");
                    let state = std::fs::read_to_string(h.agent_dir("far").join("state.json"))
                        .unwrap_or_default();
                    assert!(state.contains("routed-loop"), "{state}");
                },
            ),
        ),
        (
            "loop list",
            run(&["loop", "list", "far", "--json"], |r, _| {
                r.status(0);
                has(r, "routed-loop");
            }),
        ),
        (
            "resolve",
            run(
                &["resolve", "far", "routed-loop", "done", "here"],
                |r, h| {
                    r.status(0);
                    let resolved =
                        std::fs::read_to_string(h.agent_dir("far").join("resolved.jsonl"))
                            .unwrap_or_default();
                    assert!(resolved.contains("routed-loop"), "{resolved}");
                },
            ),
        ),
        (
            "state show",
            run(&["state", "show", "far", "--json"], |r, _| {
                r.status(0);
                has(r, "\"agent\"");
            }),
        ),
        (
            "handoff save",
            run(&["handoff", "save", "far", "--file", &body], move |r, h| {
                r.status(0);
                // Saved there, from the file read here.
                has(r, &on_host(h));
                let dir = h.agent_dir("far").join("handoffs");
                let saved: String = std::fs::read_dir(&dir)
                    .unwrap()
                    .flatten()
                    .filter(|e| e.path().is_file())
                    .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                    .collect();
                assert!(saved.contains("routed-task"), "{saved}");
            }),
        ),
        (
            "handoff list",
            run(&["handoff", "list", "far"], |r, _| {
                r.status(0);
                has(r, "far");
            }),
        ),
        (
            "handoff show",
            run(&["handoff", "show", "--agent", "far", HANDOFF], |r, _| {
                r.status(0);
                has(r, "routed-next");
            }),
        ),
        (
            "handoff search",
            run(
                &["handoff", "search", "--agent", "far", "routed", "--json"],
                |r, _| {
                    r.status(0);
                    has(r, "routed");
                },
            ),
        ),
        (
            "handoff inject",
            run(&["handoff", "inject", "far"], |r, _| {
                // The demo agent prints all the time: the host may find its pane busy.
                if r.code() != Some(0) {
                    has(r, "the agent is busy");
                }
            }),
        ),
        (
            "ledger",
            run(&["ledger", "far", "--json"], |r, _| {
                r.status(0);
                has(r, "routed-task");
            }),
        ),
        (
            "brief",
            run(&["brief", "far"], |r, _| {
                r.status(0);
                has(r, "agent `far` has no brief yet");
            }),
        ),
        (
            "send",
            Case::Run {
                args: ["send", "far", "-"].map(String::from).to_vec(),
                stdin: b"routed message from stdin".to_vec(),
                check: Box::new(|r, h| {
                    r.status(0);
                    has(r, "from `operator`");
                    let inbox = std::fs::read_to_string(h.agent_dir("far").join("inbox.jsonl"))
                        .unwrap_or_default();
                    assert!(inbox.contains("routed message from stdin"), "{inbox}");
                }),
            },
        ),
        (
            "inbox",
            run(&["inbox", "far", "--json"], |r, _| {
                r.status(0);
                has(r, "routed message from stdin");
            }),
        ),
        (
            "wait",
            // `far` runs there: the wait times out there (here it is not running, and
            // `--until exit` would be reached at once).
            run(
                &[
                    "wait",
                    "far",
                    "--until",
                    "exit",
                    "--timeout",
                    "1s",
                    "--json",
                ],
                |r, _| {
                    r.status(124);
                    has(r, "\"how\": \"timed out\"");
                },
            ),
        ),
        (
            "clinic",
            run(
                &["clinic", "far", "--dry-run", "--json", "--output", &output],
                |r, _| {
                    r.status(0);
                    has(r, "context_length_exceeded");
                },
            ),
        ),
        (
            "sandbox show",
            run(&["sandbox", "show", "far"], |r, _| {
                // The host's answer: `far` has no sandbox there.
                has(r, "agent `far` has no sandbox");
            }),
        ),
        (
            "events",
            run(&["events", "--agent", "far", "--all", "--json"], |r, _| {
                r.status(0);
                has(r, "far");
            }),
        ),
        (
            "exec",
            run(
                &["exec", "far", "--", "printenv", "PHOENIX_STATE_DIR"],
                move |r, h| {
                    r.status(0);
                    has(r, &on_host(h));
                },
            ),
        ),
        (
            "logs",
            Case::Follow {
                args: ["logs", "--follow", "-n", "5", "far"]
                    .map(String::from)
                    .to_vec(),
                shows: "working: step".into(),
            },
        ),
        (
            "attach",
            run(&["attach", "far"], |r, _| {
                // No terminal here: the host's tmux says so, about its pane of `far`.
                has(r, "open terminal failed: not a terminal");
                has(r, "of agent `far`");
            }),
        ),
        (
            "handoff clear",
            run(&["handoff", "clear", "far", "--yes"], |r, _| {
                r.status(0);
            }),
        ),
        (
            "restart",
            run(&["restart", "far"], |r, _| {
                r.status(0);
                has(r, "agent `far` on gpu-1");
            }),
        ),
        (
            "stop",
            run(&["stop", "far"], |r, _| {
                r.status(0);
                has(r, "agent `far` on gpu-1");
            }),
        ),
        (
            "start",
            run(&["start", "far"], |r, _| {
                r.status(0);
                has(r, "agent `far` on gpu-1");
            }),
        ),
        (
            "notify test",
            run(&["notify", "test", "--agent", "far"], |r, h| {
                // The host's channels, from its slice (none here): it says so.
                has(r, &h.config().display().to_string());
            }),
        ),
        (
            "demo-agent",
            Case::Not("the stand-in agent CLI, run in the agent's pane"),
        ),
        (
            "move",
            Case::Not("changes an agent's host itself (tests/it/hosts_move.rs)"),
        ),
        (
            "wrap",
            Case::Not("run in the agent's pane by its own machine's phoenix"),
        ),
        (
            "tap",
            Case::Not("run in the agent's pane by its own machine's phoenix"),
        ),
        (
            "hook",
            Case::Not("run by the agent's CLI on its own machine"),
        ),
    ];

    // Every subcommand taking an agent has a case, and every case is such a subcommand.
    let mut walked = BTreeSet::new();
    taking_an_agent(&Cli::command(), "", &mut walked);
    let listed: BTreeSet<String> = cases.iter().map(|(p, _)| p.to_string()).collect();
    let missing: Vec<&String> = walked.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "subcommands that take an agent with no case here (add one): {missing:?}"
    );
    let stale: Vec<&String> = listed.difference(&walked).collect();
    assert!(stale.is_empty(), "cases of no such subcommand: {stale:?}");

    let host = net.host("gpu-1");
    for (path, case) in cases {
        match case {
            Case::Run { args, stdin, check } => {
                let handoff = newest_handoff(host);
                let args: Vec<&str> = args
                    .iter()
                    .map(|a| if a == HANDOFF { handoff.as_str() } else { a })
                    .collect();
                let ran = net.fleet.run_within_input(&args, &stdin, WITHIN);
                for unknown in ["no agent `far`", "not declared"] {
                    assert!(
                        !ran.stderr().contains(unknown),
                        "`{path}` did not reach the host:\n{}",
                        ran.stderr()
                    );
                }
                check(&ran, host);
            }
            Case::Follow { args, shows } => {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let seen = net.fleet.path().join("follow.out");
                let said = net.fleet.path().join("follow.err");
                let mut child = net
                    .fleet
                    .command(&args)
                    .stdout(std::fs::File::create(&seen).unwrap())
                    .stderr(std::fs::File::create(&said).unwrap())
                    .spawn()
                    .unwrap();
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
                while !read(&seen).contains(&shows) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = child.kill();
                let _ = child.wait();
                assert!(
                    read(&seen).contains(&shows),
                    "`{path}` showed no {shows:?}:\n--- stdout\n{}\n--- stderr\n{}",
                    read(&seen),
                    read(&said)
                );
            }
            Case::Not(why) => assert!(!why.is_empty()),
        }
    }

    // The MCP tool is the same wait, run there: it sees `far` come back from a restart.
    let mut mcp = crate::mcp::Client::start(&net.fleet, None);
    mcp.initialize(false);
    let id = mcp.send(
        "tools/call",
        serde_json::json!({"name": "wait_for", "arguments":
            {"agent": "far", "until": "revival", "timeout_seconds": 60}}),
    );
    // The host is this machine: its `phoenix wait` is a process here.
    let waiting_there = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|p| {
                std::fs::read(p.path().join("cmdline"))
                    .is_ok_and(|c| c.windows(19).any(|w| w == b"far\0--until\0revival"))
            })
    };
    wait_until(
        Duration::from_secs(30),
        "the wait running on gpu-1",
        waiting_there,
    );
    // It reads where the ops log ends as it starts.
    std::thread::sleep(Duration::from_millis(500));
    net.fleet.run_within(&["restart", "far"], WITHIN).status(0);
    let answer = mcp.response(id, Duration::from_secs(90));
    let result = &answer["result"]["structuredContent"];
    assert_eq!(result["reached"], true, "{answer}");
    assert_eq!(result["how"], "agent_start", "{answer}");
    assert_eq!(result["host"], "gpu-1", "{answer}");
}

#[test]
fn what_a_host_is_sent_is_the_command_typed_with_what_it_reads_here_and_nothing_for_a_shell() {
    let Some(mut net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&format!(
        "{}\n{}",
        HostedFleet::demo_agent("here", None),
        HostedFleet::demo_agent("far", Some("gpu-1"))
    ));
    net.run(&["apply", "--yes"]).status(0);
    let host = net.host("gpu-1");

    // Words for the remote shell arrive as typed: nothing is expanded, nothing runs.
    let ran = net.fleet.run_within(
        &[
            "exec",
            "far",
            "--",
            "printf",
            "%s|",
            "a b",
            "$(touch pwned)",
            ";",
            "*",
            "~/x",
        ],
        WITHIN,
    );
    ran.status(0);
    has(&ran, "a b|$(touch pwned)|;|*|~/x|");
    assert!(!host.dir.join("pwned").exists());
    assert!(!net.fleet.path().join("pwned").exists());

    // A handoff's body on this machine's stdin is saved there.
    net.fleet
        .run_within_input(
            &["handoff", "save", "far"],
            b"Current task: typed-here\nNext: saved-there\n",
            WITHIN,
        )
        .status(0);
    let handoff = newest_handoff(host);
    net.run(&["--no-color", "handoff", "show", "--agent", "far", &handoff])
        .status(0)
        .stdout_has("saved-there");

    // Agents of two machines in a command that does not span them: said, nothing run.
    net.run(&["logs", "here", "far"])
        .status(1)
        .stderr_has("are on different machines");
    // A name declared nowhere is said as on one machine, with what was meant.
    net.run(&["logs", "fra", "far"])
        .status(1)
        .stderr_has("no agent `fra`");
    // This machine's agent is still this machine's.
    net.run(&["loop", "add", "here", "k", "local", "loop"])
        .status(0);
    let state =
        std::fs::read_to_string(net.fleet.state_dir().join("agents/here/state.json")).unwrap();
    assert!(state.contains("\"k\""), "{state}");

    // The host gone: the command says so, in JSON when asked, and fails.
    net.host_mut("gpu-1").sshd.stop();
    crate::hosts_reads::close_shared_connection(&net, "gpu-1");
    let ran = net.fleet.run_within(&["ledger", "far", "--json"], WITHIN);
    ran.status(1);
    let doc = ran.json();
    assert_eq!(doc["ok"], false, "{doc}");
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("host `gpu-1` is unreachable"), "{doc}");
}
