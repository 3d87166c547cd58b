//! An agent that splits its own tmux window, as Claude Code's agent teams do in tmux mode
//! (`teammateMode: "tmux"`: `split-window -d -t <its pane> -h -l 70% -P -F #{pane_id}`, then
//! the teammate's command typed into the new pane). The teammate pane is neither the agent nor
//! an undeclared agent: phoenix addresses the agent's pane by id, and never types into, reads,
//! prunes or kills the teammate's.

use crate::support;

use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// A fake lead agent: it splits a teammate pane off its own (which shows an approval dialog
/// and writes whatever it is typed to a file), then echoes what it is typed.
fn lead_script(fleet: &support::Fleet) -> std::path::PathBuf {
    let root = fleet.path();
    let script = root.join("lead.sh");
    let teammate = format!(
        "printf 'teammate-secret\\nDo you want to proceed?\\n> 1. Yes\\n'; exec cat > '{}'",
        root.join("teammate-input.txt").display()
    );
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             tmux split-window -d -t \"$TMUX_PANE\" -h -l 70% -P -F '#{{pane_id}}' \"{teammate}\" > '{pane}.tmp'\n\
             mv '{pane}.tmp' '{pane}'\n\
             echo lead-ready\n\
             exec cat\n",
            pane = root.join("teammate.pane").display(),
        ),
    )
    .unwrap();
    script
}

fn panes(fleet: &support::Fleet) -> Vec<String> {
    fleet
        .tmux(&["list-panes", "-a", "-F", "#{pane_id}"])
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_teammate_pane_split_into_the_agents_window_is_left_alone() {
    let fleet = support::Fleet::new();
    let script = lead_script(&fleet);
    std::fs::create_dir(fleet.path().join("work")).unwrap();
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\n\n\
         [[agent]]\nname = \"lead\"\ncli = \"custom\"\ncommand = \"sh '{}'\"\nworkdir = \"work\"\n",
        script.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["lead"]);
    let pane_file = fleet.path().join("teammate.pane");
    support::wait_until(WAIT, "the teammate pane", || pane_file.exists());
    let teammate = std::fs::read_to_string(&pane_file)
        .unwrap()
        .trim()
        .to_string();
    let agent_pane = fleet.agent_status("lead")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        teammate.starts_with('%') && teammate != agent_pane,
        "{teammate}"
    );
    // Both in the agent's own window.
    let window = |p: &str| {
        fleet
            .tmux(&["display-message", "-p", "-t", p, "#{window_id}"])
            .unwrap()
    };
    assert_eq!(window(&teammate), window(&agent_pane));
    support::wait_for_screen(&fleet, &teammate, "Do you want to proceed?", WAIT);

    // Not the agent, not an undeclared agent: nothing to plan, nothing pruned.
    let status = fleet.status();
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["pane"], agent_pane.as_str());
    fleet.run(&["plan"]).status(0);
    fleet.run(&["apply", "--yes", "--prune"]).status(0);
    assert!(panes(&fleet).contains(&teammate), "pruned");

    // What phoenix types goes to the agent's pane, never the teammate's.
    fleet
        .run(&["send", "lead", "hello-lead", "--from", "ci"])
        .status(0);
    support::wait_for_screen(&fleet, &agent_pane, "hello-lead", WAIT);
    // The watchdog reads the agent's pane only: the teammate's dialog is not the agent's.
    let report = fleet.run(&["watchdog", "--once", "--json"]).json();
    assert!(!report.to_string().contains("teammate-secret"), "{report}");

    // A restart replaces the agent in its own pane; the teammate keeps running.
    fleet.run(&["restart", "lead"]).status(0);
    support::wait_until(WAIT, "the agent back", || {
        fleet.agent_status("lead")["state"] == "running"
    });
    assert_eq!(fleet.agent_status("lead")["pane"], agent_pane.as_str());
    assert!(panes(&fleet).contains(&teammate), "killed by the restart");
    let dead = fleet
        .tmux(&["display-message", "-p", "-t", &teammate, "#{pane_dead}"])
        .unwrap();
    assert_eq!(dead.trim(), "0", "the teammate's program ended");

    std::thread::sleep(Duration::from_millis(500));
    let typed =
        std::fs::read_to_string(fleet.path().join("teammate-input.txt")).unwrap_or_default();
    assert_eq!(typed, "", "phoenix typed into the teammate pane");
}
