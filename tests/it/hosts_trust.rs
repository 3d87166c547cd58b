//! The hosts as untrusted peers and stale copies of moved agents: over real OpenSSH servers
//! on loopback, each host a real phoenix with its own tmux server (or, for a host that lies,
//! a script answering in the host protocol through the real transport).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use phoenix::state::FleetDir;
use phoenix::state::lock::FleetLock;

use crate::hosts_move::{agent, drop_connections, mkdir, row, start_on, wait_running};
use crate::support::hosts::{Host, HostedFleet};
use crate::support::{PHOENIX, read_jsonl, wait_until};

const WAIT: Duration = Duration::from_secs(30);

/// `phoenix run` on the host's own fleet (its daemon), its log in the host's dir.
fn host_daemon(host: &Host) -> Child {
    let log = std::fs::File::create(host.dir.join("daemon.log")).unwrap();
    Command::new(PHOENIX)
        .arg("--config")
        .arg(host.config())
        .arg("run")
        .env_remove("TMUX")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the host's daemon starts")
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The rows of `host` in the operator's merged status document.
fn rows_of<'a>(doc: &'a serde_json::Value, host: &str) -> Vec<&'a serde_json::Value> {
    doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["host"] == host)
        .collect()
}

/// Both agents of gpu-1 moved to gpu-2 while gpu-1 was unreachable; gpu-1 back with its
/// copies running (its own daemon running too).
fn moved_while_away(net: &mut HostedFleet, agents: &[&str]) -> Child {
    for host in &net.hosts {
        mkdir(&host.dir.join("work"));
    }
    let body: String = agents.iter().map(|a| agent(a, "gpu-1")).collect();
    net.toml(&body);
    start_on(net, "gpu-1");
    for a in agents {
        wait_running(net.host("gpu-1"), a);
    }
    net.run(&["hosts", "mirror", "--json"]).status(0);
    let daemon = host_daemon(net.host("gpu-1"));
    net.host_mut("gpu-1").sshd.stop();
    drop_connections(net);
    for a in agents {
        net.run(&["move", a, "--to", "gpu-2", "--from-unreachable"])
            .status(0);
        wait_running(net.host("gpu-2"), a);
    }
    net.host_mut("gpu-1").sshd.restart();
    for a in agents {
        assert_eq!(row(net.host("gpu-1"), a)["state"], "running", "{a}");
    }
    daemon
}

#[test]
fn a_returning_hosts_stale_copy_shows_in_status_is_stopped_at_first_contact_and_never_restarted() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    let daemon = moved_while_away(&mut net, &["trades", "quotes"]);
    let gpu1 = net.host("gpu-1");

    // gpu-1's fleet is busy (an apply there holds its lock): the fences reach it with the
    // first call, but its copies cannot be stopped yet. `status` shows them, and fails.
    let lock = FleetLock::acquire(
        &FleetDir::new(gpu1.state_dir()),
        "a test holding the host's fleet",
        Duration::from_secs(20),
        |_| {},
    )
    .unwrap();
    let doc = net.run(&["status", "--json"]).status(3).json();
    let stale = rows_of(&doc, "gpu-1");
    assert_eq!(stale.len(), 2, "{doc}");
    for r in &stale {
        assert_eq!(r["state"], "stale", "{r}");
        assert_eq!(r["health"], "down", "{r}");
        assert_eq!(r["stale"]["placed"], "gpu-2", "{r}");
    }
    let gpu1_entry = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "gpu-1")
        .unwrap();
    assert!(
        !gpu1_entry["stale_stop_failed"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{gpu1_entry}"
    );
    net.run(&["status"])
        .status(3)
        .stdout_has("stale copy: `trades` runs on gpu-1 but is placed on gpu-2");

    // Told, gpu-1 never starts a fenced copy again: its wrapper does not restart a CLI that
    // ends, and its daemon (which cannot take the lock anyway) plans nothing for it.
    let pid = row(gpu1, "quotes")["pid"].as_u64().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let ops = gpu1.agent_dir("quotes").join("ops.jsonl");
    wait_until(
        WAIT,
        "the wrapper refusing to start the fenced copy",
        || {
            read_jsonl(&ops)
                .iter()
                .any(|o| o["event"] == "start_fenced")
        },
    );
    let starts =
        |ops: &[serde_json::Value]| ops.iter().filter(|o| o["event"] == "agent_start").count();
    let before = starts(&read_jsonl(&ops));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        starts(&read_jsonl(&ops)),
        before,
        "the fenced copy was started again"
    );
    assert_ne!(row(gpu1, "quotes")["state"], "running");

    // The lock is free: the first command that reaches gpu-1 (here `events`) stops the
    // stale copy before it answers. gpu-1's daemon is not running meanwhile: nothing else
    // could have stopped it.
    stop(daemon);
    drop(lock);
    assert_eq!(row(gpu1, "trades")["state"], "running");
    net.run(&["events", "--json"]).status(0);
    let left = row(gpu1, "trades");
    assert_eq!(left["state"], "moved", "{left}");
    let doc = net.run(&["status", "--json"]).status(0).json();
    assert!(rows_of(&doc, "gpu-1").is_empty(), "{doc}");
    assert_eq!(rows_of(&doc, "gpu-2").len(), 2, "{doc}");
    net.run(&["move", "--cleanup"])
        .status(0)
        .stdout_has("no stale copies");

    // gpu-1's own daemon, back, starts neither; restarts there are refused.
    let daemon = host_daemon(gpu1);
    std::thread::sleep(Duration::from_secs(4));
    for a in ["trades", "quotes"] {
        assert_ne!(row(gpu1, a)["state"], "running", "{a} runs on gpu-1 again");
        assert_eq!(row(net.host("gpu-2"), a)["state"], "running", "{a}");
    }
    gpu1.run(&["restart", "trades"])
        .status(1)
        .stderr_has("moved to gpu-2");
    stop(daemon);
}

