//! The real Claude Code's first start in a folder it does not trust: 2.1.332 asks with "No,
//! exit" selected (Enter quits), 2.1.197 with "Yes" first; nobody is at a supervised agent's
//! keyboard. phoenix records the trust the way Claude's dialog does, for the declared workdir.
//! Runs with the real-CLI suites (`PHOENIX_TEST_REAL_CLIS=1`).

use crate::real_cli::{claude_agent, claude_bin, enabled, type_prompt};
use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::model_server::{ModelServer, Turn};

/// A HOME in which Claude Code skips onboarding and trusts no folder at all.
fn untrusted_home(root: &Path, key: &str) -> PathBuf {
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let state = serde_json::json!({
        "hasCompletedOnboarding": true,
        "numStartups": 3,
        "projects": { "/somewhere/else": { "hasTrustDialogAccepted": false, "lastCost": 0.5 } },
        "customApiKeyResponses": { "approved": [&key[key.len() - 20..]] },
    });
    std::fs::write(home.join(".claude.json"), state.to_string()).unwrap();
    std::fs::write(
        home.join(".claude/settings.json"),
        r#"{"skipDangerousModePermissionPrompt": true}"#,
    )
    .unwrap();
    home
}

#[test]
fn real_claude_first_start_in_an_untrusted_workdir_runs_without_a_person() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = untrusted_home(fleet.path(), key);
    let server = ModelServer::start(vec![
        Turn::bash("echo trusted-ok > out.txt"),
        Turn::text("Wrote it."),
    ]);
    fleet.toml(&claude_agent("cc", &bin, &home, &server, key));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    // Its session starts: no dialog held it (the hook fires once the dialogs are past).
    support::wait_until(Duration::from_secs(60), "the session start", || {
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "session_start")
    });
    type_prompt(&fleet, &pane, "write the file");
    support::wait_until(Duration::from_secs(60), "the bash call ran", || {
        work.join("out.txt").exists()
    });

    let ops = fleet.ops("cc");
    let trusted = ops
        .iter()
        .find(|o| o["event"] == "hooks_trusted")
        .unwrap_or_else(|| panic!("no trust recorded: {ops:?}"));
    assert_eq!(
        trusted["file"],
        home.join(".claude.json").to_string_lossy().as_ref(),
        "{trusted}"
    );
    assert!(
        !ops.iter().any(|o| o["event"] == "agent_exit"),
        "the start was not replaced: {ops:?}"
    );
    // Claude's own file: the trust is there, everything else kept.
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join(".claude.json")).unwrap()).unwrap();
    let canonical = std::fs::canonicalize(&work).unwrap();
    assert_eq!(
        config["projects"][canonical.to_string_lossy().as_ref()]["hasTrustDialogAccepted"],
        true,
        "{config}"
    );
    assert_eq!(config["hasCompletedOnboarding"], true);
    assert_eq!(config["projects"]["/somewhere/else"]["lastCost"], 0.5);
    assert_eq!(
        config["projects"]["/somewhere/else"]["hasTrustDialogAccepted"],
        false
    );
    // (`.claude.json.lock` may be there: the running Claude Code takes it to write the file.)
    let screen = fleet
        .tmux(&["capture-pane", "-p", "-t", &pane])
        .unwrap_or_default();
    assert!(!screen.contains("Yes, I trust this folder"), "{screen}");
}
