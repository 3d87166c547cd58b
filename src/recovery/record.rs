//! The recovery pipeline's durable memory in the agent's state dir: the restart ledger
//! (`restarts.json`: crashes, quarantine, the Clinic's recoveries, the watchdog's revivals,
//! the daemon's starts, discarded sessions), crash records with evidence (`crashes/`), the
//! recorded session id and stop requests. Kept on disk so a daemon or wrapper restart does
//! not forget a crash loop.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decide::{EndReason, Start, StopRequest};
use crate::state::{self, AgentDir};

/// The per-agent restart ledger: every count that stops an agent for a person.
pub const LEDGER: &str = "restarts.json";
/// The counter files the ledger replaces, read once to fill a new ledger (an upgrade does not
/// reset the budgets): the crash history and quarantine, the Clinic's recoveries, and the
/// watchdog's memory (its revivals).
pub const OLD_CRASHES: &str = "crashes.json";
pub const OLD_RECOVERIES: &str = "clinic.json";
pub const OLD_WATCHDOG: &str = "watchdog.json";
pub const CRASH_DIR: &str = "crashes";
pub const STOP_REQUEST: &str = "stop_request.json";
pub const SESSION_ID: &str = "session_id";
/// Crash records kept per agent; older ones are removed.
const KEEP_CRASH_RECORDS: usize = 20;
/// Entries kept in `crashes.json`, whatever the window.
const KEEP_CRASHES: usize = 100;
/// Discarded session ids remembered, so a stale id in state.json is never resumed again.
const KEEP_DISCARDED: usize = 20;
/// A stop request older than this was not for the run that is ending now.
const STOP_REQUEST_TTL_SECS: i64 = 120;

/// The per-agent restart ledger: each count with its own limit (`max_crashes` in the crash
/// window, `[clinic] max_recoveries` and `[watchdog] max_revivals` per task, the daemon's
/// starts per minute), one file, one lock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub crashes: Vec<CrashEntry>,
    /// Set while the agent is quarantined in safe mode (crash loop, the Clinic, the watchdog).
    #[serde(default)]
    pub safe_mode: Option<Quarantine>,
    /// Session ids that must not be resumed (failed resumes, fresh restarts).
    #[serde(default)]
    pub discarded_sessions: Vec<String>,
    /// The Clinic's recoveries spent on the current task.
    #[serde(default)]
    pub recoveries: crate::clinic::Counter,
    /// The watchdog's revivals spent on the current task.
    #[serde(default)]
    pub revivals: Revivals,
    /// When the daemon started the agent (seconds since the epoch), for its start-rate guard.
    #[serde(default)]
    pub starts: Vec<i64>,
    /// When a run that did work (a finished turn, a tool call) last ended (seconds since the
    /// epoch): the restart backoff counts only the crashes after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_work: Option<i64>,
}

/// Revivals the watchdog spent on one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Revivals {
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub count: u32,
}

impl Revivals {
    /// Spent on `task`: a new task starts from zero.
    pub fn for_task(&self, task: Option<&str>) -> u32 {
        if self.task.as_deref() == task {
            self.count
        } else {
            0
        }
    }

    pub fn spend(&mut self, task: Option<&str>) {
        self.count = self.for_task(task) + 1;
        self.task = task.map(str::to_string);
    }
}

/// The watchdog's memory as it was before the ledger: only its revivals are read.
#[derive(Debug, Default, Deserialize)]
struct OldWatchdogMemory {
    #[serde(default)]
    revival_task: Option<String>,
    #[serde(default)]
    revivals: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrashEntry {
    /// Seconds since the epoch.
    pub ts: i64,
    pub reason: EndReason,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub mode: Start,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quarantine {
    pub since: String,
    pub reason: String,
}

/// The evidence kept before any restart: how it ended and what the pane showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrashRecord {
    pub ts: String,
    pub agent: String,
    pub reason: EndReason,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub runtime_ms: u64,
    pub mode: Start,
    pub session_id: Option<String>,
    pub argv: Vec<String>,
    pub decision: String,
    /// The last lines of the pane (tmux capture-pane), if there was a pane to capture.
    pub pane_tail: Option<String>,
}

impl Ledger {
    pub fn recent_crash_times(&self) -> Vec<i64> {
        self.crashes.iter().map(|c| c.ts).collect()
    }

