//! "Needs a human" end to end with real processes on a private tmux server and a loopback
//! HTTP receiver standing in for ntfy and a Slack incoming webhook: the notification hook
//! (through the agent's wrapper, no daemon), approval prompts of Codex and Gemini on a screen,
//! agents idle with open loops; and the healthy agents that look odd (the word "approve" in
//! ordinary output, idle without open loops), which are never flagged.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::http_receiver::HttpReceiver;
use support::{Fleet, read_jsonl, wait_until};

/// `[notify]` with ntfy and a Slack-format webhook, both to `receiver`.
fn notify_to(receiver: &HttpReceiver) -> String {
    format!(
        "[notify]\ninput_cooldown = \"0s\"\n\
         webhook = {{ url_env = \"PHOENIX_TEST_SLACK_URL\", format = \"slack\" }}\n\
         ntfy = {{ url = \"{}/fleet-alerts\", priority = \"urgent\" }}\n\n",
        receiver.url
    )
}

/// `phoenix …` with the Slack webhook's URL in the environment.
fn run(fleet: &Fleet, receiver: &HttpReceiver, args: &[&str]) -> std::process::Output {
    fleet
        .command(args)
        .env("PHOENIX_TEST_SLACK_URL", format!("{}/slack", receiver.url))
        .output()
        .unwrap()
}

