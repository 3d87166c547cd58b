//! The installed version of an agent's CLI: detected once per install (cached by the
//! program's path, size and mtime), reported by `plan` and `doctor`, warned about outside the
//! versions phoenix was proven with, and the hooks made for it. Fake CLIs here are scripts
//! named like the real ones that print what the real one prints to `--version`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::Fleet;

/// A script `<dir>/bin/<name>` that answers `--version` with `answer` and counts how often it
/// was asked in `<dir>/asked`.
fn fake_cli(dir: &Path, name: &str, answer: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    let asked = dir.join("asked");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho x >> '{}'\nif [ \"$1\" = --version ]; then echo '{answer}'; exit 0; fi\nsleep 600\n",
            asked.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn asked(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("asked"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn agent(name: &str, cli: &str, program: &Path) -> String {
    let work = program.parent().unwrap().parent().unwrap().join("work");
    std::fs::create_dir_all(&work).unwrap();
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"{cli}\"\ncommand = \"{}\"\nworkdir = \"{}\"\n",
        program.display(),
        work.display()
    )
}

#[test]
fn a_newer_claude_code_than_proven_is_warned_about_and_asked_once_per_install() {
    let fleet = Fleet::new();
    let claude = fake_cli(fleet.path(), "claude", "2.1.999 (Claude Code)");
    fleet.toml(&agent("cc", "claude", &claude));
    std::fs::create_dir_all(fleet.state_dir()).unwrap();

    let plan = fleet.run(&["plan"]);
    plan.stdout_has("hooks made for Claude Code 2.1.332 (installed: 2.1.999)")
        .stdout_has("CLI versions phoenix was not proven with")
        .stdout_has(
            "! agent `cc`: Claude Code 2.1.999 is newer than the versions phoenix was proven \
             with (2.1.197–2.1.332)",
        );
    let json = fleet.run(&["plan", "--json"]).json();
    let v = &json["cli_versions"][0];
    assert_eq!(v["agent"], "cc");
    assert_eq!(v["version"], "2.1.999");
    assert_eq!(v["hooks_made_for"], "2.1.332");
    assert_eq!(v["standing"], "newer");
    assert!(v["hint"].as_str().is_some());
    let doctor = fleet.run(&["doctor", "--json"]).json();
    assert_eq!(doctor["cli_versions"][0]["standing"], "newer");
    // Three commands, one `--version`: the answer is kept while the program is unchanged.
    assert_eq!(asked(fleet.path()), 1);

    // An upgrade (the file changes) is asked again, and a proven version is no warning.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fake_cli(fleet.path(), "claude", "2.1.332 (Claude Code)");
    let plan = fleet.run(&["plan"]);
    plan.stdout_has("does not exist yet; hooks made for Claude Code 2.1.332\n");
    assert!(!plan.stdout().contains("not proven with"));
    assert_eq!(asked(fleet.path()), 2);
    fleet.run(&["doctor"]).stdout_has(
        "Claude Code 2.1.332 (proven 2.1.197–2.1.332); hooks made for Claude Code 2.1.332",
    );
}

#[test]
fn an_older_claude_code_gets_no_hook_event_it_does_not_know() {
    let fleet = Fleet::new();
    let claude = fake_cli(fleet.path(), "claude", "2.1.100 (Claude Code)");
    fleet.toml(&agent("cc", "claude", &claude));
    fleet
        .run(&["plan"])
        .stdout_has("hooks made for Claude Code 2.1.197 (installed: 2.1.100)")
        .stdout_has("is older than the versions phoenix was proven with")
        .stdout_has("upgrade Claude Code to 2.1.197–2.1.332 or newer");
    let shown = fleet
        .run(&["hooks", "show", "--agent", "cc", "--json"])
        .json();
    assert_eq!(shown["cli_version"]["hooks_made_for"], "2.1.197");
    let hooks = &shown["files"][0]["content"]["hooks"];
    for event in hooks.as_object().unwrap().keys() {
        assert!(
            phoenix::agent_cli::claude::PROVEN[0]
                .events
                .contains(&event.as_str()),
            "{event}"
        );
    }
}

#[test]
fn a_wrapper_script_is_never_started_to_learn_a_version() {
    let fleet = Fleet::new();
    // Named like no CLI: phoenix must not run it (it would start the agent).
    let script = fake_cli(fleet.path(), "my-claude.sh", "2.1.332 (Claude Code)");
    fleet.toml(&agent("cc", "claude", &script));
    let plan = fleet.run(&["plan"]);
    plan.stdout_has("hooks made for Claude Code 2.1.197 (installed version not known)");
    assert!(!plan.stdout().contains("not proven with"));
    fleet
        .run(&["doctor"])
        .stdout_has("the Claude Code version is not known")
        .stdout_has("is not Claude Code's own program");
    assert_eq!(asked(fleet.path()), 0);
}

#[test]
fn codex_and_gemini_versions_are_read_as_they_print_them() {
    let fleet = Fleet::new();
    let codex = fake_cli(&fleet.path().join("c"), "codex", "codex-cli 0.171.0");
    let gemini = fake_cli(&fleet.path().join("g"), "gemini", "0.61.0");
    fleet.toml(&format!(
        "{}\n{}",
        agent("cx", "codex", &codex),
        agent("gm", "gemini", &gemini)
    ));
    let json = fleet.run(&["doctor", "--json"]).json();
    let versions = json["cli_versions"].as_array().unwrap();
    assert_eq!(versions[0]["version"], "0.171.0");
    assert_eq!(versions[0]["standing"], "proven");
    assert_eq!(versions[1]["version"], "0.61.0");
    assert_eq!(versions[1]["standing"], "proven");
}
