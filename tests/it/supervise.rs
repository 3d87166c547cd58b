//! Supervision end to end with the demo agent on a real private tmux server: the wrapper's
//! hybrid resume, crash limits and safe mode, `phoenix restart`, and the `phoenix run` daemon.

use crate::support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Fleet, kill9, read_jsonl, wait_until};

/// A demo agent that can be resumed: `cli = "custom"` with a `resume_command` template.
fn resumable_agent(name: &str, extra: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 200ms {extra}\"\n\
         resume_command = \"phoenix demo-agent --interval 200ms {extra} --resume {{session_id}}\"\n"
    )
}

/// Restart settings for tests: the shortest cooldown, a short life deadline.
fn fast_restarts(max_crashes: u32) -> String {
    format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = {max_crashes}\ncrash_window = \"1h\"\n\n"
    )
}

fn pane_of(fleet: &Fleet, agent: &str) -> String {
    fleet.agent_status(agent)["pane"]
        .as_str()
        .expect("agent has a pane")
        .to_string()
}

fn type_into(fleet: &Fleet, pane: &str, text: &str) {
    fleet
        .tmux(&["send-keys", "-t", pane, "-l", text])
        .expect("send-keys");
    fleet
        .tmux(&["send-keys", "-t", pane, "Enter"])
        .expect("send-keys Enter");
}

fn pane_phase(fleet: &Fleet, pane: &str) -> String {
    fleet
        .tmux(&["display-message", "-p", "-t", pane, "#{@phoenix_phase}"])
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn ops_named(fleet: &Fleet, agent: &str, event: &str) -> Vec<Value> {
    fleet
        .ops(agent)
        .into_iter()
        .filter(|o| o["event"] == event)
        .collect()
}

/// Wait until there are at least `n` ops named `event`; returns them.
fn wait_ops(fleet: &Fleet, agent: &str, event: &str, n: usize) -> Vec<Value> {
    let mut found = Vec::new();
    wait_until(
        Duration::from_secs(20),
        &format!("{n} `{event}` ops of `{agent}`"),
        || {
            found = ops_named(fleet, agent, event);
            found.len() >= n
        },
    );
    found
}

fn session_id(fleet: &Fleet, agent: &str) -> Option<String> {
    let text = std::fs::read_to_string(fleet.agent_dir(agent).join("state.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["session_id"].as_str().map(str::to_string)
}

/// The recorded session id, once the session has had a turn (the demo agent's first tool call
/// is in its transcript): only such a session is resumed.
fn wait_session_id(fleet: &Fleet, agent: &str) -> String {
    let mut id = None;
    wait_until(Duration::from_secs(15), "a session with a turn", || {
        id = session_id(fleet, agent).filter(|id| {
            std::fs::metadata(transcript(fleet, agent, id)).is_ok_and(|m| m.len() > 0)
        });
        id.is_some()
    });
    id.unwrap()
}

/// Where the demo agent writes the transcript of session `id`.
fn transcript(fleet: &Fleet, agent: &str, id: &str) -> std::path::PathBuf {
    fleet
        .agent_dir(agent)
        .join("transcripts")
        .join(format!("{id}.jsonl"))
}

fn exists(path: &Path) -> bool {
    path.exists()
}

/// `phoenix run` in the background, its log in a file; stopped (SIGTERM, then SIGKILL) on drop.
/// Shared with telemetry.rs.
pub(crate) struct Daemon {
    child: Option<Child>,
    log: std::path::PathBuf,
}

impl Daemon {
    pub(crate) fn start(fleet: &Fleet, args: &[&str]) -> Daemon {
        let n = std::fs::read_dir(fleet.path()).unwrap().count();
        let log = fleet.path().join(format!("daemon-{n}.log"));
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let child = fleet
            .command(&all)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn phoenix run");
        let d = Daemon {
            child: Some(child),
            log,
        };
        wait_until(Duration::from_secs(10), "daemon up", || {
            d.log().contains("supervising the fleet")
        });
        d
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Wait until the daemon has logged `n` more reconcile passes that found nothing to do
    /// (logged at debug: start it with `-v`): it looked, and left the fleet alone.
    fn wait_idle_passes(&self, n: usize) {
        let passes = || self.log().matches("reconciled: nothing to do").count();
        let before = passes();
        wait_until(Duration::from_secs(15), "idle reconcile passes", || {
            passes() >= before + n
        });
    }

    /// SIGTERM and wait; returns the exit code.
    pub(crate) fn stop(self) -> Option<i32> {
        self.stop_with("-TERM")
    }

    /// Send `signal` (`-TERM`, `-INT`) and wait; returns the exit code.
    fn stop_with(mut self, signal: &str) -> Option<i32> {
        let mut child = self.child.take().unwrap();
        let _ = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("daemon did not stop on {signal}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// /proc/<pid>/stat fields 5 (pgrp) and 8 (tpgid: the terminal's foreground group).
fn pgrp_and_tpgid(pid: u32) -> (i64, i64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    (rest[2].parse().unwrap(), rest[5].parse().unwrap())
}

#[test]
fn killed_agent_is_resumed_by_its_wrapper_with_the_recorded_session_id() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let pane = pane_of(&fleet, "alpha");
    let id = wait_session_id(&fleet, "alpha");

    // The agent owns the pane's terminal: its own process group, in the foreground.
    let (pgrp, tpgid) = pgrp_and_tpgid(pid);
    assert_eq!(pgrp, i64::from(pid), "agent leads its own process group");
    assert_eq!(
        tpgid,
        i64::from(pid),
        "agent's group is the terminal's foreground"
    );

    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "resume", "{starts:?}");
    assert_eq!(starts[1]["session_id"], id.as_str());
    assert!(
        starts[1]["argv"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| *a == "--resume")
            .count()
            == 1,
        "resume flag once: {:?}",
        starts[1]["argv"]
    );
    let new_pid = fleet.wait_running(&["alpha"])[0];
    assert_ne!(new_pid, pid);
    assert_eq!(pane_of(&fleet, "alpha"), pane, "same pane");
    // The wrapper took the terminal back (without being stopped by SIGTTOU) and handed it on.
    wait_until(
        Duration::from_secs(5),
        "replacement in the foreground",
        || pgrp_and_tpgid(new_pid) == (i64::from(new_pid), i64::from(new_pid)),
    );

    let end = &ops_named(&fleet, "alpha", "agent_exit")[0];
    assert_eq!(end["reason"], "crash");
    assert_eq!(end["signal"], 9);
    assert_eq!(end["action"], "resume");
    // Evidence was kept and `status AGENT` shows it.
    let crashes = std::fs::read_dir(fleet.agent_dir("alpha").join("crashes"))
        .unwrap()
        .count();
    assert_eq!(crashes, 1);
    fleet
        .run(&["status", "alpha"])
        .status(0)
        .stdout_has("latest crash:")
        .stdout_has("signal 9")
        .stdout_has("demo-agent `alpha` session");
    let json = fleet.run(&["status", "alpha", "--json"]).json();
    assert_eq!(json["agents"][0]["supervision"]["crashes_in_window"], 1);
    // The resumed run came back as the same session.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ops_named(&fleet, "alpha", "agent_alive")
        .iter()
        .any(|o| o["pid"] == new_pid)
    {
        assert!(
            Instant::now() < deadline,
            "resumed run shows life: {:#?}",
            fleet.ops("alpha")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(session_id(&fleet, "alpha").as_deref(), Some(id.as_str()));
}

/// A custom CLI's resume that exits on its own before it shows any life refused the id (phoenix
/// knows no words of its): the next start is fresh and the old id is gone for good.
#[test]
fn a_resume_that_never_shows_life_starts_fresh_and_clears_the_id() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"alpha\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 200ms\"\n\
         resume_command = \"sh -c 'exit 1' {{session_id}}\"\n",
        fast_restarts(5)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let first = wait_session_id(&fleet, "alpha");

    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 3);
    assert_eq!(starts[1]["mode"], "resume", "{starts:?}");
    assert_eq!(starts[2]["mode"], "fresh", "{starts:?}");
    let ends = ops_named(&fleet, "alpha", "agent_exit");
    assert_eq!(ends[1]["code"], 1);
    assert_eq!(ends[1]["showed_life"], false);
    assert_eq!(ends[1]["action"], "fresh");
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(fleet.agent_dir("alpha").join("restarts.json")).unwrap(),
    )
    .unwrap();
    assert!(
        record["discarded_sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| *d == first.as_str()),
        "{record}"
    );
    // The fresh run's session is the one recorded now.
    wait_new_session(&fleet, "alpha", &first);
}

/// A resume killed before it showed life (kill -9, as by the operator or the machine) is no
/// proof it cannot be resumed: the next start resumes the same id, on no never-resume list.
#[test]
fn a_resume_killed_before_it_shows_life_is_resumed_again_with_the_same_id() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"alpha\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 200ms\"\n\
         resume_command = \"sh -c 'sleep 600' {{session_id}}\"\n",
        fast_restarts(5)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let first = wait_session_id(&fleet, "alpha");

    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "resume", "{starts:?}");
    kill9(starts[1]["pid"].as_u64().unwrap() as u32);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 3);
    let ends = ops_named(&fleet, "alpha", "agent_exit");
    assert_eq!(ends[1]["signal"], 9, "{ends:?}");
    assert_eq!(ends[1]["showed_life"], false, "{ends:?}");
    assert_eq!(ends[1]["action"], "resume", "{ends:?}");
    assert_eq!(starts[2]["mode"], "resume", "{starts:?}");
    assert_eq!(starts[2]["session_id"], first.as_str(), "{starts:?}");
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(fleet.agent_dir("alpha").join("restarts.json")).unwrap(),
    )
    .unwrap();
    assert!(
        !record["discarded_sessions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| *d == first.as_str())),
        "{record}"
    );
    kill9(starts[2]["pid"].as_u64().unwrap() as u32);
}

/// A resumed session that shows life and takes a turn is the conversation: killed again a
/// second after its start, it is resumed again, not thrown away for a fresh one.
#[test]
fn a_resumed_session_that_took_a_turn_is_resumed_again_when_killed_within_seconds() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let id = wait_session_id(&fleet, "alpha");
    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "resume");
    let resumed = starts[1]["pid"].as_u64().unwrap() as u32;
    // A turn of the resumed session: one more tool call in its transcript.
    let before = std::fs::read_to_string(transcript(&fleet, "alpha", &id))
        .unwrap()
        .lines()
        .count();
    wait_until(
        Duration::from_secs(10),
        "a turn of the resumed session",
        || {
            std::fs::read_to_string(transcript(&fleet, "alpha", &id))
                .is_ok_and(|t| t.lines().count() > before)
        },
    );
    kill9(resumed);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 3);
    assert_eq!(starts[2]["mode"], "resume", "{starts:?}");
    assert_eq!(starts[2]["session_id"], id.as_str());
    let ends = ops_named(&fleet, "alpha", "agent_exit");
    assert!(ends[1]["runtime_ms"].as_u64().unwrap() < 30_000, "{ends:?}");
    assert_eq!(ends[1]["action"], "resume", "{ends:?}");
}

