//! The fleet core end to end: phoenix.toml → plan → apply on a real, private tmux server.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;

use support::{Fleet, kill9, wait_until};

fn two_demo_agents() -> String {
    format!(
        "{}\n{}",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("beta", "")
    )
}

#[test]
fn apply_from_nothing_creates_everything() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());

    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("+ agent `alpha`: start")
        .stdout_has("Plan: 2 to start, 0 to restart, 0 to replace, 0 to remove.");
    assert!(!fleet.server_running(), "plan must not touch anything");

    fleet
        .run(&["apply", "--yes"])
        .status(0)
        .stdout_has("Apply complete: 2 succeeded, 0 failed.");
    let panes = fleet
        .tmux(&[
            "list-panes",
            "-a",
            "-F",
            "#{session_name}:#{window_name} #{@phoenix_agent}",
        ])
        .unwrap();
    assert!(panes.contains("test:alpha alpha"), "{panes}");
    assert!(panes.contains("test:beta beta"), "{panes}");
    fleet.wait_running(&["alpha", "beta"]);

    for dir in [fleet.state_dir(), fleet.agent_dir("alpha")] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
    let ops = fleet.ops("alpha");
    assert!(
        ops.iter()
            .any(|o| o["event"] == "apply" && o["action"] == "start"),
        "{ops:?}"
    );
    assert!(ops.iter().any(|o| o["event"] == "agent_start"), "{ops:?}");
}

#[test]
fn apply_twice_then_plan_has_nothing_to_do() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet
        .run(&["plan"])
        .status(0)
        .stdout_has("No changes. The fleet matches phoenix.toml.");
    fleet.wait_running(&["alpha", "beta"]);
    fleet
        .run(&["apply", "--yes"])
        .status(0)
        .stdout_has("No changes");
    let windows = fleet.tmux(&["list-windows", "-a"]).unwrap();
    assert_eq!(windows.lines().count(), 2, "no duplicates: {windows}");
    let plan = fleet.run(&["plan", "--json"]);
    plan.status(0);
    assert_eq!(plan.json()["changes"].as_array().unwrap().len(), 0);
}

#[test]
fn killed_agent_is_planned_as_restart_and_apply_brings_it_back() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["alpha"]);
    let pane = fleet.agent_status("alpha")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // The whole pane goes: the wrapper and the agent under it.
    kill9(wrapper);
    kill9(pids[0]);
    // tmux may see the terminal close before it has reaped the pane's process: wait for the
    // exit signal too, which the plan's reason quotes.
    wait_until(Duration::from_secs(5), "a dead pane", || {
        fleet.agent_status("alpha")["state"] == "dead"
    });
    // tmux usually learns the exit signal a moment after it sees the terminal close; now and
    // then (under load) it never does. The plan quotes the signal when tmux knows it.
    let mut signal_known = false;
    for _ in 0..40 {
        signal_known = fleet
            .tmux(&["display-message", "-p", "-t", &pane, "#{pane_dead_signal}"])
            .is_some_and(|s| s.trim() == "9");
        if signal_known {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let plan = fleet.run(&["plan"]);
    plan.status(2)
        .stdout_has(&format!("~ agent `alpha`: restart in {pane}"))
        .stdout_has("is dead")
        .stdout_has("Plan: 0 to start, 1 to restart");
    if signal_known {
        plan.stdout_has("is dead (killed by signal 9)");
    }
    let json = fleet.run(&["plan", "--json"]).json();
    assert_eq!(json["changes"][0]["action"]["type"], "restart");
    assert_eq!(json["changes"][0]["agent"], "alpha");

    fleet.run(&["apply", "--yes"]).status(0);
    let new_pids = fleet.wait_running(&["alpha"]);
    assert_ne!(new_pids[0], pids[0]);
    assert_eq!(
        fleet.agent_status("alpha")["pane"],
        pane.as_str(),
        "same pane"
    );
    fleet.run(&["plan"]).status(0);
    // The killed wrapper could not say why its session ended; its successor did.
    let lost = fleet
        .ops("alpha")
        .into_iter()
        .find(|o| o["event"] == "agent_exit")
        .expect("an agent_exit for the killed session");
    assert_eq!(lost["reason"], "runtime_stop", "{lost}");
    assert_eq!(lost["lost"], true, "{lost}");
}

#[test]
fn removed_agent_is_shown_and_only_pruned_on_request() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.toml(&Fleet::demo_agent("alpha", ""));

    fleet
        .run(&["plan"])
        .status(0)
        .stdout_has("Running but not in phoenix.toml (use --prune to remove):")
        .stdout_has("? agent `beta`");
    fleet.run(&["apply", "--yes"]).status(0);
    assert!(
        fleet
            .tmux(&["list-windows", "-a"])
            .unwrap()
            .contains("beta"),
        "apply without --prune keeps it"
    );
    let status = fleet.agent_status("beta");
    assert_eq!(status["state"], "pruned-pending");

    fleet
        .run(&["plan", "--prune"])
        .status(2)
        .stdout_has("- agent `beta`: remove")
        .stdout_has("not declared in phoenix.toml");
    fleet.run(&["apply", "--yes", "--prune"]).status(0);
    let windows = fleet.tmux(&["list-windows", "-a"]).unwrap();
    assert!(!windows.contains("beta"), "{windows}");
    fleet.run(&["plan", "--prune"]).status(0);
}

#[test]
fn spec_change_under_a_running_agent_is_a_replacement() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    let before = fleet.wait_running(&["alpha"]);

    fleet.toml(&format!(
        "{}env = {{ ROLE = \"x\" }}\n",
        Fleet::demo_agent("alpha", "--exit-code 4")
    ));
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("-/+ agent `alpha`: replace in")
        .stdout_has("spec changed: command, env")
        .stdout_has("--exit-code 4");
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(10), "replaced agent", || {
        let s = fleet.agent_status("alpha");
        s["state"] == "running" && s["pid"].as_u64() != Some(u64::from(before[0]))
    });
    fleet.run(&["plan"]).status(0);
    let env = std::fs::read(format!(
        "/proc/{}/environ",
        fleet.agent_status("alpha")["pid"]
    ))
    .unwrap();
    assert!(
        env.split(|b| *b == 0).any(|kv| kv == b"ROLE=x"),
        "agent runs with its env"
    );
}

#[test]
fn disabled_agent_is_stopped() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.toml(&format!(
        "{}\n{}enabled = false\n",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("beta", "")
    ));
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("- agent `beta`: stop")
        .stdout_has("disabled in phoenix.toml")
        // A stop keeps the agent's state: it is not counted as a removal.
        .stdout_has("Plan: 0 to start, 0 to restart, 0 to replace, 0 to remove, 1 to stop.");
    fleet.run(&["apply", "--yes"]).status(0);
    assert_eq!(fleet.agent_status("beta")["state"], "disabled");
    fleet.run(&["plan"]).status(0);
}