#[test]
fn the_operators_daemon_stops_a_returning_hosts_stale_copy() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    let daemon = moved_while_away(&mut net, &["trades"]);
    // Nobody runs a command: the operator's daemon reaches gpu-1 on its own.
    let operator = crate::supervise::Daemon::start(&net.fleet, &["-v"]);
    let deadline = std::time::Instant::now() + WAIT;
    while row(net.host("gpu-1"), "trades")["state"] != "moved" {
        assert!(
            std::time::Instant::now() < deadline,
            "the stale copy on gpu-1 was not stopped:\n{}",
            operator.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(row(net.host("gpu-2"), "trades")["state"], "running");
    operator.stop();
    stop(daemon);
    net.run(&["status", "--json"]).status(0);
}

#[test]
fn a_hosts_rows_of_agents_it_does_not_own_and_oversized_fields_are_left_out() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    // gpu-1's "phoenix" answers every call with a status of its choosing.
    let long = "x".repeat(5000);
    let status = serde_json::json!({
        "format_version": 1, "fleet": "test", "server_running": true,
        "daemon": {"running": false, "pid": null},
        "agents": [
            {"agent": "alpha", "declared": true, "enabled": true, "state": "running",
             "health": "healthy", "pane": "%1", "last_activity": long},
            {"agent": "ghost", "declared": true, "enabled": true, "state": "running",
             "health": "healthy", "pane": "%2"},
            {"agent": long, "declared": true, "enabled": true, "state": "running",
             "health": "healthy", "pane": "%3"},
            {"agent": "../../etc", "state": "running"},
        ],
    });
    let reply = serde_json::json!({
        "format_version": 1, "phoenix_version": env!("CARGO_PKG_VERSION"),
        "os": std::env::consts::OS, "arch": std::env::consts::ARCH, "ok": true,
        "result": {"code": 0, "stdout": status.to_string(), "stderr": ""},
    });
    let fake = net.fleet.path().join("lying-phoenix");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\ncat >/dev/null\ncat <<'EOF'\n{reply}\nEOF\n"),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let toml = format!(
        "{}{}",
        net.header(),
        HostedFleet::demo_agent("alpha", Some("gpu-1"))
    )
    .replace(PHOENIX, &fake.display().to_string());
    net.fleet.raw_toml(&toml);

    let doc = net.run(&["status", "--json"]).status(0).json();
    let rows = rows_of(&doc, "gpu-1");
    assert_eq!(rows.len(), 1, "{doc}");
    assert_eq!(rows[0]["agent"], "alpha");
    let activity = rows[0]["last_activity"].as_str().unwrap();
    assert!(activity.chars().count() <= 4096, "{}", activity.len());
    let warnings = doc["hosts"][0]["warnings"].to_string();
    assert!(warnings.contains("ghost"), "{warnings}");
    assert!(
        warnings.contains("without a valid agent name"),
        "{warnings}"
    );
    assert!(!warnings.contains(&long), "{warnings}");
    // The table says so too, and never shows the foreign rows.
    let text = net.run(&["status"]);
    text.status(0)
        .stdout_has("agents the fleet does not know (ghost)");
    assert!(!text.stdout().contains("../../etc"), "{}", text.stdout());
}
