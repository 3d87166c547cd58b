//! A thousand agents on one host (a cheap agent command, a real tmux server): `apply` from
//! nothing starts every one and confirms it runs, the converged plan has nothing to do,
//! `status` lists them all, and `down` leaves nothing behind. Opt-in (`PHOENIX_TEST_SCALE=1`,
//! set by `.ci/run`): it runs 2,000 processes for a minute or two.

use crate::support::{self, Fleet};

const AGENTS: usize = 1_000;

fn opted_in() -> bool {
    support::opted_in(
        support::SCALE,
        "the 1,000-agent suite",
        "2,000 processes on a real tmux server for a minute or two",
    )
}

fn fleet_of(n: usize) -> Fleet {
    // Two thousand processes starting at once: no other test's agents run meanwhile.
    let fleet = Fleet::alone();
    let mut body = String::new();
    for i in 0..n {
        body.push_str(&format!(
            "[[agent]]\nname = \"a{i:04}\"\ncli = \"custom\"\ncommand = \"sh -c 'echo ready; exec sleep 86400'\"\n\n"
        ));
    }
    fleet.toml(&body);
    fleet
}

#[test]
fn a_thousand_agents_start_converge_and_go_down_clean() {
    if !opted_in() {
        return;
    }
    let fleet = fleet_of(AGENTS);

    let apply = fleet.run(&["apply", "--yes", "--json"]);
    assert_eq!(apply.code(), Some(0), "{}", apply.stdout());
    let report: serde_json::Value = serde_json::from_str(&apply.stdout()).unwrap();
    let steps = report["steps"].as_array().unwrap();
    let starts: Vec<&serde_json::Value> = steps.iter().filter(|s| s["action"] == "start").collect();
    assert_eq!(starts.len(), AGENTS, "{}", apply.stdout());
    assert_eq!(report["failed"], 0);
    // Each start confirmed: the agent's process is there under its wrapper.
    let unconfirmed: Vec<&str> = starts
        .iter()
        .filter(|s| {
            !s["detail"]
                .as_str()
                .unwrap_or("")
                .contains("(running, pid ")
        })
        .map(|s| s["agent"].as_str().unwrap_or(""))
        .collect();
    assert!(unconfirmed.is_empty(), "not confirmed: {unconfirmed:?}");
    // Exactly one pane per agent, each tagged.
    let mut agents: Vec<String> = fleet.tagged_panes().into_iter().map(|p| p.0).collect();
    agents.sort();
    agents.dedup();
    assert_eq!(agents.len(), AGENTS);
    assert_eq!(fleet.tagged_panes().len(), AGENTS, "an agent started twice");
    // One phoenix process per agent: each tap, started with its pane, handed the pane's
    // output to its wrapper and left.
    let config = fleet.config().to_string_lossy().into_owned();
    support::wait_until(
        std::time::Duration::from_secs(60),
        "one phoenix process per agent",
        || {
            let procs = support::processes_naming(&config);
            procs.len() == AGENTS && procs.iter().all(|a| a.iter().any(|w| w == "wrap"))
        },
    );
    for name in ["a0000", "a0500", "a0999"] {
        assert!(
            fleet.ops(name).iter().any(|o| o["event"] == "tap_started"),
            "{name}: its wrapper reads its pane"
        );
    }

    // Converged: nothing to do.
    let plan = fleet.run(&["plan"]);
    assert_eq!(plan.code(), Some(0), "{}", plan.stdout());

    let status = fleet.status();
    assert_eq!(status.len(), AGENTS);
    let not_running: Vec<&serde_json::Value> =
        status.iter().filter(|r| r["state"] != "running").collect();
    assert!(not_running.is_empty(), "{not_running:?}");

    let pids: Vec<u32> = fleet.tagged_panes().into_iter().map(|p| p.3).collect();
    let down = fleet.run(&["down"]);
    assert_eq!(down.code(), Some(0), "{}{}", down.stdout(), down.stderr());
    assert!(!fleet.server_running());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let alive = || {
        pids.iter()
            .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
            .count()
    };
    while alive() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(alive(), 0, "wrappers left running after `phoenix down`");
}