#[test]
fn workdir_with_spaces_works() {
    let fleet = Fleet::new();
    let work = fleet.path().join("my work dir");
    std::fs::create_dir(&work).unwrap();
    fleet.toml(&format!(
        "{}workdir = \"my work dir\"\n",
        Fleet::demo_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    assert_eq!(cwd, work);
}

#[test]
fn state_dir_missing_under_a_running_agent_is_recreated() {
    let fleet = Fleet::new();
    fleet.toml("[[agent]]\nname = \"alpha\"\ncommand = \"phoenix demo-agent --interval 1h\"\n");
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    // Let the agent's start-up writes finish first: the wrapper's `agent_alive`, and the
    // session-start hook, which has returned once the demo agent prints its menu after it.
    support::wait_until(Duration::from_secs(10), "the session start", || {
        let ops = fleet.ops("alpha");
        ops.iter().any(|o| o["event"] == "session_start")
            && ops.iter().any(|o| o["event"] == "agent_alive")
    });
    let pane = fleet.agent_status("alpha")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &pane, "type: crash", Duration::from_secs(10));
    std::fs::remove_dir_all(fleet.agent_dir("alpha")).unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("+ agent `alpha`: create state dir");
    fleet.run(&["apply", "--yes"]).status(0);
    assert!(fleet.agent_dir("alpha").is_dir());
    fleet.run(&["plan"]).status(0);
}

/// Every kind of config error: exit 1, file:line:column, a hint, and nothing touched.
#[test]
fn config_errors_are_located_and_touch_nothing() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[thresholds]\nsilense = \"10m\"\n",
            "phoenix.toml:2:1",
            "did you mean `silence`?",
        ),
        (
            "[thresholds]\nrunaway = \"2 hourz\"\n",
            "phoenix.toml:2:11",
            "unknown unit `hourz` (did you mean `hours`?)",
        ),
        (
            "[schedules]\nwatchdog = \"*/5 * * *\"\n",
            "phoenix.toml:2:12",
            "has 4 fields, expected 5",
        ),
        (
            "[[agent]]\nname = \"a\"\ncommand = \"x\"\n[[agent]]\nname = \"a\"\ncommand = \"y\"\n",
            "phoenix.toml:5:8",
            "duplicate agent name `a`",
        ),
        (
            "[[agent]]\nname = \"a b\"\ncommand = \"x\"\n",
            "phoenix.toml:2:8",
            "is not a valid name",
        ),
        (
            "[[agent]]\nname = \"a\"\ncommand = \"x\"\nworkdir = \"missing\"\n",
            "phoenix.toml:4:11",
            "does not exist",
        ),
        ("[fleet\nname = \"x\"\n", "phoenix.toml:1:", "error:"),
        (
            "[thresholds]\nerror_cascade = \"five\"\n",
            "phoenix.toml:2:17",
            "invalid type",
        ),
        (
            "[[agent]]\nname = \"a\"\ncli = \"claud\"\n",
            "phoenix.toml:3:7",
            "did you mean `claude`?",
        ),
    ];
    for (toml, location, message) in cases {
        let fleet = Fleet::new();
        fleet.raw_toml(&format!(
            "[fleet]\ntmux_socket = \"{}\"\n{toml}",
            fleet.socket
        ));
        // Shift expected line numbers by the two header lines.
        let location = shift_line(location, 2);
        for args in [&["validate"][..], &["plan"], &["apply", "--yes"]] {
            fleet
                .run(args)
                .status(1)
                .stderr_has(&location)
                .stderr_has(message);
        }
        assert!(
            !fleet.state_dir().exists(),
            "state dir created for {toml:?}"
        );
        assert!(!fleet.server_running(), "tmux started for {toml:?}");
    }
}

fn shift_line(location: &str, by: usize) -> String {
    let mut parts: Vec<String> = location.split(':').map(String::from).collect();
    parts[1] = (parts[1].parse::<usize>().unwrap() + by).to_string();
    parts.join(":")
}

/// `crash_window = "0s"` never counted a crash (1,282 restarts a minute); `0s` elsewhere
/// switched other protections off or made the daemon spin.
#[test]
fn zero_durations_are_refused_at_their_line_and_column_with_the_minimum() {
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"0s\"\ncrash_window = \"0s\"\n\n\
         [thresholds]\nsilence = \"0s\"\n\n[[agent]]\nname = \"a\"\ncommand = \"true\"\n",
    );
    for args in [&["validate"][..], &["apply", "--yes"]] {
        fleet
            .run(args)
            .status(1)
            .stderr_has("phoenix.toml:6:12")
            .stderr_has("`cooldown` = \"0s\" is too short: the minimum is 100ms")
            .stderr_has("hint: use at least \"100ms\"")
            .stderr_has("phoenix.toml:7:16")
            .stderr_has("`crash_window` = \"0s\" is too short: the minimum is 1m")
            .stderr_has("phoenix.toml:10:11")
            .stderr_has("`silence` = \"0s\" is too short: the minimum is 1s");
    }
    assert!(!fleet.server_running(), "nothing started");
}

#[test]
fn validate_reports_all_errors_at_once_and_as_json() {
    let fleet = Fleet::new();
    fleet.toml(
        "[thresholds]\nsilence = \"x\"\nrunaway = \"2y\"\n[[agent]]\nname = \"ok\"\ncommand = \"'unbalanced\"\n",
    );
    let run = fleet.run(&["validate", "--json"]);
    run.status(1);
    let errors = run.json()["errors"].as_array().unwrap().clone();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors.iter().all(|e| e["line"].as_u64().unwrap() > 0));
    assert!(
        errors[2]["message"]
            .as_str()
            .unwrap()
            .contains("unbalanced quotes")
    );
}

#[test]
fn names_with_shell_metacharacters_are_rejected() {
    for name in [
        "a;touch pwned",
        "$(touch pwned)",
        "a`touch pwned`",
        "a b",
        "../x",
        "a'b",
    ] {
        let fleet = Fleet::new();
        fleet.toml(&format!(
            "[[agent]]\nname = \"{}\"\ncommand = \"true\"\n",
            name.replace('"', "\\\"")
        ));
        fleet
            .run(&["apply", "--yes"])
            .status(1)
            .stderr_has("is not a valid name");
        assert!(!fleet.path().join("pwned").exists());
        assert!(!fleet.server_running());
    }
    // Window and session names are checked the same way.
    let fleet = Fleet::new();
    fleet.toml("[[agent]]\nname = \"ok\"\ncommand = \"true\"\ntmux = { window = \"w;x\" }\n");
    fleet.run(&["validate"]).status(1).stderr_has("tmux window");
}

#[test]
fn missing_config_says_how_to_get_one() {
    let fleet = Fleet::new();
    fleet
        .run(&["plan"])
        .status(1)
        .stderr_has("cannot read config")
        .stderr_has("phoenix init");
}

