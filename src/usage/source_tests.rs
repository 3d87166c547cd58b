use std::io::Write;
use std::time::{Duration, Instant};

use super::*;

/// A Claude Code assistant record (one content block) with its usage.
fn claude(id: &str, input: u64, output: u64, cache_read: u64) -> String {
    format!(
        r#"{{"type":"assistant","message":{{"id":"{id}","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{{"type":"text","text":"ok"}}],"usage":{{"input_tokens":{input},"cache_creation_input_tokens":0,"cache_read_input_tokens":{cache_read},"output_tokens":{output}}}}},"timestamp":"2026-11-25T12:00:00.000Z"}}
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

fn total(entries: &[Entry]) -> u64 {
    entries.iter().map(|e| e.tokens.total()).sum()
}

fn source(path: &Path) -> Source {
    Source::new(&path.to_string_lossy(), Kind::Session)
}

#[test]
fn each_byte_is_read_once_and_appends_add_only_what_is_new() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    append(&path, &claude("m1", 10, 5, 100));
    let mut s = source(&path);
    let (first, _) = s.read(u64::MAX).unwrap();
    assert_eq!(total(&first), 115);
    assert_eq!(first[0].model, "claude-opus-4-6");
    let (again, _) = s.read(u64::MAX).unwrap();
    assert!(again.is_empty(), "nothing new: {again:?}");
    append(
        &path,
        "{\"type\":\"user\",\"message\":{\"content\":\"hi\"}}\n",
    );
    append(&path, &claude("m2", 20, 5, 0));
    let (more, _) = s.read(u64::MAX).unwrap();
    assert_eq!(total(&more), 25);
    assert_eq!(s.session.total(), 140);
    assert_eq!(s.cursor.offset, std::fs::metadata(&path).unwrap().len());
}

#[test]
fn a_partial_last_line_waits_for_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    let line = claude("m1", 10, 5, 0);
    let (head, tail) = line.split_at(40);
    append(&path, head);
    let mut s = source(&path);
    assert!(s.read(u64::MAX).unwrap().0.is_empty());
    assert_eq!(s.cursor.offset, 0, "the partial line is read again");
    append(&path, tail);
    assert_eq!(total(&s.read(u64::MAX).unwrap().0), 15);
}

#[test]
fn a_truncated_or_rotated_file_starts_over() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    append(&path, &claude("m1", 10, 5, 0));
    append(&path, &claude("m2", 10, 5, 0));
    let mut s = source(&path);
    assert_eq!(total(&s.read(u64::MAX).unwrap().0), 30);
    // Cut short, then written again: a new session in the same file.
    std::fs::write(&path, claude("m3", 1, 1, 0)).unwrap();
    let (entries, lines) = s.read(u64::MAX).unwrap();
    assert!(lines.restarted);
    assert_eq!(total(&entries), 2);
    assert_eq!(s.session.total(), 2);
    // Another file moved into place (rotation), longer than what was read.
    let other = tmp.path().join("new.jsonl");
    let text = [claude("m4", 100, 0, 0), claude("m5", 100, 0, 0)].concat();
    std::fs::write(&other, text).unwrap();
    std::fs::rename(&other, &path).unwrap();
    let (entries, lines) = s.read(u64::MAX).unwrap();
    assert!(lines.restarted);
    assert_eq!(total(&entries), 200);
}

#[test]
fn a_response_written_once_per_content_block_counts_once() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    // Claude Code: thinking, text and tool_use blocks of one message, each a record with the
    // message's usage; the last one may carry the final output count.
    append(&path, &claude("m1", 10, 2, 500));
    append(&path, &claude("m1", 10, 2, 500));
    let mut s = source(&path);
    assert_eq!(total(&s.read(u64::MAX).unwrap().0), 512);
    append(&path, &claude("m1", 10, 40, 500));
    let (more, _) = s.read(u64::MAX).unwrap();
    assert_eq!(total(&more), 38, "only what the last record adds");
}

