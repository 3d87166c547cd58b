//! The usage ledger: one agent whose Claude Code-shaped transcript is 50 MB (responses with
//! `usage` among tool results, as a long session has them). Measured: the first update (every
//! byte read, from a cold ledger; the file is in the page cache, as the transcript a CLI just
//! wrote is), an update after one more turn (a response and its tool result appended), and an
//! update with nothing new. Targets (issue 19): first ≤ 1 s, incremental ≤ 5 ms. Run with
//! `cargo bench --bench usage`.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use phoenix::spec::Cli;
use phoenix::state::{FleetDir, Op};

const TRANSCRIPT_BYTES: usize = 50 << 20;
const FIRST_RUNS: usize = 5;
const TURN_RUNS: usize = 200;

fn main() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let fleet = FleetDir::new(tmp.path().join(".phoenix"));
    fleet.ensure().unwrap();
    let dir = fleet.agent("a");
    dir.ensure().unwrap();
    let transcript = tmp.path().join("session.jsonl");
    let (responses, bytes) = write_transcript(&transcript);
    dir.record_op(
        Op::SessionStart,
        serde_json::json!({"source": "startup", "transcript_path": transcript}),
    )
    .unwrap();
    std::fs::write(
        dir.file("state.json"),
        serde_json::json!({"agent": "a", "transcript_path": transcript}).to_string(),
    )
    .unwrap();

    let mut first = Vec::new();
    for _ in 0..FIRST_RUNS {
        for name in [
            "usage.jsonl",
            "usage_state.json",
            "usage_state.json.last-good",
        ] {
            let _ = std::fs::remove_file(dir.file(name));
        }
        let t = Instant::now();
        let u = phoenix::usage::update(&dir, Cli::Claude, true).unwrap();
        first.push(t.elapsed());
        let counted: u64 = u.today.values().map(|t| t.total()).sum();
        assert_eq!(counted, responses * 2150, "every response counted once");
    }
    report(
        &format!(
            "first update, {:.1} MB transcript ({responses} responses)",
            bytes as f64 / 1e6
        ),
        first,
    );

    let mut turns = Vec::new();
    let mut idle = Vec::new();
    for k in 0..TURN_RUNS {
        append(&transcript, &turn(responses as usize + k));
        let t = Instant::now();
        phoenix::usage::update(&dir, Cli::Claude, true).unwrap();
        turns.push(t.elapsed());
        let t = Instant::now();
        phoenix::usage::update(&dir, Cli::Claude, true).unwrap();
        idle.push(t.elapsed());
    }
    report("update after one more turn", turns);
    report("update with nothing new", idle);
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "usage ledger: {what}, {} runs: median {:.2?}  p90 {:.2?}  max {:.2?}",
        times.len(),
        pct(0.5),
        pct(0.9),
        times[times.len() - 1]
    );
}

/// One turn as Claude Code records it: the assistant's response (text and a tool call, with
/// its usage) and the tool's result, a few kilobytes of output.
fn turn(k: usize) -> String {
    // Today: the update's `today` is what the bench checks.
    let at = jiff::Timestamp::now().to_string();
    let text = "Let me look at the failing test and the module it covers. ".repeat(8);
    let output = format!("line {k}: cargo test output and a file listing\n").repeat(60);
    let assistant = serde_json::json!({
        "parentUuid": format!("u{k}"), "isSidechain": false, "userType": "external",
        "cwd": "/home/u/repo", "sessionId": "431cad5d", "version": "2.1.197",
        "type": "assistant", "uuid": format!("a{k}"), "timestamp": at,
        "requestId": format!("req_{k}"),
        "message": {"id": format!("msg_{k:08}"), "type": "message", "role": "assistant",
            "model": "claude-opus-4-6",
            "content": [{"type": "text", "text": text},
                        {"type": "tool_use", "id": format!("toolu_{k}"), "name": "Bash",
                         "input": {"command": "cargo test -p core", "description": "Run the tests"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 1200, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 800, "output_tokens": 150,
                      "service_tier": "standard"}},
    });
    let user = serde_json::json!({
        "parentUuid": format!("a{k}"), "isSidechain": false, "type": "user",
        "uuid": format!("u{}", k + 1), "timestamp": at,
        "message": {"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": format!("toolu_{k}"), "content": output, "is_error": false}]},
        "toolUseResult": {"stdout": output, "stderr": "", "interrupted": false},
    });
    format!("{assistant}\n{user}\n")
}

/// A transcript of at least `TRANSCRIPT_BYTES`: its responses and its size.
fn write_transcript(path: &Path) -> (u64, usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let (mut bytes, mut k) = (0, 0);
    while bytes < TRANSCRIPT_BYTES {
        let t = turn(k);
        file.write_all(t.as_bytes()).unwrap();
        bytes += t.len();
        k += 1;
    }
    file.flush().unwrap();
    (k as u64, bytes)
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}
