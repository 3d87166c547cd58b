//! `phoenix logs`: the pane's output kept per agent in its state dir (it outlives the pane and
//! `phoenix down`), every agent interleaved with name prefixes, `--previous`, `-n`, `--since`,
//! `--json`; and `status`'s restart count and last exit.

use crate::support;

use std::time::Duration;

use support::{Fleet, kill9, wait_until};

const QUICK_RESTART: &str = "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = 5\ncrash_window = \"1h\"\n\n";

/// An agent that counts its runs: each prints `run number N` (N from a file beside it), then
/// `lines` numbered lines, then waits.
fn counting_agent(fleet: &Fleet, name: &str, lines: u32) -> String {
    let script = fleet.path().join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!(
            "n=$(cat {name}.count 2>/dev/null || echo 0); n=$((n+1)); echo $n > {name}.count\n\
             echo \"run number $n\"\n\
             i=1; while [ $i -le {lines} ]; do echo \"line $i of run $n\"; i=$((i+1)); done\n\
             exec sleep 600\n"
        ),
    )
    .unwrap();
    format!(
        "[[agent]]\nname = \"{name}\"\ncommand = \"sh {}\"\nworkdir = \".\"\n",
        script.display()
    )
}

fn logs(fleet: &Fleet, args: &[&str]) -> String {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    let run = fleet.run(&all);
    run.status(0);
    run.stdout()
}

#[test]
fn the_output_outlives_a_recreated_pane_and_down() {
    let fleet = Fleet::new();
    fleet.toml(&counting_agent(&fleet, "a", 3));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(15), "the first run's output", || {
        logs(&fleet, &["a"]).contains("line 3 of run 1")
    });
    fleet.run(&["down"]).status(0);
    assert!(!fleet.server_running());
    let after_down = logs(&fleet, &["a"]);
    assert!(after_down.contains("run number 1"), "{after_down}");
    assert!(!after_down.contains("── pane"), "{after_down}");
    // A new pane, a new wrapper: the same log goes on.
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(15), "the second run's output", || {
        logs(&fleet, &["a"]).contains("line 3 of run 2")
    });
    let text = logs(&fleet, &["a", "-n", "100"]);
    let first = text.find("line 1 of run 1").expect(&text);
    let second = text.find("run number 2").expect(&text);
    assert!(first < second, "{text}");
    let kept = fleet.agent_dir("a").join("pane.log");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", kept.display());
    fleet.run(&["down"]).status(0);
}

#[test]
fn previous_shows_the_run_before_a_kill_9_restart_and_status_counts_it() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{QUICK_RESTART}{}",
        counting_agent(&fleet, "a", 2)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["a"])[0];
    wait_until(Duration::from_secs(15), "the first run's output", || {
        logs(&fleet, &["a"]).contains("line 2 of run 1")
    });
    let no_previous = fleet.run(&["logs", "a", "--previous"]);
    assert_eq!(no_previous.code(), Some(1), "{}", no_previous.stdout());
    kill9(pid);
    wait_until(Duration::from_secs(20), "the second run's output", || {
        logs(&fleet, &["a"]).contains("line 2 of run 2")
    });
    let previous = logs(&fleet, &["a", "--previous"]);
    assert!(previous.contains("line 2 of run 1"), "{previous}");
    assert!(!previous.contains("of run 2"), "{previous}");
    let json = fleet.run(&["logs", "a", "--previous", "--json"]);
    json.status(0);
    let doc = json.json();
    assert_eq!(doc["previous"], true, "{doc}");
    assert!(
        doc["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["source"] == "output" && l["text"] == "run number 1"),
        "{doc}"
    );
    // status: the restart is counted, and why the last run ended shown.
    wait_until(Duration::from_secs(10), "the restart in status", || {
        let row = fleet.agent_status("a");
        row["restarts"] == 1 && row["last_exit"]["signal"] == "SIGKILL"
    });
    let text = fleet.run(&["status"]).stdout();
    let header = text.lines().next().unwrap_or_default();
    assert!(header.contains("RESTARTS"), "{text}");
    assert!(header.contains("LAST EXIT"), "{text}");
    assert!(text.contains("SIGKILL"), "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}\n{text}"
        );
    }
    let wide = fleet.run(&["status", "-o", "wide"]).stdout();
    assert!(
        wide.lines().next().unwrap_or_default().contains("PANE"),
        "{wide}"
    );
    fleet.run(&["down"]).status(0);
}

#[test]
fn lines_and_since_limit_what_is_shown() {
    let fleet = Fleet::new();
    fleet.toml(&counting_agent(&fleet, "a", 100));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(15), "the output", || {
        logs(&fleet, &["a"]).contains("line 100 of run 1")
    });
    let last = logs(&fleet, &["a", "-n", "5"]);
    assert_eq!(last.lines().count(), 5, "{last}");
    assert!(
        last.lines().last().unwrap().ends_with("line 100 of run 1"),
        "{last}"
    );
    let doc = fleet.run(&["logs", "a", "-n", "3", "--json"]).json();
    assert_eq!(doc["lines"].as_array().map(Vec::len), Some(3), "{doc}");
    assert_eq!(doc["agents"], serde_json::json!(["a"]), "{doc}");
    let future = logs(&fleet, &["a", "--since", "2099-01-01T00:00:00Z"]);
    assert_eq!(future, "", "{future}");
    let hour = logs(&fleet, &["a", "--since", "1h"]);
    assert!(
        hour.contains("line 1 of run 1"),
        "--since lifts the default 40:\n{hour}"
    );
    fleet.run(&["down"]).status(0);
}

#[test]
fn every_agent_interleaved_after_its_name_and_hostile_output_inert() {
    let fleet = Fleet::new();
    let hostile = fleet.path().join("hostile.sh");
    std::fs::write(
        &hostile,
        "printf 'calm \\033]0;title\\007\\033[31mred\\033[0m \\033]52;c;cm0gLXJm\\007done\\n'\nexec sleep 600\n",
    )
    .unwrap();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"bb\"\ncommand = \"sh {}\"\n",
        counting_agent(&fleet, "a", 1),
        hostile.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(15), "both agents' output", || {
        let all = logs(&fleet, &[]);
        all.contains("a  | ") && all.contains("calm red done")
    });
    let out = fleet
        .command(&["logs"])
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert!(
        !out.stdout.contains(&0x1b),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("bb | ") && l.ends_with("calm red done")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("a  | ") && l.ends_with("run number 1")),
        "{text}"
    );
    assert!(
        text.lines()
            .all(|l| l.starts_with("a  | ") || l.starts_with("bb | ")),
        "{text}"
    );
    fleet.run(&["down"]).status(0);
}
