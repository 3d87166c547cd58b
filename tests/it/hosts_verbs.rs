//! The fleet verbs across hosts, with no traps: `down` covers every host, `hosts install`
//! records where it put phoenix, `hosts check` fails where no daemon will run, a `move` ends
//! converged, a dead host's agent can be moved without a setup step, and `status` flags a
//! stale copy. Real sshd servers on loopback, each host a real phoenix with its own tmux.

use std::time::Duration;

use serde_json::Value;

use crate::hosts_reads::{close_shared_connection, declared};
use crate::support::hosts::HostedFleet;
use crate::support::wait_until;

const WAIT: Duration = Duration::from_secs(30);

fn state_of(rows: &[Value], agent: &str) -> String {
    rows.iter()
        .find(|r| r["agent"] == agent)
        .map(|r| r["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// Every agent of the fleet applied and running: this machine's and every host's.
fn up(net: &HostedFleet) {
    net.run(&["apply", "--yes"]).status(0);
    for host in &net.hosts {
        wait_until(WAIT, &format!("{}'s agents run", host.name), || {
            let rows = host.status();
            !rows.is_empty() && rows.iter().all(|r| r["state"] == "running")
        });
    }
    net.fleet.wait_running(&["here"]);
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[test]
fn down_stops_every_host_limits_to_the_named_ones_and_reports_an_unreachable_one() {
    let Some(mut net) = declared() else {
        return;
    };
    up(&net);

    // `--host` limits it: only gpu-1 goes down, this machine and gpu-2 keep running.
    let limited = net
        .run(&["down", "--host", "gpu-1", "--json"])
        .status(0)
        .json();
    assert_eq!(limited["command"], "down", "{limited}");
    assert_eq!(limited["failed"], 0, "{limited}");
    assert_eq!(
        limited["server"],
        Value::Null,
        "this machine was not asked: {limited}"
    );
    let parts = limited["hosts"].as_array().unwrap();
    assert_eq!(parts.len(), 1, "{limited}");
    assert_eq!(parts[0]["host"], "gpu-1");
    assert_eq!(parts[0]["ok"], true);
    let far1 = &limited["agents"][0];
    assert_eq!(
        (&far1["agent"], &far1["host"]),
        (&"far1".into(), &"gpu-1".into())
    );
    assert_ne!(state_of(&net.host("gpu-1").status(), "far1"), "running");
    assert_eq!(state_of(&net.host("gpu-2").status(), "far2"), "running");
    net.fleet.wait_running(&["here"]);
    // gpu-1 recorded the fleet down: its daemon leaves it down.
    assert!(net.host("gpu-1").state_dir().join(".down").exists());

    // gpu-2 gone: every other part still goes down, gpu-2 is reported and the exit is 1.
    net.host_mut("gpu-2").sshd.stop();
    close_shared_connection(&net, "gpu-2");
    let run = net.run(&["down"]);
    let text = run.stdout();
    run.status(1);
    assert!(text.contains("✓ agent `here`: stopped"), "{text}");
    assert!(
        text.contains("✗ gpu-2: host `gpu-2` is unreachable")
            && text.contains("nothing was stopped there"),
        "{text}"
    );
    assert!(text.contains("hint: check that `ssh`"), "{text}");
    assert!(text.contains("Not down: 1 part(s)"), "{text}");
    assert!(
        !net.fleet.server_running(),
        "this machine's tmux server stays up"
    );

    // The same document whatever was asked or answered.
    let all = net.run(&["down", "--json"]).status(1).json();
    assert_eq!(keys(&all), keys(&limited), "{all}");
    let parts = all["hosts"].as_array().unwrap();
    let names: Vec<&str> = parts.iter().map(|p| p["host"].as_str().unwrap()).collect();
    assert_eq!(names, ["local", "gpu-1", "gpu-2"], "{all}");
    for p in parts {
        assert_eq!(keys(p), keys(&limited["hosts"][0]), "{all}");
    }
    assert_eq!(parts[2]["ok"], false, "{all}");
    assert!(
        parts[2]["error"].as_str().unwrap().contains("unreachable"),
        "{all}"
    );
    let far2 = all["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == "far2")
        .expect("a row for the unreachable host's agent");
    assert_eq!(
        (&far2["ok"], &far2["host"]),
        (&false.into(), &"gpu-2".into()),
        "{all}"
    );
    assert_eq!(all["failed"], 1, "{all}");

    // A name that is neither this machine nor a host stops nothing.
    net.run(&["down", "--host", "gpu-9"])
        .status(1)
        .stderr_has("no host `gpu-9`");

    // And `apply` brings the fleet back everywhere.
    net.host_mut("gpu-2").sshd.restart();
    up(&net);
}

fn host_report(doc: &Value, host: &str) -> Value {
    doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == host)
        .cloned()
        .unwrap_or_else(|| panic!("no report for `{host}`: {doc}"))
}

#[test]
fn hosts_install_records_where_phoenix_went_and_an_explicit_path_still_wins() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    let agent = HostedFleet::demo_agent("far", Some("gpu-1"));
    let installed = net.fleet.path().join("remote bin/phoenix");
    let with_phoenix = |line: Option<String>| {
        let header = net.header().replace(
            &format!("phoenix = \"{}\"\n", crate::support::PHOENIX),
            &line.map(|l| format!("{l}\n")).unwrap_or_default(),
        );
        net.fleet.raw_toml(&format!("{header}{agent}"));
    };
    // Installed where the entry says, then the entry's `phoenix` taken out.
    with_phoenix(Some(format!("phoenix = \"{}\"", installed.display())));
    net.run(&["hosts", "install", "gpu-1"]).status(0);
    let record = net.fleet.state_dir().join("hosts/known/gpu-1.json");
    let known: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!(known["phoenix"], installed.display().to_string(), "{known}");
    assert_eq!(known["installed_version"], env!("CARGO_PKG_VERSION"));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&record).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    // Without `phoenix` in phoenix.toml every command reaches the installed one (the host's
    // PATH over ssh has no phoenix).
    with_phoenix(None);
    let doc = net.run(&["hosts", "check", "--json"]).json();
    let report = host_report(&doc, "gpu-1");
    assert_eq!(report["error"], Value::Null, "{doc}");
    assert_eq!(
        report["phoenix_version"],
        env!("CARGO_PKG_VERSION"),
        "{doc}"
    );
    net.run(&["apply", "--yes"]).status(0);
    wait_until(WAIT, "far runs on gpu-1", || {
        state_of(&net.host("gpu-1").status(), "far") == "running"
    });
    // Installing again goes to the recorded place and says it is recorded.
    net.run(&["hosts", "install", "gpu-1"])
        .status(0)
        .stdout_has(&format!("to {}", installed.display()))
        .stdout_has("recorded in ");

    // An explicit `phoenix` wins over the record, even a wrong one.
    with_phoenix(Some("phoenix = \"/nowhere/phoenix\"".into()));
    let doc = net.run(&["hosts", "check", "--json"]).status(1).json();
    let error = host_report(&doc, "gpu-1")["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        error.contains("`/nowhere/phoenix` was not found there"),
        "{doc}"
    );
}

#[test]
fn after_a_move_the_fleet_is_converged_without_another_apply() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    for host in &net.hosts {
        std::fs::create_dir_all(host.dir.join("work")).unwrap();
    }
    std::fs::create_dir_all(net.fleet.path().join("work")).unwrap();
    net.toml(&crate::hosts_move::agent("trades", "gpu-1"));
    net.run(&["apply", "--yes"]).status(0);
    crate::hosts_move::wait_running(net.host("gpu-1"), "trades");
    net.run(&["status"]).status(0);

    for to in ["gpu-2", "local", "gpu-1"] {
        net.run(&["move", "trades", "--to", to]).status(0);
        let status = net.run(&["status"]);
        assert_eq!(
            status.code(),
            Some(0),
            "after the move to {to}:\n{}{}",
            status.stdout(),
            status.stderr()
        );
        let plan = net.run(&["plan"]);
        assert_eq!(
            plan.code(),
            Some(0),
            "after the move to {to}:\n{}{}",
            plan.stdout(),
            plan.stderr()
        );
    }
}

#[test]
fn hosts_check_fails_on_a_host_where_no_daemon_will_run_and_passes_once_one_does() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&HostedFleet::demo_agent("far", Some("gpu-1")));
    // The test's sshd gives no systemd user manager (no PAM session, no systemd here), and
    // nothing else supervises the host's fleet: its agents would run until they die.
    let run = net.run(&["hosts", "check"]);
    let text = run.stdout();
    run.status(1);
    assert!(!text.contains("All checks passed"), "{text}");
    assert!(
        text.contains("FAIL daemon") && text.contains("no daemon will run here"),
        "{text}"
    );
    assert!(text.contains("phoenix hosts install gpu-1"), "{text}");
    assert!(
        text.contains("1 host: 0 unreachable, 1 check(s) failed."),
        "{text}"
    );
    let doc = net.run(&["hosts", "check", "--json"]).status(1).json();
    let daemon = host_report(&doc, "gpu-1")["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "daemon")
        .cloned()
        .unwrap();
    assert_eq!(daemon["ok"], false, "{doc}");
    assert!(
        daemon["fix"]
            .as_str()
            .unwrap()
            .contains(" run` under the host's own supervisor"),
        "{doc}"
    );

    // The host's own supervisor runs its daemon (as the printed command says): it passes.
    net.run(&["apply", "--yes"]).status(0);
    let host = net.host("gpu-1");
    let log = net.fleet.path().join("gpu-1-daemon.log");
    let mut daemon = std::process::Command::new(crate::support::PHOENIX)
        .arg("--config")
        .arg(host.config())
        .arg("run")
        .env_remove("TMUX")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(15), "the host's daemon", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("supervising the fleet"))
    });
    net.run(&["hosts", "check"])
        .status(0)
        .stdout_has("ok   daemon")
        .stdout_has("supervises the fleet here")
        .stdout_has("All checks passed on 1 host.");
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[test]
fn a_dead_hosts_agent_moves_from_the_copy_apply_kept_without_a_setup_step() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    for host in &net.hosts {
        std::fs::create_dir_all(host.dir.join("work")).unwrap();
    }
    net.toml(&crate::hosts_move::agent("trades", "gpu-1"));
    net.run(&["apply", "--yes"]).status(0);
    crate::hosts_move::wait_running(net.host("gpu-1"), "trades");
    // Its context grows; the next apply (nothing else to do) keeps the copy current.
    net.host("gpu-1")
        .run(&["loop", "add", "trades", "ship-parser", "ship the parser"])
        .status(0);
    net.run(&["apply", "--yes"]).status(0);
    let kept = net.fleet.state_dir().join("hosts/mirror/gpu-1/trades");
    assert!(kept.join(".mirrored_at").is_file(), "no copy kept");

    // gpu-1 dies; no `hosts mirror` was ever run.
    net.host_mut("gpu-1").sshd.stop();
    crate::hosts_move::drop_connections(&net);
    net.run(&["move", "trades", "--to", "gpu-2", "--from-unreachable"])
        .status(0)
        .stdout_has("from the mirror of gpu-1");
    crate::hosts_move::wait_running(net.host("gpu-2"), "trades");
    let context = crate::hosts_move::startup_context(net.host("gpu-2"), "trades");
    assert!(context.contains("ship the parser"), "{context}");
}

