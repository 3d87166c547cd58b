//! What the agent's pane showed, kept in its state dir for `phoenix logs`: `pane.log`, one
//! line per line of output, each with the time it was read, and `pane.log.1`, the file before
//! it. The tap that reads the pane for markers (`continuity::tap::read`) writes it as the
//! output comes (no wakeup of its own), so it outlives the pane, the wrapper and `phoenix down`.
//!
//! - **Bounded.** Past [`MAX_BYTES`] the file becomes `pane.log.1` (replacing the one before)
//!   and a new one starts: at most twice that per agent. A line longer than [`MAX_LINE`] is cut.
//! - **Text, not a terminal.** Escape sequences (colour, cursor moves, titles, the clipboard)
//!   and the other control characters are dropped as the output is written; a carriage return
//!   that redraws a line (a progress bar) keeps what was drawn last. What is left is printed
//!   through the CLI's writer, which shows anything a terminal could still act on inert.
//! - **Runs.** The wrapper marks where each run of the CLI begins ([`mark_run`]) with a line
//!   no output can hold (it starts with a control character the writer drops): what
//!   `logs --previous` splits on.
//! - **Private.** Files 0600, never opened through a link (`state::file`).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use super::AgentDir;
use super::bounded::{self, Links};

pub const PANE_LOG: &str = "pane.log";
pub const PANE_LOG_PREVIOUS: &str = "pane.log.1";
/// A log file is rotated past this size.
pub const MAX_BYTES: u64 = 4 << 20;
/// A line of output is kept up to this many bytes.
pub const MAX_LINE: usize = 4096;
/// What a run mark starts with, after the time: a control character the writer never
/// writes, so no output can pass for one.
const RUN_MARK: char = '\u{1e}';

/// Writes the pane's output as it is read (see the module's doc).
pub struct Writer {
    path: PathBuf,
    previous: PathBuf,
    file: Option<File>,
    line: Vec<u8>,
    escapes: crate::text::EscapeFilter,
    after_cr: bool,
    pending: Vec<u8>,
}

impl Writer {
    pub fn new(dir: &AgentDir) -> Writer {
        Writer {
            path: dir.file(PANE_LOG),
            previous: dir.file(PANE_LOG_PREVIOUS),
            file: None,
            line: Vec::new(),
            escapes: Default::default(),
            after_cr: false,
            pending: Vec::new(),
        }
    }

    /// Take `chunk` of the pane's output: its complete lines are written at once, in one
    /// write, with the time they were read.
    pub fn feed(&mut self, chunk: &[u8]) {
        let stamp = super::now_rfc3339();
        for &b in chunk {
            let Some(b) = self.strip(b) else { continue };
            match b {
                b'\n' => {
                    self.after_cr = false;
                    self.end_line(&stamp);
                }
                b'\r' => self.after_cr = true,
                _ => {
                    if std::mem::take(&mut self.after_cr) {
                        // The line is drawn again: what is drawn last is what it showed.
                        self.line.clear();
                    }
                    if self.line.len() < MAX_LINE {
                        self.line.push(b);
                    }
                }
            }
        }
        self.flush();
    }

    /// The output ended: its last line, if it had no newline, is written too.
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            self.end_line(&super::now_rfc3339());
            self.flush();
        }
    }

    fn end_line(&mut self, stamp: &str) {
        let line = std::mem::take(&mut self.line);
        let text = crate::text::cut_utf8(&line);
        self.pending.extend_from_slice(stamp.as_bytes());
        self.pending.push(b' ');
        self.pending.extend_from_slice(text.trim_end().as_bytes());
        self.pending.push(b'\n');
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if self.file.is_none() {
            self.file = super::file::open_append(&self.path).ok().map(|(f, _)| f);
        }
        let Some(file) = &mut self.file else {
            // Cannot be written (a full disk, a dir gone): this output is not kept.
            self.pending.clear();
            return;
        };
        if file.write_all(&self.pending).is_err() {
            self.file = None;
        } else if file.metadata().is_ok_and(|m| m.len() >= MAX_BYTES) {
            // Rename replaces whatever is at `.1` (a link too), never follows it.
            let _ = std::fs::rename(&self.path, &self.previous);
            self.file = None;
        }
        self.pending.clear();
    }

    /// Drop escape sequences and control characters, one byte at a time (a sequence may span
    /// chunks); keeps tabs, newlines and carriage returns. DEL too is dropped here.
    fn strip(&mut self, b: u8) -> Option<u8> {
        self.escapes.feed(b).filter(|&b| b != 0x7f)
    }
}

/// Note in the agent's log that a run of its CLI starts now (`what`: how, e.g. `fresh`).
pub fn mark_run(dir: &AgentDir, what: &str) {
    let what: String = what.chars().filter(|c| !c.is_control()).collect();
    let line = format!("{} {RUN_MARK}start {what}\n", super::now_rfc3339());
    let _ = super::file::append(&dir.file(PANE_LOG), line.as_bytes());
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A line of output, and when it was read.
    Output { ts: jiff::Timestamp, text: String },
    /// A run of the CLI started.
    RunStart { ts: jiff::Timestamp, what: String },
}

