//! The watchdog end to end with demo agents on a real private tmux server: silence confirmed
//! over two passes, revived once with a revival context, unrecoverable the second time (safe
//! mode, failure message); error cascades reported through a recording `gh` (de-duplicated);
//! runaway work reported, not interrupted; a dead process revived at once; missing and corrupt
//! logs never break a pass.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::{Fleet, kill9, read_jsonl, wait_until, wait_until_explained};

/// A resumable demo agent with fast restarts.
fn agent(name: &str, flags: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 100ms {flags}\"\n\
         resume_command = \"phoenix demo-agent --interval 100ms {flags} --resume {{session_id}}\"\n"
    )
}

const FAST: &str =
    "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\n\n";

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn watchdog(fleet: &Fleet) -> Value {
    let run = fleet.run(&["watchdog", "--once", "--json"]);
    assert!(
        matches!(run.code(), Some(0 | 1)),
        "watchdog failed:\n{}\n{}",
        run.stdout(),
        run.stderr()
    );
    run.json()
}

fn verdict<'a>(report: &'a Value, agent: &str) -> &'a Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap_or_else(|| panic!("no {agent} in {report}"))
}

fn read_json_file(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

fn unhealthy_events(fleet: &Fleet) -> Vec<Value> {
    read_jsonl(&fleet.state_dir().join("critical_events.jsonl"))
        .into_iter()
        .filter(|e| e["event"] == "session_unhealthy")
        .collect()
}

/// Wait until the agent made tool calls and then nothing for `quiet`: no tool call and no hook
/// at all (a session that just started is not silent).
fn wait_silent(fleet: &Fleet, agent: &str, quiet: Duration) {
    wait_until(Duration::from_secs(20), "tool calls, then silence", || {
        let log = fleet.agent_dir(agent).join("tool_use.jsonl");
        std::fs::metadata(&log)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > quiet)
            && fleet.quiet_for(agent) > quiet.as_secs_f64()
    });
}

