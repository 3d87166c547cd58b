use std::io::Write;

use super::*;
use crate::state::testing::temp_agent;

fn claude(id: &str, input: u64, output: u64) -> String {
    let at = jiff::Timestamp::now();
    format!(
        r#"{{"type":"assistant","message":{{"id":"{id}","model":"claude-opus-4-6","role":"assistant","usage":{{"input_tokens":{input},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{output}}}}},"timestamp":"{at}"}}
"#
    )
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// A session started through the hook: its op in ops.jsonl and state.json naming its file.
fn start_session(dir: &AgentDir, transcript: &Path) {
    dir.record_op(
        Op::SessionStart,
        json!({"source": "startup", "transcript_path": transcript}),
    )
    .unwrap();
    std::fs::write(
        dir.file(state::STATE),
        json!({"agent": "a", "transcript_path": transcript}).to_string(),
    )
    .unwrap();
}

fn today_total(u: &Update) -> u64 {
    u.today.values().map(Tokens::total).sum()
}

#[test]
fn an_update_appends_what_is_new_and_a_second_one_nothing() {
    let (tmp, dir) = temp_agent();
    let t = tmp.path().join("s1.jsonl");
    append(&t, &claude("m1", 100, 10));
    start_session(&dir, &t);
    let u = update(&dir, Cli::Claude, true).unwrap();
    assert_eq!(today_total(&u), 110);
    assert_eq!(u.session.map(|s| s.total()), Some(110));
    let (lines, note) = lines(&dir);
    assert_eq!((lines.len(), note), (1, None));
    assert_eq!(lines[0].model, "claude-opus-4-6");
    let len = std::fs::metadata(dir.file(LEDGER)).unwrap().len();
    let state_before = std::fs::read(dir.file(STATE)).unwrap();
    let u = update(&dir, Cli::Claude, true).unwrap();
    assert_eq!(today_total(&u), 110);
    assert_eq!(std::fs::metadata(dir.file(LEDGER)).unwrap().len(), len);
    assert_eq!(
        std::fs::read(dir.file(STATE)).unwrap(),
        state_before,
        "nothing new: nothing written"
    );
    append(&t, &claude("m2", 1, 1));
    assert_eq!(today_total(&update(&dir, Cli::Claude, true).unwrap()), 112);
    assert_eq!(super::lines(&dir).0.len(), 2);
}

#[test]
fn an_earlier_session_keeps_being_followed_after_a_new_one_starts() {
    let (tmp, dir) = temp_agent();
    let (s1, s2) = (tmp.path().join("s1.jsonl"), tmp.path().join("s2.jsonl"));
    append(&s1, &claude("m1", 100, 0));
    start_session(&dir, &s1);
    // The second session starts before any update: only ops.jsonl names the first one.
    append(&s2, &claude("m2", 10, 0));
    start_session(&dir, &s2);
    let u = update(&dir, Cli::Claude, true).unwrap();
    assert_eq!(today_total(&u), 110);
    assert_eq!(
        u.session.map(|s| s.total()),
        Some(10),
        "the current session"
    );
    append(&s1, &claude("m3", 1, 0));
    assert_eq!(today_total(&update(&dir, Cli::Claude, true).unwrap()), 111);
}

#[test]
fn a_dry_update_counts_without_writing() {
    let (tmp, dir) = temp_agent();
    let t = tmp.path().join("s1.jsonl");
    append(&t, &claude("m1", 100, 10));
    start_session(&dir, &t);
    let u = update(&dir, Cli::Claude, false).unwrap();
    assert_eq!(today_total(&u), 110);
    assert!(!dir.file(LEDGER).exists() && !dir.file(STATE).exists());
    update(&dir, Cli::Claude, true).unwrap();
    append(&t, &claude("m2", 1, 1));
    assert_eq!(today_total(&update(&dir, Cli::Claude, false).unwrap()), 112);
    assert_eq!(today_total(&update(&dir, Cli::Claude, true).unwrap()), 112);
}

#[test]
fn lines_of_an_update_that_died_before_its_state_are_cut_off() {
    let (tmp, dir) = temp_agent();
    let t = tmp.path().join("s1.jsonl");
    append(&t, &claude("m1", 100, 10));
    start_session(&dir, &t);
    update(&dir, Cli::Claude, true).unwrap();
    let len = std::fs::metadata(dir.file(LEDGER)).unwrap().len();
    // Appended, then killed before the state was saved.
    append(
        &dir.file(LEDGER),
        "{\"hour\":\"2026-11-25T12:00:00Z\",\"model\":\"x\",\"input\":5}\n",
    );
    append(&t, &claude("m2", 1, 1));
    update(&dir, Cli::Claude, true).unwrap();
    let (lines, _) = lines(&dir);
    assert!(lines.iter().all(|l| l.model != "x"), "{lines:?}");
    assert!(std::fs::metadata(dir.file(LEDGER)).unwrap().len() > len);
    let ops = std::fs::read_to_string(dir.file(OPS_LOG)).unwrap();
    assert!(ops.contains("usage_ledger_repaired"), "{ops}");
}

#[test]
fn a_ledger_whose_state_is_gone_is_set_aside_not_counted_twice() {
    let (tmp, dir) = temp_agent();
    let t = tmp.path().join("s1.jsonl");
    append(&t, &claude("m1", 100, 10));
    start_session(&dir, &t);
    update(&dir, Cli::Claude, true).unwrap();
    std::fs::remove_file(dir.file(STATE)).unwrap();
    std::fs::remove_file(dir.file(&format!("{STATE}.last-good"))).unwrap();
    let u = update(&dir, Cli::Claude, true).unwrap();
    assert_eq!(today_total(&u), 110);
    assert_eq!(lines(&dir).0.len(), 1);
    let names = crate::state::testing::file_names(&dir.path);
    assert!(
        names.iter().any(|n| n.starts_with("usage.jsonl.orphan-")),
        "{names:?}"
    );
}

#[test]
fn subagent_transcripts_beside_a_claude_session_are_counted() {
    let (tmp, dir) = temp_agent();
    let t = tmp.path().join("s1.jsonl");
    append(&t, &claude("m1", 100, 0));
    start_session(&dir, &t);
    update(&dir, Cli::Claude, true).unwrap();
    let sub = tmp.path().join("s1/subagents");
    std::fs::create_dir_all(&sub).unwrap();
    append(&sub.join("agent-1.jsonl"), &claude("m9", 7, 0));
    let u = update(&dir, Cli::Claude, true).unwrap();
    assert_eq!(today_total(&u), 107);
    assert_eq!(
        u.session.map(|s| s.total()),
        Some(100),
        "the session's own file"
    );
}

#[test]
fn a_current_transcript_that_is_no_regular_file_is_said_and_never_read() {
    let (tmp, dir) = temp_agent();
    let fifo = tmp.path().join("t.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    start_session(&dir, &fifo);
    let u = update(&dir, Cli::Claude, true).unwrap();
    let why = u.session_unreadable.unwrap();
    assert!(why.contains("is not a regular file (a FIFO)"), "{why}");
    assert_eq!(u.session, None);
}

#[test]
fn compaction_merges_lines_by_hour_and_model() {
    let (tmp, dir) = temp_agent();
    let path = dir.file(LEDGER);
    let line = |input: u64| {
        format!(
            "{{\"hour\":\"2026-11-25T12:00:00Z\",\"model\":\"m\",\"input\":{input},\"output\":0,\"cache_write\":0,\"cache_read\":0,\"responses\":1}}\n"
        )
    };
    append(&path, &line(1));
    append(&path, &line(2));
    append(&path, "not json\n");
    let len = compact(&path).unwrap();
    let (lines, note) = lines(&dir);
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].tokens.input, lines[0].responses), (3, 2));
    assert!(note.unwrap().contains("1 line(s) unreadable"));
    assert_eq!(len, std::fs::metadata(&path).unwrap().len());
    drop(tmp);
}

