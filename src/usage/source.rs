//! Reading a file that only grows, one byte once: its identity (device, inode) and how far it
//! was read are kept, each pass reads the whole lines written since, and a partial last line
//! is left for the next pass. Another file at the path (rotated) or the same one cut short
//! (truncated) is read again from its start. Only regular files are opened (`bounded`), and a
//! pass reads at most a byte budget, so a FIFO, `/dev/zero` or a runaway file cannot hang or
//! exhaust it.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent_cli::usage::{self as records, Record, Tokens};
use crate::state::bounded::{self, Links, ReadError};

/// A line longer than this is skipped unread (a tool result with an image, not usage).
pub const MAX_LINE: usize = 32 << 20;
/// Bytes read from the file at a time.
const CHUNK: usize = 4 << 20;
/// Responses remembered per file by id: the CLIs repeat a response within its turn.
const RECENT_IDS: usize = 16;
/// The model of tokens whose record names none.
pub const UNKNOWN_MODEL: &str = "unknown";

/// Where a file was read up to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cursor {
    pub dev: u64,
    pub ino: u64,
    /// The byte after the last whole line read.
    pub offset: u64,
}

/// What reading the new part of a file found.
#[derive(Debug, Default)]
pub struct Lines {
    /// The file was another one, or shorter, than the cursor said: read from its start.
    pub restarted: bool,
    /// Lines longer than `MAX_LINE`, skipped.
    pub skipped: usize,
    /// Records of more tokens than one model call uses (`MAX_PER_CALL`), not counted.
    pub absurd: usize,
}

/// Tokens of one kind a single response may have at most.
pub use crate::agent_cli::usage::MAX_PER_CALL;

/// Call `each` with every whole line written after `cursor`, at most `budget` bytes of the
/// file, and move the cursor past them. `links`: a file of phoenix's own state dir is never
/// read through a link, a CLI's is.
pub fn read_lines(
    path: &Path,
    cursor: &mut Cursor,
    budget: u64,
    links: Links,
    mut each: impl FnMut(&str),
) -> Result<Lines, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Nothing new (the usual case, for every file followed, on every pass): one stat.
    let stat = match links {
        Links::Follow => std::fs::metadata(path),
        Links::Refuse => std::fs::symlink_metadata(path),
    };
    if let Ok(meta) = stat
        && meta.is_file()
        && (meta.dev(), meta.ino(), meta.len()) == (cursor.dev, cursor.ino, cursor.offset)
    {
        return Ok(Lines::default());
    }
    let (mut file, meta) = bounded::open_regular(path, links)?;
    let mut found = Lines::default();
    if (meta.dev(), meta.ino()) != (cursor.dev, cursor.ino) || meta.len() < cursor.offset {
        found.restarted = cursor.offset > 0 || cursor.ino != 0;
        *cursor = Cursor {
            dev: meta.dev(),
            ino: meta.ino(),
            offset: 0,
        };
    }
    // What the file holds now: bytes written while it is read wait for the next pass.
    let end = meta.len().min(cursor.offset.saturating_add(budget));
    if end <= cursor.offset {
        return Ok(found);
    }
    file.seek(SeekFrom::Start(cursor.offset)).map_err(io)?;
    let mut reader = file.take(end - cursor.offset);
    // No larger than what is to be read: a few kilobytes for a turn (a 4 MiB buffer zeroed
    // and faulted in on every update cost more than the rest of it).
    let mut buf = vec![0u8; (end - cursor.offset).min(CHUNK as u64) as usize];
    // The line being read, from `line_start` on; `skipping`: it is too long to keep.
    let mut line: Vec<u8> = Vec::new();
    let mut line_start = cursor.offset;
    let mut skipping = false;
    let mut at = cursor.offset;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        let mut rest = &buf[..n];
        while let Some(k) = memchr(b'\n', rest) {
            if !skipping {
                line.extend_from_slice(&rest[..k]);
                if line.len() > MAX_LINE {
                    found.skipped += 1;
                } else {
                    each(&String::from_utf8_lossy(&line));
                }
            }
            line.clear();
            skipping = false;
            at += k as u64 + 1;
            line_start = at;
            rest = &rest[k + 1..];
        }
        at += rest.len() as u64;
        if !skipping {
            line.extend_from_slice(rest);
            if line.len() > MAX_LINE {
                skipping = true;
                found.skipped += 1;
                line = Vec::new();
            }
        }
    }
    // A partial last line waits for its end; a too long one is left behind once it ended.
    cursor.offset = line_start;
    Ok(found)
}

fn memchr(byte: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == byte)
}

/// What a file holds: a CLI's session record, or the usage an agent reported itself
/// (`usage_reported.jsonl`, written by the output tap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    #[default]
    Session,
    Reported,
}