#[test]
fn silence_is_confirmed_revived_once_then_unrecoverable() {
    let fleet = Fleet::new();
    let notify = support::notify_recorder(&fleet);
    fleet.toml(&format!(
        "[thresholds]\nsilence = \"2s\"\n\n[notify]\ncommand = [\"{}\"]\n\n{FAST}{}",
        notify.display(),
        agent("quiet", "--silent-after 1s"),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["quiet"]);
    wait_silent(&fleet, "quiet", Duration::from_secs(3));

    // One observation is not enough to act on.
    let first = watchdog(&fleet);
    let a = verdict(&first, "quiet");
    assert_eq!(a["verdict"], "suspect", "{a}");
    assert!(unhealthy_events(&fleet).is_empty());

    // The second agrees: revive, with an investigation report and a critical event.
    let second = watchdog(&fleet);
    let a = verdict(&second, "quiet");
    assert_eq!(a["verdict"], "unhealthy", "{a}");
    assert_eq!(a["action"], "revive", "{a}");
    let checks: Vec<&str> = a["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert_eq!(checks, ["silence"]);
    let events = unhealthy_events(&fleet);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert!(e["reason"].as_str().unwrap().contains("silent_for_"), "{e}");
    assert!(
        e["action_taken"]
            .as_str()
            .unwrap()
            .starts_with("revival_attempted"),
        "{e}"
    );
    assert_eq!(e["project"], "test");
    assert!(e["details"]["tool_count"].as_u64().unwrap() > 0, "{e}");
    let log = std::fs::read_to_string(fleet.path().join("notified.log")).unwrap();
    assert!(log.contains("== investigation quiet"), "{log}");
    assert!(log.contains("no sign of life for"), "{log}");

    // The wrapper resumed the session, and the revived agent was told why.
    wait_until(Duration::from_secs(15), "the revived session", || {
        fleet
            .ops("quiet")
            .iter()
            .any(|o| o["event"] == "clinic_context_injected")
    });
    let ops = fleet.ops("quiet");
    let exit = ops.iter().rfind(|o| o["event"] == "agent_exit").unwrap();
    assert_eq!(exit["reason"], "watchdog_kill", "{exit}");
    assert_eq!(exit["counts_as_crash"], false, "{exit}");
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(
        start["mode"],
        "resume",
        "{start}\n{}",
        ops.iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let pane = fleet.agent_status("quiet")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let screen = fleet
        .tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", &pane])
        .unwrap();
    assert!(screen.contains("YOU WERE REVIVED"), "{screen}");
    // Read inside the revival: it is the first of one, and the next failure is the last.
    assert!(
        screen.contains("(revival 1 of 1 for this task; another failure stops the agent"),
        "{screen}"
    );
    assert!(!screen.contains("revival 0"), "{screen}");

    // Silent again, the same task: the one revival is spent, so it stops for a person.
    wait_silent(&fleet, "quiet", Duration::from_secs(3));
    watchdog(&fleet);
    let third = watchdog(&fleet);
    let a = verdict(&third, "quiet");
    assert_eq!(a["action"], "safe_mode", "{a}");
    let last = unhealthy_events(&fleet).pop().unwrap();
    assert_eq!(last["action_taken"], "safe_mode (unrecoverable)", "{last}");
    let log = std::fs::read_to_string(fleet.path().join("notified.log")).unwrap();
    assert!(log.contains("== failure quiet"), "{log}");
    assert!(log.contains("couldn't recover"), "{log}");
    wait_until(Duration::from_secs(10), "safe mode in the pane", || {
        fleet.ops("quiet").iter().any(|o| o["event"] == "safe_mode")
    });
    // A quarantined agent is left alone by later passes.
    let after = watchdog(&fleet);
    assert_eq!(verdict(&after, "quiet")["verdict"], "skipped");
}

/// A fake `gh` that records its calls; `issue create` makes the issue show up in `issue list`.
fn fake_gh(fleet: &Fleet) -> PathBuf {
    let bin = fleet.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dir = fleet.path().display().to_string();
    let script = format!(
        r#"#!/bin/bash
echo "gh $*" >> '{dir}/gh.log'
if [ "$1 $2" = "issue list" ]; then
  cat '{dir}/open.json' 2>/dev/null || echo '[]'
elif [ "$1 $2" = "issue create" ]; then
  title=""
  while [ $# -gt 0 ]; do [ "$1" = "--title" ] && title="$2"; shift; done
  cat > /dev/null
  n=$(( $(grep -c 'issue create' '{dir}/gh.log') ))
  printf '[{{"number":%d,"title":"%s","url":"https://github.com/acme/fleet/issues/%d"}}]\n' "$n" "$title" "$n" > '{dir}/open.json'
  echo "https://github.com/acme/fleet/issues/$n"
fi
"#
    );
    let gh = bin.join("gh");
    std::fs::write(&gh, script).unwrap();
    make_executable(&gh);
    bin
}

fn watchdog_with_gh(fleet: &Fleet, bin: &Path) -> Value {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = fleet
        .command(&["watchdog", "--once", "--json"])
        .env("PATH", path)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn an_error_cascade_opens_one_watchdog_issue() {
    let fleet = Fleet::new();
    let bin = fake_gh(&fleet);
    // The policy only reports, so the agent keeps failing and the report repeats.
    std::fs::create_dir_all(fleet.path().join("policies")).unwrap();
    std::fs::write(
        fleet.path().join("policies/recovery.lua"),
        "function on_unhealthy(agent, health) return { action = 'notify', reason = 'report only' } end\n",
    )
    .unwrap();
    fleet.toml(&format!(
        "[thresholds]\nerror_cascade = 3\n\n[notify]\ngithub = {{ repo = \"acme/fleet\", labels = [\"watchdog\"] }}\nissue_cooldown = \"1s\"\n\n{FAST}{}",
        agent("flaky", "--fail-tools"),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["flaky"]);
    wait_until(Duration::from_secs(15), "failing tool calls", || {
        read_jsonl(&fleet.agent_dir("flaky").join("tool_use.jsonl"))
            .iter()
            .filter(|l| l["ok"] == false)
            .count()
            > 4
    });
    assert_eq!(
        verdict(&watchdog_with_gh(&fleet, &bin), "flaky")["verdict"],
        "suspect"
    );
    let report = watchdog_with_gh(&fleet, &bin);
    let a = verdict(&report, "flaky");
    assert_eq!(a["action"], "notify", "{a}");
    assert_eq!(a["decided_by"], "policies/recovery.lua");
    assert_eq!(
        a["issue_url"], "https://github.com/acme/fleet/issues/1",
        "{a}"
    );
    let event = unhealthy_events(&fleet).pop().unwrap();
    assert_eq!(
        event["github_issue"],
        "https://github.com/acme/fleet/issues/1"
    );
    assert!(
        event["reason"]
            .as_str()
            .unwrap()
            .contains("consecutive_tool_errors"),
        "{event}"
    );
    let log = std::fs::read_to_string(fleet.path().join("gh.log")).unwrap();
    assert!(log.contains("--title [Watchdog] agent `flaky`"), "{log}");
    assert!(log.contains("--label watchdog"), "{log}");

    // Past the notification cooldown the problem is reported again: the open issue is
    // reused, not duplicated.
    std::thread::sleep(Duration::from_millis(1100));
    let report = watchdog_with_gh(&fleet, &bin);
    assert_eq!(
        verdict(&report, "flaky")["issue_url"],
        "https://github.com/acme/fleet/issues/1"
    );
    let log = std::fs::read_to_string(fleet.path().join("gh.log")).unwrap();
    assert_eq!(log.matches("issue create").count(), 1, "{log}");
    assert!(log.matches("issue list").count() >= 2, "{log}");
}

#[test]
fn runaway_work_is_reported_not_interrupted() {
    let fleet = Fleet::new();
    let notify = support::notify_recorder(&fleet);
    fleet.toml(&format!(
        "[thresholds]\nrunaway = \"2s\"\n\n[notify]\ncommand = [\"{}\"]\n\n{FAST}{}",
        notify.display(),
        agent("busy", ""),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["busy"]);
    // Past the 2 s runaway threshold: time has to pass, the finding is about time.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(verdict(&watchdog(&fleet), "busy")["verdict"], "suspect");
    let a = verdict(&watchdog(&fleet), "busy").clone();
    assert_eq!(a["action"], "notify", "{a}");
    assert_eq!(a["findings"][0]["check"], "runaway");
    // Reported once; the next pass does not repeat it.
    let again = watchdog(&fleet);
    assert_eq!(verdict(&again, "busy")["verdict"], "unhealthy");
    let events = unhealthy_events(&fleet);
    assert_eq!(events.last().unwrap()["action_taken"], "already reported");
    let log = std::fs::read_to_string(fleet.path().join("notified.log")).unwrap();
    assert_eq!(log.matches("== investigation busy").count(), 1, "{log}");
    // And the agent was never touched.
    assert_eq!(fleet.wait_running(&["busy"]), pids);
}

#[test]
fn a_dead_process_is_revived_at_once() {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("gone", "")));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["gone"]);
    let pane = fleet.agent_status("gone")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(wrapper);
    kill9(pids[0]);
    wait_until(Duration::from_secs(5), "a dead pane", || {
        fleet.agent_status("gone")["state"] == "dead"
    });
    let report = watchdog(&fleet);
    let a = verdict(&report, "gone");
    assert_eq!(a["verdict"], "unhealthy", "{a}");
    assert_eq!(a["findings"][0]["reason"], "process_dead");
    assert_eq!(a["action"], "revive");
    let new = fleet.wait_running(&["gone"]);
    assert_ne!(new, pids);
}

/// A fleet the operator took down stays down: `watchdog --once` (twice: a finding confirmed
/// over two passes is acted on too) and the daemon's reconciles revive nothing, and say why,
/// until the operator's `apply` brings it up; then the watchdog looks after it again.
#[test]
fn watchdog_once_after_down_revives_nothing_until_apply() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{FAST}{}{}",
        agent("alpha", ""),
        agent("beta", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    fleet.run(&["down"]).status(0);
    assert!(!fleet.server_running());

    for _ in 0..2 {
        let report = watchdog(&fleet);
        for name in ["alpha", "beta"] {
            let a = verdict(&report, name);
            assert_eq!(a["verdict"], "skipped", "{a}");
            assert!(
                a["skipped"]
                    .as_str()
                    .is_some_and(|why| why.contains("taken down with `phoenix down`")),
                "{a}"
            );
            assert!(a.get("action").is_none(), "{a}");
        }
    }
    fleet
        .run(&["watchdog", "--once"])
        .status(0)
        .stdout_has("skipped    alpha        the fleet was taken down with `phoenix down` (")
        .stdout_has("`phoenix apply` brings it up");
    assert!(!fleet.server_running(), "{:?}", fleet.tagged_panes());
    assert!(unhealthy_events(&fleet).is_empty());
    // `status` says so, and why nothing comes back.
    fleet
        .run(&["status"])
        .stdout_has("fleet: the fleet was taken down with `phoenix down` (");
    let status = fleet.run(&["status", "--json"]).json();
    assert!(status["taken_down_at"].is_string(), "{status}");

    // The daemon leaves it down too, and says why.
    let daemon = crate::supervise::Daemon::start(&fleet, &[]);
    wait_until(Duration::from_secs(10), "the daemon's word", || {
        daemon.log().contains("taken down with `phoenix down`")
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!fleet.server_running(), "{}", daemon.log());
    assert_eq!(daemon.stop(), Some(0));

    // An apply of one agent starts that one and leaves the rest of the fleet down.
    fleet
        .run(&["apply", "--yes", "alpha"])
        .status(0)
        .stderr_has("the rest of the fleet stays down");
    fleet.wait_running(&["alpha"]);
    let report = watchdog(&fleet);
    assert_eq!(verdict(&report, "beta")["verdict"], "skipped", "{report}");
    assert!(fleet.agent_status("beta")["pane"].is_null());

    // The operator brings it up: checked again.
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    assert!(!fleet.state_dir().join(".down").exists());
    assert!(fleet.run(&["status", "--json"]).json()["taken_down_at"].is_null());
    let report = watchdog(&fleet);
    assert_ne!(verdict(&report, "alpha")["verdict"], "skipped", "{report}");
}

/// A pass that `phoenix run` started goes on after SIGTERM: it must not revive anyone then.
#[test]
fn a_pass_of_a_stopping_daemon_revives_no_one() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("gone", "")));
    fleet.run(&["apply", "--yes"]).status(0);
    let pids = fleet.wait_running(&["gone"]);
    let pane = fleet.agent_status("gone")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(wrapper);
    kill9(pids[0]);
    wait_until(Duration::from_secs(5), "a dead pane", || {
        fleet.agent_status("gone")["state"] == "dead"
    });
    let spec = phoenix::spec::load(&fleet.config()).unwrap();
    let runtime = phoenix::world::runtime_for(&spec);
    let report = phoenix::watchdog::Watchdog::new(&spec, &*runtime)
        .stop_when(Arc::new(AtomicBool::new(true)))
        .pass();
    let a = report.agents.iter().find(|a| a.agent == "gone").unwrap();
    assert_eq!(a.verdict, "unhealthy", "{a:?}");
    assert_eq!(
        a.action_taken.as_deref(),
        Some("revival_skipped (stopping)"),
        "{a:?}"
    );
    assert_eq!(fleet.agent_status("gone")["state"], "dead");
    // Not spent: the next pass (no longer stopping) revives it.
    let report = watchdog(&fleet);
    assert_eq!(verdict(&report, "gone")["action"], "revive");
    assert_ne!(fleet.wait_running(&["gone"]), pids);
}

#[test]
fn missing_and_corrupt_logs_never_break_a_pass() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[thresholds]\nsilence = \"1s\"\n\n{FAST}{}{}",
        agent("ok", ""),
        "[[agent]]\nname = \"idle\"\ncommand = \"sleep 1000\"\n",
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["ok", "idle"]);
    let dir = fleet.agent_dir("idle");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("state.json"), "{\"status\": \"work").unwrap();
    std::fs::write(dir.join("tool_use.jsonl"), "garbage\n{\"ts\": 3\n").unwrap();
    std::fs::write(dir.join("ops.jsonl"), "\0\0\0").unwrap();
    std::fs::write(dir.join("watchdog.json"), "not json").unwrap();
    for _ in 0..2 {
        let report = watchdog(&fleet);
        let idle = verdict(&report, "idle");
        assert_eq!(idle["verdict"], "healthy", "{idle}");
        let notes = idle["notes"].to_string();
        assert!(notes.contains("state.json is not valid JSON"), "{notes}");
        assert_eq!(verdict(&report, "ok")["verdict"], "healthy");
    }
    // Read-only: the corrupt file is left for the state store (and a person) to handle.
    assert_eq!(
        std::fs::read_to_string(dir.join("state.json")).unwrap(),
        "{\"status\": \"work"
    );
    // The human report reads as one line per agent.
    let text = fleet.run(&["watchdog", "--once"]);
    text.status(0).stdout_has("2 agents checked, 0 unhealthy");
}