#[test]
fn init_scaffolds_and_never_overwrites_without_force() {
    let fleet = Fleet::new();
    let init = || {
        let mut cmd = fleet.command(&["init"]);
        cmd.output().unwrap()
    };
    let out = init();
    assert!(out.status.success(), "{out:?}");
    for f in ["phoenix.toml", "policies/README.md", "templates/README.md"] {
        assert!(fleet.path().join(f).exists(), "{f}");
    }
    std::fs::write(fleet.config(), "# mine\n").unwrap();
    let out = init();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(fleet.config()).unwrap(), "# mine\n");
    let out = fleet.command(&["init", "--force"]).output().unwrap();
    assert!(out.status.success());
    assert!(
        std::fs::read_to_string(fleet.config())
            .unwrap()
            .contains("[fleet]")
    );
}

#[test]
fn scaffolded_config_and_bundled_example_validate() {
    let root = env!("CARGO_MANIFEST_DIR");
    for file in ["phoenix.toml.example", "examples/demo.toml"] {
        let out = std::process::Command::new(support::PHOENIX)
            .args(["--config", &format!("{root}/{file}"), "validate"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn doctor_says_what_to_fix() {
    let fleet = Fleet::new();
    fleet.toml("[[agent]]\nname = \"a\"\ncommand = \"no-such-agent-cli --x\"\n");
    fleet
        .run(&["doctor"])
        .status(1)
        .stdout_has("ok   tmux")
        .stdout_has("phoenix.toml (1 agent)")
        .stdout_has("FAIL agent `a` command")
        .stdout_has("install `no-such-agent-cli`");
    let json = fleet.run(&["doctor", "--json"]).json();
    assert_eq!(json["ok"], false);
    // Doctor only looks: it does not create the state dir it checks.
    assert!(!fleet.state_dir().exists());
    assert!(fleet.run(&["doctor"]).stdout().contains("ok   state dir"));
}

#[test]
fn status_lists_declared_agents_without_a_server() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet
        .run(&["status"])
        .status(3)
        .stdout_has("HEALTH")
        .stdout_has("alpha")
        .stdout_has("declared  down")
        .stdout_has("no tmux server");
    let json = fleet.status();
    assert_eq!(json.len(), 2);
    assert_eq!(json[0]["state"], "declared");
}

#[test]
fn apply_without_yes_off_a_terminal_refuses() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply"]).status(1).stderr_has("pass --yes");
    assert!(!fleet.server_running());
}

#[test]
fn one_failing_agent_does_not_stop_the_others() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    // A file where beta's state dir should be: beta's step fails, alpha's must not.
    std::fs::create_dir_all(fleet.state_dir().join("agents")).unwrap();
    std::fs::write(fleet.agent_dir("beta"), "in the way").unwrap();
    fleet
        .run(&["apply", "--yes"])
        .status(1)
        .stdout_has("✗ agent `beta`: start — cannot create state dir")
        .stdout_has("✓ agent `alpha`: start")
        .stdout_has("1 succeeded, 1 failed");
    fleet.wait_running(&["alpha"]);
    std::fs::remove_file(fleet.agent_dir("beta")).unwrap();
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
}

/// A command that is not there is a plan error, found before anything is started or any hook
/// file is written into the agent's workdir: not an agent failing to spawn.
#[test]
fn an_agent_whose_command_is_missing_is_a_plan_error() {
    let fleet = Fleet::new();
    std::fs::create_dir(fleet.path().join("wc")).unwrap();
    let noexec = fleet.path().join("noexec.sh");
    std::fs::write(&noexec, "#!/bin/sh\n").unwrap();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"broken\"\ncli = \"claude\"\ncommand = \"no-such-cli-xyz --flag\"\nworkdir = \"wc\"\n\n\
         [[agent]]\nname = \"noexec\"\ncommand = \"{}\"\n",
        Fleet::demo_agent("alpha", ""),
        noexec.display()
    ));
    for verb in ["plan", "apply"] {
        fleet
            .run(&[verb, "--yes"][..if verb == "plan" { 1 } else { 2 }])
            .status(1)
            .stderr_has("agent `broken`: command `no-such-cli-xyz` is not on PATH (cli `claude`)")
            .stderr_has("noexec.sh` is not an executable file")
            .stderr_has("hint: install the CLI, or fix `command` in");
    }
    assert!(!fleet.server_running(), "nothing was started");
    assert!(
        !fleet.path().join("wc/.claude").exists(),
        "no hook file was written for a CLI that is not there"
    );
    // The others can still be applied by name.
    fleet.run(&["apply", "--yes", "alpha"]).status(0);
    fleet.wait_running(&["alpha"]);
}

