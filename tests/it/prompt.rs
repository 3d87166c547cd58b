//! An interactive `apply` at its question holds no lock: the operator's terminal is a real
//! terminal (a tmux pane of a server of its own), the answer typed into it. While it waits, a
//! `phoenix restart` goes through and the daemon revives a killed pane; a plan that changed
//! while the operator was asked is shown and asked again before anything is applied.

use crate::support;

use std::time::{Duration, Instant};

use support::{Fleet, PHOENIX, kill9, wait_until};

/// What `apply` asks.
const QUESTION: &str = "Only `yes` will be accepted";

/// The operator's terminal: phoenix run at a tmux pane of a private server (not the fleet's),
/// with the test's scrubbed environment; after phoenix exits the pane says how.
struct Terminal {
    socket: String,
}

impl Terminal {
    fn start(fleet: &Fleet, args: &[&str]) -> Terminal {
        let socket = format!("{}-tty", fleet.socket);
        let home = fleet.path().join("home");
        let config = fleet.config();
        let mut words: Vec<String> = vec![
            "env".into(),
            "-i".into(),
            format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
            format!("HOME={}", home.display()),
            "TERM=xterm".into(),
            PHOENIX.into(),
            "--config".into(),
            config.to_string_lossy().into_owned(),
        ];
        words.extend(args.iter().map(|a| a.to_string()));
        let line = format!(
            "{}; echo \"[exited $?]\"; sleep 600",
            shlex::try_join(words.iter().map(String::as_str)).unwrap()
        );
        let started = std::process::Command::new("tmux")
            .args(["-L", &socket, "new-session", "-d", "-s", "tty"])
            .args(["-x", "200", "-y", "60", "-c"])
            .arg(fleet.path())
            .arg(&line)
            .env_remove("TMUX")
            .status()
            .unwrap();
        assert!(started.success(), "the operator's terminal starts");
        Terminal { socket }
    }

    /// Everything the terminal showed, its scrollback included.
    fn screen(&self) -> String {
        let out = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-J"])
            .args(["-S", "-2000", "-t", "tty"])
            .env_remove("TMUX")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[track_caller]
    fn wait_for(&self, needle: &str, times: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.screen().matches(needle).count() >= times {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the terminal never showed {needle:?} {times} time(s):\n{}",
            self.screen()
        );
    }

    fn answer(&self, text: &str) {
        for keys in [&["-l", text][..], &["Enter"][..]] {
            let sent = std::process::Command::new("tmux")
                .args(["-L", &self.socket, "send-keys", "-t", "tty"])
                .args(keys)
                .env_remove("TMUX")
                .status()
                .unwrap();
            assert!(sent.success());
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        support::kill_tmux_server(&self.socket);
    }
}

fn pane_of(fleet: &Fleet, agent: &str) -> String {
    fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap()
        .to_string()
}

fn pane_pid(fleet: &Fleet, pane: &str) -> u32 {
    fleet
        .tmux(&["display-message", "-p", "-t", pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// While `apply` waits at its question, `phoenix restart` goes through at once (it waited a
/// minute for the fleet lock and failed); the fleet changes meanwhile (a pane is closed), so
/// the yes is not to what would now be applied: the new plan is shown and asked again.
#[test]
fn an_apply_at_its_question_holds_no_lock_and_asks_again_when_the_plan_changed() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}\n{}",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("beta", "")
    ));
    fleet.run(&["apply", "--yes", "alpha"]).status(0);
    let before = fleet.wait_running(&["alpha"]);

    let tty = Terminal::start(&fleet, &["apply"]);
    tty.wait_for(QUESTION, 1, Duration::from_secs(20));
    assert!(
        tty.screen().contains("Plan: 1 to start"),
        "{}",
        tty.screen()
    );

    let asked = Instant::now();
    fleet
        .run_within(&["restart", "alpha"], Duration::from_secs(40))
        .status(0)
        .stdout_has("agent `alpha` restarted");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "restart took {:?}",
        asked.elapsed()
    );
    let restarted = fleet.wait_running(&["alpha"]);
    assert_ne!(restarted, before);