/// A screen that shows a known wedge (an API error banner) and does not change is stuck,
/// once the passes agree; extra phrases come from `[watchdog] screen_patterns`.
#[test]
fn a_wedged_screen_is_found_when_nothing_moves() {
    let fleet = Fleet::new();
    fleet.toml(
        "[watchdog]\nscreen_patterns = { custom = [\"press any key to reconnect\"] }\n\n\
         [[agent]]\nname = \"banner\"\n\
         command = \"sh -c 'echo API Error: 529 overloaded_error; sleep 1000'\"\n\
         [[agent]]\nname = \"custom\"\n\
         command = \"sh -c 'echo Press any key to reconnect; sleep 1000'\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["banner", "custom"]);
    // A state.json no hook wrote (a loop added by hand) says nothing about a turn: a CLI
    // without hooks still has its screen to go by.
    fleet
        .run(&["loop", "add", "banner", "retry", "retry the upload"])
        .status(0);
    let state = read_json_file(&fleet.agent_dir("banner").join("state.json"));
    assert_eq!(state["status"], "idle", "{state}");
    assert!(state["last_active"].is_null(), "{state}");
    // First pass: no baseline; second: the screen is read; third: it has not changed.
    watchdog(&fleet);
    watchdog(&fleet);
    let third = watchdog(&fleet);
    for agent in ["banner", "custom"] {
        let a = verdict(&third, agent);
        assert_eq!(a["verdict"], "suspect", "{a}");
        assert_eq!(a["findings"][0]["check"], "screen", "{a}");
    }
    let fourth = watchdog(&fleet);
    let a = verdict(&fourth, "banner");
    assert_eq!(a["verdict"], "unhealthy", "{a}");
    assert!(
        a["findings"][0]["summary"]
            .as_str()
            .unwrap()
            .contains("api error: 5"),
        "{a}"
    );
}

/// An API error an earlier session left in the pane's scrollback is no verdict on the session
/// running now: the screen check reads only what the current session wrote.
#[test]
fn an_old_sessions_error_in_the_scrollback_is_not_a_wedged_screen() {
    let fleet = Fleet::new();
    let count = fleet.path().join("count");
    let script = fleet.path().join("cli.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat '{c}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{c}'\n\
             if [ $n = 1 ]; then echo 'API Error: 529 overloaded_error'; sleep 1; exit 1; fi\n\
             echo 'ready'; exec sleep 1000\n",
            c = count.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\n\n\
         [[agent]]\nname = \"again\"\ncommand = \"{}\"\n",
        script.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(20), "the second session", || {
        fleet
            .ops("again")
            .iter()
            .filter(|o| o["event"] == "agent_start")
            .count()
            >= 2
    });
    let pane = fleet.agent_status("again")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    support::wait_for_screen(&fleet, &pane, "ready", Duration::from_secs(10));
    let screen = fleet.tmux(&["capture-pane", "-p", "-t", &pane]).unwrap();
    assert!(
        screen.contains("529"),
        "the old error is on screen: {screen}"
    );
    for _ in 0..4 {
        let report = watchdog(&fleet);
        let a = verdict(&report, "again");
        assert_eq!(a["verdict"], "healthy", "{a}");
    }
}

/// All screens in one tmux call, each pane's text under its own id; a pane that went away
/// does not cost the others theirs.
#[test]
fn screens_are_read_in_one_call_and_a_missing_pane_is_left_out() {
    let fleet = Fleet::new();
    fleet.toml(
        "[[agent]]\nname = \"one\"\ncommand = \"sh -c 'echo first-screen; sleep 1000'\"\n\
         [[agent]]\nname = \"two\"\ncommand = \"sh -c 'echo second-screen; sleep 1000'\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["one", "two"]);
    let pane = |a: &str| fleet.agent_status(a)["pane"].as_str().unwrap().to_string();
    let (one, two) = (pane("one"), pane("two"));
    let tmux = phoenix::world::connect(&fleet.socket);
    wait_until(Duration::from_secs(5), "both screens", || {
        let screens = tmux.capture_many(&[one.clone(), two.clone()], 20);
        screens
            .get(&one)
            .is_some_and(|t| t.contains("first-screen") && !t.contains("second"))
            && screens
                .get(&two)
                .is_some_and(|t| t.contains("second-screen") && !t.contains("first"))
    });
    let screens = tmux.capture_many(&[one.clone(), "%999".to_string(), two.clone()], 20);
    assert_eq!(screens.len(), 2, "{screens:?}");
    assert!(screens[&two].contains("second-screen"));
}

/// More panes than fit in one tmux command line: read in batches, every screen under its own
/// pane.
#[test]
fn screens_of_a_large_fleet_are_read_in_batches() {
    let fleet = Fleet::new();
    fleet
        .tmux(&[
            "new-session",
            "-d",
            "-s",
            "big",
            "sh -c 'echo screen-0; sleep 1000'",
        ])
        .unwrap();
    for i in 1..95 {
        fleet
            .tmux(&[
                "new-window",
                "-t",
                "big",
                &format!("sh -c 'echo screen-{i}; sleep 1000'"),
            ])
            .unwrap();
    }
    let panes: Vec<String> = fleet
        .tmux(&["list-panes", "-a", "-F", "#{pane_id}"])
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(panes.len(), 95);
    let tmux = phoenix::world::connect(&fleet.socket);
    wait_until(Duration::from_secs(10), "every screen", || {
        let screens = tmux.capture_many(&panes, 5);
        screens.len() == 95
            && panes.iter().enumerate().all(|(i, p)| {
                screens[p].contains(&format!("screen-{i}\n"))
                    || screens[p].trim_end().ends_with(&format!("screen-{i}"))
            })
    });
}

/// Fire the `turn-failed` hook as Claude Code's StopFailure does when the model says the prompt
/// is too long.
fn prompt_too_long(fleet: &Fleet, agent: &str) {
    stop_failure(
        fleet,
        agent,
        r#"{"hook_event_name":"StopFailure","session_id":"s1","error":"invalid_request","error_details":"400 {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 210000 tokens > 200000 maximum\"}}"}"#,
    );
}

/// Fire the `turn-failed` hook with Claude Code's StopFailure `payload`.
fn stop_failure(fleet: &Fleet, agent: &str, payload: &str) {
    use std::io::Write;
    let mut child = fleet
        .command(&["hook", "turn-failed", "--agent", agent, "--cli", "claude"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

/// What the agent's wrapper did about the latest failed turn (its `failed_turn_checked` op),
/// once it did it.
fn wrapper_checked(fleet: &Fleet, agent: &str, within: Duration, after: usize) -> Value {
    let find = || {
        fleet
            .ops(agent)
            .into_iter()
            .filter(|o| o["event"] == "failed_turn_checked")
            .nth(after)
    };
    wait_until(within, "the wrapper's check of the failed turn", || {
        find().is_some()
    });
    find().unwrap()
}

/// A failed turn (full context) goes to the Clinic at once, through the agent's wrapper: no
/// daemon, no watchdog pass. A fresh session with a context-limit handoff within seconds the
/// first time; a pass afterwards leaves the handled turn alone; once the task has used its
/// recoveries, safe mode and a failure message.
#[test]
fn a_full_context_is_cleared_at_once_without_a_daemon_then_given_up_on_after_the_clinic_limit() {
    let fleet = Fleet::new();
    let notify = support::notify_recorder(&fleet);
    fleet.toml(&format!(
        "[watchdog]\nmax_revivals = 5\n\n[clinic]\nmax_recoveries = 1\n\n[notify]\ncommand = [\"{}\"]\n\n{FAST}{}",
        notify.display(),
        agent("full", "--silent-after 300ms"),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let first_pid = fleet.wait_running(&["full"])[0];
    wait_silent(&fleet, "full", Duration::from_millis(500));
    let failed = std::time::Instant::now();
    prompt_too_long(&fleet, "full");

    wait_until(Duration::from_secs(5), "a fresh session", || {
        fleet
            .ops("full")
            .iter()
            .any(|o| o["event"] == "agent_start" && o["mode"] == "fresh" && o["pid"] != first_pid)
    });
    let took = failed.elapsed();
    let checked = wrapper_checked(&fleet, "full", Duration::from_secs(5), 0);
    assert_eq!(checked["verdict"], "unhealthy", "{checked}");
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap()
            .contains("started fresh"),
        "{checked}"
    );
    eprintln!("turn failed → fresh session started: {took:?}");
    let handoffs = fleet.run(&["handoff", "list", "full", "--json"]).json()["handoffs"].clone();
    assert_eq!(handoffs[0]["trigger_reason"], "context_limit", "{handoffs}");
    let events = fleet.run(&["events", "--agent", "full", "--json"]).stdout();
    assert!(events.contains("context_length_exceeded"), "{events}");

    // The same task fails the same way again: its one recovery is spent.
    wait_silent(&fleet, "full", Duration::from_millis(500));
    prompt_too_long(&fleet, "full");
    let checked = wrapper_checked(&fleet, "full", Duration::from_secs(5), 1);
    assert_eq!(checked["action_taken"], "safe_mode (clinic)", "{checked}");
    let log = std::fs::read_to_string(fleet.path().join("notified.log")).unwrap_or_default();
    assert!(log.contains("== failure full"), "{log}");
    wait_until(Duration::from_secs(15), "safe mode", || {
        fleet.agent_status("full")["state"] == "safe-mode"
    });
}

/// A CLI without a session-start hook leaves the state `failed` into its next session (as
/// Claude Code does until its SessionStart hook runs): the turn the wrapper handled is not
/// handled again by a pass, which would start yet another session and spend another recovery.
#[test]
fn a_failed_turn_the_wrapper_handled_is_left_alone_by_a_later_pass() {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("full", "--no-hooks")));
    fleet.run(&["apply", "--yes"]).status(0);
    let first_pid = fleet.wait_running(&["full"])[0];
    prompt_too_long(&fleet, "full");
    let checked = wrapper_checked(&fleet, "full", Duration::from_secs(5), 0);
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap()
            .contains("started fresh"),
        "{checked}"
    );
    let second_pid = fleet.wait_running(&["full"])[0];
    assert_ne!(second_pid, first_pid);
    let state: Value =
        serde_json::from_slice(&std::fs::read(fleet.agent_dir("full").join("state.json")).unwrap())
            .unwrap();
    assert_eq!(state["status"], "failed", "{state}");

    let report = watchdog(&fleet);
    let a = verdict(&report, "full");
    assert!(a["action_taken"].is_null(), "{a}");
    assert!(a["notes"].to_string().contains("already handled"), "{a}");
    assert_eq!(fleet.wait_running(&["full"])[0], second_pid);
    let starts = fleet
        .ops("full")
        .iter()
        .filter(|o| o["event"] == "agent_start")
        .count();
    assert_eq!(starts, 2, "{:#?}", fleet.ops("full"));
}

/// The daemon's pass holds the watchdog's lock when the turn fails: the wrapper's pass waits
/// for it instead of giving up, then handles the turn.
#[test]
fn a_failed_turn_during_another_pass_is_handled_once_that_pass_ends() {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("full", "--silent-after 300ms")));
    fleet.run(&["apply", "--yes"]).status(0);
    let first_pid = fleet.wait_running(&["full"])[0];
    wait_silent(&fleet, "full", Duration::from_millis(500));
    let other = phoenix::state::lock::FleetLock::acquire_file(
        &phoenix::state::FleetDir::new(fleet.state_dir()),
        phoenix::state::lock::WATCHDOG_LOCK,
        "watchdog pass",
        Duration::ZERO,
        |_| {},
    )
    .unwrap();
    prompt_too_long(&fleet, "full");
    let marker = fleet.agent_dir("full").join(".turn-failed");
    wait_until(
        Duration::from_secs(5),
        "the wrapper took the signal",
        || !marker.exists(),
    );
    assert!(
        !fleet
            .ops("full")
            .iter()
            .any(|o| o["event"] == "failed_turn_checked")
    );
    drop(other);
    let checked = wrapper_checked(&fleet, "full", Duration::from_secs(5), 0);
    assert!(
        checked["action_taken"]
            .as_str()
            .unwrap()
            .contains("started fresh"),
        "{checked}"
    );
    wait_until(Duration::from_secs(5), "a fresh session", || {
        fleet
            .ops("full")
            .iter()
            .any(|o| o["event"] == "agent_start" && o["mode"] == "fresh" && o["pid"] != first_pid)
    });
}

/// A 401 at the end of a turn: the wrapper quarantines the agent at once (no daemon, no
/// restart), and a pass afterwards has nothing to do.
#[test]
fn an_expired_key_goes_to_safe_mode_at_once_without_a_daemon() {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("auth", "--silent-after 300ms")));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["auth"]);
    wait_silent(&fleet, "auth", Duration::from_millis(500));
    stop_failure(
        &fleet,
        "auth",
        r#"{"hook_event_name":"StopFailure","session_id":"s1","error":"authentication_failed","error_details":"API Error: 401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}"}"#,
    );
    wait_until(Duration::from_secs(5), "safe mode", || {
        fleet.agent_status("auth")["state"] == "safe-mode"
    });
    let checked = wrapper_checked(&fleet, "auth", Duration::from_secs(5), 0);
    assert_eq!(checked["action_taken"], "safe_mode (clinic)", "{checked}");
    let record: Value = serde_json::from_slice(
        &std::fs::read(fleet.agent_dir("auth").join("restarts.json")).unwrap(),
    )
    .unwrap();
    assert!(
        record["safe_mode"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("invalid_credentials"),
        "{record}"
    );
    let starts = fleet
        .ops("auth")
        .iter()
        .filter(|o| o["event"] == "agent_start")
        .count();
    assert_eq!(starts, 1, "{:#?}", fleet.ops("auth"));
    let report = watchdog(&fleet);
    let a = verdict(&report, "auth");
    assert!(a["action_taken"].is_null(), "{a}");
}

