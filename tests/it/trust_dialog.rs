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
