//! State files against a real temp dir: rollback of corrupt files, links and FIFOs planted
//! in their place, failed writes, the temp-file sweep and foreign state dirs.

use std::os::unix::fs::symlink;

use serde::Serialize;

use super::*;

#[derive(Debug, Default, PartialEq, Serialize, serde::Deserialize)]
struct Doc {
    items: Vec<String>,
}

use crate::state::testing::temp_agent as agent;

use crate::state::testing::file_names as names;

#[test]
fn a_corrupt_file_never_reaches_its_last_good_copy_and_is_rolled_back() {
    let (_tmp, dir) = agent();
    let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
    file.update(|d| d.get_or_insert_with(Doc::default).items.push("one".into()))
        .unwrap();
    fs::write(file.path(), b"{\"items\": [\"on").unwrap();
    // The next update starts from the last good copy, and its result becomes the new one.
    file.update(|d| d.get_or_insert_with(Doc::default).items.push("two".into()))
        .unwrap();
    let good: Doc = serde_json::from_slice(&fs::read(file.last_good_path()).unwrap()).unwrap();
    assert_eq!(good.items, ["one", "two"]);
    assert_eq!(file.load().unwrap().unwrap(), good);
    let kept: Vec<String> = names(&dir.path)
        .into_iter()
        .filter(|n| n.starts_with("doc.json.corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        fs::read(dir.file(&kept[0])).unwrap(),
        b"{\"items\": [\"on",
        "the corrupt bytes are kept for inspection"
    );
    let critical =
        fs::read_to_string(FleetDir::new(dir.fleet_root()).critical_events_path()).unwrap();
    let event: serde_json::Value = serde_json::from_str(critical.lines().next().unwrap()).unwrap();
    assert_eq!(event["event"], "doc_corrupt");
    assert_eq!(event["agent"], "a");
    let ops = fs::read_to_string(dir.file(super::super::OPS_LOG)).unwrap();
    assert!(ops.contains("doc_rollback"), "{ops}");
}

/// Two corruptions within one millisecond: each keeps its own copy of the bad bytes.
#[test]
fn corruptions_in_one_millisecond_keep_both_copies() {
    let (_tmp, dir) = agent();
    let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
    for i in 0..3 {
        fs::write(file.path(), format!("garbage {i}")).unwrap();
        assert_eq!(file.load().unwrap(), None);
    }
    let mut kept: Vec<String> = names(&dir.path)
        .into_iter()
        .filter(|n| n.starts_with("doc.json.corrupt-"))
        .map(|n| fs::read_to_string(dir.file(&n)).unwrap())
        .collect();
    kept.sort();
    assert_eq!(kept, ["garbage 0", "garbage 1", "garbage 2"]);
}

/// Setting aside never replaces a copy already there, whatever the clock says.
#[test]
fn a_copy_of_the_same_name_is_never_replaced() {
    let (_tmp, dir) = agent();
    let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
    fs::write(dir.file("doc.json.corrupt-X"), "first").unwrap();
    for second in ["second", "third"] {
        fs::write(file.path(), second).unwrap();
        file.set_aside(&file.path(), "doc.json.corrupt-X").unwrap();
    }
    assert_eq!(
        fs::read_to_string(dir.file("doc.json.corrupt-X")).unwrap(),
        "first"
    );
    assert_eq!(
        fs::read_to_string(dir.file("doc.json.corrupt-X-01")).unwrap(),
        "second"
    );
    assert_eq!(
        fs::read_to_string(dir.file("doc.json.corrupt-X-02")).unwrap(),
        "third"
    );
}

#[test]
fn corrupt_copies_are_bounded() {
    let (_tmp, dir) = agent();
    let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
    for i in 0..(KEEP_CORRUPT + 3) {
        fs::write(file.path(), format!("garbage {i}")).unwrap();
        assert_eq!(file.load().unwrap(), None);
        std::thread::sleep(Duration::from_millis(2));
    }
    let kept = names(&dir.path)
        .into_iter()
        .filter(|n| n.starts_with("doc.json.corrupt-"))
        .count();
    assert_eq!(kept, KEEP_CORRUPT);
}

#[test]
fn a_link_or_a_fifo_in_place_of_a_state_file_is_not_followed() {
    let (tmp, dir) = agent();
    let file = JsonFile::<Doc>::new(&dir, "doc.json", "doc");
    file.update(|d| {
        *d = Some(Doc {
            items: vec!["mine".into()],
        })
    })
    .unwrap();
    let target = tmp.path().join("someone-elses.json");
    fs::write(&target, b"{\"items\": [\"theirs\"]}").unwrap();
    fs::remove_file(file.path()).unwrap();
    symlink(&target, file.path()).unwrap();
    assert_eq!(file.load().unwrap().unwrap().items, ["mine"]);
    file.update(|d| d.as_mut().unwrap().items.push("more".into()))
        .unwrap();
    assert_eq!(
        fs::read(&target).unwrap(),
        b"{\"items\": [\"theirs\"]}",
        "the link's target is untouched"
    );
    // Appends refuse a link too.
    let log = dir.file("log.jsonl");
    symlink(&target, &log).unwrap();
    super::super::append_jsonl(&log, &"x").unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"{\"items\": [\"theirs\"]}");
    assert_eq!(fs::read(&log).unwrap(), b"\"x\"\n");
    assert!(!fs::symlink_metadata(&log).unwrap().file_type().is_symlink());
    let critical =
        fs::read_to_string(FleetDir::new(dir.fleet_root()).critical_events_path()).unwrap();
    assert!(critical.contains("state_file_refused"), "{critical}");
    // A FIFO is refused without hanging.
    fs::remove_file(file.path()).unwrap();
    nix::unistd::mkfifo(&file.path(), nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert!(matches!(file.read().unwrap(), Loaded::Corrupt(_)));
}

#[test]
fn a_dead_namesakes_temp_file_or_a_link_in_its_place_is_not_in_the_way() {
    let (tmp, dir) = agent();
    let path = dir.file("x.json");
    let target = tmp.path().join("target");
    fs::write(&target, b"theirs").unwrap();
    // The next temp names this process will use: one left over, one a planted link.
    let next = TEMP_SEQ.load(Ordering::Relaxed);
    let me = std::process::id();
    for (i, seq) in (next..next + 64).enumerate() {
        let t = dir.file(&format!(".x.json{TMP_MARK}{me}.{seq}"));
        if i % 2 == 0 {
            fs::write(&t, b"stale").unwrap();
        } else {
            symlink(&target, &t).unwrap();
        }
    }
    write_atomic(&path, b"mine", 0o600, true).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"mine");
    assert_eq!(fs::read(&target).unwrap(), b"theirs");
}

