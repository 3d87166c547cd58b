//! Special files planted in the state dir (a FIFO, a symbolic link) where phoenix keeps its
//! fleet-wide files: the event log and the index. Every command and hook finishes, says or
//! records the refusal, and never follows the link. Before, a FIFO at critical_events.jsonl
//! made the next recorded event take the events lock a second time (the refusal was recorded
//! as another event) and wait for itself, and a FIFO at index.db hung SQLite's open.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Fleet, read_jsonl, wait_until};

/// Long enough for a loaded machine; a hang is forever.
const FINISHES: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
enum Planted {
    Fifo,
    Link,
}

const PLANTED: [Planted; 2] = [Planted::Fifo, Planted::Link];

/// Plant `what` at `path`; a link points at a file outside the state dir that must survive.
fn plant(fleet: &Fleet, path: &Path, what: Planted) -> PathBuf {
    let victim = fleet.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let _ = std::fs::remove_file(path);
    match what {
        Planted::Fifo => {
            nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }
        Planted::Link => std::os::unix::fs::symlink(&victim, path).unwrap(),
    }
    victim
}

fn events(fleet: &Fleet) -> Vec<Value> {
    read_jsonl(&fleet.state_dir().join("critical_events.jsonl"))
}

/// The refusals recorded of `file` (a name in the state dir).
fn refusals_of(fleet: &Fleet, file: &str) -> Vec<Value> {
    events(fleet)
        .into_iter()
        .filter(|e| {
            e["event"] == "state_file_refused"
                && e["details"]["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with(&format!("/{file}")))
        })
        .collect()
}

fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

fn agent_toml(extra: &str) -> String {
    format!(
        "[[agent]]\nname = \"a\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 200ms {extra}\"\n\
         resume_command = \"phoenix demo-agent --interval 200ms {extra} --resume {{session_id}}\"\n"
    )
}

/// A state.json cut short: reading it rolls it back and records a critical event, which is
/// what met the planted file.
fn corrupt_state(fleet: &Fleet) {
    let dir = fleet.agent_dir("a");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("state.json"), b"{\"open_loops\": [").unwrap();
}

