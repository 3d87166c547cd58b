//! Moves and stale copies through the combined `plan` and `apply`: editing an agent's `host`
//! in phoenix.toml is a move, shown once and carried out with the agent's context; a copy
//! left on a host that was unreachable during a move is shown and stopped. Real sshd hosts,
//! each a real phoenix with its own tmux server.

use crate::hosts_move::{agent, drop_connections, mkdir, row, startup_context, wait_running};
use crate::support::hosts::HostedFleet;

/// Every host and this machine have the agents' workdir (`work`).
fn with_workdirs(net: &HostedFleet) {
    for host in &net.hosts {
        mkdir(&host.dir.join("work"));
    }
    mkdir(&net.fleet.path().join("work"));
}

fn placement(net: &HostedFleet, agent: &str) -> serde_json::Value {
    let text =
        std::fs::read_to_string(net.fleet.state_dir().join("hosts/placements.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["agents"][agent].clone()
}

#[test]
fn a_changed_host_is_one_move_in_the_plan_and_apply_carries_it_with_its_context() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    with_workdirs(&net);
    net.toml(&agent("trades", "gpu-1"));
    // The first apply of a fleet: a plain start, and the place recorded.
    net.run(&["plan"])
        .status(2)
        .stdout_has("+ agent `trades`: start");
    net.run(&["apply", "--yes"]).status(0);
    let (gpu1, gpu2) = (net.host("gpu-1"), net.host("gpu-2"));
    wait_running(gpu1, "trades");
    assert_eq!(placement(&net, "trades")["place"], "gpu-1");
    gpu1.run(&["loop", "add", "trades", "ship-parser", "ship the parser"])
        .status(0);

    net.toml(&agent("trades", "gpu-2"));
    let plan = net.run(&["plan"]);
    let text = plan.stdout();
    plan.status(2);
    assert!(
        text.contains("gpu-2:   ~ agent `trades`: move gpu-1 → gpu-2 (")
            && text.contains("ledger and open loops carried)"),
        "{text}"
    );
    assert!(text.contains("1 to move"), "{text}");
    // Not also a start on the target, nor an undeclared agent on the source.
    assert!(!text.contains("start — "), "{text}");
    assert!(!text.contains("not in phoenix.toml"), "{text}");
    let doc = net.run(&["plan", "--json"]).status(2).json();
    let planned = &doc["moves"][0];
    assert_eq!(
        (&planned["agent"], &planned["from"], &planned["to"]),
        (&"trades".into(), &"gpu-1".into(), &"gpu-2".into()),
        "{doc}"
    );
    assert_eq!(planned["problems"], serde_json::json!([]), "{doc}");
    assert_eq!(planned["source"]["open_loops"], 1, "{doc}");
    assert_eq!(doc["stale"], serde_json::json!([]), "{doc}");

    let applied = net.run(&["apply", "--yes", "--json"]).status(0).json();
    let moved = &applied["moves"][0];
    assert_eq!(moved["ok"], true, "{applied}");
    let handoff = moved["report"]["handoff"].as_str().unwrap().to_string();
    // The new session on gpu-2 started fresh with the move handoff and the open loop.
    wait_running(gpu2, "trades");
    let context = startup_context(gpu2, "trades");
    assert!(
        context.contains(&format!("--- latest handoff ({handoff}, move) ---")),
        "{context}"
    );
    assert!(context.contains("ship the parser"), "{context}");
    // gpu-1 no longer runs it, nor declares it (its slice went without it), nor would start it.
    let left = row(gpu1, "trades");
    assert!(
        left["pid"].is_null() && left["state"] != "running",
        "{left}"
    );
    gpu1.run(&["start", "trades"]).status(1);
    assert_eq!(placement(&net, "trades")["place"], "gpu-2");
    assert_eq!(placement(&net, "trades")["generation"], 1);
    // phoenix.toml is as the operator wrote it, and the fleet matches it everywhere.
    let toml = std::fs::read_to_string(net.fleet.config()).unwrap();
    assert!(toml.contains("host = \"gpu-2\""), "{toml}");
    let again = net.run(&["plan"]);
    let text = again.stdout();
    again.status(0);
    assert!(!text.contains("slice: write"), "{text}");
}

#[test]
fn a_move_whose_target_lacks_the_workdir_fails_the_plan_and_apply_leaves_the_agent() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    mkdir(&net.host("gpu-1").dir.join("work"));
    net.toml(&format!(
        "{}{}",
        agent("trades", "gpu-1"),
        agent("other", "gpu-1")
    ));
    net.run(&["apply", "--yes"]).status(0);
    let gpu1 = net.host("gpu-1");
    let pid = wait_running(gpu1, "trades");
    wait_running(gpu1, "other");

    net.toml(&format!(
        "{}{}",
        agent("trades", "gpu-2"),
        agent("other", "gpu-1")
    ));
    let plan = net.run(&["plan"]);
    let text = plan.stdout();
    plan.status(1);
    assert!(text.contains("move gpu-1 → gpu-2"), "{text}");
    assert!(text.contains("✗ cannot move: workdir"), "{text}");
    assert!(text.contains("Cannot move: `trades`"), "{text}");

    let apply = net.run(&["apply", "--yes"]);
    let text = apply.stdout();
    apply.status(1);
    assert!(
        text.contains("✗ agent `trades`: move gpu-1 → gpu-2 — not moved: workdir"),
        "{text}"
    );
    assert_eq!(row(gpu1, "trades")["pid"], pid, "the agent was touched");
    assert!(
        !gpu1.agent_dir("trades").join("handoffs").exists(),
        "a move handoff was saved"
    );
    assert!(
        net.host("gpu-2")
            .status()
            .iter()
            .all(|r| r["agent"] != "trades"),
        "gpu-2 was given the agent"
    );
    assert_eq!(placement(&net, "trades")["place"], "gpu-1");
    // gpu-1 still declares it: its own plan keeps it as it is.
    let own = gpu1.run(&["plan", "--json"]).json();
    assert!(own["changes"].as_array().unwrap().is_empty(), "{own}");
    assert!(own["unmanaged"].as_array().unwrap().is_empty(), "{own}");
}