#[test]
fn missing_tmux_is_diagnosed_with_a_next_step() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    let out = fleet
        .command(&["apply", "--yes"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`tmux` was not found on PATH"), "{stderr}");
    assert!(stderr.contains("apt install tmux"), "{stderr}");
    let doctor = fleet
        .command(&["doctor"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&doctor.stdout).contains("FAIL tmux"));
}

/// A tmux step that keeps failing is retried once, then diagnosed with a next step: here the
/// socket directory cannot exist because TMUX_TMPDIR names a file.
#[test]
fn a_tmux_failure_is_retried_then_diagnosed() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    let not_a_dir = fleet.path().join("not-a-dir");
    std::fs::write(&not_a_dir, "x").unwrap();
    let out = fleet
        .command(&["apply", "--yes"])
        .env("TMUX_TMPDIR", &not_a_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not a directory"), "{stderr}");
    assert!(
        stderr.contains("point TMUX_TMPDIR at a writable directory"),
        "{stderr}"
    );
    // Nothing was touched.
    assert!(!fleet.state_dir().exists());
}

/// The pids of the agent processes of `agents`, by `phoenix status`.
fn running_pids(fleet: &Fleet, agents: &[&str]) -> Vec<u32> {
    fleet.wait_running(agents)
}

#[test]
fn prune_in_one_project_leaves_another_projects_agents_alone() {
    // Two projects with the defaults: no fleet name, no socket, the same agent names.
    let mut other = Fleet::new();
    other.derived_socket_toml(&format!(
        "{}{}",
        Fleet::demo_agent("x", ""),
        Fleet::demo_agent("y", "")
    ));
    let mut mine = Fleet::new();
    mine.derived_socket_toml(&Fleet::demo_agent("x", ""));

    other.run(&["apply", "--yes"]).status(0);
    let before = running_pids(&other, &["x", "y"]);
    mine.run(&["apply", "--yes", "--prune"]).status(0);
    let own = running_pids(&mine, &["x"]);
    assert!(!before.contains(&own[0]), "{own:?} is the other project's");
    mine.run(&["apply", "--yes", "--prune"]).status(0);
    mine.run(&["plan", "--prune"])
        .status(0)
        .stdout_has("No changes");

    assert_eq!(running_pids(&other, &["x", "y"]), before);
    assert_eq!(other.tagged_panes().len(), 2);
    assert_ne!(
        mine.socket, other.socket,
        "each project gets its own server"
    );
}

#[test]
fn fleets_sharing_a_named_socket_see_and_prune_only_their_own_panes() {
    let other = Fleet::new();
    other.toml(&format!(
        "{}{}",
        Fleet::demo_agent("x", ""),
        Fleet::demo_agent("y", "")
    ));
    // Same socket, same fleet name, same agent names: only the directory differs.
    let mut mine = Fleet::new();
    mine.socket = other.socket.clone();
    mine.toml(&Fleet::demo_agent("x", ""));
    other.run(&["apply", "--yes"]).status(0);
    let before = running_pids(&other, &["x", "y"]);
    // Panes phoenix did not start: a plain shell, and one that merely claims an agent's tag.
    let plain = other
        .tmux(&["new-window", "-d", "-P", "-F", "#{pane_id}", "sleep", "600"])
        .unwrap();
    let claimed = other
        .tmux(&["new-window", "-d", "-P", "-F", "#{pane_id}", "sleep", "600"])
        .unwrap();
    other
        .tmux(&[
            "set-option",
            "-p",
            "-t",
            claimed.trim(),
            "@phoenix_agent",
            "y",
        ])
        .unwrap();

    mine.run(&["plan", "--prune"])
        .status(2)
        .stdout_has("+ agent `x`: start")
        .stdout_has("Plan: 1 to start, 0 to restart, 0 to replace, 0 to remove.");
    mine.run(&["apply", "--yes", "--prune"]).status(0);
    let own = running_pids(&mine, &["x"]);
    assert!(!before.contains(&own[0]));
    mine.run(&["plan", "--prune"])
        .status(0)
        .stdout_has("No changes");

    assert_eq!(running_pids(&other, &["x", "y"]), before);
    let panes = other
        .tmux(&["list-panes", "-a", "-F", "#{pane_id}"])
        .unwrap();
    for pane in [plain.trim(), claimed.trim()] {
        assert!(panes.lines().any(|p| p == pane), "{pane} was removed");
    }
    // Each fleet's panes carry its own identity.
    let tags: Vec<String> = other.tagged_panes().into_iter().map(|p| p.1).collect();
    let (mine_id, other_id) = (mine.spec().fleet.id, other.spec().fleet.id);
    assert_ne!(mine_id, other_id);
    assert_eq!(tags.iter().filter(|t| **t == mine_id).count(), 1);
    assert_eq!(tags.iter().filter(|t| **t == other_id).count(), 2);
}

#[test]
fn concurrent_applies_start_each_agent_once() {
    let fleet = Fleet::new();
    let agents = ["a", "b", "c", "d", "e"];
    fleet.toml(&agents.map(|a| Fleet::demo_agent(a, "")).concat());
    let children: Vec<_> = (0..3)
        .map(|_| {
            fleet
                .command(&["apply", "--yes"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    fleet.wait_running(&agents);
    let mut tagged: Vec<String> = fleet.tagged_panes().into_iter().map(|p| p.0).collect();
    tagged.sort();
    assert_eq!(tagged, agents, "one pane per agent");
    fleet.run(&["plan"]).status(0).stdout_has("No changes");
}

#[test]
fn a_second_pane_for_an_agent_is_planned_away_and_the_first_keeps_running() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("x", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["x"])[0];
    let (_, id, original, _) = fleet.tagged_panes().remove(0);
    let fp = fleet
        .tmux(&["display-message", "-p", "-t", &original, "#{@phoenix_fp}"])
        .unwrap();
    // A copy with every tag of the real one, made by hand.
    let extra = fleet
        .tmux(&["new-window", "-d", "-P", "-F", "#{pane_id}", "sleep", "600"])
        .unwrap();
    let extra = extra.trim();
    for (option, value) in [
        ("@phoenix_fleet", id.as_str()),
        ("@phoenix_agent", "x"),
        ("@phoenix_fp", fp.trim()),
    ] {
        fleet
            .tmux(&["set-option", "-p", "-t", extra, option, value])
            .unwrap();
    }

    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has(&format!(
            "- agent `x`: remove {extra} — a second pane for the agent, which runs in {original}"
        ))
        .stdout_has("0 to restart, 0 to replace, 1 to remove.");
    fleet
        .run(&["apply", "--yes"])
        .status(0)
        .stdout_has(&format!("removed pane {extra}"));
    let panes: Vec<String> = fleet.tagged_panes().into_iter().map(|p| p.2).collect();
    assert_eq!(panes, [original]);
    assert_eq!(
        fleet.agent_status("x")["pid"].as_u64(),
        Some(u64::from(pid))
    );
    fleet.run(&["plan"]).status(0).stdout_has("No changes");
}

#[test]
fn a_pane_an_older_phoenix_started_is_still_this_fleets_and_a_look_alike_is_not() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        Fleet::demo_agent("x", ""),
        Fleet::demo_agent("y", "")
    ));
    // Panes as phoenix started them before panes carried the fleet's identity: x's wrapper
    // for this very phoenix.toml; y's tag on a pane that runs something else.
    let config = fleet.config();
    let x = fleet
        .tmux(&[
            "new-session",
            "-d",
            "-P",
            "-F",
            "#{pane_id}",
            "-s",
            "test",
            "-n",
            "x",
            support::PHOENIX,
            "--config",
            config.to_str().unwrap(),
            "wrap",
            "--agent",
            "x",
        ])
        .unwrap();
    let y = fleet
        .tmux(&["new-window", "-d", "-P", "-F", "#{pane_id}", "sleep", "600"])
        .unwrap();
    let fp = fleet.spec().agent("x").unwrap().launch().fingerprint();
    for (option, value) in [("@phoenix_agent", "x"), ("@phoenix_fp", fp.as_str())] {
        fleet
            .tmux(&["set-option", "-p", "-t", x.trim(), option, value])
            .unwrap();
    }
    fleet
        .tmux(&["set-option", "-p", "-t", y.trim(), "@phoenix_agent", "y"])
        .unwrap();
    let status = fleet.agent_status("x");
    assert_eq!(status["pane"], x.trim(), "{status}");
    // x's wrapper makes its state dir as it comes up; the plan is about panes, not that.
    support::wait_until(std::time::Duration::from_secs(10), "x's wrapper up", || {
        fleet.agent_dir("x").exists()
    });
    let plan = fleet.run(&["plan", "--prune"]);
    assert!(!plan.stdout().contains("agent `x`"), "{}", plan.stdout());
    plan.stdout_has("+ agent `y`: start")
        .stdout_has("0 to remove");
}

#[test]
fn agents_left_on_the_old_default_socket_stop_an_apply_with_what_to_do() {
    // A fleet without `tmux_socket`, upgraded: its agent still runs on `phoenix-<name>`.
    let mut fleet = Fleet::new();
    let name = format!("legacy-{}", std::process::id());
    fleet.derived_socket_toml(&format!(
        "[fleet]\nname = \"{name}\"\n\n{}",
        Fleet::demo_agent("x", "")
    ));
    let mut old = Fleet::new();
    old.socket = format!("phoenix-{name}");
    let config = fleet.config();
    old.tmux(&[
        "new-session",
        "-d",
        "-s",
        &name,
        support::PHOENIX,
        "--config",
        config.to_str().unwrap(),
        "wrap",
        "--agent",
        "x",
    ])
    .unwrap();
    old.tmux(&["set-option", "-p", "@phoenix_agent", "x"])
        .unwrap();

    fleet
        .run(&["apply", "--yes"])
        .status(1)
        .stderr_has(&format!(
            "agent `x` of this fleet still runs on tmux server `phoenix-{name}`"
        ))
        .stderr_has(&format!("set `tmux_socket = \"phoenix-{name}\"`"))
        .stderr_has(&format!("`tmux -L phoenix-{name} kill-server`"));
    assert!(!fleet.server_running(), "a second copy was started");
    fleet
        .run(&["plan"])
        .status(2)
        .stderr_has("warning: agent `x` of this fleet still runs");
    fleet
        .run(&["status"])
        .status(3)
        .stderr_has("warning: agent `x` of this fleet still runs");
    let doctor = fleet.run(&["doctor"]).stdout();
    assert!(doctor.contains("FAIL tmux server"), "{doctor}");

    old.tmux(&["kill-server"]);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["x"]);
    let doctor = fleet.run(&["doctor"]).stdout();
    assert!(
        doctor.contains("ok   tmux server") && doctor.contains(&fleet.socket),
        "{doctor}"
    );
}