#[test]
fn an_agent_without_a_state_dir_has_nothing_and_gets_none() {
    let (_tmp, fleet) = crate::state::testing::temp_fleet();
    let dir = fleet.agent("ghost");
    let u = update(&dir, Cli::Custom, true).unwrap();
    assert!(u.today.is_empty());
    assert!(!dir.path.exists());
}

#[test]
fn a_link_planted_as_the_ledger_is_moved_aside_not_followed() {
    let (tmp, dir) = temp_agent();
    let elsewhere = tmp.path().join("elsewhere.txt");
    std::fs::write(&elsewhere, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.file(LEDGER)).unwrap();
    let t = tmp.path().join("s1.jsonl");
    append(&t, &claude("m1", 100, 10));
    start_session(&dir, &t);
    assert_eq!(today_total(&update(&dir, Cli::Claude, true).unwrap()), 110);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep me\n");
    assert!(!dir.file(LEDGER).is_symlink());
    assert_eq!(lines(&dir).0.len(), 1);
}

#[test]
fn the_oldest_sessions_are_forgotten_whole_and_the_current_one_never() {
    let followed = |path: &str, beside: Option<&str>, changed: i64| Followed {
        source: Source::new(path, Kind::Session),
        beside: beside.map(str::to_string),
        added: 0,
        changed,
    };
    let mut state = LedgerState::default();
    // The current session changed first of all, with files beside it.
    state.sources.push(followed("cur", None, 0));
    for k in 0..10 {
        state
            .sources
            .push(followed(&format!("cur-sub-{k}"), Some("cur"), 0));
    }
    // An old session whose subagent changed late: it goes last, and whole.
    state.sources.push(followed("old", None, 1));
    state.sources.push(followed("old-sub", Some("old"), 10_000));
    for k in 0..MAX_SOURCES {
        state
            .sources
            .push(followed(&format!("s{k}"), None, 2 + k as i64));
    }
    evict(&mut state, Some("cur"));
    assert_eq!(state.sources.len(), MAX_SOURCES);
    let has = |p: &str| state.sources.iter().any(|f| f.source.path == p);
    assert!(has("cur") && has("cur-sub-9"), "the current session stays");
    assert!(
        has("old") && has("old-sub"),
        "changed lately through its subagent"
    );
    assert!(!has("s0") && !has("s12") && has("s13"), "13 too many");
    // A forgotten session resumed later goes on where it was read up to.
    assert_eq!(state.forgotten.len(), 13);
    state.forgotten[0].cursor.offset = 4096;
    follow(&mut state, "s0", Kind::Session, None, 99);
    let back = state
        .sources
        .iter()
        .find(|f| f.source.path == "s0")
        .unwrap();
    assert_eq!(back.source.cursor.offset, 4096);
    assert_eq!(state.forgotten.len(), 12);
}

#[test]
fn reported_usage_is_kept_apart_bounded_and_read_only_for_a_cli_without_hooks() {
    let (_tmp, dir) = temp_agent();
    let reported = dir.file(REPORTED);
    let line = |input: u64| {
        format!(
            "{}\n",
            json!({"ts": crate::state::now_rfc3339(), "model": "my-model", "input": input, "output": 0})
        )
    };
    append(&reported, &line(1000));
    append(&reported, &line(u64::MAX));
    append(&reported, &line(50_000_000));
    // A CLI with hooks: what the agent writes there is no record of its CLI.
    let u = update(&dir, Cli::Claude, true).unwrap();
    assert_eq!(today_total(&u), 0);
    assert!(u.reported_today.is_empty());
    // A custom CLI: counted, apart, and the absurd calls not at all.
    let u = update(&dir, Cli::Custom, true).unwrap();
    assert_eq!(today_total(&u), 1000);
    assert_eq!(u.reported_today["my-model"].input, 1000);
    assert!(
        u.notes
            .iter()
            .any(|n| n.contains("2 record(s) of more than")),
        "{:?}",
        u.notes
    );
    let (lines, _) = lines(&dir);
    assert!(lines.iter().all(|l| l.reported), "{lines:?}");
}