/// An agent that never got a prompt has a session id but no conversation: restarting or
/// replacing it starts fresh (no resume its CLI would refuse, no crash counted), and a crash
/// of it types no continue prompt into the next session: there is no task to continue.
#[test]
fn an_agent_that_never_got_a_prompt_is_started_fresh_and_told_nothing() {
    let fleet = Fleet::new();
    // Hooked like Claude Code (so that a continue prompt would be typed), idle from the start.
    // (A custom CLI's pane output would count as life; a Claude-like one shows it by hooks.)
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"idle\"\ncli = \"claude\"\n\
         command = \"phoenix demo-agent --interval 200ms --silent-after 0s\"\n",
        fast_restarts(5)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["idle"]);
    let first = session_id_soon(&fleet, "idle");
    assert!(!transcript(&fleet, "idle", &first).exists());

    fleet.run(&["restart", "idle"]).status(0);
    let starts = wait_ops(&fleet, "idle", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "fresh", "{starts:?}");
    let skipped = ops_named(&fleet, "idle", "resume_skipped");
    assert_eq!(skipped[0]["session_id"], first.as_str(), "{skipped:?}");
    assert!(
        !fleet.agent_dir("idle").join("restarts.json").exists()
            || std::fs::read_to_string(fleet.agent_dir("idle").join("restarts.json"))
                .unwrap()
                .contains("\"crashes\": []"),
        "no crash"
    );

    // Killed: a crash, but of a session without a task.
    let pid = fleet.wait_running(&["idle"])[0];
    wait_until(Duration::from_secs(10), "the second session", || {
        session_id(&fleet, "idle").is_some_and(|s| s != first)
    });
    kill9(pid);
    let skipped = wait_ops(&fleet, "idle", "continue_prompt_skipped", 1);
    assert_eq!(skipped[0]["after"], "crash", "{skipped:?}");
    let starts = wait_ops(&fleet, "idle", "agent_start", 3);
    assert_eq!(starts[2]["mode"], "fresh", "{starts:?}");
    let alive = starts[2]["pid"].clone();
    wait_until(Duration::from_secs(10), "the next run alive", || {
        ops_named(&fleet, "idle", "agent_alive")
            .iter()
            .any(|o| o["pid"] == alive)
    });
    // The decision not to type it was made (and recorded) before this run started.
    assert!(ops_named(&fleet, "idle", "continue_prompt_sent").is_empty());
    let ends = ops_named(&fleet, "idle", "agent_exit");
    assert!(ends.iter().all(|e| e["code"] != 1), "{ends:?}");
}

/// A session other than `old` that has had a turn.
fn wait_new_session(fleet: &Fleet, agent: &str, old: &str) -> String {
    let mut id = None;
    wait_until(Duration::from_secs(20), "a new session with a turn", || {
        id = session_id(fleet, agent).filter(|id| {
            id != old && std::fs::metadata(transcript(fleet, agent, id)).is_ok_and(|m| m.len() > 0)
        });
        id.is_some()
    });
    id.unwrap()
}

fn session_id_soon(fleet: &Fleet, agent: &str) -> String {
    let mut id = None;
    wait_until(Duration::from_secs(15), "a recorded session id", || {
        id = session_id(fleet, agent);
        id.is_some()
    });
    id.unwrap()
}

/// A command that cannot run (missing binary, or a script whose program is missing: exit
/// 127) is no crash to retry: safe mode at once, with the reason, and no word of resuming.
/// Both are Claude-like (life shows by hooks): the shell's "not found" in the pane is no life.
#[test]
fn a_missing_binary_goes_to_safe_mode_without_retries() {
    let fleet = Fleet::new();
    let script = fleet.path().join("cli.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nexec phoenix-no-such-program-xyz \"$@\"\n",
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let noexec = fleet.path().join("noexec.sh");
    std::fs::write(&noexec, "#!/bin/sh\n").unwrap();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"gone\"\ncli = \"claude\"\ncommand = \"/nonexistent/bin/claude\"\n\n\
         [[agent]]\nname = \"script\"\ncli = \"claude\"\ncommand = \"{}\"\n\n\
         [[agent]]\nname = \"noexec\"\ncli = \"claude\"\ncommand = \"{}\"\n",
        fast_restarts(5),
        script.display(),
        noexec.display()
    ));
    // `apply` refuses what it can see cannot run; the command of `script` only fails when run.
    fleet
        .run(&["apply", "--yes"])
        .status(1)
        .stderr_has("command `/nonexistent/bin/claude` is not an executable file");
    fleet.run(&["apply", "--yes", "script"]);
    // Started past the plan's check (a restart, as the daemon or the watchdog would), the
    // wrapper stops each for a person at its first failed spawn, with no crash budget spent.
    for agent in ["gone", "noexec"] {
        fleet.run(&["restart", agent]);
    }
    for (agent, code) in [
        ("gone", "exit 127: not found"),
        ("script", "exit 127: not found"),
        ("noexec", "exit 126: not executable"),
    ] {
        let safe = wait_ops(&fleet, agent, "safe_mode", 1);
        let why = safe[0]["why"].as_str().unwrap();
        assert!(why.contains(&format!("cannot be run ({code})")), "{why}");
        assert!(why.contains("fix `command` in phoenix.toml"), "{why}");
        assert!(!why.contains("resum"), "{why}");
        let ends = ops_named(&fleet, agent, "agent_exit");
        assert_eq!(ends.len(), 1, "no retry: {ends:?}");
        assert_eq!(ends[0]["action"], "safe_mode");
        let pane = pane_of(&fleet, agent);
        wait_until(Duration::from_secs(5), "safe mode shown", || {
            pane_phase(&fleet, &pane) == "safe"
        });
    }
}

#[test]
fn fresh_marker_is_honoured_once() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let first = wait_session_id(&fleet, "alpha");
    let marker = fleet.agent_dir("alpha").join(".fresh");
    std::fs::write(&marker, "").unwrap();

    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "fresh");
    assert!(!exists(&marker), "consumed when honoured");
    assert_eq!(ops_named(&fleet, "alpha", "fresh_marker_honoured").len(), 1);
    let second = wait_new_session(&fleet, "alpha", &first);

    let pid = fleet.wait_running(&["alpha"])[0];
    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 3);
    assert_eq!(starts[2]["mode"], "resume", "only once");
    assert_eq!(starts[2]["session_id"], second.as_str());
}