#[test]
fn a_stale_copy_on_a_host_that_comes_back_is_stopped_by_the_first_plan_that_reaches_it() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    with_workdirs(&net);
    net.toml(&agent("trades", "gpu-1"));
    net.run(&["apply", "--yes"]).status(0);
    wait_running(net.host("gpu-1"), "trades");
    net.run(&["hosts", "mirror"]).status(0);

    net.host_mut("gpu-1").sshd.stop();
    drop_connections(&net);
    net.run(&["move", "trades", "--to", "gpu-2", "--from-unreachable"])
        .status(0);
    wait_running(net.host("gpu-2"), "trades");
    // While gpu-1 is away, the plan says what it still owes.
    let away = net.run(&["plan", "--skip-unreachable"]);
    assert!(
        away.stdout()
            .contains("? agent `trades`: stale copy not observed (placed on gpu-2, generation 1"),
        "{}",
        away.stdout()
    );

    net.host_mut("gpu-1").sshd.restart();
    let gpu1 = net.host("gpu-1");
    assert_eq!(row(gpu1, "trades")["state"], "running");
    // The first command that reaches gpu-1 (this plan) delivers the fence it is owed: the
    // copy is stopped before gpu-1 answers; apply then settles the rest of the record.
    net.run(&["plan"]);
    let left = row(gpu1, "trades");
    assert!(
        left["pid"].is_null() && left["state"] != "running",
        "{left}"
    );
    net.run(&["apply", "--yes"]).status(0);
    gpu1.run(&["start", "trades"]).status(1);
    assert_eq!(row(net.host("gpu-2"), "trades")["state"], "running");
    assert!(placement(&net, "trades")["owed_fences"].is_null());
    net.run(&["plan"]).status(0);
}
