//! One combined `plan` and `apply` across this machine and real sshd hosts: every host plans
//! and applies its own slice, asked in parallel, and the operator shows one plan grouped by
//! host. An unreachable host or one that cannot take its slice is reported without stopping
//! the others.

use std::time::{Duration, Instant};

use crate::support::hosts::HostedFleet;
use crate::support::wait_until;

/// Two hosts and this machine, one demo agent each.
fn three_parts() -> Option<HostedFleet> {
    let net = HostedFleet::start(&["gpu-1", "gpu-2"])?;
    net.toml(&format!(
        "{}\n{}\n{}",
        HostedFleet::demo_agent("here", None),
        HostedFleet::demo_agent("trades", Some("gpu-1")),
        HostedFleet::demo_agent("tests", Some("gpu-2")),
    ));
    Some(net)
}

/// The agent's row of `status --json` on `host` says it runs.
fn runs_on(net: &HostedFleet, host: &str, agent: &str) -> bool {
    net.host(host)
        .status()
        .iter()
        .any(|r| r["agent"] == agent && r["state"] == "running")
}

fn wait_running_on(net: &HostedFleet, host: &str, agent: &str) {
    wait_until(
        Duration::from_secs(20),
        &format!("agent `{agent}` running on {host}"),
        || runs_on(net, host, agent),
    );
}

/// The line of `text` that starts with `label:` and says `what`.
fn line_of<'a>(text: &'a str, label: &str, what: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("{label}:")) && l.contains(what))
        .unwrap_or_else(|| panic!("no `{label}: … {what}` line in:\n{text}"))
}

#[test]
fn one_plan_and_one_apply_cover_this_machine_and_every_host() {
    let Some(net) = three_parts() else {
        return;
    };
    let plan = net.run(&["plan"]);
    plan.status(2);
    let text = plan.stdout();
    let here = text
        .find(line_of(&text, "local", "+ agent `here`: start"))
        .unwrap();
    let gpu1 = text
        .find(line_of(&text, "gpu-1", "+ agent `trades`: start"))
        .unwrap();
    let gpu2 = text
        .find(line_of(&text, "gpu-2", "+ agent `tests`: start"))
        .unwrap();
    assert!(here < gpu1 && gpu1 < gpu2, "groups out of order:\n{text}");
    line_of(&text, "gpu-1", "+ slice: write phoenix.toml (new)");
    assert!(
        text.contains("Plan: 3 to start, 0 to restart, 0 to replace, 0 to remove")
            && text.contains("2 host slices to write"),
        "{text}"
    );
    // A plan writes nothing on a host.
    assert!(!net.host("gpu-1").config().exists());

    let doc = net.run(&["plan", "--json"]).status(2).json();
    let parts = doc["hosts"].as_array().unwrap();
    let names: Vec<&str> = parts.iter().map(|p| p["host"].as_str().unwrap()).collect();
    assert_eq!(names, ["local", "gpu-1", "gpu-2"], "{doc}");
    for (part, agent) in parts.iter().zip(["here", "trades", "tests"]) {
        assert_eq!(part["reachable"], true, "{part}");
        assert!(part["error"].is_null(), "{part}");
        assert_eq!(part["plan"]["format_version"], 1, "{part}");
        assert_eq!(part["plan"]["changes"][0]["agent"], agent, "{part}");
        assert_eq!(part["plan"]["summary"]["start"], 1, "{part}");
    }
    assert_eq!(parts[1]["push"][0]["path"], "phoenix.toml", "{doc}");
    assert_eq!(parts[1]["push"][0]["new"], true, "{doc}");

    let apply = net.run(&["apply", "--yes"]);
    apply.status(0);
    let text = apply.stdout();
    line_of(&text, "gpu-2", "✓ agent `tests`: start");
    line_of(&text, "gpu-1", "✓ slice: wrote phoenix.toml (new)");
    assert!(text.contains("Apply complete"), "{text}");
    net.fleet.wait_running(&["here"]);
    wait_running_on(&net, "gpu-1", "trades");
    wait_running_on(&net, "gpu-2", "tests");
    // Each host runs its own agents only.
    assert!(!runs_on(&net, "gpu-1", "tests") && !runs_on(&net, "gpu-2", "trades"));

    let again = net.run(&["plan"]);
    again.status(0).stdout_has("No changes");

    // A warm combined plan: the shared connections are up, both hosts plan in parallel.
    let runs = 5;
    let started = Instant::now();
    for _ in 0..runs {
        net.run(&["plan"]).status(0);
    }
    eprintln!(
        "MEASURED: warm combined plan, this machine and 2 hosts: {:?} per plan",
        started.elapsed() / runs
    );

    // A changed policy is pushed although no agent changes.
    std::fs::create_dir_all(net.fleet.path().join("policies")).unwrap();
    std::fs::write(net.fleet.path().join("policies/notes.txt"), "-- pushed\n").unwrap();
    let text = net.run(&["plan"]).status(2).stdout();
    line_of(&text, "gpu-2", "+ slice: write policies/notes.txt (new)");
    net.run(&["apply", "--yes", "trades"]).status(0);
    assert_eq!(
        std::fs::read_to_string(net.host("gpu-1").dir.join("policies/notes.txt")).unwrap(),
        "-- pushed\n"
    );
    // `apply trades` went to gpu-1 only.
    assert!(!net.host("gpu-2").dir.join("policies").exists());
}

