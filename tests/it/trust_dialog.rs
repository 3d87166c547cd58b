//! A CLI stopped at its folder-trust dialog waits for a person: when phoenix could not record
//! the trust itself, the wrapper says what the CLI asks and never replaces the start over and
//! over (Claude Code shows no life while it asks).

use crate::support;

use std::time::Duration;

#[test]
fn a_start_held_at_claudes_trust_dialog_needs_a_person_and_is_not_replaced() {
    let fleet = support::Fleet::new();
    let root = fleet.path();
    std::fs::create_dir(root.join("work")).unwrap();
    // Claude's config is a link into a dotfiles repo: phoenix does not rewrite it.
    let home = root.join("home");
    std::fs::create_dir_all(home.join("dotfiles")).unwrap();
    std::fs::write(home.join("dotfiles/claude.json"), "{}").unwrap();
    std::os::unix::fs::symlink(home.join("dotfiles/claude.json"), home.join(".claude.json"))
        .unwrap();
    // What Claude Code 2.1.332 draws, then it waits.
    let script = root.join("claude.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nprintf ' Accessing workspace:\\n\\n %s\\n\\n ❯ No, exit\\n   Yes, I trust this folder\\n' \"$PWD\"\nexec cat\n",
    )
    .unwrap();
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"1s\"\n\n\
         [[agent]]\nname = \"cc\"\ncli = \"claude\"\ncommand = \"sh '{}'\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\" }}\n",
        script.display(),
        home.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["cc"])[0];
    support::wait_until(Duration::from_secs(20), "the wait for a person", || {
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "needs_input" && o["reason"] == "trust_dialog")
    });
    // Several life deadlines later: the same start, still asking.
    std::thread::sleep(Duration::from_secs(4));
    let ops = fleet.ops("cc");
    assert!(
        ops.iter().any(|o| o["event"] == "hooks_trust_failed"),
        "{ops:?}"
    );
    assert!(!ops.iter().any(|o| o["event"] == "agent_exit"), "{ops:?}");
    let asks: Vec<_> = ops.iter().filter(|o| o["event"] == "needs_input").collect();
    assert_eq!(asks.len(), 1, "said once: {ops:?}");
    assert!(
        asks[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Claude Code asks whether to trust"),
        "{ops:?}"
    );
    assert_eq!(fleet.wait_running(&["cc"])[0], pid);
    assert_eq!(
        std::fs::read_to_string(home.join("dotfiles/claude.json")).unwrap(),
        "{}"
    );
}

/// What Claude Code 2.1.332 does at its trust dialog: "No, exit" is selected and Enter quits
/// with exit 1. A key there (a person's, or anything typed into the pane) is an answer, not a
/// crash: the agent waits for a person and is never started again by itself until the folder
/// is trusted; `phoenix restart` starts it again (to the same question here).
#[test]
fn an_exit_at_claudes_trust_dialog_waits_for_a_person_until_the_folder_is_trusted() {
    let fleet = support::Fleet::new();
    let root = fleet.path();
    std::fs::create_dir(root.join("work")).unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(home.join("dotfiles")).unwrap();
    let config = home.join("dotfiles/claude.json");
    std::fs::write(&config, "{}").unwrap();
    std::os::unix::fs::symlink(&config, home.join(".claude.json")).unwrap();
    let script = root.join("claude.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         if grep -q hasTrustDialogAccepted \"$HOME/.claude.json\"; then echo trusted; exec cat; fi\n\
         printf ' Accessing workspace:\\n\\n %s\\n\\n ❯ No, exit\\n   Yes, I trust this folder\\n' \"$PWD\"\n\
         read answer\n\
         echo \"Claude Code didn't start because this folder isn't trusted.\"\n\
         exit 1\n",
    )
    .unwrap();
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n\
         [[agent]]\nname = \"cc\"\ncli = \"claude\"\ncommand = \"sh '{}'\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\" }}\n",
        script.display(),
        home.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let starts = || {
        fleet
            .ops("cc")
            .iter()
            .filter(|o| o["event"] == "agent_start")
            .count()
    };
    let decline = |n: usize| {
        fleet.wait_running(&["cc"]);
        let pane = fleet.agent_status("cc")["pane"]
            .as_str()
            .unwrap()
            .to_string();
        support::wait_for_screen(
            &fleet,
            &pane,
            "Accessing workspace",
            Duration::from_secs(20),
        );
        fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
        support::wait_until(Duration::from_secs(20), "safe mode", || {
            fleet
                .ops("cc")
                .iter()
                .filter(|o| o["event"] == "safe_mode")
                .count()
                == n
        });
        pane
    };
    let pane = decline(1);
    // Twenty cooldowns later: the one start, no crash, waiting for a person.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(starts(), 1, "{:#?}", fleet.ops("cc"));
    let ops = fleet.ops("cc");
    let exit = ops.iter().find(|o| o["event"] == "agent_exit").unwrap();
    assert_eq!(exit["reason"], "trust_declined", "{exit}");
    assert_eq!(exit["counts_as_crash"], false, "{exit}");
    let asks: Vec<_> = ops.iter().filter(|o| o["event"] == "needs_input").collect();
    assert_eq!(asks.len(), 1, "{ops:#?}");
    assert_eq!(asks[0]["reason"], "trust_dialog");
    let status = fleet.agent_status("cc");
    assert_eq!(status["state"], "safe-mode", "{status}");
    let screen = fleet
        .tmux(&["capture-pane", "-p", "-S", "-100", "-t", &pane])
        .unwrap();
    assert!(screen.contains("exited at that question"), "{screen}");
    assert!(screen.contains("or trust the folder"), "{screen}");

    // A person restarts it: the same question, the same answer, the same wait.
    fleet.run(&["restart", "cc"]).status(0);
    decline(2);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(starts(), 2, "{:#?}", fleet.ops("cc"));

    // The folder is trusted where the config lives: it starts by itself.
    std::fs::write(
        &config,
        format!(
            "{{\"projects\": {{\"{}\": {{\"hasTrustDialogAccepted\": true}}}}}}",
            std::fs::canonicalize(root.join("work")).unwrap().display()
        ),
    )
    .unwrap();
    support::wait_until(Duration::from_secs(10), "the start after the trust", || {
        starts() == 3
    });
    let ops = fleet.ops("cc");
    let given = ops
        .iter()
        .find(|o| o["event"] == "input_given")
        .unwrap_or_else(|| panic!("{ops:#?}"));
    assert_eq!(given["by"], "folder_trusted", "{given}");
    assert_eq!(given["reason"], "trust_dialog", "{given}");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fleet.agent_dir("cc").join("state.json")).unwrap())
            .unwrap();
    assert!(state["needs_input"].is_null(), "{state}");
}