#[test]
fn a_pass_over_a_fleet_never_applied_starts_nothing() {
    let fleet = Fleet::new();
    fleet.toml(&agent("a", ""));
    let report = watchdog(&fleet);
    let a = verdict(&report, "a");
    assert_eq!(
        a["skipped"], "never started (`phoenix apply` starts it)",
        "{a}"
    );
    assert!(a["action_taken"].is_null(), "{a}");
    assert!(!fleet.server_running(), "the watchdog started the fleet");
    // Once applied, the same pass does watch it.
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a"]);
    let report = watchdog(&fleet);
    assert!(verdict(&report, "a")["skipped"].is_null(), "{report}");
}

#[test]
fn a_pass_while_another_runs_does_nothing_and_says_so() {
    let fleet = Fleet::new();
    fleet.toml(&agent("a", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a"]);
    // Another pass holds the watchdog's lock (as the daemon's pass would while it acts).
    let other = phoenix::state::lock::FleetLock::acquire_file(
        &phoenix::state::FleetDir::new(fleet.state_dir()),
        phoenix::state::lock::WATCHDOG_LOCK,
        "watchdog pass",
        Duration::ZERO,
        |_| {},
    )
    .unwrap();
    let report = watchdog(&fleet);
    let holder = format!("pid {}, `watchdog pass`", std::process::id());
    assert_eq!(
        report["skipped"],
        format!("another watchdog pass ({holder}) is running")
    );
    assert_eq!(report["agents"], serde_json::json!([]));
    drop(other);
    let report = watchdog(&fleet);
    assert!(report["skipped"].is_null(), "{report}");
    assert_eq!(verdict(&report, "a")["agent"], "a");
}

/// A transcript_path that names a FIFO or `/dev/zero` (recorded when it was a file, replaced
/// since): the pass returns at once, says why it did not count tokens, and checks the rest.
#[test]
fn a_fifo_or_dev_zero_as_transcript_never_stalls_a_pass() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[thresholds]\nmax_tokens = 1000000\n\n{FAST}{}{}{}",
        "[[agent]]\nname = \"fifo\"\ncommand = \"sleep 1000\"\n",
        "[[agent]]\nname = \"zero\"\ncommand = \"sleep 1000\"\n",
        agent("ok", ""),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["fifo", "zero", "ok"]);
    let fifo = fleet.path().join("transcript.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (agent, transcript) in [("fifo", fifo.as_path()), ("zero", Path::new("/dev/zero"))] {
        let state = serde_json::json!({"agent": agent, "status": "idle",
            "last_active": jiff::Timestamp::now().to_string(), "transcript_path": transcript});
        std::fs::write(fleet.agent_dir(agent).join("state.json"), state.to_string()).unwrap();
    }
    let run = fleet.run_within(&["watchdog", "--once", "--json"], Duration::from_secs(5));
    let report = run.json();
    for (agent, kind) in [("fifo", "a FIFO"), ("zero", "a character device")] {
        let a = verdict(&report, agent);
        assert_eq!(a["verdict"], "healthy", "{a}");
        let notes = a["notes"].to_string();
        assert!(
            notes.contains(&format!("is not a regular file ({kind}): not read")),
            "{notes}"
        );
    }
    assert_eq!(verdict(&report, "ok")["verdict"], "healthy");
}

