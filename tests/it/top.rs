//! `phoenix top` in a real 80×24 terminal: a second private tmux server runs it, the test
//! presses keys with send-keys and reads the screen with capture-pane, against a real fleet.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::{Fleet, wait_until};

/// The terminal `top` runs in: its own tmux server, killed on drop.
pub(crate) struct Screen {
    socket: String,
}

impl Screen {
    pub(crate) fn start(fleet: &Fleet) -> Screen {
        let screen = Screen {
            socket: format!("{}-ui", fleet.socket),
        };
        let command = format!(
            "'{}' --config '{}' top --interval 500ms; echo top-exited-$?; sleep 60",
            support::PHOENIX,
            fleet.config().display()
        );
        let ok = Command::new("tmux")
            .args(["-L", &screen.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "80", "-y", "24", "-e", "TERM=xterm-256color"])
            .arg(command)
            .env_remove("TMUX")
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot start the terminal for top");
        screen
    }

    pub(crate) fn text(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        for k in keys {
            Command::new("tmux")
                .args(["-L", &self.socket, "send-keys", "-t", "0", k])
                .status()
                .unwrap();
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    fn type_text(&self, text: &str) {
        Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "0", "-l", text])
            .status()
            .unwrap();
    }

    pub(crate) fn wait_for(&self, what: &str) -> String {
        wait_until(Duration::from_secs(15), what, || self.text().contains(what));
        self.text()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

#[test]
fn top_shows_the_fleet_and_restarts_injects_and_opens_panes_by_key() {
    let fleet = Fleet::new();
    // Agents that print rarely: an injection waits for a quiet pane.
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\n\n{}{}",
        "[[agent]]\nname = \"alpha\"\ncommand = \"phoenix demo-agent --interval 5s\"\n",
        "[[agent]]\nname = \"bravo\"\ncommand = \"phoenix demo-agent --interval 5s\"\n"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["alpha", "bravo"]);
    std::fs::write(
        fleet.state_dir().join("critical_events.jsonl"),
        format!(
            "{}\n",
            serde_json::json!({"ts": jiff::Timestamp::now().to_string(), "event": "session_unhealthy",
                               "agent": "bravo", "reason": "silent_for_12_minutes", "action_taken": "notified"})
        ),
    )
    .unwrap();

    let screen = Screen::start(&fleet);
    let text = screen.wait_for("2 agents: 2 healthy");
    for needle in [
        "AGENT",
        "CONTEXT",
        "alpha",
        "bravo",
        &pids[0].to_string(),
        "silent_for_12_minutes",
        "r restart",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
    // Everything fits 80 columns: no line of the table is cut.
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    // Restart bravo: asked first, then done, and the new pid shows.
    screen.keys(&["j", "r"]);
    screen.wait_for("Restart `bravo`? y = yes");
    screen.keys(&["y"]);
    screen.wait_for("restarted `bravo` (via wrapper");
    wait_until(Duration::from_secs(15), "a new bravo", || {
        fleet.agent_status("bravo")["pid"].as_u64() != Some(u64::from(pids[1]))
    });
    let new_pid = fleet.agent_status("bravo")["pid"].as_u64().unwrap();
    screen.wait_for(&new_pid.to_string());
    assert_eq!(
        fleet.agent_status("alpha")["pid"].as_u64(),
        Some(u64::from(pids[0]))
    );

    // Inject a line into bravo: the demo agent prints what `say` tells it.
    screen.keys(&["i"]);
    screen.type_text("say hello-from-top");
    screen.wait_for("inject into `bravo`");
    screen.keys(&["Enter"]);
    screen.wait_for("injected into `bravo`");
    let pane = fleet.agent_status("bravo")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(Duration::from_secs(10), "the injected line", || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", &pane])
            .is_some_and(|s| s.lines().any(|l| l.trim() == "hello-from-top"))
    });

    // Open bravo's pane (attach to the fleet's server), detach, and be back in top.
    screen.keys(&["a"]);
    wait_until(Duration::from_secs(10), "bravo's pane", || {
        let t = screen.text();
        !t.contains("phoenix top") && t.contains("hello-from-top")
    });
    screen.keys(&["C-b", "d"]);
    screen.wait_for("back from `bravo`");

    screen.keys(&["q"]);
    screen.wait_for("top-exited-0");
}

#[test]
fn top_without_a_terminal_says_what_to_use_instead() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    fleet
        .run(&["top"])
        .status(1)
        .stderr_has("needs a terminal")
        .stderr_has("phoenix status --json");
}