#[test]
fn a_crash_is_diagnosed_from_its_own_session_not_from_old_scrollback() {
    let fleet = Fleet::new();
    let count = fleet.path().join("count");
    let script = fleet.path().join("cli.sh");
    // Session 1 hits an overloaded API and dies; session 2 dies without a word about why;
    // session 3 stays up.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat '{c}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{c}'\n\
             case $n in\n\
             1) echo 'API Error: 529 {{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}'; sleep 1; exit 1;;\n\
             2) echo 'working on it'; sleep 1; exit 1;;\n\
             *) exec sleep 600;;\n\
             esac\n",
            c = count.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"a\"\ncli = \"custom\"\ncommand = \"{}\"\n",
        fast_restarts(5),
        script.display()
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_ops(&fleet, "a", "agent_start", 3);
    let ends = wait_ops(&fleet, "a", "agent_exit", 2);
    assert!(
        ends.iter().all(|e| e["counts_as_crash"] == true),
        "{ends:?}"
    );

    // The first crash is the overload; the second is not, whatever the pane still shows.
    let diagnoses = ops_named(&fleet, "a", "clinic_diagnosis");
    assert_eq!(diagnoses.len(), 1, "{diagnoses:?}");
    assert_eq!(diagnoses[0]["diagnosis"]["root_cause"], "transient_error");
    let undiagnosed = ops_named(&fleet, "a", "clinic_undiagnosed");
    assert_eq!(undiagnosed.len(), 1, "{undiagnosed:?}");
    let second = undiagnosed[0].to_string();
    assert!(!second.contains("529"), "{second}");
    assert!(!second.to_lowercase().contains("overloaded"), "{second}");
    assert!(
        !ends[1]["explain"].as_str().unwrap().contains("transient"),
        "{:?}",
        ends[1]
    );

    // The crash record keeps what the dying session printed, and only that.
    let crashes = fleet.agent_dir("a").join("crashes");
    let mut records: Vec<_> = std::fs::read_dir(&crashes)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    records.sort();
    assert_eq!(records.len(), 2, "{records:?}");
    let tail = |p: &Path| -> String {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v["pane_tail"].as_str().unwrap_or("").to_string()
    };
    assert!(tail(&records[0]).contains("529"), "{}", tail(&records[0]));
    let last = tail(&records[1]);
    assert!(last.contains("working on it"), "{last}");
    assert!(!last.contains("529"), "{last}");

    // Asked afterwards, the Clinic diagnoses the last exit the same way.
    let asked = fleet
        .run(&["clinic", "a", "--json", "--dry-run"])
        .status(0)
        .json();
    assert_ne!(
        asked["diagnosis"]["root_cause"], "transient_error",
        "{asked}"
    );
}

#[test]
fn max_crashes_enter_safe_mode_with_a_critical_event_that_survives_a_new_wrapper() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(3),
        resumable_agent("alpha", "--crash-after 300ms")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_ops(&fleet, "alpha", "safe_mode", 1);
    assert_eq!(ops_named(&fleet, "alpha", "agent_start").len(), 3);
    let ends = ops_named(&fleet, "alpha", "agent_exit");
    assert_eq!(ends.len(), 3);
    assert!(ends.iter().all(|e| e["reason"] == "crash"), "{ends:?}");
    assert_eq!(ends[2]["action"], "safe_mode");

    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "crash_loop");
    assert_eq!(events[0]["agent"], "alpha");
    assert_eq!(events[0]["action_taken"], "safe_mode");

    let pane = pane_of(&fleet, "alpha");
    wait_until(Duration::from_secs(5), "safe phase", || {
        pane_phase(&fleet, &pane) == "safe"
    });
    assert_eq!(fleet.agent_status("alpha")["state"], "safe-mode");
    let screen = fleet.tmux(&["capture-pane", "-p", "-t", &pane]).unwrap();
    assert!(screen.contains("safe mode"), "{screen}");
    // Nothing to do for a reconciler: the quarantine is intentional.
    fleet.run(&["plan"]).status(0);

    // A new wrapper (the pane died and was restarted) still knows: straight to safe mode.
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(wrapper);
    wait_until(Duration::from_secs(5), "pane dead", || {
        fleet.agent_status("alpha")["state"] == "dead"
    });
    fleet.run(&["apply", "--yes"]).status(0);
    wait_ops(&fleet, "alpha", "safe_mode", 2);
    assert_eq!(
        ops_named(&fleet, "alpha", "agent_start").len(),
        3,
        "no new start while quarantined"
    );

    // Safe mode never runs what is typed.
    type_into(&fleet, &pane, "touch pwned");
    support::wait_for_screen(
        &fleet,
        &pane,
        "unknown word `touch pwned`",
        Duration::from_secs(5),
    );
    assert!(!fleet.path().join("pwned").exists());

    // `restart` typed in the pane lifts the quarantine.
    type_into(&fleet, &pane, "restart");
    wait_ops(&fleet, "alpha", "agent_start", 4);
}

#[test]
fn agent_that_never_shows_life_counts_as_a_failed_start() {
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"1s\"\nmax_crashes = 2\n\n\
         [[agent]]\nname = \"mute\"\ncli = \"custom\"\ncommand = \"sleep 1000\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    wait_ops(&fleet, "mute", "safe_mode", 1);
    let ends = ops_named(&fleet, "mute", "agent_exit");
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(ends.iter().all(|e| e["reason"] == "no_life"), "{ends:?}");
    assert!(ends.iter().all(|e| e["showed_life"] == false));
}

/// `restart.when = "always"`: a clean exit is started again after the cooldown (and counts as
/// no crash: it never reaches safe mode); `"never"`: a crash is left stopped for a person.
#[test]
fn restart_when_always_restarts_clean_exits_and_never_restarts_nothing() {
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nmax_crashes = 2\n\n\
         [[agent]]\nname = \"tidy\"\ncli = \"custom\"\ncommand = \"sh -c 'echo up; sleep 1; exit 0'\"\n\
         restart = { when = \"always\" }\n\n\
         [[agent]]\nname = \"once\"\ncli = \"custom\"\ncommand = \"sh -c 'echo up; sleep 1; exit 3'\"\n\
         restart = { when = \"never\" }\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    // More clean exits than max_crashes, each started again.
    let starts = wait_ops(&fleet, "tidy", "agent_start", 4);
    assert!(
        starts
            .iter()
            .all(|s| s["mode"] == "resume" || s["mode"] == "fresh")
    );
    let ends = ops_named(&fleet, "tidy", "agent_exit");
    assert!(ends.len() >= 3, "{ends:?}");
    assert!(ends.iter().all(|e| e["reason"] == "clean_exit"), "{ends:?}");
    assert!(ops_named(&fleet, "tidy", "safe_mode").is_empty());

    let stopped = wait_ops(&fleet, "once", "safe_mode", 1);
    assert!(
        stopped[0].to_string().contains("never"),
        "the reason names the setting: {stopped:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ops_named(&fleet, "once", "agent_start").len(), 1);
    assert_eq!(fleet.agent_status("once")["state"], "safe-mode");
}

#[test]
fn clean_exit_leaves_it_stopped_the_daemon_skips_it_and_restart_brings_it_back() {
    let fleet = Fleet::new();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n{}{}",
        fleet.socket,
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    let daemon = Daemon::start(&fleet, &["-v"]);
    fleet.wait_running(&["alpha"]);
    let pane = pane_of(&fleet, "alpha");
    let id = wait_session_id(&fleet, "alpha");

    type_into(&fleet, &pane, "exit");
    let marker = fleet.agent_dir("alpha").join(".clean-exit");
    wait_until(Duration::from_secs(10), ".clean-exit", || exists(&marker));
    wait_ops(&fleet, "alpha", "safe_mode", 1);
    let end = &ops_named(&fleet, "alpha", "agent_exit")[0];
    assert_eq!(end["reason"], "clean_exit");
    assert_eq!(end["code"], 0);

    // Two reconcile passes later the daemon has not restarted it.
    daemon.wait_idle_passes(2);
    assert_eq!(ops_named(&fleet, "alpha", "agent_start").len(), 1);
    assert_eq!(fleet.agent_status("alpha")["state"], "stopped");

    // `quit` closes the pane; dead with the marker is still intentional.
    type_into(&fleet, &pane, "quit");
    wait_until(Duration::from_secs(5), "pane dead", || {
        fleet
            .tmux(&["display-message", "-p", "-t", &pane, "#{pane_dead}"])
            .is_some_and(|s| s.trim() == "1")
    });
    daemon.wait_idle_passes(2);
    assert_eq!(ops_named(&fleet, "alpha", "agent_start").len(), 1);

    let run = fleet.run(&["restart", "alpha"]);
    run.status(0).stdout_has("restarted resuming its session");
    assert!(daemon.log().contains("restarted on request"));
    assert!(!exists(&marker), "restart clears the marker");
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "resume");
    assert_eq!(starts[1]["session_id"], id.as_str());
    fleet.wait_running(&["alpha"]);
    daemon.wait_idle_passes(2);
    assert_eq!(
        ops_named(&fleet, "alpha", "agent_start").len(),
        2,
        "no duplicate"
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn operator_restart_of_a_running_agent_is_recorded_and_fresh_is_not_undone_by_the_daemon() {
    let fleet = Fleet::new();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n{}{}",
        fleet.socket,
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    let daemon = Daemon::start(&fleet, &["-v"]);
    let pid = fleet.wait_running(&["alpha"])[0];
    let first = wait_session_id(&fleet, "alpha");

    fleet
        .run(&["restart", "alpha", "--fresh"])
        .status(0)
        .stdout_has("with a fresh session");
    // The running daemon carried it out, through its own apply path.
    assert!(
        daemon.log().contains("restarted on request"),
        "{}",
        daemon.log()
    );
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "fresh");
    let end = &ops_named(&fleet, "alpha", "agent_exit")[0];
    assert_eq!(end["reason"], "operator_restart");
    assert_eq!(end["counts_as_crash"], false);
    let new_pid = fleet.wait_running(&["alpha"])[0];
    assert_ne!(new_pid, pid);

    // Whatever restarts it next resumes the new session, never the one left on purpose.
    let second = wait_new_session(&fleet, "alpha", &first);
    kill9(new_pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 3);
    assert_eq!(starts[2]["mode"], "resume");
    assert_eq!(starts[2]["session_id"], second.as_str());
    fleet.wait_running(&["alpha"]);
    daemon.wait_idle_passes(2);
    assert_eq!(
        ops_named(&fleet, "alpha", "agent_start").len(),
        3,
        "no duplicate start"
    );
    drop(daemon);
}

#[test]
fn daemon_restarts_a_dead_pane_at_once_and_a_restarted_daemon_does_not_duplicate_agents() {
    let fleet = Fleet::new();
    // A long interval: only events can explain a quick reaction.
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n{}{}\n{}",
        fleet.socket,
        fast_restarts(5),
        resumable_agent("alpha", ""),
        resumable_agent("beta", "")
    ));
    let daemon = Daemon::start(&fleet, &[]);
    let pids = fleet.wait_running(&["alpha", "beta"]);

    // A second daemon for the same state dir refuses to start.
    let second = fleet.run(&["run"]);
    second.status(1).stderr_has("already supervises state dir");

    // The whole pane dies (wrapper and agent): the daemon sees it through the pidfd.
    let pane = pane_of(&fleet, "alpha");
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(wrapper);
    kill9(pids[0]);
    let started = Instant::now();
    wait_until(Duration::from_secs(10), "alpha back", || {
        let s = fleet.agent_status("alpha");
        s["state"] == "running" && s["pid"].as_u64() != Some(u64::from(pids[0]))
    });
    assert!(started.elapsed() < Duration::from_secs(8));

    // SIGTERM: clean exit 0, agents keep running.
    assert_eq!(daemon.stop(), Some(0));
    let pids = fleet.wait_running(&["alpha", "beta"]);
    // A new daemon (even after kill -9 of the old one) converges without duplicates.
    let daemon = Daemon::start(&fleet, &[]);
    let pid = daemon.pid();
    kill9(pid);
    drop(daemon);
    let daemon = Daemon::start(&fleet, &["-v"]);
    wait_until(Duration::from_secs(5), "a reconcile", || {
        daemon.log().contains("nothing to do")
    });
    assert_eq!(fleet.wait_running(&["alpha", "beta"]), pids);
    let windows = fleet.tmux(&["list-windows", "-a"]).unwrap();
    assert_eq!(windows.lines().count(), 2, "{windows}");
    // SIGINT (Ctrl-C in a terminal) is as clean as SIGTERM, and leaves the agents too.
    let log = daemon.log.clone();
    assert_eq!(daemon.stop_with("-INT"), Some(0));
    assert!(
        std::fs::read_to_string(log)
            .unwrap()
            .contains("SIGINT received: stopping")
    );
    assert_eq!(fleet.wait_running(&["alpha", "beta"]), pids);
}