#[test]
fn a_dead_hosts_agent_without_a_kept_copy_starts_fresh_only_when_asked() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    for host in &net.hosts {
        std::fs::create_dir_all(host.dir.join("work")).unwrap();
    }
    net.toml(&crate::hosts_move::agent("trades", "gpu-1"));
    net.run(&["apply", "--yes"]).status(0);
    crate::hosts_move::wait_running(net.host("gpu-1"), "trades");
    // The copy is gone (a new operator machine, a wiped state dir), and so is gpu-1.
    std::fs::remove_dir_all(net.fleet.state_dir().join("hosts/mirror")).unwrap();
    net.host_mut("gpu-1").sshd.stop();
    crate::hosts_move::drop_connections(&net);
    net.run(&["move", "trades", "--to", "gpu-2", "--from-unreachable"])
        .status(1)
        .stderr_has("no copy of `trades`'s context")
        .stderr_has("--from-unreachable --fresh");
    assert!(
        net.host("gpu-2")
            .status()
            .iter()
            .all(|r| r["agent"] != "trades")
    );
    net.run(&[
        "move",
        "trades",
        "--to",
        "gpu-2",
        "--from-unreachable",
        "--fresh",
    ])
    .status(0)
    .stdout_has("✓ agent `trades` moved gpu-1 → gpu-2")
    .stdout_has("without it (its handoffs, ledger and open loops are lost here");
    crate::hosts_move::wait_running(net.host("gpu-2"), "trades");
}