#[test]
fn a_failed_write_leaves_no_temp_file() {
    let (_tmp, dir) = agent();
    // A rename onto a non-empty directory fails after the temp file was written.
    let path = dir.file("busy");
    fs::create_dir(&path).unwrap();
    fs::write(path.join("x"), b"").unwrap();
    assert!(write_atomic(&path, b"data", 0o600, true).is_err());
    assert!(
        names(&dir.path).iter().all(|n| !n.contains(TMP_MARK)),
        "{:?}",
        names(&dir.path)
    );
}

#[test]
fn stale_temp_files_of_dead_writers_are_swept_and_live_ones_kept() {
    let (_tmp, dir) = agent();
    let fleet = FleetDir::new(dir.fleet_root());
    // A pid that is surely not running: a child that has been reaped.
    let dead = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let me = std::process::id();
    let old = std::time::SystemTime::now() - Duration::from_secs(120);
    let make = |path: PathBuf, age: std::time::SystemTime| {
        fs::write(&path, b"partial").unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(age)
            .unwrap();
        path
    };
    create_private_dir_checked(&dir.file("handoffs"), false).unwrap();
    let swept = [
        make(dir.file(&format!(".state.json.tmp.{dead}.0")), old),
        make(dir.file(&format!(".ledger.json.tmp.{dead}")), old),
        make(dir.file(".crashes.json.last-good.tmp"), old),
        make(dir.file(&format!("handoffs/.h.md.tmp.{dead}.3")), old),
        make(fleet.root.join(format!(".notify.json.tmp.{dead}.1")), old),
    ];
    let kept = [
        make(dir.file(&format!(".state.json.tmp.{me}.0")), old),
        make(
            dir.file(&format!(".state.json.tmp.{dead}.9")),
            std::time::SystemTime::now(),
        ),
        make(dir.file("notes.tmp.1"), old),
    ];
    assert_eq!(fleet.sweep_temp_files(), swept.len());
    for p in &swept {
        assert!(!p.exists(), "{}", p.display());
    }
    for p in &kept {
        assert!(p.exists(), "{}", p.display());
    }
}

#[test]
fn a_state_dir_of_another_user_or_a_linked_agent_dir_is_refused() {
    let (tmp, dir) = agent();
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let linked = dir.fleet_root().join("agents").join("b");
    symlink(&elsewhere, &linked).unwrap();
    let err = FleetDir::new(dir.fleet_root())
        .agent("b")
        .ensure_usable()
        .unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    // The state dir itself may be a link to a dir of the user's own.
    let real = tmp.path().join("real-state");
    fs::create_dir(&real).unwrap();
    let link = tmp.path().join("linked-state");
    symlink(&real, &link).unwrap();
    FleetDir::new(&link).agent("z").ensure_usable().unwrap();
    assert!(real.join("agents/z").is_dir());
    // A state dir another user owns: as root, hand one to `nobody`; otherwise `/` is one.
    let foreign = if nix::unistd::geteuid().is_root() {
        let root = tmp.path().join("theirs");
        fs::create_dir(&root).unwrap();
        std::os::unix::fs::chown(&root, Some(65534), Some(65534)).unwrap();
        root
    } else {
        PathBuf::from("/")
    };
    let err = FleetDir::new(&foreign).agent("x").ensure().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    assert!(
        err.to_string().contains(&foreign.display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("hint:"), "{err}");
    assert!(!foreign.join("agents").exists());
}

/// `f` on a thread of its own, failing the test if it has not returned within 10 s (a lock
/// taken twice waits forever: the test must fail, not hang).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} still running after 10 s (a lock taken twice?)"))
}