#[test]
fn an_unreachable_host_is_reported_and_skip_unreachable_does_the_rest() {
    let Some(mut net) = three_parts() else {
        return;
    };
    net.host_mut("gpu-2").sshd.stop();

    let plan = net.run(&["plan"]);
    plan.status(1);
    let text = plan.stdout();
    line_of(&text, "gpu-2", "host `gpu-2` is unreachable");
    assert!(text.contains("Connection refused"), "{text}");
    line_of(
        &text,
        "gpu-2",
        "? agent `tests`: unknown (host unreachable)",
    );
    line_of(&text, "gpu-1", "+ agent `trades`: start");
    line_of(&text, "local", "+ agent `here`: start");

    let skipping = net.run(&["plan", "--skip-unreachable"]);
    skipping
        .status(2)
        .stdout_has("Skipped: host `gpu-2`, unreachable");

    let doc = net.run(&["plan", "--json"]).status(1).json();
    let gpu2 = &doc["hosts"][2];
    assert_eq!(gpu2["host"], "gpu-2", "{doc}");
    assert_eq!(gpu2["reachable"], false, "{doc}");
    assert!(gpu2["plan"].is_null(), "{doc}");
    assert_eq!(gpu2["unknown"][0], "tests", "{doc}");
    assert!(
        gpu2["error"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{doc}"
    );
    assert!(gpu2["hint"].as_str().unwrap().contains("ssh"), "{doc}");

    // Without --skip-unreachable nothing is applied anywhere.
    net.run(&["apply", "--yes"])
        .status(1)
        .stderr_has("nothing applied: host `gpu-2` is unreachable")
        .stderr_has("--skip-unreachable");
    assert!(!net.host("gpu-1").config().exists());
    assert!(!net.fleet.server_running());

    let apply = net.run(&["apply", "--yes", "--skip-unreachable"]);
    apply.status(0);
    line_of(&apply.stdout(), "gpu-2", "skipped");
    net.fleet.wait_running(&["here"]);
    wait_running_on(&net, "gpu-1", "trades");
    net.run(&["plan", "--skip-unreachable"]).status(0);
}

#[test]
fn a_host_that_cannot_take_its_slice_fails_alone() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    net.toml(&format!(
        "{}\n{}\n{}workdir = \"/nowhere/on/any/host\"\n",
        HostedFleet::demo_agent("here", None),
        HostedFleet::demo_agent("trades", Some("gpu-1")),
        HostedFleet::demo_agent("tests", Some("gpu-2")),
    ));
    let plan = net.run(&["plan"]);
    plan.status(1);
    let text = plan.stdout();
    line_of(&text, "gpu-2", "error: host `gpu-2`");
    assert!(text.contains("/nowhere/on/any/host"), "{text}");
    line_of(
        &text,
        "gpu-2",
        "? agent `tests`: unknown (no plan from the host)",
    );
    // Not a reachability problem: skipping unreachable hosts does not hide it.
    net.run(&["plan", "--skip-unreachable"]).status(1);

    let apply = net.run(&["apply", "--yes", "--json"]);
    apply.status(1);
    let doc = apply.json();
    let parts = doc["hosts"].as_array().unwrap();
    assert_eq!(parts[0]["host"], "local", "{doc}");
    assert_eq!(parts[0]["apply"]["steps"][0]["agent"], "here", "{doc}");
    assert_eq!(parts[1]["apply"]["steps"][0]["agent"], "trades", "{doc}");
    assert_eq!(parts[1]["apply"]["steps"][0]["ok"], true, "{doc}");
    assert_eq!(
        parts[1]["apply"]["pushed"][0]["path"], "phoenix.toml",
        "{doc}"
    );
    assert_eq!(parts[2]["reachable"], true, "{doc}");
    assert!(parts[2]["apply"].is_null(), "{doc}");
    assert!(
        parts[2]["error"]
            .as_str()
            .unwrap()
            .contains("/nowhere/on/any/host"),
        "{doc}"
    );
    assert_eq!(doc["failed"], 1, "{doc}");
    net.fleet.wait_running(&["here"]);
    wait_running_on(&net, "gpu-1", "trades");
    assert!(!net.host("gpu-2").config().exists());
}

