//! Fleet-wide reads and actions across hosts: the operator's `status`, `events`, `handoff
//! search`, `logs` and `restart`/`stop`/`start` show and act on every host (real sshd
//! servers on loopback, each with its own phoenix fleet), each row labelled with its host.

use std::time::{Duration, Instant};

use phoenix::hosts::fleet::{self, APPLY_TIMEOUT};
use phoenix::hosts::protocol::Call;
use serde_json::Value;

use crate::support::hosts::HostedFleet;
use crate::support::serve::Server;
use crate::support::{read_jsonl, wait_until};

/// One local agent `here`, `far1` on gpu-1 and `far2` on gpu-2.
pub(crate) fn declared() -> Option<HostedFleet> {
    let net = HostedFleet::start(&["gpu-1", "gpu-2"])?;
    net.toml(&format!(
        "{}\n{}\n{}",
        HostedFleet::demo_agent("here", None),
        HostedFleet::demo_agent("far1", Some("gpu-1")),
        HostedFleet::demo_agent("far2", Some("gpu-2"))
    ));
    Some(net)
}

/// The agents of `hosts` started there: each host's slice applied through the host protocol
/// (as the combined apply will), every host at once; then this machine's agent.
pub(crate) fn start(net: &HostedFleet, hosts: &[&str]) {
    let spec = net.fleet.spec();
    let links: Vec<_> = fleet::links(&spec)
        .into_iter()
        .filter(|l| hosts.contains(&l.name()))
        .collect();
    let replies = fleet::each(&links, |link| {
        let call = Call::Apply {
            dir: link.host.dir.clone(),
            slice: fleet::slice(&spec, link.name()).unwrap(),
            files: Default::default(),
            agents: vec![],
            prune: Default::default(),
        };
        link.ask(call, APPLY_TIMEOUT)
    });
    for reply in replies {
        let reply = reply.unwrap();
        assert_eq!(reply.result["code"], 0, "{}", reply.result);
    }
    net.run(&["apply", "--yes", "here"]).status(0);
    for host in hosts {
        wait_until(Duration::from_secs(30), "the host's agent runs", || {
            net.host(host)
                .status()
                .iter()
                .all(|r| r["state"] == "running")
        });
    }
}

/// A status document without what moves between two reads of it.
fn steady(mut doc: Value) -> Value {
    doc["observed_at"] = Value::Null;
    // `phoenix serve` shares one observation among its readers and says how old it is.
    doc["observed_age_ms"] = Value::Null;
    for a in doc["agents"].as_array_mut().unwrap() {
        for moving in [
            "uptime_secs",
            "last_activity",
            "context",
            "watchdog",
            "health",
            // Demo agents spend tokens between the two reads.
            "usage_today",
        ] {
            a[moving] = Value::Null;
        }
    }
    for h in doc["hosts"].as_array_mut().unwrap() {
        h["observed_at"] = Value::Null;
    }
    doc
}

fn host_entry<'a>(doc: &'a Value, host: &str) -> &'a Value {
    doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == host)
        .unwrap_or_else(|| panic!("no host {host}: {doc}"))
}

/// `ssh -O exit` for the operator's shared connection to `host`, as when a host goes down
/// (the connection dies with it).
pub(crate) fn close_shared_connection(net: &HostedFleet, host: &str) {
    let control = fleet::control_dir(&net.fleet.state_dir());
    let status = std::process::Command::new("ssh")
        .arg("-F")
        .arg(&net.ssh_config)
        .arg("-o")
        .arg(format!("ControlPath={}/%C", control.display()))
        .args(["-O", "exit", &net.host(host).sshd.alias])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "no shared connection to {host}");
}

fn row<'a>(doc: &'a Value, agent: &str) -> &'a Value {
    doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == agent)
        .unwrap_or_else(|| panic!("no row for {agent}: {doc}"))
}