/// The commands of the hooks a Claude Code settings file has for `event`.
fn hook_commands(settings: &Value, event: &str) -> Vec<String> {
    settings["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["hooks"].as_array().into_iter().flatten())
        .filter_map(|h| h["command"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn the_daemon_restores_a_removed_phoenix_hook_and_keeps_the_users_own() {
    let fleet = Fleet::new();
    let work = fleet.path().join("wc");
    std::fs::create_dir_all(work.join(".claude")).unwrap();
    let settings = work.join(".claude/settings.json");
    let user_stop = "echo the-users-own-stop-hook";
    std::fs::write(
        &settings,
        serde_json::json!({
            "model": "the-users-model",
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": user_stop}]}]},
        })
        .to_string(),
    )
    .unwrap();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n\
         [[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\n",
        fleet.socket
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let read =
        || -> Value { serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap() };
    let ours = |v: &Value| {
        hook_commands(v, "Stop")
            .iter()
            .filter(|c| c.contains("phoenix-hook"))
            .count()
    };
    assert!(ours(&read()) > 0, "{}", read());
    let daemon = Daemon::start(&fleet, &["-v"]);
    fleet.wait_running(&["c"]);

    // Someone takes phoenix's Stop hook out, leaving their own.
    let mut edited = read();
    for group in edited["hooks"]["Stop"].as_array_mut().unwrap() {
        group["hooks"]
            .as_array_mut()
            .unwrap()
            .retain(|h| !h["command"].as_str().unwrap_or("").contains("phoenix-hook"));
    }
    edited["hooks"]["Stop"]
        .as_array_mut()
        .unwrap()
        .retain(|g| !g["hooks"].as_array().unwrap().is_empty());
    std::fs::write(&settings, edited.to_string()).unwrap();
    assert_eq!(ours(&read()), 0);
    fleet.run(&["plan"]).status(2).stdout_has("settings.json");

    wait_until(Duration::from_secs(10), "the Stop hook restored", || {
        ours(&read()) > 0
    });
    let restored = read();
    assert_eq!(restored["model"], "the-users-model");
    assert!(
        hook_commands(&restored, "Stop").contains(&user_stop.to_string()),
        "{restored}"
    );
    // Two passes later nothing more was done: the drift was converged, and logged, once.
    daemon.wait_idle_passes(2);
    let log = daemon.log();
    let applied: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("applied") && l.contains("install_hooks"))
        .collect();
    assert_eq!(applied.len(), 1, "{log}");
    fleet.run(&["plan"]).status(0);
    daemon.stop();
}

/// An agent the daemon starts reads its hooks at startup: a hook file drifted while its pane
/// was gone is written back before the agent is started again, in the same pass.
#[test]
fn the_daemon_writes_hook_files_before_it_starts_the_agent() {
    let fleet = Fleet::new();
    std::fs::create_dir_all(fleet.path().join("wc")).unwrap();
    let settings = fleet.path().join("wc/.claude/settings.json");
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n\
         [[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\n",
        fleet.socket
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["c"]);
    let pane = pane_of(&fleet, "c");
    fleet.tmux(&["kill-pane", "-t", &pane]);
    std::fs::write(&settings, "{}").unwrap();
    let before = ops_named(&fleet, "c", "agent_start").len();
    let daemon = Daemon::start(&fleet, &[]);
    wait_ops(&fleet, "c", "agent_start", before + 1);
    let ops = fleet.ops("c");
    let installed = ops
        .iter()
        .rposition(|o| o["event"] == "apply" && o["action"] == "install_hooks")
        .expect("the hooks were written back");
    let started = ops
        .iter()
        .rposition(|o| o["event"] == "apply" && o["action"] == "start")
        .expect("the daemon started it");
    assert!(installed < started, "{ops:#?}");
    assert!(
        std::fs::read_to_string(&settings)
            .unwrap()
            .contains("phoenix-hook")
    );
    daemon.stop();
}

#[test]
fn a_settings_file_the_daemon_cannot_merge_into_is_reported_once_not_every_pass() {
    let fleet = Fleet::new();
    let work = fleet.path().join("wc");
    std::fs::create_dir_all(work.join(".claude")).unwrap();
    let settings = work.join(".claude/settings.json");
    std::fs::write(&settings, "{ not json").unwrap();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n\
         [[agent]]\nname = \"c\"\ncli = \"claude\"\ncommand = \"sleep 100000\"\nworkdir = \"wc\"\n",
        fleet.socket
    ));
    let daemon = Daemon::start(&fleet, &["-v"]);
    fleet.wait_running(&["c"]);
    let held = |log: &str| log.matches("hook file still cannot be changed").count();
    wait_until(
        Duration::from_secs(10),
        "two passes after the failure",
        || held(&daemon.log()) >= 2,
    );
    let log = daemon.log();
    let failed = log.lines().filter(|l| l.contains("step failed")).count();
    assert_eq!(failed, 1, "{log}");
    assert!(log.contains("not valid JSON"), "{log}");
    // The user's file is left as it was.
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), "{ not json");

    // Fixed by a person: the daemon merges into it at the next pass.
    std::fs::write(&settings, "{}").unwrap();
    wait_until(Duration::from_secs(10), "hooks merged", || {
        std::fs::read_to_string(&settings)
            .unwrap()
            .contains("phoenix-hook")
    });
    daemon.stop();
}

#[test]
fn config_edit_is_picked_up_by_the_daemon() {
    let fleet = Fleet::new();
    let header = format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n{}",
        fleet.socket,
        fast_restarts(5)
    );
    fleet.raw_toml(&format!("{header}{}", resumable_agent("alpha", "")));
    let daemon = Daemon::start(&fleet, &["--log-format", "json"]);
    fleet.wait_running(&["alpha"]);

    // A broken edit is reported and the last good config kept.
    fleet.raw_toml(&format!("{header}[[agent]]\nname = \"x y\"\n"));
    wait_until(Duration::from_secs(10), "invalid config logged", || {
        daemon.log().contains("keeping the last good one")
    });
    fleet.raw_toml(&format!(
        "{header}{}\n{}",
        resumable_agent("alpha", ""),
        resumable_agent("beta", "")
    ));
    fleet.wait_running(&["alpha", "beta"]);
    let log = daemon.log();
    for l in log.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not json `{l}`: {e}"));
    }
    // An editor's save raises several file events; one edit is one reload in the log.
    let reloads = |log: &str| {
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["fields"]["message"] == "config reloaded")
            .count()
    };
    assert_eq!(reloads(&log), 1, "{log}");
    // Touching the file without changing it is not a reload either.
    let config = std::fs::read(fleet.config()).unwrap();
    std::fs::write(fleet.config(), &config).unwrap();
    fleet.raw_toml(&format!("{header}{}", resumable_agent("alpha", "")));
    wait_until(Duration::from_secs(10), "the second edit reloaded", || {
        reloads(&daemon.log()) == 2
    });
    let log_path = daemon.log.clone();
    assert_eq!(daemon.stop(), Some(0));
    let log = std::fs::read_to_string(log_path).unwrap();
    assert_eq!(reloads(&log), 2, "{log}");
}