#[test]
fn codex_totals_count_their_difference_and_a_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("rollout.jsonl");
    let count = |input: u64, cached: u64, output: u64| {
        format!(
            r#"{{"timestamp":"2026-11-23T19:04:15.184Z","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{input},"cached_input_tokens":{cached},"output_tokens":{output},"reasoning_output_tokens":0,"total_tokens":{}}},"model_context_window":258400}}}}}}
"#,
            input + output
        )
    };
    append(
        &path,
        "{\"timestamp\":\"2026-11-23T19:04:10Z\",\"type\":\"turn_context\",\"payload\":{\"model\":\"gpt-5.3-codex\"}}\n",
    );
    append(&path, &count(1000, 0, 100));
    append(&path, &count(1000, 0, 100));
    let mut s = source(&path);
    let (entries, _) = s.read(u64::MAX).unwrap();
    assert_eq!(
        total(&entries),
        1100,
        "the same count twice is counted once"
    );
    assert_eq!(entries[0].model, "gpt-5.3-codex");
    append(&path, &count(3000, 800, 250));
    let (entries, _) = s.read(u64::MAX).unwrap();
    assert_eq!(total(&entries), 2150);
    assert_eq!(entries[0].tokens.cache_read, 800);
    assert_eq!(s.session.total(), 3250);
    // A total that starts over (a resumed session counting afresh) is all new.
    append(&path, &count(500, 0, 10));
    assert_eq!(total(&s.read(u64::MAX).unwrap().0), 510);
}

#[test]
fn gemini_messages_updated_in_place_count_once() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("session.jsonl");
    let gemini = |tool_status: &str| {
        format!(
            r#"{{"id":"g1","timestamp":"2026-11-23T19:04:54.933Z","type":"gemini","content":"","toolCalls":[{{"id":"c1","name":"run_shell_command","status":"{tool_status}"}}],"tokens":{{"input":900,"output":20,"cached":0,"thoughts":0,"tool":0,"total":920}},"model":"gemini-3.1-pro-preview"}}
"#
        )
    };
    append(
        &path,
        "{\"sessionId\":\"s\",\"projectHash\":\"p\",\"startTime\":\"2026-11-23T19:04:50Z\",\"kind\":\"main\"}\n",
    );
    append(&path, &gemini("executing"));
    append(
        &path,
        "{\"$set\":{\"lastUpdated\":\"2026-11-23T19:04:55Z\"}}\n",
    );
    append(&path, &gemini("success"));
    let mut s = source(&path);
    assert_eq!(total(&s.read(u64::MAX).unwrap().0), 920);
}

#[test]
fn a_fifo_or_dev_zero_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = Instant::now();
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let err = source(path).read(u64::MAX).unwrap_err();
        assert!(matches!(err, ReadError::NotRegular { .. }), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        source(&tmp.path().join("missing"))
            .read(u64::MAX)
            .unwrap_err()
            .is_not_found()
    );
}

#[test]
fn a_pass_reads_at_most_its_budget_and_the_next_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    let line = claude("m1", 10, 5, 0);
    for k in 0..10 {
        append(&path, &line.replace("m1", &format!("m{k}")));
    }
    let mut s = source(&path);
    let budget = line.len() as u64 * 3 + 5;
    let mut seen = 0;
    for _ in 0..4 {
        seen += s.read(budget).unwrap().0.len();
    }
    assert_eq!(seen, 10);
}

#[test]
fn an_overlong_line_is_skipped_and_the_rest_read() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    let mut big = String::from("{\"type\":\"user\",\"usage\":\"");
    big.push_str(&"x".repeat(MAX_LINE + 10));
    big.push_str("\"}\n");
    append(&path, &big);
    append(&path, &claude("m1", 10, 5, 0));
    let mut s = source(&path);
    let (entries, lines) = s.read(u64::MAX).unwrap();
    assert_eq!((lines.skipped, total(&entries)), (1, 15));
}

#[test]
fn reported_usage_is_read_in_phoenix_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("usage_reported.jsonl");
    append(
        &path,
        "{\"ts\":\"2026-11-25T12:00:00Z\",\"model\":\"my-model\",\"input\":1200,\"output\":300}\n",
    );
    let mut s = Source::new(&path.to_string_lossy(), Kind::Reported);
    let (entries, _) = s.read(u64::MAX).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].model.as_str(), entries[0].tokens.total()),
        ("my-model", 1500)
    );
}

#[test]
fn the_tokens_of_a_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    assert!(tokens_in(&path, u64::MAX).unwrap_err().is_not_found());
    append(&path, "{\"type\":\"user\"}\n");
    assert_eq!(tokens_in(&path, u64::MAX).unwrap(), None);
    append(&path, &claude("m1", 10, 5, 100));
    assert_eq!(tokens_in(&path, u64::MAX).unwrap(), Some(115));
}