#[test]
fn status_events_logs_and_search_show_every_host_with_rows_labelled() {
    let Some(net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);

    let table = net.run(&["status"]);
    table.status(0);
    let text = table.stdout();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("HOST "), "{text}");
    for (host, agent) in [("(local)", "here"), ("gpu-1", "far1"), ("gpu-2", "far2")] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(host) && l.contains(agent) && l.contains("running")),
            "{text}"
        );
    }
    assert!(text.contains("host `gpu-1`:"), "{text}");

    // Warm (the shared connections are up): the whole fleet's status, the best of three.
    let mut doc = Value::Null;
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let warm = Instant::now();
        doc = net.run(&["status", "--json"]).status(0).json();
        best = best.min(warm.elapsed());
    }
    eprintln!("warm `status --json` across 2 hosts and this machine: {best:?}");
    assert_eq!(row(&doc, "here")["host"], Value::Null);
    assert_eq!(row(&doc, "far1")["host"], "gpu-1");
    assert_eq!(row(&doc, "far2")["host"], "gpu-2");
    assert_eq!(row(&doc, "far2")["state"], "running");
    assert!(row(&doc, "far1")["pid"].as_u64().is_some(), "{doc}");
    let hosts = doc["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{doc}");
    assert!(hosts.iter().all(|h| h["reachable"] == true), "{doc}");

    // The API's status is the same merged document.
    let server = Server::start(&net.fleet, &[]);
    let (code, api) = server.get("/api/status");
    assert_eq!(code, 200, "{api}");
    let cli = net.run(&["status", "--json"]).status(0).json();
    assert_eq!(steady(api), steady(cli));
    drop(server);

    // One agent of a host: as its host describes it.
    net.run(&["status", "far1"])
        .status(0)
        .stdout_has("gpu-1")
        .stdout_has("Agent:          far1");
    let one = net.run(&["status", "far2", "--json"]).status(0).json();
    assert_eq!(one["agents"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(row(&one, "far2")["host"], "gpu-2");

    // Every step of every agent, one timeline, each with its host.
    let events = net.run(&["events", "--all", "--json"]).status(0).json();
    let events = events["events"].as_array().unwrap().clone();
    for (host, agent) in [
        (Value::Null, "here"),
        ("gpu-1".into(), "far1"),
        ("gpu-2".into(), "far2"),
    ] {
        assert!(
            events
                .iter()
                .any(|e| e["agent"] == agent && e["host"] == host),
            "{agent}: {events:?}"
        );
    }
    let times: Vec<jiff::Timestamp> = events
        .iter()
        .filter_map(|e| e["ts"].as_str()?.parse().ok())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let human = net
        .run(&["events", "--all", "--agent", "far2"])
        .status(0)
        .stdout();
    let mut lines = human.lines();
    assert!(
        lines.next().unwrap().contains("HOST"),
        "a header first: {human}"
    );
    assert!(
        lines.all(|l| l.contains(" gpu-2 ") && l.contains("far2")),
        "{human}"
    );

    // The reads of one agent come from its host.
    // Its kept output there: five lines of it.
    let far = net.run(&["logs", "far1", "-n", "5"]);
    far.status(0).stdout_has("working: step");
    assert_eq!(far.stdout().lines().count(), 5, "{}", far.stdout());

    // A handoff saved on a host is found from here, labelled with its host.
    let body = net.host("gpu-1").dir.join("body.md");
    std::fs::write(
        &body,
        "Current task: calibrate the zanzibar telescope\nNext: point it north\n",
    )
    .unwrap();
    net.host("gpu-1")
        .run(&["handoff", "save", "far1", "--file", body.to_str().unwrap()])
        .status(0);
    let found = net
        .run(&["handoff", "search", "zanzibar", "--json"])
        .status(0)
        .json();
    let hits = found["hits"].as_array().unwrap();
    assert!(!hits.is_empty(), "{found}");
    assert_eq!(hits[0]["host"], "gpu-1", "{found}");
    assert_eq!(hits[0]["agent"], "far1", "{found}");
    net.run(&["handoff", "search", "zanzibar"])
        .status(0)
        .stdout_has("gpu-1");
    net.run(&["handoff", "list", "far1"])
        .status(0)
        .stdout_has("far1");
}

#[test]
fn a_stopped_host_is_shown_unreachable_and_the_others_still_answer_at_once() {
    let Some(mut net) = declared() else {
        return;
    };
    start(&net, &["gpu-1"]);
    // gpu-2 answers, but was never applied to: its agent is declared, not started.
    let doc = net.run(&["status", "--json"]).status(3).json();
    assert_eq!(row(&doc, "far2")["state"], "declared", "{doc}");
    assert_eq!(row(&doc, "far1")["state"], "running", "{doc}");
    let gpu2 = host_entry(&doc, "gpu-2");
    assert_eq!(gpu2["reachable"], true, "{doc}");
    assert!(
        gpu2["error"]
            .as_str()
            .unwrap()
            .contains("no fleet here yet"),
        "{doc}"
    );

    // Then it goes away: its server stops, and with it the shared connection.
    net.host_mut("gpu-2").sshd.stop();
    close_shared_connection(&net, "gpu-2");

    let started = Instant::now();
    let run = net.run(&["status", "--json"]);
    let took = started.elapsed();
    // Refused at once: it costs nothing like a timeout (connect 5 s, status 10 s).
    assert!(took < Duration::from_secs(5), "{took:?}");
    run.status(3);
    let doc = run.json();
    assert_eq!(row(&doc, "far1")["state"], "running", "{doc}");
    assert_eq!(row(&doc, "here")["state"], "running", "{doc}");
    let far2 = row(&doc, "far2");
    assert_eq!(far2["state"], "unknown", "{doc}");
    assert_eq!(far2["host"], "gpu-2", "{doc}");
    let gpu2 = host_entry(&doc, "gpu-2");
    assert_eq!(gpu2["reachable"], false, "{doc}");
    assert!(
        gpu2["error"].as_str().unwrap().contains("unreachable"),
        "{doc}"
    );

    let table = net.run(&["status"]);
    table
        .status(3)
        .stdout_has("host `gpu-2` is unreachable")
        .stdout_has("= hint:");
    assert!(
        table
            .stdout()
            .lines()
            .any(|l| l.starts_with("gpu-2") && l.contains("far2") && l.contains("unknown")),
        "{}",
        table.stdout()
    );

    // A host that takes the connection and never speaks (hung, or a black hole further
    // along) costs its connect timeout, not the read's, and the others are shown.
    let silent = std::net::TcpListener::bind(("127.0.0.1", net.host("gpu-2").sshd.port)).unwrap();
    let started = Instant::now();
    let run = net.run(&["status", "--json"]);
    let took = started.elapsed();
    drop(silent);
    assert!(
        took < fleet::CONNECT_TIMEOUT + Duration::from_secs(3),
        "{took:?}"
    );
    let doc = run.status(3).json();
    assert_eq!(row(&doc, "far1")["state"], "running", "{doc}");
    assert_eq!(row(&doc, "far2")["state"], "unknown", "{doc}");
    assert_eq!(host_entry(&doc, "gpu-2")["reachable"], false, "{doc}");

    // Acting on it says so, and still acts on the rest.
    let restarted = net.run(&["restart", "far2", "far1", "--json"]);
    restarted.status(1);
    let results = restarted.json();
    let result = |agent: &str| {
        results["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["agent"] == agent)
            .unwrap()
            .clone()
    };
    assert_eq!(result("far2")["ok"], false, "{results}");
    assert_eq!(result("far1")["ok"], true, "{results}");
    assert_eq!(result("far1")["host"], "gpu-1", "{results}");
}

#[test]
fn attach_to_an_agent_of_a_host_opens_its_pane_there_over_ssh() {
    let Some(net) = declared() else {
        return;
    };
    start(&net, &["gpu-1"]);
    let gpu1 = net.host("gpu-1");
    let pane = gpu1.status()[0]["pane"].as_str().unwrap().to_string();
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` (util-linux) on PATH for a terminal");
        return;
    }
    let cmd = format!(
        "{} --config {} attach far1",
        env!("CARGO_BIN_EXE_phoenix"),
        net.fleet.config().display()
    );
    // A pseudo-terminal whose input stays open (a closed one would end the client at once).
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", net.fleet.path().join("home"))
        .env("TERM", "xterm")
        .current_dir(net.fleet.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let clients = || {
        let out = std::process::Command::new("tmux")
            .args(["-L", &gpu1.socket, "list-clients", "-F"])
            .arg("#{client_name}\t#{pane_id}")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    wait_until(
        Duration::from_secs(15),
        "a client on the host's server",
        || !clients().is_empty(),
    );
    let listed = clients();
    let (client, on) = listed.split_once('\t').unwrap();
    assert_eq!(on, pane, "{listed}");
    std::process::Command::new("tmux")
        .args(["-L", &gpu1.socket, "detach-client", "-t", client])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "attach did not return");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn restart_stop_and_start_of_an_agent_of_a_host_happen_on_that_host() {
    let Some(net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);
    let gpu1 = net.host("gpu-1");
    let pid = |agent: &str| {
        gpu1.status()
            .iter()
            .find(|r| r["agent"] == agent)
            .and_then(|r| r["pid"].as_u64())
    };
    let before = pid("far1").unwrap();

    net.run(&["restart", "far1"])
        .status(0)
        .stdout_has("agent `far1` on gpu-1: restarted");
    let ops = read_jsonl(&gpu1.agent_dir("far1").join("ops.jsonl"));
    assert!(
        ops.iter().any(|o| o["event"] == "operator_restart"),
        "{ops:?}"
    );
    wait_until(Duration::from_secs(20), "far1 runs again", || {
        pid("far1").is_some_and(|p| p != before)
    });

    // Grouped per host, this machine's agent as on one machine.
    let stopped = net
        .run(&["stop", "far1", "here", "far2", "--json"])
        .status(0)
        .json();
    let hosts: Vec<(String, Value)> = stopped["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["agent"].as_str().unwrap().to_string(), r["host"].clone()))
        .collect();
    assert!(hosts.contains(&("here".into(), Value::Null)), "{stopped}");
    assert!(
        hosts.contains(&("far2".into(), "gpu-2".into())),
        "{stopped}"
    );
    let state = |host: &str, agent: &str| {
        net.host(host)
            .status()
            .iter()
            .find(|r| r["agent"] == agent)
            .map(|r| r["state"].clone())
    };
    assert_eq!(state("gpu-1", "far1"), Some("stopped".into()));
    assert_eq!(state("gpu-2", "far2"), Some("stopped".into()));
    net.run(&["status"]).status(3);

    net.run(&["start", "far2"])
        .status(0)
        .stdout_has("agent `far2` on gpu-2");
    assert_eq!(state("gpu-2", "far2"), Some("running".into()));
    // `--all` leaves what a person stopped, on every host.
    let all = net.run(&["restart", "--all", "--json"]).status(0).json();
    let restarted: Vec<&str> = all["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["agent"].as_str().unwrap())
        .collect();
    assert_eq!(restarted, ["far2"], "{all}");
}