/// A save that truncates before it writes leaves an empty phoenix.toml for a moment (longer
/// than the debounce under load): an empty file is a fleet of no agents, and the daemon must
/// wait for the write rather than switch to it.
#[test]
fn an_emptied_config_is_a_save_in_progress_not_a_fleet_of_none() {
    let fleet = Fleet::new();
    let header = format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n",
        fleet.socket
    );
    fleet.raw_toml(&format!("{header}{}", resumable_agent("alpha", "")));
    let daemon = Daemon::start(&fleet, &["--log-format", "json", "-v"]);
    fleet.wait_running(&["alpha"]);
    std::fs::File::create(fleet.config()).unwrap();
    wait_until(Duration::from_secs(10), "the empty file seen", || {
        daemon.log().contains("config file is empty")
    });
    assert!(
        !daemon.log().contains("config reloaded"),
        "{}",
        daemon.log()
    );
    fleet.raw_toml(&format!(
        "{header}{}\n{}",
        resumable_agent("alpha", ""),
        resumable_agent("beta", "")
    ));
    fleet.wait_running(&["alpha", "beta"]);
    let log = daemon.log();
    assert_eq!(log.matches("config reloaded").count(), 1, "{log}");
    assert!(
        !log.contains("take effect when the daemon restarts"),
        "{log}"
    );
    daemon.stop();
}

#[test]
fn schedules_run_with_a_log_line() {
    let fleet = Fleet::new();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\n\n[schedules]\nwatchdog = \"* * * * *\"\nbrief = \"off\"\n",
        fleet.socket
    ));
    let daemon = Daemon::start(&fleet, &[]);
    let log = daemon.log();
    assert!(log.contains("job=\"watchdog\""), "{log}");
    assert!(log.contains("scheduled"), "{log}");
    assert!(!log.contains("job=\"brief\""), "{log}");
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn service_unit_is_printed_and_written_without_systemd() {
    let fleet = Fleet::new();
    fleet.toml("");
    fleet
        .run(&["service", "install", "--print"])
        .status(0)
        .stdout_has("KillMode=process")
        .stdout_has("run\"")
        .stdout_has(&fleet.config().display().to_string());
    fleet
        .run(&["service", "install"])
        .status(0)
        .stdout_has("systemctl --user enable --now phoenix-test.service");
    let unit = fleet
        .path()
        .join("home/.config/systemd/user/phoenix-test.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(text.contains("WantedBy=default.target"));
    assert!(
        text.contains(&format!("WorkingDirectory={}\n", fleet.path().display())),
        "{text}"
    );
    // systemd itself must accept it (a quoted WorkingDirectory once made it refuse the unit).
    if let Ok(out) = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
    {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("fatal") && !err.contains("not absolute"),
            "systemd-analyze verify:\n{err}"
        );
    }
}

#[test]
fn dead_tmux_server_is_rebuilt_resuming_recorded_sessions() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    let id = wait_session_id(&fleet, "alpha");

    fleet.tmux(&["kill-server"]);
    wait_until(Duration::from_secs(5), "server gone", || {
        !fleet.server_running()
    });
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "resume");
    assert_eq!(starts[1]["session_id"], id.as_str());
}

#[test]
fn spec_change_is_recorded_as_a_drift_replacement() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    wait_session_id(&fleet, "alpha");
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "--exit-code 4")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let ends = wait_ops(&fleet, "alpha", "agent_exit", 1);
    assert_eq!(ends[0]["reason"], "drift_replacement", "{ends:?}");
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(
        starts[1]["mode"], "resume",
        "a replacement keeps the session"
    );
    assert!(
        ops_named(&fleet, "alpha", "agent_exit")
            .iter()
            .all(|e| e["counts_as_crash"] != true)
    );
}

#[test]
fn resumed_session_that_comes_back_with_another_id_is_treated_as_fresh() {
    let fleet = Fleet::new();
    // This "resume" form passes the id where the CLI does not resume with it (as a task
    // name): the CLI starts a new session every time. (`validate` refuses a resume_command
    // without `{session_id}`, so the id has to appear somewhere.)
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"alpha\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 200ms\"\n\
         resume_command = \"phoenix demo-agent --interval 200ms --task {{session_id}}\"\n",
        fast_restarts(5)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let first = wait_session_id(&fleet, "alpha");
    kill9(pid);
    let starts = wait_ops(&fleet, "alpha", "agent_start", 2);
    assert_eq!(starts[1]["mode"], "resume");
    wait_until(Duration::from_secs(20), "another session id", || {
        session_id(&fleet, "alpha").is_some_and(|s| s != first)
    });

    // It crashes within seconds, but it was not a resume: the new session is resumed.
    let pid = fleet.wait_running(&["alpha"])[0];
    assert_ne!(pid, 0);
    kill9(pid);
    let exits = wait_ops(&fleet, "alpha", "agent_exit", 2);
    assert_eq!(exits[1]["mode"], "fresh", "{exits:?}");
    assert_eq!(exits[1]["action"], "resume");
    assert_eq!(ops_named(&fleet, "alpha", "resume_mismatch").len(), 1);
}

#[test]
fn apply_racing_a_starting_daemon_starts_each_agent_once() {
    let fleet = Fleet::new();
    let agents = ["a", "b", "c"];
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n{}",
        fleet.socket,
        agents.map(|a| Fleet::demo_agent(a, "")).concat()
    ));
    // Both at once: the daemon's first reconcile and the apply.
    let log = fleet.path().join("daemon.log");
    let daemon = fleet
        .command(&["run", "-v"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let daemon = Daemon {
        child: Some(daemon),
        log,
    };
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&agents);
    // A reconcile that found nothing to do, after everything runs: the daemon has seen the
    // fleet as the apply left it.
    let seen = daemon.log().matches("nothing to do").count();
    wait_until(Duration::from_secs(10), "a converged reconcile", || {
        daemon.log().matches("nothing to do").count() > seen
    });
    let mut tagged: Vec<String> = fleet.tagged_panes().into_iter().map(|p| p.0).collect();
    tagged.sort();
    assert_eq!(tagged, agents, "one pane per agent\n{}", daemon.log());
    daemon.stop();
}

#[test]
fn a_wrapper_run_in_another_tmux_server_never_touches_the_fleets_pane_of_that_id() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}[[agent]]\nname = \"b\"\ncommand = \"no-such-program-phoenix-test\"\nenabled = false\n",
        fast_restarts(5),
        Fleet::demo_agent("a", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a"]);
    let pane = pane_of(&fleet, "a");
    // A started pane has no phase (read as running) until its wrapper sets one.
    let phase = pane_phase(&fleet, &pane);
    assert_eq!(phase, "");
    // Someone runs b's wrapper by hand in their own tmux, where it is in a pane of that id.
    let mine = Fleet::new();
    let config = fleet.config();
    let out = mine
        .tmux(&[
            "new-session",
            "-d",
            "-P",
            "-F",
            "#{pane_id}",
            support::PHOENIX,
            "--config",
            config.to_str().unwrap(),
            "wrap",
            "--agent",
            "b",
        ])
        .unwrap();
    assert_eq!(out.trim(), pane, "the same pane id on both servers");
    // Its command cannot start: safe mode at once, which sets the phase of its own pane only.
    wait_ops(&fleet, "b", "spawn_failed", 1);
    wait_ops(&fleet, "b", "safe_mode", 1);
    assert_eq!(
        pane_phase(&fleet, &pane),
        phase,
        "the fleet's pane was never set to safe"
    );
}