/// A phoenix linked against a newer glibc than a host has cannot run there: `hosts check`
/// says so (with the static build to use instead) and `hosts install` copies nothing.
#[test]
fn a_phoenix_the_hosts_glibc_cannot_run_is_flagged_by_check_and_refused_by_install() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&HostedFleet::demo_agent("far", Some("gpu-1")));
    // This machine's own phoenix runs on the host (the same machine, behind sshd).
    let doc = net.run(&["hosts", "check", "--json"]).json();
    let row = |doc: &serde_json::Value| {
        host_report(doc, "gpu-1")["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "phoenix to install")
            .cloned()
            .unwrap_or_else(|| panic!("no install row: {doc}"))
    };
    let ours = row(&doc);
    assert_eq!(ours["ok"], true, "{doc}");
    assert!(
        ours["detail"].as_str().unwrap().contains("needs glibc 2."),
        "{ours}"
    );

    // A build that asks for glibc 2.999 (an ELF header and its symbol version strings).
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    elf[5] = 1;
    elf[18..20].copy_from_slice(&0x3eu16.to_le_bytes());
    elf.extend_from_slice(b"\0GLIBC_2.2.5\0GLIBC_2.999\0");
    let binary = net.fleet.path().join("phoenix-new-glibc");
    std::fs::write(&binary, &elf).unwrap();
    net.fleet.raw_toml(&format!(
        "{}{}",
        net.header().replacen(
            "[[host]]\n",
            "[[host]]\nbinary = \"phoenix-new-glibc\"\n",
            1
        ),
        HostedFleet::demo_agent("far", Some("gpu-1"))
    ));
    let run = net.run(&["hosts", "check"]);
    run.status(1);
    let text = run.stdout();
    assert!(
        text.contains("FAIL phoenix to install")
            && text.contains(
                "cannot run there: it needs glibc 2.999 or newer and the host has glibc 2."
            ),
        "{text}"
    );
    assert!(text.contains("x86_64-unknown-linux-musl"), "{text}");
    let doc = net.run(&["hosts", "check", "--json"]).status(1).json();
    assert_eq!(row(&doc)["ok"], false, "{doc}");

    // Install refuses before copying: the host's directory gets nothing.
    let target = net.fleet.path().join("installed");
    net.fleet.raw_toml(&format!(
        "{}{}",
        net.header()
            .replacen(
                "[[host]]\n",
                "[[host]]\nbinary = \"phoenix-new-glibc\"\n",
                1
            )
            .replacen(
                &format!("phoenix = \"{}\"", crate::support::PHOENIX),
                &format!("phoenix = \"{}/phoenix\"", target.display()),
                1
            ),
        HostedFleet::demo_agent("far", Some("gpu-1"))
    ));
    net.run(&["hosts", "install", "gpu-1"])
        .status(1)
        .stderr_has("cannot run")
        .stderr_has("needs glibc 2.999 or newer")
        .stderr_has("nothing was copied")
        .stderr_has("x86_64-unknown-linux-musl");
    assert!(!target.exists(), "install copied something");
}