/// Temp files left by writers killed mid-write (the kill -9 storm left 256) are removed by the
/// next watchdog pass once stale and their writer is gone; a live writer's are kept.
#[test]
fn a_watchdog_pass_sweeps_stale_temp_files_of_dead_writers() {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("a", "")));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a"]);
    let dead = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let dir = fleet.agent_dir("a");
    let old = std::time::SystemTime::now() - Duration::from_secs(300);
    let plant = |path: PathBuf| {
        std::fs::write(&path, b"{\"half\": ").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        path
    };
    let stale: Vec<PathBuf> = (0..20)
        .map(|i| plant(dir.join(format!(".state.json.tmp.{dead}.{i}"))))
        .chain([plant(
            fleet
                .state_dir()
                .join(format!(".critical_events.jsonl.tmp.{dead}.0")),
        )])
        .collect();
    let live = plant(dir.join(format!(".ledger.json.tmp.{}.0", std::process::id())));
    watchdog(&fleet);
    for p in &stale {
        assert!(!p.exists(), "{} was not swept", p.display());
    }
    assert!(live.exists(), "a live writer's temp file is kept");
}

/// Type a line into an agent's pane, as a person would.
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

fn explain(fleet: &Fleet, agent: &str) -> String {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    format!(
        "{}\n--- state.json\n{}",
        fleet.explain(agent, &pane),
        state(fleet, agent)
    )
}