fn watchdog(fleet: &Fleet, receiver: &HttpReceiver) -> Value {
    let out = run(fleet, receiver, &["watchdog", "--once", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "watchdog output is not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn verdict<'a>(report: &'a Value, agent: &str) -> &'a Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap_or_else(|| panic!("no {agent} in {report}"))
}

/// The ntfy messages the receiver got about `agent`.
fn pushes_about(receiver: &HttpReceiver, agent: &str) -> Vec<Value> {
    receiver
        .to("/")
        .iter()
        .map(|r| r.json())
        .filter(|j| {
            j["title"]
                .as_str()
                .is_some_and(|t| t.starts_with(&format!("{agent}:")))
        })
        .collect()
}

fn type_into(fleet: &Fleet, agent: &str, text: &str) {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap()
        .to_string();
    fleet.tmux(&["send-keys", "-t", &pane, "-l", text]).unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
}

fn state(fleet: &Fleet, agent: &str) -> Value {
    std::fs::read_to_string(fleet.agent_dir(agent).join("state.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

/// The shapes the two services expect: ntfy's JSON publish (to the server's root, the topic
/// in the body, an integer priority, a click link) and Slack's `{"text"}`.
#[test]
fn a_needs_input_test_reaches_ntfy_and_slack_in_their_shapes() {
    let receiver = HttpReceiver::start();
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[notify]\nwebhook = {{ url_env = \"PHOENIX_TEST_SLACK_URL\", format = \"slack\" }}\n\n\
         [notify.ntfy]\nurl = \"{}/fleet-alerts\"\npriority = \"urgent\"\n\
         click = \"https://fleet.example.com/\"\n\n{}",
        receiver.url,
        Fleet::demo_agent("alpha", "")
    ));
    let out = run(
        &fleet,
        &receiver,
        &[
            "notify",
            "test",
            "--needs-input",
            "--agent",
            "alpha",
            "--json",
        ],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["kind"], "needs_input", "{report}");

    let ntfy = receiver.to("/");
    assert_eq!(ntfy.len(), 1, "{:?}", receiver.requests());
    assert_eq!(ntfy[0].method, "POST");
    assert_eq!(ntfy[0].header("content-type"), Some("application/json"));
    let push = ntfy[0].json();
    assert_eq!(push["topic"], "fleet-alerts", "{push}");
    assert_eq!(push["priority"], 5, "{push}");
    assert_eq!(push["click"], "https://fleet.example.com/", "{push}");
    assert!(
        push["title"].as_str().unwrap().starts_with("alpha: "),
        "{push}"
    );
    assert!(push["message"].as_str().unwrap().contains("test"), "{push}");
    assert_eq!(push["tags"][0], "raising_hand", "{push}");

    let slack = receiver.to("/slack");
    assert_eq!(slack.len(), 1, "{:?}", receiver.requests());
    let body = slack[0].json();
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["text"],
        "Slack's incoming webhooks take `text`: {body}"
    );
    assert!(body["text"].as_str().unwrap().starts_with('*'), "{body}");
}

/// The hook says the CLI shows a permission prompt: state.json has the wait, the wrapper
/// (no daemon, no pass) sends it at once, once; `status` shows it; the tool call after the
/// permission ends it.
#[test]
fn a_permission_prompt_from_the_hook_is_sent_by_the_wrapper_and_ends_with_the_next_tool_call() {
    let receiver = HttpReceiver::start();
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        notify_to(&receiver),
        Fleet::demo_agent("alpha", "")
    ));
    // The wrapper reads the webhook URL from its environment: the apply starts it.
    let out = run(&fleet, &receiver, &["apply", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fleet.wait_running(&["alpha"]);
    type_into(&fleet, "alpha", "silent");
    let payload = r#"{"session_id":"s1","hook_event_name":"Notification","message":"Claude needs your permission to use Bash","notification_type":"permission_prompt"}"#;
    for _ in 0..2 {
        fleet
            .run_within_input(
                &[
                    "hook",
                    "notification",
                    "--agent",
                    "alpha",
                    "--cli",
                    "claude",
                ],
                payload.as_bytes(),
                Duration::from_secs(20),
            )
            .status(0);
    }
    let wait = &state(&fleet, "alpha")["needs_input"];
    assert_eq!(wait["reason"], "permission_prompt", "{wait}");
    assert_eq!(wait["source"], "hook", "{wait}");
    wait_until(Duration::from_secs(20), "the wrapper's ntfy push", || {
        !pushes_about(&receiver, "alpha").is_empty()
    });
    let push = &pushes_about(&receiver, "alpha")[0];
    assert!(
        push["message"]
            .as_str()
            .unwrap()
            .contains("Claude needs your permission to use Bash"),
        "{push}"
    );
    assert_eq!(receiver.to("/slack").len(), 1, "{:?}", receiver.requests());
    let row = fleet.agent_status("alpha");
    assert_eq!(row["needs_input"]["reason"], "permission_prompt", "{row}");
    let human = fleet.run(&["status"]);
    human.stdout_has("needs a human: alpha (permission_prompt");

    // A watchdog pass sees the same wait: not sent again, and no silence for a quiet agent
    // that waits.
    let report = watchdog(&fleet, &receiver);
    let a = verdict(&report, "alpha");
    assert_eq!(a["needs_input"]["reason"], "permission_prompt", "{a}");
    assert_eq!(pushes_about(&receiver, "alpha").len(), 1);
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let recorded: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "needs_input")
        .collect();
    assert_eq!(recorded.len(), 1, "{events:?}");
    assert_eq!(recorded[0]["reason"], "permission_prompt");

    // Permission given: the tool runs, its heartbeat ends the wait.
    let post_tool = r#"{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":"","stderr":"","interrupted":false}}"#;
    fleet
        .run_within_input(
            &["hook", "heartbeat", "--agent", "alpha", "--cli", "claude"],
            post_tool.as_bytes(),
            Duration::from_secs(20),
        )
        .status(0);
    assert!(state(&fleet, "alpha").get("needs_input").is_none());
    assert!(fleet.agent_status("alpha")["needs_input"].is_null());
    let ops = fleet.ops("alpha");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "input_given" && o["by"] == "tool_call"),
        "{ops:?}"
    );
    // Not a wait at all: a login that worked.
    fleet
        .run_within_input(
            &["hook", "notification", "--agent", "alpha", "--cli", "claude"],
            br#"{"hook_event_name":"Notification","message":"Logged in","notification_type":"auth_success"}"#,
            Duration::from_secs(20),
        )
        .status(0);
    assert!(state(&fleet, "alpha").get("needs_input").is_none());
    // Claude idle at its prompt: finished work without open loops, a wait with them.
    let idle = br#"{"hook_event_name":"Notification","message":"Claude is waiting for your input","notification_type":"idle_prompt"}"#;
    let idle_hook = || {
        fleet
            .run_within_input(
                &[
                    "hook",
                    "notification",
                    "--agent",
                    "alpha",
                    "--cli",
                    "claude",
                ],
                idle,
                Duration::from_secs(20),
            )
            .status(0);
    };
    idle_hook();
    assert!(state(&fleet, "alpha").get("needs_input").is_none());
    fleet
        .run(&["loop", "add", "alpha", "docs", "finish the docs"])
        .status(0);
    idle_hook();
    assert_eq!(
        state(&fleet, "alpha")["needs_input"]["reason"],
        "idle_prompt"
    );
}

/// Idle at its prompt with open loops past `thresholds.waiting`: a human is needed, told
/// once; idle without open loops is a finished job, never flagged. A prompt ends the wait.
#[test]
fn idle_with_open_loops_needs_a_human_and_idle_without_them_does_not() {
    let receiver = HttpReceiver::start();
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[thresholds]\nwaiting = \"1s\"\n\n{}{}{}",
        notify_to(&receiver),
        Fleet::demo_agent("loopy", ""),
        Fleet::demo_agent("done", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["loopy", "done"]);
    for agent in ["loopy", "done"] {
        type_into(&fleet, agent, "turn true");
    }
    wait_until(Duration::from_secs(20), "both turns over", || {
        ["loopy", "done"]
            .iter()
            .all(|a| state(&fleet, a)["status"] == "idle")
    });
    fleet
        .run(&["loop", "add", "loopy", "parser", "port the parser"])
        .status(0);
    std::thread::sleep(Duration::from_millis(1500));
    let first = watchdog(&fleet, &receiver);
    let loopy = verdict(&first, "loopy");
    assert_eq!(
        loopy["needs_input"]["reason"], "idle_with_open_loops",
        "{loopy}"
    );
    assert_eq!(
        loopy["verdict"], "healthy",
        "waiting is no illness: {loopy}"
    );
    let done = verdict(&first, "done");
    assert!(done.get("needs_input").is_none(), "{done}");
    let pushes = pushes_about(&receiver, "loopy");
    assert_eq!(pushes.len(), 1, "{:?}", receiver.requests());
    assert!(
        pushes[0]["message"]
            .as_str()
            .unwrap()
            .contains("1 open loop"),
        "{}",
        pushes[0]
    );
    assert!(pushes_about(&receiver, "done").is_empty());

    // The same wait, a pass later: shown, not sent again.
    let second = watchdog(&fleet, &receiver);
    assert_eq!(
        verdict(&second, "loopy")["needs_input"]["reason"],
        "idle_with_open_loops"
    );
    assert_eq!(pushes_about(&receiver, "loopy").len(), 1);
    let rows = fleet.status();
    let row = |a: &str| rows.iter().find(|r| r["agent"] == a).unwrap().clone();
    assert_eq!(row("loopy")["needs_input"]["source"], "watchdog");
    assert!(row("done")["needs_input"].is_null());

    // Someone gives it the next task: the wait is over.
    type_into(&fleet, "loopy", "please go on with the parser");
    wait_until(Duration::from_secs(20), "the prompt hook", || {
        state(&fleet, "loopy")["status"] == "working"
    });
    let third = watchdog(&fleet, &receiver);
    assert!(
        verdict(&third, "loopy").get("needs_input").is_none(),
        "{third}"
    );
    assert!(fleet.agent_status("loopy")["needs_input"].is_null());
    let ops = fleet.ops("loopy");
    let names: Vec<&str> = ops.iter().filter_map(|o| o["event"].as_str()).collect();
    assert!(
        names.contains(&"needs_input") && names.contains(&"input_given"),
        "{names:?}"
    );
}

/// Codex's and Gemini's approval prompts, as their TUIs draw them, on screens that stay put:
/// each agent needs a human (and is not "stuck on screen"); an agent that says "approve" in
/// its ordinary output is just working.
#[test]
fn approval_prompts_on_the_screen_need_a_human_but_the_word_approve_does_not() {
    let receiver = HttpReceiver::start();
    let fleet = Fleet::new();
    let script = |name: &str, text: &str| {
        let path = fleet.path().join(format!("{name}.sh"));
        std::fs::write(&path, format!("cat <<'EOF'\n{text}\nEOF\nsleep 1000\n")).unwrap();
        path
    };
    let codex = script(
        "codex",
        "• I'll run the test suite.\n\n  Would you like to run the following command?\n\n  $ cargo test\n\n\
         › 1. Yes, just this once\n  2. Yes, and don't ask again for commands that start with `cargo test`\n\
         \x20 3. No, and tell Codex what to do differently (esc)\n\n  Press enter to confirm or esc to cancel",
    );
    let gemini = script(
        "gemini",
        "╭────────────────────────────────────────╮\n│ ?  Shell rm -rf build                   │\n\
         │ Allow execution of [Shell]?             │\n│ ● 1. Allow once                         │\n\
         │   2. Allow for this session             │\n│   3. No, suggest changes (esc)          │\n\
         ╰────────────────────────────────────────╯",
    );
    let chatty = script(
        "chatty",
        "working: step 4\nthe reviewer will approve the change once CI passes\n\
         Would you like to run the following command? is a string in the codex source\ndone",
    );
    let agent = |name: &str, cli: &str, path: &std::path::Path| {
        format!(
            "[[agent]]\nname = \"{name}\"\ncli = \"{cli}\"\ncommand = \"sh {}\"\n",
            path.display()
        )
    };
    fleet.toml(&format!(
        "{}{}{}{}",
        notify_to(&receiver),
        agent("cx", "codex", &codex),
        agent("gm", "gemini", &gemini),
        agent("chatty", "custom", &chatty)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cx", "gm", "chatty"]);
    // First pass: no baseline; second: the screens are read; third: they did not change.
    watchdog(&fleet, &receiver);
    let second = watchdog(&fleet, &receiver);
    for a in ["cx", "gm", "chatty"] {
        assert!(verdict(&second, a).get("needs_input").is_none(), "{second}");
    }
    let third = watchdog(&fleet, &receiver);
    for (a, question) in [
        ("cx", "Would you like to run the following command?"),
        ("gm", "Allow execution of [Shell]?"),
    ] {
        let v = verdict(&third, a);
        assert_eq!(v["needs_input"]["reason"], "approval_prompt", "{v}");
        assert!(
            v["needs_input"]["message"]
                .as_str()
                .unwrap()
                .contains(question),
            "{v}"
        );
        assert_eq!(
            v["verdict"], "healthy",
            "a prompt is not a wedged screen: {v}"
        );
        assert_eq!(
            pushes_about(&receiver, a).len(),
            1,
            "{:?}",
            receiver.requests()
        );
    }
    let chatty = verdict(&third, "chatty");
    assert!(chatty.get("needs_input").is_none(), "{chatty}");
    assert!(pushes_about(&receiver, "chatty").is_empty());
}

/// With `phoenix serve` running, a push leads to its dashboard (ntfy's `click`), and once it
/// stops, no longer.
#[test]
fn an_ntfy_push_links_to_the_dashboard_of_a_running_serve() {
    let receiver = HttpReceiver::start();
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[notify]\nntfy = {{ url = \"{}/fleet-alerts\" }}\n\n{}",
        receiver.url,
        Fleet::demo_agent("alpha", "")
    ));
    std::fs::create_dir_all(fleet.state_dir()).unwrap();
    let server = support::serve::Server::start(&fleet, &[]);
    let test = || {
        run(&fleet, &receiver, &["notify", "test", "--needs-input"]);
        receiver.to("/").last().unwrap().json()
    };
    let push = test();
    assert_eq!(push["click"], format!("{}/", server.url), "{push}");
    assert_eq!(push["priority"], 4, "the default is high: {push}");
    drop(server);
    let push = test();
    assert!(push.get("click").is_none(), "{push}");
}