    pub fn is_discarded(&self, id: &str) -> bool {
        self.discarded_sessions.iter().any(|d| d == id)
    }

    pub fn discard_session(&mut self, id: &str) {
        if !self.is_discarded(id) {
            self.discarded_sessions.push(id.to_string());
        }
        let excess = self.discarded_sessions.len().saturating_sub(KEEP_DISCARDED);
        self.discarded_sessions.drain(..excess);
    }

    /// A person restarted the agent: every count that stops it for a person starts again
    /// (crashes, quarantine, the Clinic's recoveries, the watchdog's revivals, the daemon's
    /// starts). Discarded sessions stay discarded.
    pub fn reset(&mut self) {
        self.crashes.clear();
        self.safe_mode = None;
        self.recoveries = crate::clinic::Counter::default();
        self.revivals = Revivals::default();
        self.starts.clear();
    }

    /// The daemon is about to start the agent at `now`: false (and nothing noted) if it
    /// already started it `max` times within `window_secs`.
    pub fn note_start(&mut self, now: i64, window_secs: i64, max: usize) -> bool {
        self.starts.retain(|&t| now - t <= window_secs);
        if self.starts.len() >= max {
            return false;
        }
        self.starts.push(now);
        true
    }

    pub fn push_crash(&mut self, entry: CrashEntry, window_secs: i64) {
        let cutoff = entry.ts - window_secs;
        self.crashes.retain(|c| c.ts > cutoff);
        self.crashes.push(entry);
        let excess = self.crashes.len().saturating_sub(KEEP_CRASHES);
        self.crashes.drain(..excess);
    }
}

/// `restarts.json` as a `JsonFile`: atomic, locked, rolled back to its last good copy.
fn ledger_file(dir: &AgentDir) -> state::JsonFile<Ledger> {
    state::JsonFile::new(dir, LEDGER, "restarts").lock_file(".restarts.lock")
}

/// A ledger filled from the counter files an older phoenix wrote, for a state dir that has
/// none yet. `crashes.json` goes through its `JsonFile` (a corrupt one is rolled back to its
/// last good copy, so its quarantine is not lost); the others are plain reads, and whatever
/// does not parse counts as nothing spent.
fn from_old_files(dir: &AgentDir) -> Ledger {
    let mut ledger = state::JsonFile::<Ledger>::new(dir, OLD_CRASHES, "crashes")
        .lock_file(".crashes.lock")
        .load()
        .ok()
        .flatten()
        .unwrap_or_default();
    let read =
        |name: &str| state::file::read_bounded(&dir.file(name), state::file::STATE_FILE_LIMIT).ok();
    if let Some(counter) = read(OLD_RECOVERIES).and_then(|b| serde_json::from_slice(&b).ok()) {
        ledger.recoveries = counter;
    }
    if let Some(old) =
        read(OLD_WATCHDOG).and_then(|b| serde_json::from_slice::<OldWatchdogMemory>(&b).ok())
    {
        ledger.revivals = Revivals {
            task: old.revival_task,
            count: old.revivals,
        };
    }
    ledger
}

/// Read the restart ledger. Without one, what the old counter files say (written into the
/// ledger by the first update). A corrupt ledger is kept aside as
/// `restarts.json.corrupt-<time>` and rolled back to the last good copy (else empty), and
/// that is a critical event: losing it could let a quarantined crash loop restart.
pub fn load(dir: &AgentDir) -> Ledger {
    let file = ledger_file(dir);
    if !file.exists() {
        return from_old_files(dir);
    }
    file.load_or_default()
}

/// Read, change and write the restart ledger under its lock, atomically. The first update in
/// a state dir without a ledger starts from the old counter files (read once: from then on
/// the ledger exists).
pub fn update<T>(dir: &AgentDir, f: impl FnOnce(&mut Ledger) -> T) -> io::Result<T> {
    ledger_file(dir)
        .update(|slot| f(slot.get_or_insert_with(|| from_old_files(dir))))
        .map_err(io::Error::other)
}

/// Write a crash record to `crashes/<timestamp>.json` and drop the oldest beyond the limit.
pub fn write_crash_record(dir: &AgentDir, record: &CrashRecord) -> io::Result<PathBuf> {
    let crash_dir = dir.file(CRASH_DIR);
    state::create_private_dir(&crash_dir)?;
    let name = format!("{}.json", record.ts.replace(':', "-"));
    let path = crash_dir.join(name);
    let bytes = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    state::atomic_write(&path, &bytes)?;
    let mut files = crash_files(&crash_dir);
    let excess = files.len().saturating_sub(KEEP_CRASH_RECORDS);
    for old in files.drain(..excess) {
        let _ = fs::remove_file(old);
    }
    Ok(path)
}

fn crash_files(crash_dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(crash_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    // Names are RFC 3339 timestamps, so the name order is the time order.
    files.sort();
    files
}

/// The newest crash record, for `phoenix status AGENT`.
pub fn latest_crash(dir: &AgentDir) -> Option<CrashRecord> {
    let path = crash_files(&dir.file(CRASH_DIR)).pop()?;
    serde_json::from_slice(&state::file::read_bounded(&path, state::file::STATE_FILE_LIMIT).ok()?)
        .ok()
}

/// A session the agent's hooks recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedSession {
    pub id: String,
    /// The working directory the session started in, when the hook said.
    pub cwd: Option<PathBuf>,
}

/// The recorded session: `state.json` `session_id` (with `session_cwd` when present), else the
/// plain `session_id` file.
pub fn recorded_session(dir: &AgentDir) -> Option<RecordedSession> {
    let from_state = dir.peek_state().and_then(|s| {
        let id = s.session_id?.trim().to_string();
        let cwd = s.session_cwd.filter(|c| !c.is_empty()).map(PathBuf::from);
        (!id.is_empty()).then_some(RecordedSession { id, cwd })
    });
    from_state.or_else(|| {
        let id = read_session_file(dir).ok()?;
        let id = id.trim().to_string();
        (!id.is_empty()).then_some(RecordedSession { id, cwd: None })
    })
}

/// The plain `session_id` file: never through a link, a few bytes at most.
fn read_session_file(dir: &AgentDir) -> io::Result<String> {
    let bytes = state::file::read_bounded(&dir.file(SESSION_ID), 4096)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether a recorded session may be resumed by this agent in `workdir`.
pub fn resumable(session: &RecordedSession, record: &Ledger, workdir: &Path) -> bool {
    if record.is_discarded(&session.id) || !is_plain_id(&session.id) {
        return false;
    }
    match &session.cwd {
        None => true,
        Some(cwd) => same_dir(cwd, workdir),
    }
}

/// Did session `id` get as far as one turn? Its transcript says (the path its session-start
/// hook reported with that id): a session that never got a prompt has none, and its CLI
/// cannot resume it (Claude Code exits 1: "No conversation found"). Without a transcript to
/// look at, nothing says it is empty: `true`.
pub fn session_has_turn(dir: &AgentDir, id: &str) -> bool {
    transcript_turn(dir, id).unwrap_or(true)
}

/// Why session `id` is not resumed for want of a turn, as the `resume_skipped` op says it: a
/// transcript that is gone is not one "with no turn".
pub fn no_turn_why(dir: &AgentDir, id: &str) -> String {
    let path = dir
        .read_state()
        .ok()
        .filter(|s| s.session_id.as_deref() == Some(id))
        .and_then(|s| s.transcript_path);
    match path {
        Some(path) if !Path::new(&path).exists() => {
            format!("its transcript `{path}` is gone")
        }
        _ => "its transcript has no turn".to_string(),
    }
}

/// What the transcript of session `id` says about a turn; `None` when there is none to read.
fn transcript_turn(dir: &AgentDir, id: &str) -> Option<bool> {
    let state = dir.read_state().ok()?;
    match (&state.session_id, &state.transcript_path) {
        (Some(sid), Some(path)) if sid == id => {
            Some(crate::clinic::triage::transcript_has_turn(Path::new(path)))
        }
        _ => None,
    }
}

/// Did session `id` have a task: a prompt phoenix's hook saw in it (after a `session_start`
/// of that id in ops.jsonl), or a turn in its transcript? The prompt counts even when the
/// transcript lost it: Claude Code writes its transcript behind, and a kill -9 right after a
/// turn can leave none of it on disk.
pub fn session_had_task(dir: &AgentDir, id: &str) -> bool {
    let ops = state::op::tail(&dir.file(state::OPS_LOG));
    let mut current: Option<&str> = None;
    for op in &ops {
        match op.op {
            state::Op::SessionStart(_) => current = op.get("session_id").as_str(),
            state::Op::Prompt(_) if current == Some(id) => return true,
            _ => {}
        }
    }
    transcript_turn(dir, id) == Some(true)
}

/// Was a turn of session `id` open when it ended: a prompt after its last finished turn, a
/// turn that failed (nobody typed the next prompt), or a tool call the wrapper stopped at its
/// exit (`interrupted_tool.json`)? A session that waited idle at its prompt, its turn done,
/// has nothing to continue. Followed over every start of the id (a resumed session keeps
/// what its earlier runs left open until a turn of its own finishes).
pub fn turn_was_open(dir: &AgentDir, id: &str) -> bool {
    if dir.file(state::INTERRUPTED_TOOL).exists() {
        return true;
    }
    let ops = state::op::tail(&dir.file(state::OPS_LOG));
    let mut current: Option<&str> = None;
    let mut seen = false;
    let mut open = false;
    for op in &ops {
        match op.op {
            state::Op::SessionStart(_) => {
                current = op.get("session_id").as_str();
                seen |= current == Some(id);
            }
            _ if current != Some(id) => {}
            state::Op::Prompt(_) | state::Op::TurnFailed(_) => open = true,
            state::Op::TurnComplete(_) => open = false,
            _ => {}
        }
    }
    if seen {
        return open;
    }
    // The session began before the ops' tail (a long one): its state says how its last turn
    // stands. Unknown is open: a continue prompt too many beats a task left standing.
    match dir.read_state() {
        Ok(s) if s.session_id.as_deref() == Some(id) => {
            matches!(s.status, state::Status::Working | state::Status::Failed)
        }
        _ => true,
    }
}

pub fn same_dir(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    canon(a) == canon(b)
}

/// Session ids end up as one argument; refuse anything that could be read as an option.
fn is_plain_id(id: &str) -> bool {
    !id.starts_with('-')
        && id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

/// Forget the recorded session: remove the plain file and remember the id as discarded.
pub fn clear_session(dir: &AgentDir, id: &str) -> io::Result<()> {
    if read_session_file(dir).is_ok_and(|s| s.trim() == id) {
        let _ = fs::remove_file(dir.file(SESSION_ID));
    }
    update(dir, |r| r.discard_session(id))
}

pub(super) fn stop_file(dir: &AgentDir) -> state::JsonFile<StopRequest> {
    state::JsonFile::new(dir, STOP_REQUEST, "stop_request")
}

/// Take the pending stop request, if one was made recently.
pub fn take_stop_request(dir: &AgentDir) -> Option<StopRequest> {
    let file = stop_file(dir);
    if !file.exists() {
        return None;
    }
    let req = file.update(Option::take).ok()??;
    let age = jiff::Timestamp::now().as_second() - req.ts;
    (age <= STOP_REQUEST_TTL_SECS).then_some(req)
}

/// The last `agent_exit` in ops.jsonl (the wrapper's record, one per run): why the agent
/// last stopped.
pub fn last_exit(dir: &AgentDir) -> Option<Value> {
    // Its end only (one `agent_exit` per run), never through a link.
    let path = dir.file(state::OPS_LOG);
    let size = fs::symlink_metadata(&path).ok()?.len();
    let text = state::read_since(&path, size.saturating_sub(4 << 20));
    // From the end, line by line: the last exit is near it.
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<state::op::Line>(l).ok())
        .find(|o| matches!(o.op, state::Op::AgentExit(_)))
        .map(|o| o.to_value())
}

/// What `phoenix status AGENT` shows about supervision: why it last stopped, the crash count
/// in the window, quarantine, and the latest crash record with the pane's last lines.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub last_end: Option<Value>,
    pub crashes_in_window: usize,
    pub max_crashes: Option<u32>,
    pub safe_mode: Option<Quarantine>,
    pub latest_crash: Option<CrashRecord>,
}

pub fn summary(dir: &AgentDir, restart: Option<&crate::spec::RestartSettings>) -> Summary {
    let record = load(dir);
    let now = jiff::Timestamp::now().as_second();
    let window = restart
        .map(|r| r.crash_window.as_secs() as i64)
        .unwrap_or(i64::MAX);
    Summary {
        last_end: last_exit(dir),
        crashes_in_window: record
            .crashes
            .iter()
            .filter(|c| now.saturating_sub(c.ts) < window)
            .count(),
        max_crashes: restart.map(|r| r.max_crashes),
        safe_mode: record.safe_mode,
        latest_crash: latest_crash(dir),
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(end) = &self.last_end {
            let code = match (end["code"].as_i64(), end["signal"].as_i64()) {
                (_, Some(sig)) => format!(", signal {sig}"),
                (Some(code), None) => format!(", exit code {code}"),
                _ => String::new(),
            };
            writeln!(
                f,
                "last stop:    {}{code} at {} ({} run)",
                end["reason"].as_str().unwrap_or("?"),
                end["ts"].as_str().unwrap_or("?"),
                end["mode"].as_str().unwrap_or("?"),
            )?;
            // Why, in words: the one recorded explanation of this exit.
            if let Some(why) = end["explain"].as_str().filter(|w| !w.is_empty()) {
                writeln!(f, "why:          {why}")?;
            }
        }
        match self.max_crashes {
            Some(max) => writeln!(
                f,
                "crashes:      {} in the window (max {max})",
                self.crashes_in_window
            )?,
            None => writeln!(f, "crashes:      {}", self.crashes_in_window)?,
        }
        if let Some(q) = &self.safe_mode {
            writeln!(f, "safe mode:    since {}: {}", q.since, q.reason)?;
        }
        if let Some(c) = &self.latest_crash {
            let how = match (c.code, c.signal) {
                (_, Some(sig)) => format!("signal {sig}"),
                (Some(code), None) => format!("exit code {code}"),
                _ => "unknown exit".into(),
            };
            writeln!(
                f,
                "latest crash: {} {how} after {}ms ({}) — {}",
                c.ts,
                c.runtime_ms,
                c.mode.as_str(),
                c.decision
            )?;
            if let Some(tail) = &c.pane_tail {
                let lines: Vec<&str> = tail.lines().collect();
                for line in &lines[lines.len().saturating_sub(10)..] {
                    writeln!(f, "  | {line}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{FleetDir, Op};
    use serde_json::json;

    fn dir() -> (tempfile::TempDir, AgentDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        (tmp, dir)
    }

    #[test]
    fn crash_history_survives_on_disk_and_drops_old_entries() {
        let (_t, d) = dir();
        for ts in [100, 200, 5000] {
            update(&d, |r| {
                r.push_crash(
                    CrashEntry {
                        ts,
                        reason: EndReason::Crash,
                        code: Some(1),
                        signal: None,
                        mode: Start::Fresh,
                    },
                    3600,
                )
            })
            .unwrap();
        }
        assert_eq!(load(&d).recent_crash_times(), [5000]);
    }

    #[test]
    fn corrupt_crashes_json_is_kept_aside_and_reset() {
        let (_t, d) = dir();
        fs::write(d.file(LEDGER), b"{not json").unwrap();
        assert_eq!(load(&d), Ledger::default());
        let kept = fs::read_dir(&d.path)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("restarts.json.corrupt-")
            })
            .count();
        assert_eq!(kept, 1);
    }

    #[test]
    fn corrupt_crashes_json_keeps_its_quarantine_from_the_last_good_copy() {
        let (_t, d) = dir();
        update(&d, |r| {
            r.safe_mode = Some(Quarantine {
                since: "now".into(),
                reason: "crash loop".into(),
            })
        })
        .unwrap();
        fs::write(d.file(LEDGER), b"{\"crashes\": [").unwrap();
        assert_eq!(load(&d).safe_mode.unwrap().reason, "crash loop");
        // Repaired on disk, and a person is told.
        assert_eq!(load(&d).safe_mode.unwrap().reason, "crash loop");
        let events =
            fs::read_to_string(crate::state::FleetDir::new(d.fleet_root()).critical_events_path())
                .unwrap();
        assert!(events.contains("restarts_corrupt"), "{events}");
        assert!(events.contains("rolled back"), "{events}");
    }

    #[test]
    fn session_comes_from_state_json_then_the_plain_file() {
        let (_t, d) = dir();
        assert_eq!(recorded_session(&d), None);
        fs::write(d.file(SESSION_ID), "abc\n").unwrap();
        assert_eq!(recorded_session(&d).unwrap().id, "abc");
        fs::write(
            d.file("state.json"),
            r#"{"session_id": "xyz", "session_cwd": "/w"}"#,
        )
        .unwrap();
        let s = recorded_session(&d).unwrap();
        assert_eq!(s.id, "xyz");
        assert_eq!(s.cwd.as_deref(), Some(Path::new("/w")));
    }

    #[test]
    fn discarded_or_foreign_sessions_are_not_resumed() {
        let (_t, d) = dir();
        let mut record = Ledger::default();
        let s = RecordedSession {
            id: "abc".into(),
            cwd: Some("/elsewhere".into()),
        };
        assert!(!resumable(&s, &record, Path::new("/work")));
        let s = RecordedSession {
            id: "abc".into(),
            cwd: None,
        };
        assert!(resumable(&s, &record, Path::new("/work")));
        record.discard_session("abc");
        assert!(!resumable(&s, &record, Path::new("/work")));
        let s = RecordedSession {
            id: "--dangerous".into(),
            cwd: None,
        };
        assert!(!resumable(&s, &Ledger::default(), Path::new("/")));
        clear_session(&d, "abc").unwrap();
        assert!(load(&d).is_discarded("abc"));
    }

    #[test]
    fn a_session_whose_transcript_has_no_turn_has_none() {
        let (_t, d) = dir();
        let transcript = d.file("t.jsonl");
        let state = format!(
            r#"{{"agent": "a", "session_id": "s1", "transcript_path": "{}"}}"#,
            transcript.display()
        );
        fs::write(d.file("state.json"), state).unwrap();
        // Never written (or deleted): nothing to resume, and the op says which it is.
        assert!(!session_has_turn(&d, "s1"));
        assert_eq!(
            no_turn_why(&d, "s1"),
            format!("its transcript `{}` is gone", transcript.display())
        );
        fs::write(&transcript, "").unwrap();
        assert!(!session_has_turn(&d, "s1"));
        assert_eq!(no_turn_why(&d, "s1"), "its transcript has no turn");
        fs::write(
            &transcript,
            "{\"type\": \"file-history-snapshot\"}\n{\"type\": \"user\", \"isMeta\": true, \"message\": {\"content\": \"x\"}}\n",
        )
        .unwrap();
        assert!(!session_has_turn(&d, "s1"));
        fs::write(
            &transcript,
            "{\"type\": \"user\", \"message\": {\"role\": \"user\", \"content\": \"fix it\"}}\n",
        )
        .unwrap();
        assert!(session_has_turn(&d, "s1"));
        // A format it does not know, another session's id, no state: it cannot tell.
        fs::write(&transcript, "{\n  \"messages\": []\n}\n").unwrap();
        assert!(session_has_turn(&d, "s1"));
        assert!(session_has_turn(&d, "s2"));
        fs::remove_file(d.file("state.json")).unwrap();
        assert!(session_has_turn(&d, "s1"));
    }

    #[test]
    fn a_session_had_a_task_if_a_prompt_came_in_it_whatever_its_transcript() {
        let (_t, d) = dir();
        fs::write(
            d.file("state.json"),
            format!(
                r#"{{"agent": "a", "session_id": "s2", "transcript_path": "{}"}}"#,
                d.file("none.jsonl").display()
            ),
        )
        .unwrap();
        assert!(!session_had_task(&d, "s2"));
        d.record_op(Op::SessionStart, json!({"session_id": "s1"}))
            .unwrap();
        d.record_op(Op::Prompt, json!({"chars": 3})).unwrap();
        d.record_op(Op::SessionStart, json!({"session_id": "s2"}))
            .unwrap();
        // The prompt was in s1, not in s2 (whose transcript is not there either).
        assert!(session_had_task(&d, "s1"));
        assert!(!session_had_task(&d, "s2"));
        d.record_op(Op::Prompt, json!({"chars": 3})).unwrap();
        assert!(session_had_task(&d, "s2"));
    }

    #[test]
    fn a_turn_was_open_from_its_prompt_until_it_finished_over_every_start_of_the_session() {
        let (_t, d) = dir();
        let op = |op, f| d.record_op(op, f).unwrap();
        op(Op::SessionStart, json!({"session_id": "s1"}));
        assert!(!turn_was_open(&d, "s1"), "no prompt yet");
        op(Op::Prompt, json!({"chars": 3}));
        assert!(turn_was_open(&d, "s1"), "killed mid-turn");
        op(Op::TurnComplete, json!({}));
        assert!(
            !turn_was_open(&d, "s1"),
            "idle at its prompt: nothing to continue"
        );
        op(Op::Prompt, json!({"chars": 3}));
        op(Op::TurnFailed, json!({"error": "prompt_too_long"}));
        assert!(turn_was_open(&d, "s1"), "a failed turn waits for nobody");
        // Resumed, killed before a turn of its own: what was open stays open.
        op(
            Op::SessionStart,
            json!({"session_id": "s1", "source": "resume"}),
        );
        assert!(turn_was_open(&d, "s1"));
        assert!(
            turn_was_open(&d, "s2"),
            "another session, begun before the ops' tail, with no state: open"
        );
        op(Op::Prompt, json!({"chars": 3}));
        op(Op::TurnComplete, json!({}));
        assert!(!turn_was_open(&d, "s1"));
        // A tool call the wrapper stopped at the exit settles it.
        fs::write(d.file(state::INTERRUPTED_TOOL), r#"{"tool":"Bash"}"#).unwrap();
        assert!(turn_was_open(&d, "s1"));
    }

    #[test]
    fn stop_requests_are_taken_once() {
        let (_t, d) = dir();
        super::super::execute::request_stop(&d, EndReason::OperatorRestart, true).unwrap();
        let req = take_stop_request(&d).unwrap();
        assert_eq!(req.reason, EndReason::OperatorRestart);
        // The fresh start travels one way: the marker.
        assert!(d.has_marker(crate::state::FRESH));
        assert_eq!(take_stop_request(&d), None);
    }

    #[test]
    fn only_the_newest_crash_records_are_kept() {
        let (_t, d) = dir();
        for i in 0..(KEEP_CRASH_RECORDS + 3) {
            let rec = CrashRecord {
                ts: format!("2026-01-01T00:00:{i:02}Z"),
                agent: "a".into(),
                reason: EndReason::Crash,
                code: Some(1),
                signal: None,
                runtime_ms: 1,
                mode: Start::Fresh,
                session_id: None,
                argv: vec![],
                decision: String::new(),
                pane_tail: None,
            };
            write_crash_record(&d, &rec).unwrap();
        }
        assert_eq!(crash_files(&d.file(CRASH_DIR)).len(), KEEP_CRASH_RECORDS);
        let latest = latest_crash(&d).unwrap();
        assert_eq!(
            latest.ts,
            format!("2026-01-01T00:00:{:02}Z", KEEP_CRASH_RECORDS + 2)
        );
    }

    /// An upgrade keeps the budgets: a state dir an older phoenix left (crash history and
    /// quarantine in crashes.json, recoveries in clinic.json, revivals in watchdog.json) is
    /// read into the ledger once; from then on the ledger alone counts.
    #[test]
    fn the_old_counter_files_are_read_once_into_the_ledger() {
        let (_t, d) = dir();
        fs::write(
            d.file(OLD_CRASHES),
            r#"{"crashes": [{"ts": 5000, "reason": "crash", "code": 1, "signal": null, "mode": "resume"}],
                "safe_mode": {"since": "then", "reason": "crash loop"}, "discarded_sessions": ["old"]}"#,
        )
        .unwrap();
        fs::write(
            d.file(OLD_RECOVERIES),
            r#"{"task": "fix it", "recoveries": 2, "updated": "2026-01-01T00:00:00Z", "history": []}"#,
        )
        .unwrap();
        fs::write(
            d.file(OLD_WATCHDOG),
            r#"{"revival_task": "fix it", "revivals": 1, "tool_count": 7}"#,
        )
        .unwrap();
        let seen = load(&d);
        assert_eq!(seen.recent_crash_times(), [5000]);
        assert_eq!(seen.safe_mode.as_ref().unwrap().reason, "crash loop");
        assert!(seen.is_discarded("old"));
        assert_eq!(seen.recoveries.recoveries, 2);
        assert_eq!(seen.revivals.for_task(Some("fix it")), 1);
        assert_eq!(seen.revivals.for_task(Some("another task")), 0);
        // Reading writes nothing; the first update writes the ledger with all of it.
        assert!(!d.file(LEDGER).exists());
        update(&d, |l| l.revivals.spend(Some("fix it"))).unwrap();
        assert_eq!(load(&d).revivals.for_task(Some("fix it")), 2);
        assert_eq!(load(&d).recoveries.recoveries, 2);
        // The old files are not read again.
        fs::write(
            d.file(OLD_RECOVERIES),
            r#"{"task": "fix it", "recoveries": 9}"#,
        )
        .unwrap();
        assert_eq!(load(&d).recoveries.recoveries, 2);
        // A person's restart resets every count, and keeps discarded sessions discarded.
        update(&d, |l| l.reset()).unwrap();
        let reset = load(&d);
        assert_eq!(
            (
                reset.crashes.len(),
                reset.recoveries.recoveries,
                reset.revivals.count
            ),
            (0, 0, 0)
        );
        assert!(reset.safe_mode.is_none() && reset.is_discarded("old"));
    }

    /// The daemon's start-rate guard is in the ledger: a new daemon sees the starts an
    /// earlier one made within the window.
    #[test]
    fn starts_are_limited_per_window_and_survive_on_disk() {
        let (_t, d) = dir();
        for i in 0..5 {
            assert!(update(&d, |l| l.note_start(1000 + i, 60, 5)).unwrap());
        }
        assert!(!update(&d, |l| l.note_start(1010, 60, 5)).unwrap());
        assert_eq!(load(&d).starts.len(), 5);
        // Out of the window again.
        assert!(update(&d, |l| l.note_start(1070, 60, 5)).unwrap());
    }
}