#[test]
fn hostile_names_and_dirs_are_refused_here_or_carried_literally() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    let control = phoenix::hosts::fleet::control_dir(&net.fleet.state_dir());
    let nothing_sent = || assert!(!control.exists(), "ssh was run: {}", control.display());

    // An agent name that would be a command in a shell: refused by validate, nothing sent.
    net.toml(&HostedFleet::demo_agent("x$(touch pwned)", Some("gpu-1")));
    net.run(&["plan"]).status(1).stderr_has("not a valid name");
    nothing_sent();

    // A host directory with a control character.
    net.fleet.raw_toml(&format!(
        "{}[[host]]\nname = \"gpu-2\"\nssh = \"gpu-1\"\ndir = \"/tmp/a\\nb\"\n\n{}",
        net.header(),
        HostedFleet::demo_agent("trades", Some("gpu-2"))
    ));
    net.run(&["apply", "--yes"])
        .status(1)
        .stderr_has("`dir` contains the control character");
    nothing_sent();

    // A name on the command line that no agent has.
    net.toml(&HostedFleet::demo_agent("trades", Some("gpu-1")));
    net.run(&["apply", "--yes", "trades;touch pwned"])
        .status(1)
        .stderr_has("no agent `trades;touch pwned`")
        .stderr_has("trades");
    nothing_sent();

    // Shell syntax in a host's directory is a directory name there, never a command.
    let marker = format!("/tmp/phx-pwned-{}", std::process::id());
    let odd = net
        .fleet
        .path()
        .join("hosts")
        .join(format!("g $(touch {marker}) 'q' `touch {marker}`"));
    let host = net.host("gpu-1");
    net.fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nssh_config = \"{}\"\n\n[[host]]\nname = \"gpu-1\"\nssh = \"{}\"\ndir = \"{}\"\nphoenix = \"{}\"\ntmux_socket = \"{}\"\n\n{}",
        net.fleet.socket,
        net.ssh_config.display(),
        host.sshd.alias,
        odd.display(),
        env!("CARGO_BIN_EXE_phoenix"),
        host.socket,
        HostedFleet::demo_agent("trades", Some("gpu-1"))
    ));
    net.run(&["apply", "--yes"]).status(0);
    assert!(odd.join("phoenix.toml").is_file(), "{}", odd.display());
    assert!(!std::path::Path::new(&marker).exists(), "{marker}");
}
