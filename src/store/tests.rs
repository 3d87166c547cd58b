//! The index against real SQLite files: query building, ranking of common words, per-agent
//! search and the rebuild of a corrupt index.

use std::path::Path;

use super::*;
use crate::state::handoff;

#[test]
fn queries_cannot_inject_fts_syntax() {
    assert_eq!(
        fts_query("auth patterns").as_deref(),
        Some("\"auth\" \"patterns\"")
    );
    // Operators are words (`OR` and `a` are also stop words).
    assert_eq!(
        fts_query("NEAR(a b) OR \"x").as_deref(),
        Some("\"NEAR\" \"b\" \"x\"")
    );
    assert_eq!(fts_query("  ***  "), None);
    assert_eq!(fts_query("the auth* of it").as_deref(), Some("\"auth\"*"));
    // Only stop words: searched as they are; a short prefix is a word.
    assert_eq!(fts_query("a* the").as_deref(), Some("\"a\" \"the\""));
}

fn handoff(agent: &str, i: usize, summary: &str, body: &str) -> handoff::Handoff {
    handoff::Handoff {
        id: format!("20260101T{i:06}Z-x"),
        agent: agent.into(),
        cli: "claude".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        trigger: handoff::Trigger::Manual,
        related: vec![],
        summary: summary.into(),
        body: body.into(),
        notes: Vec::new(),
    }
}

#[test]
fn a_common_word_ranks_the_newest_matches_and_an_agent_is_searched_alone() {
    let (_tmp, fleet) = crate::state::testing::temp_fleet();
    let store = Store::open(&fleet).unwrap();
    // The oldest handoff is the best match for "deploy" (in its title), but 2,100 newer
    // ones mention it too.
    let mut all = vec![handoff("a", 0, "deploy deploy rollback", "deploy")];
    all.extend((1..=RANK_AT_MOST + 100).map(|i| handoff("a", i, "routine", "deploy done")));
    all.push(handoff(
        "b",
        9_999,
        "other agent",
        "deploy from b, rollback plan",
    ));
    store.put_handoffs(&all).unwrap();

    let newest = store.search("deploy", None, None, 10).unwrap();
    assert_eq!(newest.len(), 10);
    assert!(newest.iter().all(|h| h.reference != "20260101T000000Z-x"));
    // A second word narrows the matches below the cap: the old one is found again.
    let narrowed = store.search("deploy rollback", None, None, 10).unwrap();
    assert_eq!(narrowed[0].reference, "20260101T000000Z-x", "{narrowed:?}");

    let only_b = store.search("deploy", Some("b"), None, 10).unwrap();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0].agent, "b");
    assert!(only_b[0].snippet.contains("[deploy]"), "{:?}", only_b[0]);
    assert!(
        store
            .search("deploy", Some("a"), None, 50)
            .unwrap()
            .iter()
            .all(|h| h.agent == "a")
    );
    // The startup context's query: any word, this agent, the shown handoff left out.
    let related = store.related("b", "prepare the rollback", &[], 3).unwrap();
    assert_eq!(related.len(), 1);
    assert_eq!(related[0].reference, "20260101T009999Z-x");
    assert!(
        store
            .related("b", "prepare the rollback", &["20260101T009999Z-x"], 3)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn any_word_queries_keep_the_longest_content_words() {
    assert_eq!(
        fts_any_query("Fix the OAuth login (oauth) for \"users\" OR x", 2).as_deref(),
        Some("\"oauth\" OR \"login\"")
    );
    assert_eq!(fts_any_query("a to of", 8), None);
}

/// Overwrite the middle of a file (several pages of a database) with garbage.
fn corrupt_middle(path: &Path) {
    use std::io::{Seek, SeekFrom, Write};
    let len = std::fs::metadata(path).unwrap().len();
    assert!(
        len > 64 * 1024,
        "the index is big enough to corrupt its middle: {len}"
    );
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(len / 2 - 16 * 1024)).unwrap();
    f.write_all(&[0xab; 32 * 1024]).unwrap();
}

fn every_handoff_is_found(fleet: &FleetDir, n: usize) {
    let store = Store::open(fleet).unwrap();
    for i in 0..n {
        let hits = store.search(&format!("uniq{i}x"), None, None, 5).unwrap();
        assert_eq!(hits.len(), 1, "handoff {i}: {hits:?}");
    }
}