/// One file the usage comes from, and what reading it so far left to remember.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Source {
    pub path: String,
    pub kind: Kind,
    pub cursor: Cursor,
    /// The running total counted so far (Codex): the next one adds its difference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<Tokens>,
    /// The model of the responses that follow (Codex's turn context).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The latest responses with an id, and what was counted for each.
    pub recent: Vec<(String, Tokens)>,
    /// Everything counted from this file since it started: its session's tokens.
    pub session: Tokens,
}

/// Tokens of one model at one time, new since the last pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// When the record says it was written (seconds since the epoch); `None`: it does not.
    pub at: Option<i64>,
    pub model: String,
    pub tokens: Tokens,
}

impl Source {
    pub fn new(path: &str, kind: Kind) -> Source {
        Source {
            path: path.to_string(),
            kind,
            ..Source::default()
        }
    }

    /// The usage written to the file since the last pass (at most `budget` bytes of it).
    pub fn read(&mut self, budget: u64) -> Result<(Vec<Entry>, Lines), ReadError> {
        let mut entries = Vec::new();
        let mut cursor = self.cursor.clone();
        let path = std::path::PathBuf::from(&self.path);
        let kind = self.kind;
        let mut records: Vec<Record> = Vec::new();
        let links = match kind {
            Kind::Session => Links::Follow,
            Kind::Reported => Links::Refuse,
        };
        let lines = read_lines(&path, &mut cursor, budget, links, |line| {
            if !records::may_hold_usage(line) && kind == Kind::Session {
                return;
            }
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                return;
            };
            let record = match kind {
                Kind::Session => records::record_in(&value),
                Kind::Reported => reported(&value),
            };
            records.extend(record);
        })?;
        if lines.restarted {
            // Its records start over; the ids seen stay, so a rewritten file does not count
            // the responses it repeats.
            self.total = None;
            self.model = None;
            self.session = Tokens::default();
        }
        self.cursor = cursor;
        let mut lines = lines;
        for record in records {
            // One call's usage past any model's: a forged or broken line, not a cost.
            if let Record::Response { tokens, .. } = &record
                && records::absurd(tokens).is_some()
            {
                lines.absurd += 1;
                continue;
            }
            if let Some(entry) = self.count(record) {
                self.session.add(&entry.tokens);
                entries.push(entry);
            }
        }
        Ok((entries, lines))
    }

    /// What one record adds to the count.
    fn count(&mut self, record: Record) -> Option<Entry> {
        let (at, model, tokens) = match record {
            Record::Model(m) => {
                self.model = Some(m);
                return None;
            }
            Record::Total { at, tokens } => {
                let new = match self.total {
                    Some(before) if !tokens.fell_from(&before) => tokens.beyond(&before),
                    // The first count of the file, or a total that started over.
                    _ => tokens,
                };
                self.total = Some(tokens);
                (at, None, new)
            }
            Record::Response {
                id,
                model,
                at,
                tokens,
            } => (at, model, self.new_in_response(id, tokens)),
        };
        let model = model
            .or_else(|| self.model.clone())
            .unwrap_or_else(|| UNKNOWN_MODEL.to_string());
        (!tokens.is_zero()).then(|| Entry {
            at: at.as_deref().and_then(seconds),
            model,
            tokens,
        })
    }

    /// A response seen before (same id) adds only what it reports beyond what was counted.
    fn new_in_response(&mut self, id: Option<String>, tokens: Tokens) -> Tokens {
        let Some(id) = id else {
            return tokens;
        };
        if let Some((_, counted)) = self.recent.iter_mut().find(|(i, _)| *i == id) {
            let more = tokens.max(counted).beyond(counted);
            *counted = counted.max(&tokens);
            return more;
        }
        self.recent.push((id, tokens));
        let over = self.recent.len().saturating_sub(RECENT_IDS);
        self.recent.drain(..over);
        tokens
    }
}

fn seconds(ts: &str) -> Option<i64> {
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// A line of `usage_reported.jsonl`: `{"ts", "model", "input", "output", "cache_write",
/// "cache_read"}`, as the output tap writes it.
fn reported(value: &Value) -> Option<Record> {
    let tokens: Tokens = serde_json::from_value(value.clone()).ok()?;
    (!tokens.is_zero()).then(|| Record::Response {
        id: None,
        model: records_text(value, "model"),
        at: records_text(value, "ts"),
        tokens,
    })
}

fn records_text(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The tokens a whole session file records, read from its start: what its session used.
pub fn tokens_in(path: &Path, budget: u64) -> Result<Option<u64>, ReadError> {
    let mut source = Source::new(&path.to_string_lossy(), Kind::Session);
    let (entries, _) = source.read(budget)?;
    Ok((!entries.is_empty()).then(|| source.session.total()))
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