/// A pass that starts several agents once went on starting them after SIGTERM: the signal
/// was only looked at between passes.
#[test]
fn sigterm_during_a_pass_starts_no_further_agent() {
    use std::os::unix::fs::PermissionsExt;
    let fleet = Fleet::new();
    let agents: String = ["a", "b", "c", "d"]
        .iter()
        .map(|n| Fleet::demo_agent(n, ""))
        .collect();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n{agents}",
        fleet.socket
    ));

    // tmux as the daemon sees it: each start is logged, then takes a second.
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v tmux"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let shim = fleet.path().join("shim");
    let starts = fleet.path().join("starts");
    std::fs::create_dir_all(&shim).unwrap();
    std::fs::create_dir_all(&starts).unwrap();
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in\n  *\" new-window \"*|*\" new-session \"*)\n    : > '{}/'$$\n    sleep 1 ;;\nesac\nexec '{real}' \"$@\"\n",
        starts.display()
    );
    std::fs::write(shim.join("tmux"), script).unwrap();
    std::fs::set_permissions(shim.join("tmux"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = fleet.path().join("daemon.log");
    let mut child = fleet
        .command(&["run"])
        .env("PATH", path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn phoenix run");
    let started = || std::fs::read_dir(&starts).unwrap().count();
    wait_until(Duration::from_secs(15), "the pass's first start", || {
        started() >= 1
    });
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "daemon did not stop on SIGTERM:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(started(), 1, "starts after SIGTERM:\n{log}");
    assert!(log.contains("the rest of this pass is abandoned"), "{log}");

    // The daemon is gone; nothing it left behind starts another pane either: once every tmux
    // call it began has ended (the shim named each after its pid), one pane at most.
    wait_until(
        Duration::from_secs(15),
        "the daemon's tmux calls ended",
        || {
            std::fs::read_dir(&starts)
                .unwrap()
                .flatten()
                .all(|e| !Path::new("/proc").join(e.file_name()).exists())
        },
    );
    let panes = fleet
        .tmux(&["list-panes", "-a", "-F", "#{window_name}"])
        .unwrap_or_default()
        .lines()
        .filter(|w| ["a", "b", "c", "d"].contains(w))
        .count();
    assert!(panes <= 1, "a pane appeared after the daemon stopped");
}

/// A person's `phoenix restart` gives the task a new budget of watchdog revivals (as it does
/// for crashes and the Clinic's recoveries); the rest of the watchdog's memory stays. The
/// revivals an older phoenix kept in `watchdog.json` are the ledger's from the first update.
#[test]
fn an_operator_restart_resets_the_revivals_spent_on_the_task() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    let memory = fleet.agent_dir("alpha").join("watchdog.json");
    std::fs::write(
        &memory,
        r#"{"revival_task": "fix the login test", "revivals": 1, "tool_count": 7}"#,
    )
    .unwrap();
    fleet.run(&["restart", "alpha"]).status(0);
    let ledger: Value = serde_json::from_str(
        &std::fs::read_to_string(fleet.agent_dir("alpha").join("restarts.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(ledger["revivals"]["count"], 0, "{ledger}");
    assert_eq!(ledger["revivals"]["task"], Value::Null, "{ledger}");
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&memory).unwrap()).unwrap();
    assert_eq!(after["tool_count"], 7, "{after}");
}

/// A custom-CLI agent running `script` (a shell script written 0755 into the fleet dir) in
/// the fleet's `work` dir.
fn script_agent(fleet: &Fleet, name: &str, script: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let work = fleet.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = fleet.path().join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    fleet.toml(&format!(
        "{}[[agent]]\nname = \"{name}\"\ncommand = \"{}\"\nworkdir = \"{}\"\n",
        fast_restarts(5),
        path.display(),
        work.display()
    ));
    work
}

/// Whether `pid` is running (a zombie has ended).
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let state = s.get(s.rfind(')')? + 2..)?.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// Children of `parent` that ended and were never collected.
fn zombie_children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
            rest[0] == "Z" && rest[1] == parent.to_string()
        })
        .collect()
}