    // The fleet changes under the question: alpha's pane is closed.
    let pane = pane_of(&fleet, "alpha");
    fleet.tmux(&["kill-pane", "-t", &pane]);
    wait_until(Duration::from_secs(10), "alpha without a pane", || {
        fleet.agent_status("alpha")["pane"].is_null()
    });
    tty.answer("yes");
    tty.wait_for(
        "The plan changed while you were asked",
        1,
        Duration::from_secs(20),
    );
    tty.wait_for(QUESTION, 2, Duration::from_secs(20));
    assert!(
        tty.screen().contains("Plan: 2 to start"),
        "{}",
        tty.screen()
    );
    assert!(
        fleet.agent_status("beta")["pane"].is_null(),
        "nothing applied before the second yes"
    );
    tty.answer("yes");
    tty.wait_for("[exited 0]", 1, Duration::from_secs(30));
    fleet.wait_running(&["alpha", "beta"]);
}

/// The daemon revives a killed pane while an interactive apply waits at its question (the
/// pane stayed dead until the question was answered).
#[test]
fn the_daemon_revives_a_killed_pane_while_an_apply_waits_at_its_question() {
    let fleet = Fleet::new();
    let header = format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n",
        fleet.socket
    );
    fleet.raw_toml(&format!(
        "{header}{}\n{}",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("gone", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["alpha", "gone"]);
    // `gone` leaves phoenix.toml: only `--prune` (never the daemon) stops it.
    fleet.raw_toml(&format!("{header}{}", Fleet::demo_agent("alpha", "")));
    let daemon = crate::supervise::Daemon::start(&fleet, &[]);

    let tty = Terminal::start(&fleet, &["apply", "--prune"]);
    tty.wait_for(QUESTION, 1, Duration::from_secs(20));
    let pane = pane_of(&fleet, "alpha");
    kill9(pane_pid(&fleet, &pane));
    kill9(pids[0]);
    let killed = Instant::now();
    wait_until(
        Duration::from_secs(15),
        "alpha revived by the daemon",
        || {
            let s = fleet.agent_status("alpha");
            s["state"] == "running" && s["pid"].as_u64().is_some_and(|p| p != u64::from(pids[0]))
        },
    );
    assert!(
        killed.elapsed() < Duration::from_secs(12),
        "{}",
        daemon.log()
    );
    // Still asking: nothing of the plan was applied.
    assert!(!tty.screen().contains("[exited"), "{}", tty.screen());
    tty.answer("yes");
    tty.wait_for("[exited 0]", 1, Duration::from_secs(30));
    assert!(
        fleet.tagged_panes().iter().all(|p| p.0 != "gone"),
        "{:?}",
        fleet.tagged_panes()
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// With `[[host]]`s too: the combined apply asks with no lock held (a restart goes through
/// meanwhile), plans this machine again under its lock after the yes, and a plan that changed
/// is shown whole and asked again.
#[test]
fn a_combined_apply_at_its_question_holds_no_lock_and_asks_again_when_the_plan_changed() {
    let Some(net) = support::hosts::HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&format!(
        "{}\n{}\n{}",
        support::hosts::HostedFleet::demo_agent("here", None),
        support::hosts::HostedFleet::demo_agent("later", None),
        support::hosts::HostedFleet::demo_agent("far", Some("gpu-1")),
    ));
    let fleet = &net.fleet;
    net.run(&["apply", "--yes", "here", "far"]).status(0);
    fleet.wait_running(&["here"]);

    let tty = Terminal::start(fleet, &["apply"]);
    tty.wait_for(QUESTION, 1, Duration::from_secs(30));
    assert!(tty.screen().contains("agent `later`"), "{}", tty.screen());
    let asked = Instant::now();
    fleet
        .run_within(&["restart", "here"], Duration::from_secs(40))
        .status(0);
    assert!(asked.elapsed() < Duration::from_secs(20));

    let pane = pane_of(fleet, "here");
    fleet.tmux(&["kill-pane", "-t", &pane]);
    wait_until(Duration::from_secs(10), "here without a pane", || {
        fleet.agent_status("here")["pane"].is_null()
    });
    tty.answer("yes");
    tty.wait_for(
        "The plan changed while you were asked",
        1,
        Duration::from_secs(30),
    );
    tty.wait_for(QUESTION, 2, Duration::from_secs(30));
    assert!(fleet.agent_status("later")["pane"].is_null());
    tty.answer("yes");
    tty.wait_for("[exited 0]", 1, Duration::from_secs(60));
    fleet.wait_running(&["here", "later"]);
}