fn tool_calls(fleet: &Fleet, agent: &str) -> usize {
    read_jsonl(&fleet.agent_dir(agent).join("tool_use.jsonl")).len()
}

/// An agent idle longer than the silence threshold that starts a turn is not silent: its
/// last tool call was before the turn; nor is it a runaway: the turn before ended long ago,
/// this one has just begun. The same turn, once nothing happens in it for longer than the
/// threshold, is silent.
#[test]
fn a_turn_after_a_long_idle_is_not_silent_but_a_silent_turn_still_is() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[thresholds]\nsilence = \"5s\"\nrunaway = \"5s\"\n\n{FAST}{}",
        agent("late", "--silent-after 1ms"),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["late"]);
    let before = tool_calls(&fleet, "late");
    type_into(&fleet, "late", "turn cargo build");
    wait_until_explained(
        Duration::from_secs(15),
        "one finished turn",
        || state(&fleet, "late")["status"] == "idle" && tool_calls(&fleet, "late") > before,
        || explain(&fleet, "late"),
    );
    wait_until(Duration::from_secs(20), "an idle gap past silence", || {
        fleet.quiet_for("late") > 6.0
    });
    assert_eq!(verdict(&watchdog(&fleet), "late")["verdict"], "healthy");

    // A new prompt; the model thinks without calling a tool.
    type_into(&fleet, "late", "please refactor the parser");
    wait_until(Duration::from_secs(10), "the new turn", || {
        state(&fleet, "late")["status"] == "working"
    });
    for pass in 0..2 {
        let report = watchdog(&fleet);
        let a = verdict(&report, "late");
        assert_eq!(a["verdict"], "healthy", "pass {pass}: {a}");
    }

    // Nothing at all happens in the turn (no hook, no transcript write, a still screen).
    wait_until(
        Duration::from_secs(20),
        "a turn silent past silence",
        || fleet.quiet_for("late") > 6.0,
    );
    let first = watchdog(&fleet);
    assert_eq!(verdict(&first, "late")["verdict"], "suspect", "{first}");
    let second = watchdog(&fleet);
    let a = verdict(&second, "late");
    assert_eq!(a["verdict"], "unhealthy", "{a}");
    assert_eq!(a["findings"][0]["check"], "silence", "{a}");
    let summary = a["findings"][0]["summary"].as_str().unwrap();
    assert!(summary.contains("no sign of life for"), "{summary}");
}

