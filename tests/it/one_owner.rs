//! Nothing but a person decides in a pane, and one owner restarts an agent: safe mode reads
//! only what is typed after its prompt (never text phoenix pasted into a CLI that did not read
//! it), and an operator's restart is carried out once while the daemon reconciles.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{Fleet, wait_until};

use crate::supervise::Daemon;

fn ops_named(fleet: &Fleet, agent: &str, event: &str) -> Vec<Value> {
    fleet
        .ops(agent)
        .into_iter()
        .filter(|o| o["event"] == event)
        .collect()
}

fn wait_ops(fleet: &Fleet, agent: &str, event: &str, n: usize) -> Vec<Value> {
    let mut found = Vec::new();
    wait_until(
        Duration::from_secs(30),
        &format!("{n} `{event}` ops of `{agent}`"),
        || {
            found = ops_named(fleet, agent, event);
            found.len() >= n
        },
    );
    found
}

/// A custom CLI running `script` (written 0755 into the fleet dir) in the fleet's `work` dir.
fn script(fleet: &Fleet, name: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let work = fleet.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = fleet.path().join(format!("{name}.sh"));
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (path, work)
}

fn pane_of(fleet: &Fleet, agent: &str) -> String {
    fleet.agent_status(agent)["pane"]
        .as_str()
        .expect("agent has a pane")
        .to_string()
}

fn pane_says(fleet: &Fleet, pane: &str, what: &str) -> String {
    fleet
        .tmux(&["display-message", "-p", "-t", pane, what])
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn type_into(fleet: &Fleet, pane: &str, text: &str) {
    fleet
        .tmux(&["send-keys", "-t", pane, "-l", text])
        .expect("send-keys");
    fleet
        .tmux(&["send-keys", "-t", pane, "Enter"])
        .expect("send-keys Enter");
}

/// A custom CLI that never reads its input gets its startup context pasted (the latest
/// handoff, whose lines include `restart` and `quit`), crashes, and lands in safe mode. The
/// pasted text waited unread in the terminal: read as typed, `restart` restarted the
/// crash-looping agent again and again and `quit` closed its pane. It is gone before the
/// prompt appears, a paste into the prompt is dropped, and what a person types still counts.
#[test]
fn text_pasted_into_a_cli_that_never_read_it_does_not_answer_safe_mode() {
    let fleet = Fleet::new();
    let (deaf, work) = script(
        &fleet,
        "deaf",
        "#!/bin/sh\necho deaf agent up\nsleep 8\nexit 3\n",
    );
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\n\
         max_crashes = 1\ncrash_window = \"1h\"\n\n\
         [[agent]]\nname = \"deaf\"\ncli = \"custom\"\ncommand = \"{}\"\nworkdir = \"{}\"\n",
        deaf.display(),
        work.display()
    ));
    fleet
        .run_within_input(
            &["handoff", "save", "deaf"],
            // Notes first: each its own line in the handoff, and in the startup text.
            b"restart\nquit\nCurrent task: carry on\n",
            Duration::from_secs(20),
        )
        .status(0);
    fleet.run(&["apply", "--yes"]).status(0);
    let injected = wait_ops(&fleet, "deaf", "startup_context_injected", 1);
    assert_eq!(injected.len(), 1, "{injected:?}");
    wait_ops(&fleet, "deaf", "safe_mode", 1);
    let pane = pane_of(&fleet, "deaf");
    wait_until(Duration::from_secs(5), "safe phase", || {
        pane_says(&fleet, &pane, "#{@phoenix_phase}") == "safe"
    });
    // What waited in the terminal would have been read within a poll of the prompt.
    std::thread::sleep(Duration::from_secs(2));
    let still_in_safe_mode = || {
        let screen = fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .unwrap_or_default();
        assert_eq!(
            pane_says(&fleet, &pane, "#{pane_dead}"),
            "0",
            "pane closed:\n{screen}"
        );
        assert_eq!(
            ops_named(&fleet, "deaf", "agent_start").len(),
            1,
            "{screen}"
        );
        assert_eq!(ops_named(&fleet, "deaf", "crash_loop").len(), 1, "{screen}");
        assert!(ops_named(&fleet, "deaf", "operator_restart").is_empty());
        assert!(ops_named(&fleet, "deaf", "operator_stop").is_empty());
        assert_eq!(pane_says(&fleet, &pane, "#{@phoenix_phase}"), "safe");
        let events = support::read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
        assert_eq!(events.len(), 1, "{events:?}");
    };
    still_in_safe_mode();
    // A paste into the prompt itself (the way phoenix gives text) is no one's answer either.
    fleet
        .tmux(&["set-buffer", "-b", "t", "restart\nquit\n"])
        .unwrap();
    fleet
        .tmux(&["paste-buffer", "-p", "-d", "-b", "t", "-t", &pane])
        .unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
    support::wait_for_screen(
        &fleet,
        &pane,
        "pasted text is not read here",
        Duration::from_secs(5),
    );
    std::thread::sleep(Duration::from_secs(1));
    still_in_safe_mode();

    // A person's word, typed after the prompt, still restarts it.
    type_into(&fleet, &pane, "restart");
    wait_ops(&fleet, "deaf", "agent_start", 2);
    let restart = &ops_named(&fleet, "deaf", "operator_restart")[0];
    assert_eq!(restart["from"], "safe_mode");
}

