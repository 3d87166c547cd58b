//! The real Claude Code (pinned, driven by the scripted model server) waiting for a person:
//! without bypass mode a Bash call asks for permission, its Notification hook (installed by
//! `apply`) records the wait, the agent's wrapper pushes it to ntfy (a loopback receiver), and
//! the permission given ends it. Runs with `PHOENIX_TEST_REAL_CLIS=1`, like real_cli.rs.

use crate::real_cli::{claude_bin, enabled, prepared_home};
use crate::support;

use std::time::Duration;

use support::http_receiver::HttpReceiver;
use support::model_server::{ModelServer, Turn};
use support::{read_jsonl, wait_until};

#[test]
fn real_claude_asking_for_permission_is_pushed_once_and_the_permission_ends_the_wait() {
    if !enabled() {
        return;
    }
    let receiver = HttpReceiver::start();
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let server = ModelServer::start(vec![
        Turn::bash("echo approved > out.txt"),
        Turn::text("Wrote it."),
    ]);
    // The `default` permission mode: a Bash call that writes asks first (2.1.332's own
    // default is `auto`, which runs it unasked, so the mode is named).
    fleet.toml(&format!(
        "[notify]\nntfy = {{ url = \"{}/fleet-alerts\" }}\n\n\
         [[agent]]\nname = \"cc\"\ncli = \"claude\"\ncommand = \"'{}' --permission-mode default\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\", ANTHROPIC_BASE_URL = \"{}\", ANTHROPIC_API_KEY = \"{key}\", \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_TELEMETRY = \"1\", \
         DISABLE_ERROR_REPORTING = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
        receiver.url,
        bin.display(),
        home.display(),
        server.base_url()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let settings = std::fs::read_to_string(work.join(".claude/settings.json")).unwrap();
    assert!(
        settings.contains("hook notification --agent cc"),
        "{settings}"
    );
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = fleet.agent_dir("cc");
    // Its input box is up once SessionStart has run (`ready_after_session_start`).
    wait_until(Duration::from_secs(60), "the session start hook", || {
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "session_start")
    });
    std::thread::sleep(Duration::from_secs(1));
    fleet
        .tmux(&["send-keys", "-t", &pane, "-l", "write the approved file"])
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();

    let screen = || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .unwrap_or_default()
    };
    let explain = || {
        format!(
            "--- screen\n{}\n--- ops\n{:?}\n--- hook errors\n{}",
            screen(),
            fleet.ops("cc"),
            std::fs::read_to_string(dir.join("hook_errors.jsonl")).unwrap_or_default()
        )
    };
    support::wait_until_explained(
        Duration::from_secs(60),
        "the ntfy push",
        || !receiver.to("/").is_empty(),
        explain,
    );
    let push = receiver.to("/")[0].json();
    assert_eq!(push["topic"], "fleet-alerts", "{push}");
    assert!(
        push["title"]
            .as_str()
            .unwrap()
            .starts_with("cc: needs a human"),
        "{push}"
    );
    assert!(
        push["message"].as_str().unwrap().contains("permission"),
        "{push}"
    );
    assert!(
        !work.join("out.txt").exists(),
        "nothing ran before the permission"
    );
    let row = fleet.agent_status("cc");
    assert_eq!(row["needs_input"]["reason"], "permission_prompt", "{row}");
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"] == "needs_input")
            .count(),
        1,
        "{events:?}"
    );

    // A person allows it (the first option, selected): the call runs, the wait is over.
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
    wait_until(Duration::from_secs(30), "the approved call ran", || {
        work.join("out.txt").exists()
    });
    support::wait_until_explained(
        Duration::from_secs(30),
        "the wait ended",
        || fleet.agent_status("cc")["needs_input"].is_null(),
        explain,
    );
    assert!(
        fleet.ops("cc").iter().any(|o| o["event"] == "input_given"),
        "{}",
        explain()
    );
    assert_eq!(receiver.to("/").len(), 1, "one push per wait");
}