#[test]
fn an_apply_waits_for_the_fleet_lock_and_says_for_whom() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("x", ""));
    std::fs::create_dir_all(fleet.state_dir()).unwrap();
    let held = phoenix::state::lock::FleetLock::acquire(
        &phoenix::state::FleetDir::new(fleet.state_dir()),
        "a test",
        Duration::ZERO,
        |_| {},
    )
    .unwrap();
    let log = fleet.path().join("apply.err");
    let mut apply = fleet
        .command(&["apply", "--yes"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let waiting = format!(
        "waiting for another phoenix (pid {}, `a test`) to finish changing the fleet (up to 60s)",
        std::process::id()
    );
    wait_until(Duration::from_secs(10), "the waiting message", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&waiting)
    });
    assert!(!fleet.server_running(), "started while the lock was held");
    drop(held);
    assert!(apply.wait().unwrap().success());
    fleet.wait_running(&["x"]);
}

#[test]
fn a_renamed_fleet_replaces_its_agents_instead_of_starting_them_twice() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("x", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["x"]);
    let text = std::fs::read_to_string(fleet.config())
        .unwrap()
        .replace("name = \"test\"", "name = \"renamed\"");
    std::fs::write(fleet.config(), text).unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("-/+ agent `x`: replace in %0")
        .stdout_has("Plan: 0 to start");
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["x"]);
    let panes = fleet.tagged_panes();
    assert_eq!(panes.len(), 1, "{panes:?}");
    assert_eq!(panes[0].1, fleet.spec().fleet.id);
    fleet.run(&["plan"]).status(0).stdout_has("No changes");
}

#[test]
fn renaming_a_fleet_on_its_default_socket_stops_apply_until_the_old_server_is_dealt_with() {
    let mut fleet = Fleet::new();
    let toml = |name: &str| {
        format!(
            "[fleet]\nname = \"{name}-{}\"\n\n{}",
            std::process::id(),
            Fleet::demo_agent("x", "")
        )
    };
    fleet.derived_socket_toml(&toml("first"));
    let mut old = Fleet::new();
    old.socket = fleet.socket.clone();
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["x"]);

    fleet.derived_socket_toml(&toml("second"));
    assert_ne!(fleet.socket, old.socket);
    fleet
        .run(&["apply", "--yes"])
        .status(1)
        .stderr_has(&format!(
            "agent `x` of this fleet still runs on tmux server `{}` (this file's default socket under an earlier fleet name)",
            old.socket
        ));
    assert!(!fleet.server_running(), "a second copy was started");
    old.tmux(&["kill-server"]);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["x"]);
}

/// A typo in a script's command line is not "changes pending" (2): it exits 64 (EX_USAGE),
/// documented in --help; asking for help or the version is a success.
#[test]
fn usage_errors_exit_64_and_help_exits_0() {
    let fleet = Fleet::new();
    fleet.toml("");
    for args in [
        vec!["no-such-command"],
        vec!["plan", "--no-such-flag"],
        vec!["events", "--since", "soon"],
        vec!["status", "a", "b", "c"],
    ] {
        fleet.run(&args).status(64).stderr_has("--help");
    }
    fleet
        .run(&["--help"])
        .status(0)
        .stdout_has("64 usage error")
        .stdout_has("2  changes pending");
    fleet.run(&["--version"]).status(0).stdout_has("phoenix ");
    let version = env!("CARGO_PKG_VERSION");
    let plain = fleet.run(&["version"]);
    assert_eq!(plain.status(0).stdout(), format!("phoenix {version}\n"));
    let json = fleet.run(&["version", "--json"]).status(0).json();
    assert_eq!(json["format_version"], 1);
    assert_eq!(json["version"], version);
    // Grouped by purpose; the internal commands stay out of the list but run.
    fleet
        .run(&["--help"])
        .stdout_has("\nFleet:\n")
        .stdout_has("\nSetup:\n")
        .stdout_has("  version  ");
    fleet.run(&["help"]).status(0).stdout_has("\nAgents:\n");
    fleet
        .run(&["wrap", "--help"])
        .status(0)
        .stdout_has("Usage:");
    fleet
        .run(&["plan", "--help"])
        .status(0)
        .stdout_has("Usage:");
}