/// `phoenix restart` while `phoenix run` reconciles: the CLI is stopped under its wrapper,
/// which starts the next one once it has stopped what the old one left behind (here a tool
/// in the CLI's process group that ignores SIGTERM: seconds). The daemon, woken by the restart, took the pane without its
/// CLI for dead and restarted it a second time (an extra stop, start and handoff). Every
/// restart is carried out once.
#[test]
fn an_operator_restart_is_carried_out_once_while_the_daemon_reconciles() {
    let fleet = Fleet::new();
    let (agent, work) = script(
        &fleet,
        "slow",
        "#!/bin/sh\n\
         sh -c 'trap \"\" TERM; sleep 60' </dev/null >/dev/null 2>&1 &\n\
         echo slow agent up\n\
         exec sleep 1000\n",
    );
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n\
         [defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\n\
         max_crashes = 100\ncrash_window = \"1h\"\n\n\
         [[agent]]\nname = \"slow\"\ncli = \"custom\"\ncommand = \"{}\"\nworkdir = \"{}\"\n",
        fleet.socket,
        agent.display(),
        work.display()
    ));
    let daemon = Daemon::start(&fleet, &["-v"]);
    fleet.wait_running(&["slow"]);
    let restarts = 3;
    for n in 1..=restarts {
        fleet
            .run_within(&["restart", "slow"], Duration::from_secs(60))
            .status(0)
            .stdout_has("restarted resuming its session");
        wait_ops(&fleet, "slow", "agent_start", n + 1);
        fleet.wait_running(&["slow"]);
    }
    // Long enough for a reconcile pass after the last start.
    std::thread::sleep(Duration::from_secs(3));
    let starts = ops_named(&fleet, "slow", "agent_start");
    let ends = ops_named(&fleet, "slow", "agent_exit");
    let log = daemon.log();
    assert_eq!(starts.len(), restarts + 1, "{ends:?}\n{log}");
    assert_eq!(ends.len(), restarts, "{ends:?}");
    assert!(
        ends.iter().all(|e| e["reason"] == "operator_restart"),
        "{ends:?}"
    );
    // The daemon's one change: the first start.
    let applied: Vec<_> = ops_named(&fleet, "slow", "apply")
        .into_iter()
        .filter(|o| o["action"] != "init_state")
        .collect();
    assert_eq!(applied.len(), 1, "the daemon acted too: {applied:?}");
    assert_eq!(applied[0]["action"], "start", "{applied:?}");
    assert!(!log.contains("restarted in pane"), "{log}");
    assert_eq!(daemon.stop(), Some(0));
}