#[test]
fn a_fifo_or_link_at_the_event_log_never_hangs_a_hook() {
    for what in PLANTED {
        let fleet = Fleet::new();
        fleet.toml(&agent_toml(""));
        corrupt_state(&fleet);
        let log = fleet.state_dir().join("critical_events.jsonl");
        let victim = plant(&fleet, &log, what);
        let payload = br#"{"hook_event_name":"PostToolUse","session_id":"s1","tool_name":"Bash","tool_input":{"command":"ls"}}"#;
        fleet
            .run_within_input(
                &["hook", "heartbeat", "--agent", "a", "--cli", "claude"],
                payload,
                FINISHES,
            )
            .status(0);
        let start = br#"{"hook_event_name":"SessionStart","session_id":"s1","source":"startup"}"#;
        corrupt_state(&fleet);
        plant(&fleet, &log, what);
        fleet
            .run_within_input(
                &["hook", "session-start", "--agent", "a", "--cli", "claude"],
                start,
                FINISHES,
            )
            .status(0);
        assert!(is_regular(&log), "{what:?}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "{what:?}");
        let names: Vec<String> = events(&fleet)
            .iter()
            .map(|e| e["event"].as_str().unwrap_or("").to_string())
            .collect();
        // The heartbeat met the planted log (recording the rollback of state.json); the
        // session start found a regular log again, or a new planted one it refused as well.
        assert!(
            !refusals_of(&fleet, "critical_events.jsonl").is_empty(),
            "{what:?}: {names:?}"
        );
        assert!(names.iter().any(|n| n == "state_corrupt"), "{names:?}");
    }
}

#[test]
fn a_fifo_or_link_at_the_index_never_hangs_session_start_or_search() {
    for what in PLANTED {
        for file in ["index.db", "index.db-wal"] {
            let fleet = Fleet::new();
            fleet.toml(&agent_toml(""));
            let dir = fleet.agent_dir("a");
            std::fs::create_dir_all(&dir).unwrap();
            // A task: the session start looks for related decisions in the index.
            std::fs::write(
                dir.join("ledger.json"),
                br#"{"agent":"a","current_task":"Port the billing service"}"#,
            )
            .unwrap();
            std::fs::create_dir_all(fleet.state_dir()).unwrap();
            // A real index first, so that a planted WAL sits next to one.
            fleet
                .run_within(&["handoff", "search", "billing"], FINISHES)
                .status(0);
            let path = fleet.state_dir().join(file);
            let victim = plant(&fleet, &path, what);
            let start =
                br#"{"hook_event_name":"SessionStart","session_id":"s1","source":"startup"}"#;
            fleet
                .run_within_input(
                    &["hook", "session-start", "--agent", "a", "--cli", "claude"],
                    start,
                    FINISHES,
                )
                .status(0);
            assert!(
                !refusals_of(&fleet, file).is_empty(),
                "{what:?} at {file}: {:?}",
                events(&fleet)
            );
            fleet
                .run_within(&["handoff", "search", "billing"], FINISHES)
                .status(0);
            // Moved aside (never followed) and the index rebuilt.
            let moved: Vec<Value> = refusals_of(&fleet, file)
                .into_iter()
                .filter(|e| e["details"]["moved_to"].is_string())
                .collect();
            assert_eq!(moved.len(), 1, "{what:?} at {file}: {:?}", events(&fleet));
            assert!(
                std::fs::symlink_metadata(&path).map_or(true, |m| m.is_file()),
                "{what:?} at {file}"
            );
            assert!(is_regular(&fleet.state_dir().join("index.db")));
            assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        }
    }
}

#[test]
fn a_fifo_at_the_event_log_does_not_stop_the_watchdog() {
    let fleet = Fleet::new();
    fleet.toml(&agent_toml(""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a"]);
    let log = fleet.state_dir().join("critical_events.jsonl");
    for what in PLANTED {
        corrupt_state(&fleet);
        std::fs::write(fleet.agent_dir("a").join("watchdog.json"), b"{\"x\": [").unwrap();
        // (The planted file takes the place of the log and of the events it held.)
        let victim = plant(&fleet, &log, what);
        fleet
            .run_within(&["watchdog", "--once"], FINISHES)
            .status(0);
        // A second pass is not skipped as "still running".
        let again = fleet.run_within(&["watchdog", "--once"], FINISHES);
        again.status(0);
        assert!(
            !again.stderr().contains("still running"),
            "{}",
            again.stderr()
        );
        assert!(is_regular(&log), "{what:?}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(
            refusals_of(&fleet, "critical_events.jsonl").len(),
            1,
            "{what:?}: {:?}",
            events(&fleet)
        );
    }
}

#[test]
fn a_fifo_at_the_event_log_does_not_stop_the_wrapper() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = 3\ncrash_window = \"1h\"\n\n{}",
        agent_toml("--crash-after 700ms")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let log = fleet.state_dir().join("critical_events.jsonl");
    plant(&fleet, &log, Planted::Fifo);
    // Three crashes: the wrapper records a crash loop (a critical event) and goes to safe
    // mode; before, recording it waited for itself and the wrapper was stuck in its cooldown.
    wait_until(Duration::from_secs(40), "the crash loop recorded", || {
        events(&fleet).iter().any(|e| e["event"] == "crash_loop")
    });
    wait_until(Duration::from_secs(20), "safe mode", || {
        fleet.ops("a").iter().any(|o| o["event"] == "safe_mode")
    });
    assert_eq!(refusals_of(&fleet, "critical_events.jsonl").len(), 1);
    assert!(is_regular(&log));
    // And it still answers: `stop` ends it.
    fleet.run_within(&["stop", "a"], FINISHES).status(0);
}
