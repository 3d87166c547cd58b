//! Reading the end of an append-only log (ops.jsonl, tool_use.jsonl, a CLI's transcript):
//! bounded, from the first complete line on, bad lines skipped.

use std::path::Path;

use serde_json::Value;

use super::bounded::{self, Links};

/// How much of the end of a log or transcript is read.
pub const TAIL_BYTES: u64 = 512 * 1024;

/// The end of a file, from the first complete line on; `None` unless it is a regular file.
pub fn tail(path: &Path, bytes: u64) -> Option<String> {
    bounded::read_tail(path, bytes, Links::Follow)
        .ok()
        .map(|t| t.lines_text())
}

/// The JSON lines at the end of a file (its last [`TAIL_BYTES`]); lines that do not parse
/// are skipped.
pub fn tail_jsonl(path: &Path) -> Vec<Value> {
    objects(&tail(path, TAIL_BYTES).unwrap_or_default())
}

/// The JSON objects among `text`'s lines.
pub fn objects(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

/// The last `n` parseable lines of a JSON-lines file of phoenix's own, reading only its last
/// 16 KiB and never through a link: cheap enough for a hook.
pub fn last(path: &Path, n: usize) -> Vec<Value> {
    let Ok(tail) = bounded::read_tail(path, 16 * 1024, Links::Refuse) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&tail.bytes);
    let mut lines: Vec<Value> = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str(l).ok())
        .take(n)
        .collect();
    lines.reverse();
    lines
}