#[test]
fn a_lock_taken_twice_by_its_holder_is_refused_and_other_threads_wait() {
    let (_tmp, fleet) = crate::state::testing::temp_fleet();
    let path = fleet.root.join("x.lock");
    let held = lock(&path).unwrap();
    let again = within_10s("a second lock", {
        let path = fleet.root.join("y.lock");
        move || {
            // The same thread asks again: refused at once, naming the file.
            let first = lock(&path).unwrap();
            let second = lock(&path).unwrap_err();
            drop(first);
            (second.kind(), second.to_string())
        }
    });
    assert_eq!(again.0, io::ErrorKind::Deadlock);
    assert!(again.1.contains("taken twice"), "{}", again.1);
    // Another thread waits for the holder, as before.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _lock = lock(&path).unwrap();
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(200))
            .is_err()
    );
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    waiter.join().unwrap();
}

#[test]
fn a_fifo_a_link_or_a_dir_at_a_lock_file_is_refused_at_once() {
    let (tmp, fleet) = crate::state::testing::temp_fleet();
    let fifo = fleet.root.join("fifo.lock");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let link = fleet.root.join("link.lock");
    let target = tmp.path().join("target");
    fs::write(&target, b"precious").unwrap();
    symlink(&target, &link).unwrap();
    let dir = fleet.root.join("dir.lock");
    fs::create_dir(&dir).unwrap();
    let refused = within_10s("locking planted files", move || {
        [fifo, link, dir]
            .iter()
            .map(|p| {
                lock(p)
                    .map(|_| ())
                    .map_err(|e| (is_refusal(&e), e.to_string()))
            })
            .collect::<Vec<_>>()
    });
    for r in &refused {
        let (refusal, message) = r.clone().unwrap_err();
        assert!(refusal, "{message}");
    }
    assert!(
        refused[0]
            .clone()
            .unwrap_err()
            .1
            .contains("not a regular file")
    );
    assert!(refused[1].clone().unwrap_err().1.contains("symbolic link"));
    assert_eq!(fs::read(&target).unwrap(), b"precious");
}

#[test]
fn a_fifo_or_link_at_the_event_log_or_its_lock_is_moved_aside_and_recorded_without_waiting() {
    for planted in ["fifo", "link", "dir"] {
        for at in ["critical_events.jsonl", "critical_events.lock"] {
            let (tmp, fleet) = crate::state::testing::temp_fleet();
            let path = fleet.root.join(at);
            let target = tmp.path().join("target");
            fs::write(&target, b"precious").unwrap();
            match planted {
                "fifo" => {
                    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
                        .unwrap()
                }
                "link" => symlink(&target, &path).unwrap(),
                _ => fs::create_dir(&path).unwrap(),
            }
            let writer = fleet.clone();
            within_10s("recording an event", move || {
                writer
                    .record_critical("crash_loop", "a", "r", "safe_mode", serde_json::json!({}))
                    .unwrap();
            });
            let log = fs::read_to_string(fleet.critical_events_path()).unwrap();
            let events: Vec<serde_json::Value> = log
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let names: Vec<&str> = events
                .iter()
                .map(|e| e["event"].as_str().unwrap())
                .collect();
            assert_eq!(
                names,
                ["state_file_refused", "crash_loop"],
                "{planted} at {at}"
            );
            assert!(
                events[0]["reason"].as_str().unwrap().contains(at),
                "{planted} at {at}: {log}"
            );
            let aside = events[0]["details"]["moved_to"].as_str().unwrap();
            assert!(fs::symlink_metadata(aside).is_ok(), "{aside}");
            assert!(
                fs::symlink_metadata(&path).unwrap().is_file(),
                "{planted} at {at}"
            );
            assert_eq!(fs::read(&target).unwrap(), b"precious");
        }
    }
}

#[test]
fn a_link_planted_at_an_agents_log_is_recorded_in_the_event_log_without_waiting() {
    let (tmp, dir) = agent();
    let target = tmp.path().join("target");
    fs::write(&target, b"precious").unwrap();
    symlink(&target, dir.file(crate::state::OPS_LOG)).unwrap();
    let writer = dir.clone();
    within_10s("recording an op", move || {
        writer
            .record_op(crate::state::Op::AgentStart, serde_json::Value::Null)
            .unwrap()
    });
    let fleet = FleetDir::new(dir.fleet_root());
    let log = fs::read_to_string(fleet.critical_events_path()).unwrap();
    assert!(log.contains("state_file_refused"), "{log}");
    assert_eq!(fs::read(&target).unwrap(), b"precious");
}