/// Running the same command at the end of every turn is a habit, not a loop: neither idle
/// after those turns nor working on the next one is the agent found repeating itself.
#[test]
fn the_same_command_across_separate_prompts_is_not_a_loop() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[thresholds]\nrepeat = 3\n\n{FAST}{}",
        agent("habit", "--silent-after 1ms"),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["habit"]);
    let before = tool_calls(&fleet, "habit");
    for k in 1..=4 {
        type_into(&fleet, "habit", "turn cargo test");
        wait_until_explained(
            Duration::from_secs(15),
            "the turn's tool call",
            || {
                tool_calls(&fleet, "habit") == before + k
                    && state(&fleet, "habit")["status"] == "idle"
            },
            || explain(&fleet, "habit"),
        );
    }
    let lines = read_jsonl(&fleet.agent_dir("habit").join("tool_use.jsonl"));
    let digests: Vec<&Value> = lines[before..].iter().map(|l| &l["input_digest"]).collect();
    assert!(digests.iter().all(|d| *d == digests[0] && d.is_string()));
    for pass in 0..2 {
        let a = verdict(&watchdog(&fleet), "habit").clone();
        assert_eq!(a["verdict"], "healthy", "idle, pass {pass}: {a}");
    }
    type_into(&fleet, "habit", "please start the next task");
    wait_until(Duration::from_secs(10), "the next turn", || {
        state(&fleet, "habit")["status"] == "working"
    });
    for pass in 0..2 {
        let a = verdict(&watchdog(&fleet), "habit").clone();
        assert_eq!(a["verdict"], "healthy", "working, pass {pass}: {a}");
    }
    assert!(unhealthy_events(&fleet).is_empty());
}
