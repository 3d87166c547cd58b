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

/// The real Claude Code 2.1.197 and 2.1.332 side by side, each started by phoenix with the
/// hooks made for its own version: 2.1.197 (which stops at a blocking "Settings Warning" for
/// a settings file naming an event it does not know) gets none it does not know and runs
/// them, 2.1.332 gets every event phoenix installs, its newer ones too. With the real-CLI
/// suites (`PHOENIX_TEST_REAL_CLIS=1`); both versions whatever `PHOENIX_TEST_CLI_VERSIONS`
/// says, since the difference is the point.
#[test]
fn real_claude_code_2_1_197_and_2_1_332_each_run_the_hooks_made_for_their_version() {
    use crate::real_cli::{enabled, prepared_home};
    use crate::support::model_server::{ModelServer, Turn};
    use phoenix::agent_cli::claude::PROVEN;
    use std::collections::BTreeSet;
    use std::time::Duration;

    if !enabled() {
        return;
    }
    let versions = ["2.1.197", "2.1.332"];
    let fleet = Fleet::new();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let mut toml = String::new();
    let mut servers = Vec::new();
    for v in versions {
        let bin = crate::support::npm_cli_at("claude", "@anthropic-ai/claude-code", v, "claude");
        let root = fleet.path().join(v);
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let home = prepared_home(&root, &work, key);
        let server = ModelServer::start(vec![
            Turn::bash(&format!("echo {v} > out.txt")),
            Turn::text("Done."),
        ]);
        toml.push_str(&format!(
            "[[agent]]\nname = \"cc{}\"\ncli = \"claude\"\ncommand = \"'{}' --dangerously-skip-permissions\"\n\
             workdir = \"{}\"\nenv = {{ HOME = \"{}\", ANTHROPIC_BASE_URL = \"{}\", ANTHROPIC_API_KEY = \"{key}\", \
             IS_SANDBOX = \"1\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_TELEMETRY = \"1\", \
             DISABLE_ERROR_REPORTING = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
            v.replace('.', ""),
            bin.display(),
            work.display(),
            home.display(),
            server.base_url()
        ));
        servers.push(server);
    }
    fleet.toml(&toml);
    let names: Vec<String> = versions
        .iter()
        .map(|v| format!("cc{}", v.replace('.', "")))
        .collect();

    // What `plan` says each agent's hooks are made for.
    let plan = fleet.run(&["plan", "--json"]).json();
    for (name, v) in names.iter().zip(versions) {
        let seen = plan["cli_versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["agent"] == name.as_str())
            .unwrap_or_else(|| panic!("{name}: {plan}"))
            .clone();
        assert_eq!(seen["version"], v, "{seen}");
        assert_eq!(seen["hooks_made_for"], v, "{seen}");
        assert_eq!(seen["standing"], "proven", "{seen}");
    }
    fleet.run(&["apply", "--yes"]).status(0);
    let events = |v: &str| -> BTreeSet<String> {
        let path = fleet.path().join(v).join("work/.claude/settings.json");
        let settings: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        settings["hooks"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let (old, new) = (events(versions[0]), events(versions[1]));
    for e in &old {
        assert!(PROVEN[0].events.contains(&e.as_str()), "2.1.197 got {e}");
    }
    for e in &new {
        assert!(PROVEN[1].events.contains(&e.as_str()), "2.1.332 got {e}");
    }
    // 2.1.332 gets everything 2.1.197 gets, and each event phoenix installs that 2.1.197
    // does not know goes to 2.1.332 alone.
    let known_to_old: BTreeSet<String> = new
        .iter()
        .filter(|e| PROVEN[0].events.contains(&e.as_str()))
        .cloned()
        .collect();
    assert_eq!(old, known_to_old, "2.1.332: {new:?}");
    assert!(
        new.contains("SessionStart") && new.contains("StopFailure"),
        "{new:?}"
    );

    fleet.wait_running(&[names[0].as_str(), names[1].as_str()]);
    for (name, v) in names.iter().zip(versions) {
        let pane = fleet.agent_status(name)["pane"]
            .as_str()
            .unwrap()
            .to_string();
        crate::support::wait_until_explained(
            Duration::from_secs(90),
            &format!("{v}'s session start hook"),
            || {
                fleet
                    .ops(name)
                    .iter()
                    .any(|o| o["event"] == "session_start")
            },
            || fleet.explain(name, &pane),
        );
        crate::real_cli::type_prompt(&fleet, &pane, "write the file");
    }
    for ((name, v), server) in names.iter().zip(versions).zip(&servers) {
        let pane = fleet.agent_status(name)["pane"]
            .as_str()
            .unwrap()
            .to_string();
        let dir = fleet.agent_dir(name);
        crate::support::wait_until_explained(
            Duration::from_secs(90),
            &format!("{v}'s tool call and turn end through its hooks"),
            || {
                crate::support::read_jsonl(&dir.join("tool_use.jsonl"))
                    .iter()
                    .any(|t| t["tool"] == "Bash" && t["ok"] == true)
                    && fleet
                        .ops(name)
                        .iter()
                        .any(|o| o["event"] == "turn_complete")
            },
            || fleet.explain(name, &pane),
        );
        assert_eq!(
            std::fs::read_to_string(fleet.path().join(v).join("work/out.txt"))
                .unwrap()
                .trim(),
            v
        );
        assert!(!server.message_requests().is_empty());
        let screen = fleet
            .tmux(&["capture-pane", "-p", "-S", "-200", "-t", &pane])
            .unwrap_or_default();
        assert!(!screen.contains("Settings Warning"), "{v}: {screen}");
        assert!(!screen.contains("Unknown hook event"), "{v}: {screen}");
        assert!(!dir.join("hook_errors.jsonl").exists(), "{v}");
    }
}