/// As `systemctl status`: 3 while a declared agent is not running, 0 once all run; a
/// disabled agent does not count.
#[test]
fn status_exits_3_while_a_declared_agent_is_not_running() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["status"]).status(3);
    fleet.run(&["status", "--json"]).status(3);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    fleet.run(&["status"]).status(0);
    fleet.run(&["status", "alpha"]).status(0);
    fleet.toml(&format!(
        "{}\n{}enabled = false\n",
        Fleet::demo_agent("alpha", ""),
        Fleet::demo_agent("beta", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.run(&["status"]).status(0);
}

/// The panes of agent `name` on the fleet's server.
fn panes_of(fleet: &Fleet, name: &str) -> Vec<String> {
    fleet
        .tagged_panes()
        .into_iter()
        .filter(|(agent, ..)| agent == name)
        .map(|(_, _, pane, _)| pane)
        .collect()
}

#[test]
fn a_stopped_agent_stays_down_through_apply_and_restart_until_start() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["alpha", "beta"]);

    let stop = fleet.run(&["stop", "alpha", "--json"]);
    stop.status(0);
    let v = stop.json();
    assert_eq!(v["agents"][0]["agent"], "alpha", "{v}");
    assert_eq!(v["agents"][0]["ok"], true, "{v}");
    assert!(panes_of(&fleet, "alpha").is_empty(), "its pane is gone");
    assert_eq!(fleet.agent_status("alpha")["state"], "stopped");

    // Neither plan nor apply starts it again; both say how to.
    fleet
        .run(&["plan"])
        .status(0)
        .stdout_has("agent `alpha`: stopped")
        .stdout_has("`phoenix start alpha`");
    fleet.run(&["apply", "--yes"]).status(0);
    assert!(panes_of(&fleet, "alpha").is_empty(), "apply started it");
    fleet
        .run(&["restart", "alpha"])
        .status(1)
        .stderr_has("`phoenix start alpha`");
    fleet
        .run(&["status"])
        .status(3)
        .stdout_has("alpha")
        .stdout_has("stopped");

    fleet
        .run(&["start", "alpha"])
        .status(0)
        .stdout_has("✓ agent `alpha`");
    fleet.wait_running(&["alpha"]);
    assert_eq!(
        fleet.wait_running(&["beta"]),
        [pids[1]],
        "beta was left alone throughout"
    );
    fleet.run(&["plan"]).status(0);
}

#[test]
fn lifecycle_verbs_name_unknown_agents_and_reject_bad_usage() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    for verb in [
        "stop", "start", "restart", "attach", "logs", "apply", "ledger", "brief",
    ] {
        fleet
            .run(&[verb, "alpah"])
            .status(1)
            .stderr_has("no agent `alpah`")
            .stderr_has("did you mean `alpha`?");
    }
    fleet.run(&["stop"]).status(64);
    fleet.run(&["restart"]).status(64);
    fleet.run(&["restart", "alpha", "--all"]).status(64);
    assert!(!fleet.server_running(), "nothing was started");
    fleet
        .run(&["attach", "alpha"])
        .status(1)
        .stderr_has("agent `alpha` has no pane");
}

#[test]
fn apply_with_agent_names_changes_only_those_agents() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet
        .run(&["apply", "--yes", "beta"])
        .status(0)
        .stdout_has("agent `beta`: start");
    fleet.wait_running(&["beta"]);
    assert!(
        panes_of(&fleet, "alpha").is_empty(),
        "alpha was not a target"
    );
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("+ agent `alpha`: start");
}

#[test]
fn restart_all_restarts_every_running_agent() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    let before = fleet.wait_running(&["alpha", "beta"]);
    let run = fleet.run(&["restart", "--all", "--json"]);
    run.status(0);
    let v = run.json();
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(v["agents"].as_array().map(Vec::len), Some(2), "{v}");
    let after = fleet.wait_running(&["alpha", "beta"]);
    assert!(
        before.iter().zip(&after).all(|(b, a)| b != a),
        "{before:?} → {after:?}"
    );
}

#[test]
fn logs_show_the_agents_steps_and_its_screen() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    support::wait_until(Duration::from_secs(10), "the demo agent's banner", || {
        fleet
            .run(&["logs", "alpha"])
            .stdout()
            .contains("demo-agent `alpha` session")
    });
    let run = fleet.run(&["logs", "alpha", "-n", "200"]);
    run.status(0).stdout_has("[phoenix] agent_start");
    let text = run.stdout();
    let step = text.find("[phoenix] agent_start").unwrap();
    let screen = text.find("demo-agent `alpha` session").unwrap();
    assert!(step < screen, "the start before its output:\n{text}");
    assert!(!text.contains("demo-agent `beta`"), "{text}");
}

#[test]
fn down_stops_this_fleet_and_its_hooks_but_not_another_fleet_or_the_users_hooks() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}\n[[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"phoenix demo-agent --interval 200ms\"\nworkdir = \"wc\"\n",
        Fleet::demo_agent("alpha", "")
    ));
    let settings = fleet.path().join("wc/.claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(
        &settings,
        r#"{"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "my-own-hook"}]}]}}"#,
    )
    .unwrap();
    // Another fleet on the same tmux server.
    let other = Fleet::new();
    other.raw_toml(&format!(
        "[fleet]\nname = \"other\"\ntmux_socket = \"{}\"\n\n{}",
        fleet.socket,
        Fleet::demo_agent("gamma", "")
    ));
    // The plan shows phoenix's MCP server entry for Claude Code as it shows hook changes.
    fleet
        .run(&["plan"])
        .stdout_has(".mcp.json")
        .stdout_has("\"mcpServers\"");
    fleet.run(&["apply", "--yes"]).status(0);
    other.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "c"]);
    let hooked = std::fs::read_to_string(&settings).unwrap();
    assert!(hooked.contains("phoenix") && hooked.contains("my-own-hook"));
    let mcp_json = fleet.path().join("wc/.mcp.json");
    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&mcp_json).unwrap()).unwrap();
    assert_eq!(
        server["mcpServers"]["phoenix"]["args"][2], "mcp",
        "{server}"
    );
    assert!(hooked.contains("enabledMcpjsonServers"), "{hooked}");

    let run = fleet.run(&["down", "--remove-hooks", "--json"]);
    run.status(0);
    let v = run.json();
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(v["server"], "kept: panes of another fleet run on it", "{v}");
    let left: Vec<String> = fleet.tagged_panes().into_iter().map(|p| p.0).collect();
    assert_eq!(left, ["gamma"], "only the other fleet's pane is left");
    let cleaned = std::fs::read_to_string(&settings).unwrap();
    assert!(
        cleaned.contains("my-own-hook") && cleaned.contains("opus"),
        "{cleaned}"
    );
    assert!(!cleaned.contains("phoenix"), "{cleaned}");
    assert!(
        !mcp_json.exists(),
        "phoenix's .mcp.json, holding only its entry, is removed"
    );
    fleet.run(&["status"]).status(3);

    // The other fleet's own `down` takes the server with its last pane.
    other
        .run(&["down"])
        .status(0)
        .stdout_has("✓ agent `gamma`")
        .stdout_has(": stopped");
    assert!(!fleet.server_running());
    // And `apply` brings a downed fleet back.
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "c"]);
}

#[test]
fn service_install_status_and_uninstall() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    fleet
        .run(&["service", "status"])
        .status(3)
        .stdout_has("not installed");
    fleet.run(&["service", "install"]).status(0);
    let unit = fleet
        .path()
        .join("home/.config/systemd/user/phoenix-test.service");
    assert!(unit.is_file());
    let status = fleet.run(&["service", "status", "--json"]);
    status.status(3);
    assert_eq!(status.json()["installed"], true);
    fleet
        .run(&["service", "uninstall"])
        .status(0)
        .stdout_has("removed");
    assert!(!unit.exists());
    fleet
        .run(&["service", "uninstall"])
        .status(0)
        .stdout_has("no unit installed");
}