impl Entry {
    pub fn ts(&self) -> jiff::Timestamp {
        match self {
            Entry::Output { ts, .. } | Entry::RunStart { ts, .. } => *ts,
        }
    }
}

/// The log's lines, oldest first: the rotated file's, then the current one's (each read
/// bounded, never through a link).
pub fn read(dir: &AgentDir) -> Vec<Entry> {
    let mut entries = Vec::new();
    for name in [PANE_LOG_PREVIOUS, PANE_LOG] {
        if let Ok(tail) = bounded::read_tail(&dir.file(name), MAX_BYTES * 2, Links::Refuse) {
            entries.extend(parse(&tail.lines_text()));
        }
    }
    entries
}

/// The entries among `text`'s lines (a line that is not one is skipped).
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Entry> {
    let (ts, rest) = line.split_once(' ')?;
    let ts: jiff::Timestamp = ts.parse().ok()?;
    Some(match rest.strip_prefix(RUN_MARK) {
        Some(mark) => Entry::RunStart {
            ts,
            what: mark
                .strip_prefix("start")
                .unwrap_or(mark)
                .trim()
                .to_string(),
        },
        None => Entry::Output {
            ts,
            text: rest.to_string(),
        },
    })
}

/// The entries of the run before the last one started (`None` when the log holds no run
/// before it): between the last two run marks, or before the only one.
pub fn previous_run(entries: &[Entry]) -> Option<&[Entry]> {
    let starts: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Entry::RunStart { .. }))
        .map(|(i, _)| i)
        .collect();
    let (from, to) = match starts.as_slice() {
        [] => return None,
        [only] => (0, *only),
        [.., before, last] => (*before, *last),
    };
    let run = &entries[from..to];
    run.iter()
        .any(|e| matches!(e, Entry::Output { .. }))
        .then_some(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn outputs(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .filter_map(|e| match e {
                Entry::Output { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn output_is_kept_as_text_lines_without_escapes() {
        let (_tmp, fleet) = super::super::testing::temp_fleet();
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let mut w = Writer::new(&dir);
        w.feed(b"\x1b[32mgreen\x1b[0m line\r\nprogress 10%\rprogress 10");
        w.feed(b"0%\n\x1b]52;c;cm0gLXJm\x07\x1b]0;ti");
        w.feed(b"tle\x1b\\after\x07bell\nhalf");
        w.finish();
        let entries = read(&dir);
        assert_eq!(
            outputs(&entries),
            ["green line", "progress 100%", "afterbell", "half"]
        );
        let mode = std::fs::metadata(dir.file(PANE_LOG))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_log_rotates_once_and_a_line_is_cut() {
        let (_tmp, fleet) = super::super::testing::temp_fleet();
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let mut w = Writer::new(&dir);
        let long = vec![b'x'; MAX_LINE * 3];
        let mut chunk = long.clone();
        chunk.push(b'\n');
        for _ in 0..(3 * MAX_BYTES as usize / MAX_LINE) {
            w.feed(&chunk);
        }
        let size = |n| std::fs::metadata(dir.file(n)).map(|m| m.len()).unwrap_or(0);
        assert!(size(PANE_LOG) < MAX_BYTES, "{}", size(PANE_LOG));
        assert!(size(PANE_LOG_PREVIOUS) >= MAX_BYTES);
        assert!(size(PANE_LOG_PREVIOUS) < MAX_BYTES + 2 * MAX_LINE as u64);
        let entries = read(&dir);
        assert!(outputs(&entries).iter().all(|l| l.len() == MAX_LINE));
    }

    #[test]
    fn a_link_in_place_of_the_log_is_not_written_through() {
        let (tmp, fleet) = super::super::testing::temp_fleet();
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "mine\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.file(PANE_LOG)).unwrap();
        let mut w = Writer::new(&dir);
        w.feed(b"hello\n");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine\n");
        assert_eq!(outputs(&read(&dir)), ["hello"]);
    }

    #[test]
    fn the_previous_run_is_between_the_last_two_marks_and_no_output_forges_one() {
        let (_tmp, fleet) = super::super::testing::temp_fleet();
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let mut w = Writer::new(&dir);
        mark_run(&dir, "fresh");
        w.feed(b"one\n\x1e start forged\n");
        mark_run(&dir, "resume");
        w.feed(b"two\n");
        let entries = read(&dir);
        let previous = previous_run(&entries).unwrap();
        assert_eq!(outputs(previous), ["one", " start forged"]);
        mark_run(&dir, "resume");
        let entries = read(&dir);
        assert_eq!(outputs(previous_run(&entries).unwrap()), ["two"]);
    }
}