/// `--interval 0s` read the fleet in a busy loop.
#[test]
fn a_refresh_interval_below_the_minimum_is_refused() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    for interval in ["0s", "50ms"] {
        fleet
            .run(&["top", "--interval", interval])
            .status(64)
            .stderr_has("is too short: the minimum is 200ms");
    }
}

/// Who waits for a person and what each agent spent today: `needs you` in the agent's row,
/// the count in the title, the wait itself on the key line for the selected agent, and the
/// estimated cost today in TODAY (priced from `[prices]`); an agent that waits for nobody
/// shows its health as before.
#[test]
fn top_shows_who_needs_a_human_and_what_each_spent_today() {
    let (fleet, _) = support::spending_fleet_with_a_waiting_agent("", "alpha", "bravo");

    let screen = Screen::start(&fleet);
    let text = screen.wait_for("1 needs a human");
    let row = |agent: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(agent))
            .unwrap_or_else(|| panic!("no {agent} row in\n{text}"))
            .to_string()
    };
    assert!(text.contains("TODAY"), "{text}");
    assert!(row("alpha").contains("needs you"), "{text}");
    assert!(row("alpha").contains('$'), "{text}");
    assert!(!row("bravo").contains("needs you"), "{text}");
    assert!(row("bravo").contains("healthy"), "{text}");
    assert!(row("bravo").contains('$'), "{text}");
    // The selected agent (alpha, the first) says what it waits for.
    assert!(
        text.contains("alpha needs a human (permission_prompt"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    screen.keys(&["q"]);
    screen.wait_for("top-exited-0");
}

/// `d` shows the selected agent's details in place of the events: why it is down (flaky: safe
/// mode after its crash loop, its crashes under the hours of the day), its tokens per hour, its
/// pane's last lines; `s` stops an agent and `S` starts it again, each confirmed with `y`.
#[test]
fn top_says_why_an_agent_is_down_shows_its_day_and_pane_and_stops_and_starts_it() {
    let fleet = support::worker_and_flaky_fleet();

    let screen = Screen::start(&fleet);
    screen.wait_for("d details");
    // worker first: running, a bar this hour, its pane.
    screen.keys(&["d"]);
    let text = screen.wait_for("working: step");
    assert!(text.contains("running (healthy)"), "{text}");
    assert!(
        text.contains(" today ") && text.contains(" tokens · $"),
        "{text}"
    );
    assert!(text.contains("0 today · 00h to 24h"), "{text}");
    // flaky: safe mode, its two crashes marked.
    screen.keys(&["j"]);
    let text = screen.wait_for("safe mode since");
    assert!(text.contains("crashes: 2 in the window (max 2)"), "{text}");
    assert!(text.contains('×') && text.contains("2 today"), "{text}");
    assert!(text.contains("last stop: crash, exit code"), "{text}");
    println!("top with flaky's details:\n{text}");

    // Stop worker: asked first, then stopped (and it says how to start it).
    screen.keys(&["k", "s"]);
    screen.wait_for("Stop `worker` (down until started)?");
    screen.keys(&["y"]);
    wait_until(Duration::from_secs(15), "worker stopped", || {
        fleet.agent_status("worker")["state"] == "stopped"
    });
    screen.wait_for("stopped on purpose: down until started (S");
    screen.keys(&["S"]);
    screen.wait_for("Start `worker`?");
    screen.keys(&["y"]);
    fleet.wait_running(&["worker"]);
    screen.wait_for("running (healthy)");
    screen.keys(&["q"]);
    screen.wait_for("top-exited-0");
}