#[test]
fn a_partly_corrupt_index_is_rebuilt_into_a_new_file() {
    let (_tmp, fleet) = crate::state::testing::temp_fleet();
    let dir = fleet.agent("a");
    dir.ensure().unwrap();
    let n = 400;
    for i in 0..n {
        let body = format!("uniq{i}x {}", "filler words about the deploy ".repeat(20));
        handoff::write(&dir, &handoff("a", i, &format!("handoff {i}"), &body)).unwrap();
    }
    drop(Store::open(&fleet).unwrap());
    let index = fleet.root.join(INDEX);

    // `reindex` never reads the damaged file: it builds a new one and renames it in place.
    corrupt_middle(&index);
    let (_, documents) = Store::rebuild_fresh(&fleet).unwrap();
    assert!(documents >= n, "{documents}");
    every_handoff_is_found(&fleet, n);

    // The whole-file check finds damage that no query of the moment may meet.
    corrupt_middle(&index);
    drop(Store::open_checked(&fleet).unwrap());
    every_handoff_is_found(&fleet, n);

    // A search that meets the damage rebuilds and answers in full.
    corrupt_middle(&index);
    for i in [0, n / 2, n - 1] {
        let hits = search(&fleet, &format!("uniq{i}x"), None, None, 5).unwrap();
        assert_eq!(hits.len(), 1, "handoff {i}: {hits:?}");
    }
    every_handoff_is_found(&fleet, n);
    // An empty file (a create that was cut short) is rebuilt, not taken as a new index.
    std::fs::write(&index, b"").unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", index.display()));
    }
    every_handoff_is_found(&fleet, n);

    let names = crate::state::testing::file_names(&fleet.root);
    assert!(!names.iter().any(|n| n.contains(".tmp.")), "{names:?}");
}

/// The index file's size and modification time, and how much its write-ahead log holds.
fn index_files(fleet: &FleetDir) -> (u64, std::time::SystemTime, u64) {
    let index = std::fs::metadata(fleet.root.join(INDEX)).unwrap();
    let wal = std::fs::metadata(format!("{}-wal", fleet.root.join(INDEX).display()))
        .map_or(0, |m| m.len());
    (index.len(), index.modified().unwrap(), wal)
}

#[test]
fn a_search_of_a_current_index_writes_nothing_and_a_new_handoff_is_still_found() {
    let (_tmp, fleet) = crate::state::testing::temp_fleet();
    let dir = fleet.agent("a");
    dir.ensure().unwrap();
    handoff::write(&dir, &handoff("a", 1, "first", "alpha words")).unwrap();
    note_pending(&fleet, &dir, "20260101T000001Z-x");
    assert_eq!(search(&fleet, "alpha", None, None, 5).unwrap().len(), 1);
    let before = index_files(&fleet);
    std::thread::sleep(std::time::Duration::from_millis(20));
    for _ in 0..3 {
        assert_eq!(search(&fleet, "alpha", None, None, 5).unwrap().len(), 1);
    }
    // (A read-only reader of a WAL index leaves an empty log and the shared memory behind.)
    assert_eq!(index_files(&fleet), before, "a query wrote to the index");
    // A handoff written since is indexed by the next search, as before.
    handoff::write(&dir, &handoff("a", 2, "second", "beta words")).unwrap();
    note_pending(&fleet, &dir, "20260101T000002Z-x");
    assert_eq!(search(&fleet, "beta", None, None, 5).unwrap().len(), 1);
}

#[test]
fn a_fifo_or_link_among_the_index_files_is_refused_recorded_and_rebuilt_without_waiting() {
    for at in ["index.db", "index.db-wal", "index.db-journal"] {
        for planted in ["fifo", "link"] {
            let (tmp, fleet) = crate::state::testing::temp_fleet();
            let dir = fleet.agent("a");
            dir.ensure().unwrap();
            handoff::write(&dir, &handoff("a", 1, "first", "alpha words")).unwrap();
            note_pending(&fleet, &dir, "20260101T000001Z-x");
            assert_eq!(search(&fleet, "alpha", None, None, 5).unwrap().len(), 1);
            let path = fleet.root.join(at);
            let _ = std::fs::remove_file(&path);
            let target = tmp.path().join("target");
            std::fs::write(&target, b"precious").unwrap();
            match planted {
                "fifo" => {
                    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
                        .unwrap()
                }
                _ => std::os::unix::fs::symlink(&target, &path).unwrap(),
            }
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = fleet.clone();
            std::thread::spawn(move || {
                // The session-start hook's read, then a search.
                let read = Store::open_for_read(&reader).is_some();
                let hits = search(&reader, "alpha", None, None, 5).map(|h| h.len());
                let _ = tx.send((read, hits));
            });
            let (read, hits) = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{planted} at {at}: still waiting after 10 s"));
            assert!(!read, "{planted} at {at}: opened");
            assert_eq!(hits.unwrap(), 1, "{planted} at {at}");
            assert!(
                std::fs::symlink_metadata(&path).map_or(true, |m| m.is_file()),
                "{planted} at {at} is still there"
            );
            assert_eq!(std::fs::read(&target).unwrap(), b"precious");
            let log = std::fs::read_to_string(fleet.critical_events_path()).unwrap();
            assert!(
                log.contains("state_file_refused") && log.contains(at),
                "{planted} at {at}: {log}"
            );
        }
    }
}