/// A first run: `init` then `apply` works on a machine with no agent CLI installed.
#[test]
fn init_scaffolds_a_fleet_that_runs_as_it_is() {
    let mut fleet = Fleet::new();
    fleet
        .run(&["init"])
        .status(0)
        .stdout_has("created phoenix.toml")
        .stdout_has("created phoenix.toml.example");
    // Follow the socket phoenix derived for this file, so the harness cleans it up.
    fleet.socket = fleet.spec().fleet.socket;
    fleet.run(&["validate"]).status(0);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["demo"]);
    let reference = std::fs::read_to_string(fleet.path().join("phoenix.toml.example")).unwrap();
    assert!(
        reference.contains("[thresholds]"),
        "the full reference is beside it"
    );
}

#[test]
fn init_writes_the_file_named_with_the_cli_asked_for() {
    let fleet = Fleet::new();
    let file = fleet.path().join("sub/my.toml");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(support::PHOENIX)
            .current_dir(fleet.path())
            .env("HOME", fleet.path().join("home"))
            // No agent CLI can be found, whatever this machine has installed.
            .env("PATH", "/nonexistent")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&["init", "-c", "sub/my.toml", "--cli", "codex"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("-c "),
        "the next steps name the file: {stdout}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("cli = \"codex\""), "{text}");
    assert!(fleet.path().join("sub/phoenix.toml.example").exists());
    assert!(!fleet.config().exists());
    // Without codex installed, plan says so instead of starting a crash loop.
    let (code, _, stderr) = run(&["-c", "sub/my.toml", "plan"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("command `codex` is not on PATH"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["init", "--cli", "cursor"]);
    assert_eq!(code, Some(64), "{stderr}");
}

#[test]
fn logs_follow_prints_new_steps_as_they_happen() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    let log = fleet.path().join("follow.out");
    let mut child = fleet
        .command(&["logs", "alpha", "-f"])
        .stdout(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(Duration::from_secs(10), "the first lines", || {
        read().contains("[phoenix] ")
    });
    let before = read().matches("[phoenix] ").count();
    fleet.run(&["stop", "alpha"]).status(0);
    wait_until(Duration::from_secs(10), "the stop's steps", || {
        read().matches("[phoenix] ").count() > before
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(read().contains("stop"), "{}", read());
}

/// With `--json` a failure is a JSON document on stdout too (a script reads one stream):
/// `{format_version, ok: false, error: {message, hint}}` — for a failed command, a config
/// that cannot be read and a usage error alike; every `--json` has a help line.
#[test]
fn json_errors_are_json_on_stdout_with_format_version() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    let shape = |run: &support::Run, code: i32| -> serde_json::Value {
        run.status(code);
        let doc = run.json();
        assert_eq!(doc["format_version"], 1, "{doc}");
        assert_eq!(doc["ok"], false, "{doc}");
        assert!(doc["error"]["message"].is_string(), "{doc}");
        assert!(run.stderr().trim().is_empty(), "{}", run.stderr());
        doc
    };
    let missing = shape(&fleet.run(&["status", "nosuch", "--json"]), 1);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no agent `nosuch`"),
        "{missing}"
    );
    let usage = shape(&fleet.run(&["plan", "--json", "--bogus"]), 64);
    assert!(
        usage["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--bogus"),
        "{usage}"
    );
    // Without --json, errors stay text on stderr.
    fleet
        .run(&["status", "nosuch"])
        .status(1)
        .stderr_has("error: no agent `nosuch`");
    // A success carries the version too, every list under a name.
    let plan = fleet.run(&["plan", "--json"]).json();
    assert_eq!(plan["format_version"], 1);
    let events = fleet.run(&["events", "--json"]).status(0).json();
    assert_eq!(events["format_version"], 1);
    assert!(events["events"].is_array(), "{events}");
    for cmd in [
        vec!["status"],
        vec!["plan"],
        vec!["events"],
        vec!["doctor"],
        vec!["handoff", "list"],
        vec!["loop", "list"],
        vec!["hooks", "show"],
    ] {
        let mut args = cmd.clone();
        args.push("--help");
        let help = fleet.run(&args).status(0).stdout();
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with("--json"))
            .unwrap_or_else(|| panic!("{cmd:?} has --json:\n{help}"));
        assert!(line.trim() != "--json", "{cmd:?}: --json has no help line");
    }
    // A config that cannot be read: its hint too.
    std::fs::remove_file(fleet.config()).unwrap();
    let no_config = shape(&fleet.run(&["plan", "--json"]), 1);
    assert!(
        no_config["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("phoenix init"),
        "{no_config}"
    );
}

/// Colour only for a person: piped output, `NO_COLOR` and `--no-color` have no escape codes;
/// on a terminal (a pseudo-TTY through `script`) the plan's `+` and errors are coloured.
#[test]
fn colour_on_a_terminal_only() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    let piped = fleet.run(&["plan"]);
    piped.status(2).stdout_has("+ agent `alpha`");
    assert!(!piped.stdout().contains('\x1b'), "{:?}", piped.stdout());
    let error = fleet.run(&["status", "nosuch"]);
    assert!(!error.stderr().contains('\x1b'), "{:?}", error.stderr());
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped the terminal half: no `script` (util-linux) on PATH");
        return;
    }
    let on_tty = |extra: &str, env: &[(&str, &str)]| -> String {
        let cmd = format!(
            "{} --config {} plan {extra}",
            env!("CARGO_BIN_EXE_phoenix"),
            fleet.config().display()
        );
        // The harness's scrubbed environment, through a pseudo-terminal.
        let mut c = std::process::Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", fleet.path().join("home"))
            .env("TERM", "xterm")
            .current_dir(fleet.path())
            .stdin(std::process::Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let coloured = on_tty("", &[]);
    assert!(
        coloured.contains("\x1b[32m") && coloured.contains("+ agent `alpha`"),
        "{coloured:?}"
    );
    let plain = on_tty("--no-color", &[]);
    assert!(plain.contains("+ agent `alpha`"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
    let no_color = on_tty("", &[("NO_COLOR", "1")]);
    assert!(!no_color.contains('\x1b'), "{no_color:?}");
}

/// `status AGENT` describes one agent as `kubectl describe` does: how it runs, how it is,
/// what it works on, how it restarts and what it left for the next session.
#[test]
fn status_of_one_agent_is_a_full_description() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    fleet
        .run(&["loop", "add", "alpha", "ship-it", "ship the thing"])
        .status(0);
    let run = fleet.run(&["status", "alpha"]);
    run.status(0);
    for label in [
        "Agent:",
        "CLI:",
        "Command:",
        "Workdir:",
        "State:",
        "Health:",
        "Uptime:",
        "Current task:",
        "Restart:",
        "Latest handoff:",
        "crashes:",
    ] {
        run.stdout_has(label);
    }
    run.stdout_has(&format!("Pid:            {pid}"))
        .stdout_has("Open loops:     1 (0 stale)")
        .stdout_has("demo-agent")
        .stdout_has("running");
}

/// `attach` puts a terminal on the agent's own pane in the fleet's private server (not
/// another agent's, not another server), and returns 0 when the person detaches.
#[test]
fn attach_opens_the_agents_pane_and_returns_when_detached() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    let pane = fleet.agent_status("beta")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` (util-linux) on PATH for a terminal");
        return;
    }
    let cmd = format!(
        "{} --config {} attach beta",
        env!("CARGO_BIN_EXE_phoenix"),
        fleet.config().display()
    );
    // A pseudo-terminal whose input stays open (a closed one would end the client at once).
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", fleet.path().join("home"))
        .env("TERM", "xterm")
        .current_dir(fleet.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let clients = || {
        fleet
            .tmux(&["list-clients", "-F", "#{client_name}\t#{pane_id}"])
            .unwrap_or_default()
    };
    wait_until(
        Duration::from_secs(10),
        "a client on the fleet's server",
        || !clients().trim().is_empty(),
    );
    let listed = clients();
    let (client, on) = listed.trim().split_once('\t').unwrap();
    assert_eq!(on, pane, "{listed}");
    fleet.tmux(&["detach-client", "-t", client]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "attach did not return"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    // Both agents still run: attaching and detaching changed nothing.
    fleet.wait_running(&["alpha", "beta"]);
}

/// `--json` is one pretty document of one shape whatever the number of agents: `restart` of
/// one agent is the list of one, as of many; `resolve` and `init` have one too.
#[test]
fn json_is_one_pretty_shape_whatever_the_count() {
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    let pretty = |run: &support::Run| {
        let text = run.stdout();
        assert!(text.starts_with("{\n  \"format_version\": 1,"), "{text}");
        run.json()
    };
    let one = fleet.run(&["restart", "alpha", "--json"]);
    let one = pretty(one.status(0));
    let many = fleet.run(&["restart", "alpha", "beta", "--json"]);
    let many = pretty(many.status(0));
    for doc in [&one, &many] {
        assert_eq!(doc["command"], "restart", "{doc}");
        assert_eq!(doc["failed"], 0, "{doc}");
        assert!(doc["agents"][0]["via"].is_string(), "{doc}");
    }
    assert_eq!(one["agents"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(many["agents"].as_array().map(Vec::len), Some(2), "{many}");
    fleet
        .run(&["loop", "add", "alpha", "l1", "a", "loop"])
        .status(0);
    let resolved = fleet.run(&["resolve", "alpha", "l1", "done", "--json"]);
    let resolved = pretty(resolved.status(0));
    assert_eq!(resolved["resolved"]["id"], "l1", "{resolved}");
    let init = std::process::Command::new(support::PHOENIX)
        .current_dir(fleet.path())
        .env("HOME", fleet.path().join("home"))
        .args(["init", "-c", "sub/phoenix.toml", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&init.stdout).into_owned();
    assert_eq!(init.status.code(), Some(0), "{text}");
    assert!(text.starts_with("{\n  \"format_version\": 1,"), "{text}");
    let init: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(init["ok"], true, "{init}");
    assert!(fleet.path().join("sub/phoenix.toml").is_file());
    fleet.run(&["down"]).status(0);
}

/// `attach` from inside the person's own tmux (another server than the fleet's): the agent's
/// pane opens in a popup of that tmux, `C-b d` pressed at the person's terminal leaves the
/// agent's pane (not the person's own tmux, whose client stays attached), and `attach`
/// returns 0.
#[test]
fn attach_from_inside_another_tmux_opens_a_popup_that_c_b_d_closes() {
    use std::io::Write;
    let fleet = Fleet::new();
    fleet.toml(&two_demo_agents());
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    let pane = fleet.agent_status("beta")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` (util-linux) on PATH for a terminal");
        return;
    }
    // The person's own tmux: its own server, a real client on a pseudo-terminal.
    let own = format!("{}-own", fleet.socket);
    let own_tmux = |args: &[&str]| {
        let out = std::process::Command::new("tmux")
            .args(["-L", &own])
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    struct KillOnDrop(String);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            support::kill_tmux_server(&self.0);
        }
    }
    let _own_server = KillOnDrop(own.clone());
    let started = std::process::Command::new("tmux")
        .args(["-L", &own, "-f", "/dev/null", "new-session", "-d"])
        .args(["-x", "120", "-y", "40", "sleep 600"])
        .env_remove("TMUX")
        .status()
        .unwrap();
    assert!(started.success());
    let mut person = std::process::Command::new("script")
        .args(["-qec", &format!("tmux -L {own} attach"), "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", fleet.path().join("home"))
        .env("TERM", "xterm")
        .current_dir(fleet.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let own_clients = || own_tmux(&["list-clients", "-F", "#{client_name}"]);
    wait_until(
        Duration::from_secs(10),
        "the person's client on their own tmux",
        || !own_clients().trim().is_empty(),
    );

    // `phoenix attach` typed in a window of the person's tmux ($TMUX names that server).
    let rc = fleet.path().join("attach-rc");
    own_tmux(&[
        "new-window",
        &format!(
            "'{}' --config '{}' attach beta; echo $? > '{}'; sleep 600",
            support::PHOENIX,
            fleet.config().display(),
            rc.display()
        ),
    ]);
    let fleet_clients = || {
        fleet
            .tmux(&["list-clients", "-F", "#{pane_id}"])
            .unwrap_or_default()
    };
    wait_until(
        Duration::from_secs(10),
        "a client on the fleet's server",
        || !fleet_clients().trim().is_empty(),
    );
    assert_eq!(fleet_clients().trim(), pane);
    assert_eq!(own_clients().trim().lines().count(), 1, "{}", own_clients());

    // The person presses C-b d at their terminal.
    let stdin = person.stdin.as_mut().unwrap();
    stdin.write_all(b"\x02").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stdin.write_all(b"d").unwrap();
    stdin.flush().unwrap();
    wait_until(Duration::from_secs(10), "attach to return", || rc.exists());
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "0");
    assert!(fleet_clients().trim().is_empty(), "{}", fleet_clients());
    // Still in their own tmux: its client attached, the terminal's program still running.
    assert_eq!(own_clients().trim().lines().count(), 1, "{}", own_clients());
    assert!(
        person.try_wait().unwrap().is_none(),
        "the person's tmux client ended"
    );
    let _ = person.kill();
    fleet.wait_running(&["alpha", "beta"]);
}