#[test]
fn a_tool_that_setsids_away_from_a_killed_agent_is_stopped_before_the_next_start() {
    let fleet = Fleet::new();
    // The first run starts a tool in a session of its own that would act 3 s later; every
    // run notes whether the previous run's tool is still alive as it starts.
    let work = script_agent(
        &fleet,
        "tooly",
        "#!/bin/sh\n\
         if [ -f tool.pid ] && [ -e /proc/$(cat tool.pid) ] && ! grep -q ') Z' /proc/$(cat tool.pid)/stat; then echo alive >> overlap; fi\n\
         if [ ! -f started ]; then touch started; setsid sh -c 'echo $$ > tool.pid; sleep 3; touch MARK' & fi\n\
         echo agent up\n\
         exec sleep 1000\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["tooly"])[0];
    wait_until(Duration::from_secs(10), "the tool started", || {
        work.join("tool.pid").exists()
    });
    let tool: u64 = std::fs::read_to_string(work.join("tool.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(running(tool));
    kill9(pid);

    wait_ops(&fleet, "tooly", "agent_start", 2);
    fleet.wait_running(&["tooly"]);
    assert!(
        !work.join("overlap").exists(),
        "the next run started while the old tool ran"
    );
    assert!(!running(tool), "the old tool still runs beside the new run");
    let pane = pane_of(&fleet, "tooly");
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        zombie_children(wrapper),
        Vec::<u32>::new(),
        "left uncollected"
    );
    let stopped = ops_named(&fleet, "tooly", "strays_stopped");
    let procs = stopped[0]["processes"].as_array().unwrap();
    assert!(
        procs.iter().any(|p| p["pid"].as_u64() == Some(tool)),
        "the detached tool is recorded: {stopped:?}"
    );
    assert!(
        procs.iter().any(|p| p["comm"] == "sleep"),
        "its children too: {stopped:?}"
    );
    assert!(
        procs
            .iter()
            .any(|p| p["argv"].to_string().contains("sleep 3; touch MARK")),
        "with what they ran: {stopped:?}"
    );
    assert!(!work.join("MARK").exists(), "the orphaned tool acted");
}

/// A kill -9 of a launcher (Codex's or Gemini's node) leaves processes behind that the sweep
/// spares (phoenix's own programs: a hook still writing) and that end later, reparented to
/// the wrapper, its subreaper: each is collected as it ends, not when the pane goes (they
/// stayed `[phoenix-hook]`, `[codex]`, `[node]`, `[bash]` zombies), and the agent's own end is
/// still recorded as the kill it was.
#[test]
fn orphans_that_end_after_their_agent_was_killed_are_collected_as_they_end() {
    let fleet = Fleet::new();
    let work = script_agent(
        &fleet,
        "launcher",
        &format!(
            "#!/bin/sh\n\
             if [ ! -f started ]; then touch started; \
             env -u PHOENIX_STATE_DIR -u PHOENIX_AGENT {} demo-agent --no-hooks --agent ghost \
             --interval 1h --crash-after 2s >/dev/null 2>&1 & echo $! > helper.pid; fi\n\
             echo agent up\n\
             exec sleep 1000\n",
            support::PHOENIX
        ),
    );
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["launcher"])[0];
    wait_until(Duration::from_secs(10), "the helper started", || {
        work.join("helper.pid").exists()
    });
    let helper: u32 = std::fs::read_to_string(work.join("helper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pane = pane_of(&fleet, "launcher");
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(pid);
    wait_ops(&fleet, "launcher", "agent_start", 2);
    // The helper ends within 2 s of its start (or at the group's SIGTERM); then it is
    // collected at once, long before the wrapper's half-minute look.
    wait_until(Duration::from_secs(8), "the helper collected", || {
        !std::path::Path::new(&format!("/proc/{helper}")).exists()
    });
    assert_eq!(
        zombie_children(wrapper),
        Vec::<u32>::new(),
        "left uncollected"
    );
    let exit = &ops_named(&fleet, "launcher", "agent_exit")[0];
    assert_eq!(exit["signal"], 9, "{exit}");
    // The new run is the wrapper's child, unharmed by the collecting.
    fleet.wait_running(&["launcher"]);
    assert_eq!(ops_named(&fleet, "launcher", "agent_exit").len(), 1);
}

/// A Claude-shaped fake agent whose first run reports a session, a prompt and then a failed
/// turn with `error` and `details` through phoenix's own hooks, as Claude Code's would.
fn failing_turn_agent(fleet: &Fleet, name: &str, error: &str, details: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let work = fleet.path().join(format!("work-{name}"));
    std::fs::create_dir_all(&work).unwrap();
    let hook = |event: &str, body: serde_json::Value| {
        format!(
            "printf '%s' '{}' | {} hook {event} --agent {name} --cli claude\n",
            body.to_string().replace('\'', r"'\''"),
            support::PHOENIX
        )
    };
    let cwd = work.display().to_string();
    let script = format!(
        "#!/bin/sh\nn=$(cat runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > runs\necho run $n\n\
         if [ $n = 1 ]; then\n{}{}sleep 1\n{}fi\nexec sleep 1000\n",
        hook(
            "session-start",
            serde_json::json!({"session_id": "s1", "cwd": cwd,
            "hook_event_name": "SessionStart", "source": "startup"})
        ),
        hook(
            "prompt",
            serde_json::json!({"session_id": "s1", "cwd": cwd,
            "hook_event_name": "UserPromptSubmit", "prompt": "fix the login test"})
        ),
        hook(
            "turn-failed",
            serde_json::json!({"session_id": "s1", "cwd": cwd,
            "hook_event_name": "StopFailure", "error": error, "error_details": details})
        ),
    );
    let path = fleet.path().join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"claude\"\ncommand = \"{}\"\nworkdir = \"{}\"\n",
        path.display(),
        work.display()
    )
}

/// A failed turn the Clinic retries (529 overloaded) is revived after the Clinic's delay, not
/// at once (`delay_ms 0`); one it stops for a person (401) says safe mode in the pane, not
/// "→ resuming now" right before it.
#[test]
fn a_retried_failed_turn_waits_its_delay_and_a_quarantine_says_safe_mode() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"1s\"\nbackoff_max = \"1s\"\nlife_deadline = \"5s\"\nmax_crashes = 5\ncrash_window = \"1h\"\n\n{}\n{}",
        failing_turn_agent(
            &fleet,
            "flaky",
            "rate_limit",
            r#"529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ),
        failing_turn_agent(
            &fleet,
            "badkey",
            "authentication_failed",
            r#"401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
        ),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let starts = wait_ops(&fleet, "flaky", "agent_start", 2);
    let exit = &ops_named(&fleet, "flaky", "agent_exit")[0];
    assert_eq!(exit["reason"], "watchdog_kill", "{exit}");
    assert_eq!(exit["delay_ms"], 1000, "{exit}");
    let at = |o: &Value| {
        o["ts"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    // From the failed turn's report (before the stop) to the next start.
    let failed = &ops_named(&fleet, "flaky", "turn_failed")[0];
    let waited = at(&starts[1]).as_millisecond() - at(failed).as_millisecond();
    assert!(
        waited >= 1000,
        "restarted {waited} ms after the failed turn"
    );
    let screen = |agent: &str| {
        let pane = pane_of(&fleet, agent);
        fleet
            .tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", &pane])
            .unwrap()
    };
    assert!(
        screen("flaky").contains("→ resuming in 1s"),
        "{}",
        screen("flaky")
    );

    wait_ops(&fleet, "badkey", "safe_mode", 1);
    let shown = screen("badkey");
    assert!(!shown.contains("resuming now"), "{shown}");
    assert!(
        shown.contains("→ safe mode (clinic: invalid_credentials"),
        "{shown}"
    );
    assert_eq!(ops_named(&fleet, "badkey", "agent_start").len(), 1);
}

#[test]
fn a_new_wrapper_stops_the_agent_its_killed_predecessor_left_running() {
    let fleet = Fleet::new();
    // Ignores SIGHUP (as a CLI may) and notes any earlier run still alive when it starts.
    let script = "#!/bin/sh\n\
         trap '' HUP\n\
         for p in $(cat pids 2>/dev/null); do \
           if [ -e /proc/$p ] && ! grep -q ') Z' /proc/$p/stat; then echo $p >> overlap; fi; \
         done\n\
         echo $$ >> pids\n\
         if [ ! -f job.pid ]; then (setsid sh -c 'echo $$ > job.pid; exec sleep 100' &); fi\n\
         echo agent up\n\
         while :; do sleep 0.2; done\n";
    let work = script_agent(&fleet, "solo", script);
    let config = std::fs::read_to_string(fleet.config()).unwrap();
    fleet.raw_toml(&config.replace("[fleet]\n", "[fleet]\nreconcile_interval = \"1h\"\n"));
    let _daemon = Daemon::start(&fleet, &[]);
    let agent = fleet.wait_running(&["solo"])[0];
    // A job whose parent already exited: orphaned to the wrapper, out of the agent's tree.
    wait_until(Duration::from_secs(10), "the job", || {
        std::fs::read_to_string(work.join("job.pid")).is_ok_and(|p| !p.trim().is_empty())
    });
    let job: u64 = std::fs::read_to_string(work.join("job.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pane = pane_of(&fleet, "solo");
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(wrapper);
    wait_until(Duration::from_secs(20), "a second run", || {
        std::fs::read_to_string(work.join("pids"))
            .unwrap_or_default()
            .lines()
            .count()
            >= 2
    });
    assert!(
        !work.join("overlap").exists(),
        "two agent processes at once: {:?}",
        std::fs::read_to_string(work.join("overlap"))
    );
    assert!(!running(u64::from(agent)));
    let stopped = ops_named(&fleet, "solo", "previous_agent_stopped");
    assert_eq!(stopped[0]["agent_pid"], agent, "{stopped:?}");
    // Found by the agent's marker after the killed wrapper's orphans went to init.
    assert!(!running(job), "the orphaned job outlived its wrapper");
    assert!(
        stopped[0]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"].as_u64() == Some(job)),
        "{stopped:?}"
    );
}

/// A resumable demo agent `alpha` applied, running and with its session recorded: its pid
/// and pane.
fn resumable_alpha_with_a_session(fleet: &Fleet) -> (u32, String) {
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let pane = pane_of(fleet, "alpha");
    wait_session_id(fleet, "alpha");
    (pid, pane)
}

#[test]
fn the_tool_call_a_killed_agent_was_running_is_stopped_and_named_to_the_next_session() {
    let fleet = Fleet::new();
    let (pid, pane) = resumable_alpha_with_a_session(&fleet);
    let (pidfile, mark) = (fleet.path().join("tool.pid"), fleet.path().join("MARK"));
    // A tool that leaves a job in a session of its own (as `setsid … &` does), then waits.
    type_into(
        &fleet,
        &pane,
        &format!(
            "tool setsid sh -c 'echo $$ > {}; sleep 3; touch {}' & sleep 100",
            pidfile.display(),
            mark.display()
        ),
    );
    wait_until(Duration::from_secs(10), "the tool is in flight", || {
        fleet.agent_dir("alpha").join("in_flight.json").exists()
            && std::fs::read_to_string(&pidfile).is_ok_and(|p| !p.trim().is_empty())
    });
    let tool: u64 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(pid);

    let interrupted = wait_ops(&fleet, "alpha", "tool_interrupted", 1);
    assert_eq!(interrupted[0]["tool"], "Bash");
    assert!(
        interrupted[0]["input"]
            .as_str()
            .unwrap()
            .contains("sleep 3; touch"),
        "{interrupted:?}"
    );
    assert!(
        interrupted[0]["stopped_pids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_u64() == Some(tool)),
        "{interrupted:?}"
    );
    assert!(!running(tool), "the orphaned job still runs");
    // The resumed session is told which command was stopped, so the model can rerun it.
    support::wait_for_screen(
        &fleet,
        &pane,
        "interrupted and has been stopped: Bash",
        Duration::from_secs(20),
    );
    assert!(!mark.exists(), "the orphaned job acted");
    assert!(
        !fleet
            .agent_dir("alpha")
            .join("interrupted_tool.json")
            .exists(),
        "named once"
    );
}

/// A CLI's worker outlives its killed launcher and, as the wrapper stops what is left, reports
/// its stopped tool as finished (the Gemini CLI's AfterTool did, under load): the call was
/// interrupted all the same, and is recorded and named to the next session.
#[test]
fn a_call_the_dying_agent_reports_finished_is_still_named_as_interrupted() {
    let fleet = Fleet::new();
    let (pid, pane) = resumable_alpha_with_a_session(&fleet);
    let payload = fleet.path().join("done.json");
    std::fs::write(
        &payload,
        r#"{"hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"c"},"tool_response":{"stdout":"","stderr":"","interrupted":false}}"#,
    )
    .unwrap();
    let reported = fleet.path().join("REPORTED");
    // Stopped, the tool's shell reports the call done through the agent's own hook.
    type_into(
        &fleet,
        &pane,
        &format!(
            "tool trap '{} hook heartbeat --agent alpha < {}; touch {}; exit 1' TERM; sleep 100 & wait",
            support::PHOENIX,
            payload.display(),
            reported.display()
        ),
    );
    wait_until(Duration::from_secs(10), "the tool is in flight", || {
        fleet.agent_dir("alpha").join("in_flight.json").exists()
    });
    kill9(pid);

    let interrupted = wait_ops(&fleet, "alpha", "tool_interrupted", 1);
    assert!(reported.exists(), "the dying tool reported its call done");
    assert!(
        interrupted[0]["input"]
            .as_str()
            .unwrap()
            .contains("sleep 100"),
        "{interrupted:?}"
    );
    support::wait_for_screen(
        &fleet,
        &pane,
        "interrupted and has been stopped: Bash",
        Duration::from_secs(20),
    );
}

/// status, doctor and top's snapshot say whether `phoenix run` supervises this fleet.
#[test]
fn status_and_doctor_say_whether_the_daemon_runs() {
    let fleet = Fleet::new();
    fleet.toml(&Fleet::demo_agent("alpha", ""));
    fleet.run(&["status"]).stdout_has("daemon: not running");
    let daemon = Daemon::start(&fleet, &[]);
    fleet.wait_running(&["alpha"]);
    let said = format!("supervises this fleet (pid {})", daemon.pid());
    fleet.run(&["status"]).status(0).stdout_has(&said);
    fleet.run(&["doctor"]).stdout_has("ok   daemon");
    fleet.run(&["doctor"]).stdout_has(&said);
    assert_eq!(daemon.stop(), Some(0));
    fleet.run(&["status"]).stdout_has("daemon: not running");
}

/// An upgrade resets no budget: a state dir an older phoenix left has its counts in
/// `crashes.json` (and `clinic.json`, `watchdog.json`), which the restart ledger
/// (`restarts.json`) is filled from. Two crashes already in the window leave one before
/// safe mode, and a quarantined agent stays quarantined.
#[test]
fn an_upgrade_keeps_the_crash_budget_and_the_quarantine_of_the_old_counter_files() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}{}",
        fast_restarts(3),
        resumable_agent("alpha", "--crash-after 300ms"),
        resumable_agent("beta", "")
    ));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    use std::os::unix::fs::DirBuilderExt;
    let old = |agent: &str, text: String| {
        let dir = fleet.agent_dir(agent);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .unwrap();
        std::fs::write(dir.join("crashes.json"), text).unwrap();
    };
    let crash = |ts: u64| {
        format!(r#"{{"ts": {ts}, "reason": "crash", "code": 1, "signal": null, "mode": "fresh"}}"#)
    };
    old(
        "alpha",
        format!(
            r#"{{"crashes": [{}, {}]}}"#,
            crash(now - 20),
            crash(now - 10)
        ),
    );
    old(
        "beta",
        r#"{"safe_mode": {"since": "before the upgrade", "reason": "crash loop"}}"#.into(),
    );
    fleet.run(&["apply", "--yes"]).status(0);
    wait_ops(&fleet, "alpha", "safe_mode", 1);
    assert_eq!(
        ops_named(&fleet, "alpha", "agent_start").len(),
        1,
        "the third crash in the window, counting the old two"
    );
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "crash_loop" && e["agent"] == "alpha"),
        "{events:?}"
    );
    let ledger: Value = serde_json::from_str(
        &std::fs::read_to_string(fleet.agent_dir("alpha").join("restarts.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(ledger["crashes"].as_array().unwrap().len(), 3, "{ledger}");

    let safe = wait_ops(&fleet, "beta", "safe_mode", 1);
    assert!(
        safe[0]["why"].as_str().unwrap().contains("crash loop"),
        "{safe:?}"
    );
    assert!(ops_named(&fleet, "beta", "agent_start").is_empty());
}

#[test]
fn the_daemon_leaves_a_stopped_agent_down_until_start() {
    let fleet = Fleet::new();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1h\"\n\n{}{}\n{}",
        fleet.socket,
        fast_restarts(5),
        resumable_agent("alpha", ""),
        resumable_agent("beta", "")
    ));
    let daemon = Daemon::start(&fleet, &["-v"]);
    fleet.wait_running(&["alpha", "beta"]);
    let reconciles = |d: &Daemon| d.log().matches("reconciled: nothing to do").count();
    let before = reconciles(&daemon);
    fleet
        .run(&["stop", "alpha"])
        .status(0)
        .stdout_has("stays down until `phoenix start alpha`");
    // The pane's end wakes the daemon: it reconciles and finds nothing to do.
    wait_until(
        Duration::from_secs(10),
        "a reconcile after the stop",
        || reconciles(&daemon) > before,
    );
    assert_eq!(fleet.agent_status("alpha")["state"], "stopped");
    assert!(fleet.agent_status("alpha")["pane"].is_null());
    fleet
        .run(&["down"])
        .status(0)
        .stderr_has("`phoenix run` (pid");
    fleet.run(&["start", "alpha"]).status(0);
    fleet.wait_running(&["alpha"]);
    assert_eq!(daemon.stop(), Some(0));
}

/// `start` is a person's decision, as `restart` is: an agent stopped in safe mode starts
/// again instead of going straight back into it.
#[test]
fn start_after_stop_lifts_safe_mode() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(3),
        resumable_agent("alpha", "--crash-after 300ms")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    wait_ops(&fleet, "alpha", "safe_mode", 1);
    assert_eq!(ops_named(&fleet, "alpha", "agent_start").len(), 3);
    fleet.run(&["stop", "alpha"]).status(0);
    fleet.run(&["start", "alpha"]).status(0);
    wait_until(Duration::from_secs(10), "a new start", || {
        ops_named(&fleet, "alpha", "agent_start").len() > 3
    });
}

/// A child process stopped (SIGKILL) and reaped on drop, its stdout in a file.
struct Background {
    child: Child,
    out: std::path::PathBuf,
}

impl Background {
    fn start(fleet: &Fleet, args: &[&str], name: &str) -> Background {
        let out = fleet.path().join(name);
        let child = fleet
            .command(args)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn phoenix");
        Background { child, out }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon's log (stderr, the journal under systemd) says every crash, restart and the
/// safe-mode entry of an agent, although the agent's wrapper did them; and `events --follow
/// --agent` shows every session end as it happens (it once followed the critical events only).
#[test]
fn the_daemon_logs_every_crash_restart_and_safe_mode_entry_and_events_follow_shows_them() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(3),
        resumable_agent("alpha", "--crash-after 300ms")
    ));
    let follow = Background::start(
        &fleet,
        &["events", "--follow", "--agent", "alpha"],
        "follow.out",
    );
    let daemon = Daemon::start(&fleet, &[]);
    wait_ops(&fleet, "alpha", "safe_mode", 1);
    wait_until(
        Duration::from_secs(10),
        "safe mode in the daemon's log",
        || daemon.log().contains("agent entered safe mode"),
    );
    let log = daemon.log();
    let lines = |what: &str| {
        log.lines()
            .filter(|l| l.contains(what) && l.contains("alpha"))
            .count()
    };
    assert_eq!(lines("agent crashed"), 3, "{log}");
    assert_eq!(lines("agent (re)started"), 3, "{log}");
    wait_until(Duration::from_secs(10), "three ends followed", || {
        follow.stdout().matches("agent_exit").count() == 3
    });
    let followed = follow.stdout();
    assert!(followed.contains("crash_loop"), "{followed}");
    drop(follow);
    assert_eq!(daemon.stop(), Some(0));

    // Plain `events` shows the session ends; `--all` every step of ops.jsonl.
    let plain = fleet.run(&["events"]).status(0).stdout();
    assert_eq!(plain.matches("agent_exit").count(), 3, "{plain}");
    assert!(!plain.contains("agent_start"), "{plain}");
    let all = fleet.run(&["events", "--all", "--agent", "alpha"]).stdout();
    assert_eq!(all.matches("agent_start").count(), 3, "{all}");
    assert!(all.contains("safe_mode"), "{all}");
    let json = fleet.run(&["events", "--all", "--json"]).json();
    assert_eq!(json["format_version"], 1);
    assert!(
        json["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "agent_alive"),
        "{json}"
    );
}

/// `[fleet] reload = "plan"`: an edit is logged as a plan and applied by nobody but the
/// operator's `phoenix apply`, which the daemon then keeps (never reconciling back toward the
/// file before it); an apply of some agents of the unapplied edit is refused.
#[test]
fn with_reload_plan_an_edit_waits_for_the_operators_apply() {
    let fleet = Fleet::new();
    let header = format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\nreload = \"plan\"\n\n{}",
        fleet.socket,
        fast_restarts(5)
    );
    fleet.raw_toml(&format!("{header}{}", resumable_agent("alpha", "")));
    fleet.run(&["apply", "--yes"]).status(0);
    let daemon = Daemon::start(&fleet, &["-v"]);
    fleet.wait_running(&["alpha"]);

    fleet.raw_toml(&format!(
        "{header}{}\n{}",
        resumable_agent("alpha", ""),
        resumable_agent("beta", "")
    ));
    wait_until(Duration::from_secs(10), "the plan logged", || {
        daemon
            .log()
            .contains("nothing of it is applied until `phoenix apply`")
    });
    assert!(daemon.log().contains("beta"), "{}", daemon.log());
    daemon.wait_idle_passes(2);
    assert!(ops_named(&fleet, "beta", "agent_start").is_empty());
    assert_ne!(fleet.agent_status("beta")["state"], "running");

    let some = fleet.run(&["apply", "--yes", "beta"]);
    assert_ne!(some.code(), Some(0));
    some.stderr_has("reload = \"plan\"");

    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha", "beta"]);
    wait_until(
        Duration::from_secs(10),
        "the daemon took the edit over",
        || daemon.log().contains("applied the edit"),
    );
    daemon.wait_idle_passes(2);
    assert_eq!(ops_named(&fleet, "beta", "agent_start").len(), 1);
    assert_eq!(ops_named(&fleet, "alpha", "agent_start").len(), 1);
    assert_eq!(daemon.stop(), Some(0));
}

/// The pane runs the small `phoenix-wrap` (what keeps a wrapper's memory down for its agent's
/// whole life), while `phoenix` in an agent's command is still the `phoenix` with every
/// command; `phoenix-wrap` answers `--version` itself (what `hosts install` runs on a copy),
/// hands any other command line to the `phoenix` beside it, and a copy with none beside it
/// says so at once instead of running itself again.
#[test]
fn an_agents_pane_runs_phoenix_wrap_and_phoenix_wrap_hands_the_rest_to_phoenix() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{}{}",
        fast_restarts(5),
        resumable_agent("alpha", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    let pane = pane_of(&fleet, "alpha");
    let wrapper = support::scenarios::wrapper_of(&fleet, "alpha");
    let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let small = Path::new(support::PHOENIX).with_file_name("phoenix-wrap");
    assert_eq!(exe(wrapper), small.canonicalize().unwrap());
    assert_eq!(
        exe(pid),
        Path::new(support::PHOENIX).canonicalize().unwrap(),
        "`phoenix demo-agent` in the agent's command runs phoenix, not the wrapper binary"
    );
    // Still the wrapper that supervises: a kill is a restart in the same pane.
    kill9(pid);
    wait_until(Duration::from_secs(10), "alpha back", || {
        let s = fleet.agent_status("alpha");
        s["state"] == "running" && s["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    assert_eq!(pane_of(&fleet, "alpha"), pane);

    let run = |program: &Path, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .env("HOME", fleet.path().join("home"))
            .current_dir(fleet.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let version = run(&small, &["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("phoenix-wrap {}", env!("CARGO_PKG_VERSION"))
    );
    let config = fleet.config();
    let status = run(
        &small,
        &["--config", config.to_str().unwrap(), "status", "--json"],
    );
    assert!(status.status.success(), "{status:?}");
    let doc: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["agents"][0]["agent"], "alpha", "{doc}");

    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join(".phoenix-wrap.install.123");
    std::fs::copy(&small, &copy).unwrap();
    let started = Instant::now();
    let refused = run(&copy, &["status"]);
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no phoenix beside me"),
        "{refused:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    fleet.run(&["down"]).status(0);
}
