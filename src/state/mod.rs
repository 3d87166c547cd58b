//! The state directory: per-agent dirs, markers, append-only logs and atomic file writes.
//! `agent` models state.json; `store` reads and writes it safely.

pub mod agent;
pub mod applied;
pub mod bounded;
pub mod claim;
pub mod daemon;
pub mod doorbell;
pub mod down;
pub mod events;
pub mod fence;
pub mod file;
pub mod handoff;
pub mod inbox;
pub mod jsonl;
pub mod ledger;
pub mod lock;
pub mod op;
pub mod pane_log;
pub mod store;
#[cfg(test)]
pub mod testing;
pub mod tree_watch;

pub use agent::{AgentState, NeedsInput, OpenLoop, ResolvedItem, Retention, Status};
pub use file::{JsonFile, Loaded};
pub use op::Op;
pub use store::{BRIEF, HOOK_ERRORS, LAST_GOOD, RESOLVED_LOG, STATE, StateError, TOOL_USE};

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

/// Marker written by the wrapper when the agent exited cleanly; the reconciler leaves it alone.
pub const CLEAN_EXIT: &str = ".clean-exit";
/// Marker `phoenix stop` writes: the agent stays down through `apply` and the daemon until
/// `phoenix start` removes it (a state file, so it survives restarts of phoenix itself).
pub const STOPPED: &str = ".stopped";
/// Marker asking the next start to be fresh instead of resuming.
pub const FRESH: &str = ".fresh";
/// Marker the turn-failed hook leaves for the agent's wrapper: a turn ended in an API error
/// and nobody will type the next prompt, so the wrapper asks the watchdog's decision now.
pub const TURN_FAILED: &str = ".turn-failed";
/// Marker the notification hook leaves for the agent's wrapper: the CLI waits for a person
/// (a permission prompt), so the wrapper sends the "needs a human" notification now.
pub const NEEDS_INPUT: &str = ".needs-input";
/// The effective launch spec the running agent was started with (drift detection).
pub const STARTED_SPEC: &str = "started_spec.json";
pub const OPS_LOG: &str = "ops.jsonl";
/// The tool call the agent is running now (PreToolUse writes it, PostToolUse and Stop remove
/// it): the wrapper knows which call an exit interrupted.
pub const IN_FLIGHT: &str = "in_flight.json";
/// The tool call the last session was running when it ended, for the next session's startup
/// context to name; consumed by it.
pub const INTERRUPTED_TOOL: &str = "interrupted_tool.json";
pub const CRITICAL_EVENTS: &str = "critical_events.jsonl";
/// A brief.md larger than this is not read (a brief is a page or two).
const MAX_BRIEF_BYTES: u64 = 1024 * 1024;

/// The fleet-wide state directory (`.phoenix/` by default).
#[derive(Debug, Clone)]
pub struct FleetDir {
    pub root: PathBuf,
}

impl FleetDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FleetDir { root: root.into() }
    }

    pub fn agent(&self, name: &str) -> AgentDir {
        AgentDir {
            name: name.to_string(),
            path: self.root.join("agents").join(name),
        }
    }

    /// Create the state dir and its `agents/` dir, private to the user; refuse a state dir
    /// another user owns (it may be a link to one of the user's own dirs).
    pub fn ensure(&self) -> io::Result<()> {
        file::create_private_dir_checked(&self.root, true)?;
        create_private_dir(&self.root.join("agents"))
    }

    pub fn critical_events_path(&self) -> PathBuf {
        self.root.join(CRITICAL_EVENTS)
    }

    /// Names of agents that have a state dir, sorted.
    pub fn agent_names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.root.join("agents"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }
}

/// One agent's state directory.
#[derive(Debug, Clone)]
pub struct AgentDir {
    pub name: String,
    pub path: PathBuf,
}

impl AgentDir {
    pub fn exists(&self) -> bool {
        self.path.is_dir()
    }

    /// Make sure the dir exists and may be used: created when missing, else a real directory
    /// (not a link) owned by the running user in a state dir owned by them. Two stats when
    /// it exists (the hooks call this on every event).
    pub fn ensure_usable(&self) -> io::Result<()> {
        match self.check_usable() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.ensure(),
            other => other,
        }
    }

    /// `ensure_usable` without creating anything: the dir exists and may be written to.
    pub fn check_usable(&self) -> io::Result<()> {
        match fs::symlink_metadata(&self.path) {
            Err(e) => Err(e),
            Ok(meta) => {
                if !meta.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "`{}` is not a directory (a symbolic link?); phoenix does not follow links in its state dir",
                            self.path.display()
                        ),
                    ));
                }
                file::check_owner(&self.path, &meta)?;
                let root = self.fleet_root();
                file::check_owner(&root, &fs::metadata(&root)?)
            }
        }
    }

    /// Create the directory (and parents) with mode 0700.
    pub fn ensure(&self) -> io::Result<()> {
        if let Some(agents) = self.path.parent()
            && let Some(root) = agents.parent()
        {
            FleetDir::new(root).ensure()?;
        }
        create_private_dir(&self.path)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The agent's brief.md, if it has one that is a regular file of at most 1 MiB.
    pub fn brief(&self) -> Option<String> {
        bounded::read_string(&self.file(BRIEF), MAX_BRIEF_BYTES, bounded::Links::Refuse).ok()
    }

    pub fn has_marker(&self, marker: &str) -> bool {
        self.file(marker).exists()
    }

    /// The names in the dir, read once (none when it is not a readable dir): what a reader of
    /// many of its files asks first, so that a file that is not there costs no `stat` (issue
    /// 34: a plan of 1,000 agents made 7,013 for markers that did not exist).
    pub fn listing(&self) -> Option<Listing> {
        let entries = fs::read_dir(&self.path).ok()?;
        let mut names = std::collections::HashSet::new();
        for entry in entries {
            let Ok(entry) = entry else {
                return Some(Listing::unknown());
            };
            // A dir grown past any size phoenix makes: answer "maybe" rather than hold it all.
            if names.len() >= Listing::MAX_NAMES {
                return Some(Listing::unknown());
            }
            names.insert(entry.file_name());
        }
        Some(Listing {
            names,
            complete: true,
        })
    }

    /// `listing`, or one that answers "maybe" to every name when the dir cannot be listed
    /// (the reads then find out, as without a listing).
    pub fn listing_or_unknown(&self) -> Listing {
        self.listing().unwrap_or_else(Listing::unknown)
    }

    /// Leave `marker` and wake the agent's wrapper to look at it.
    pub fn set_marker(&self, marker: &str) -> io::Result<()> {
        atomic_write(
            &self.file(marker),
            jiff::Timestamp::now().to_string().as_bytes(),
        )?;
        doorbell::ring(self);
        Ok(())
    }

    pub fn clear_marker(&self, marker: &str) -> io::Result<()> {
        match fs::remove_file(self.file(marker)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Append one event to `ops.jsonl`: `{"ts", "agent", "event", …fields}`, as in
    /// `dir.record_op(Op::AgentAlive, json!({"pid": pid}))`. Fields that are not an object
    /// (`Value::Null`) add nothing.
    pub fn record_op(&self, op: op::Make, fields: Value) -> io::Result<()> {
        self.record(op(match fields {
            Value::Object(map) => map,
            _ => Map::new(),
        }))
    }

    /// Append one op, built already, to `ops.jsonl`.
    pub fn record(&self, op: Op) -> io::Result<()> {
        let line = op::Line {
            ts: Some(now_rfc3339()),
            agent: Some(self.name.clone()),
            op,
        };
        append_jsonl(&self.file(OPS_LOG), &line)
    }

    /// Modification time of the most recently touched activity file, if any.
    pub fn last_activity(&self) -> Option<jiff::Timestamp> {
        self.last_activity_among(None)
    }

    /// `last_activity`, with a `stat` only of the files `listing` may have.
    pub fn last_activity_among(&self, listing: Option<&Listing>) -> Option<jiff::Timestamp> {
        ["state.json", "tool_use.jsonl", OPS_LOG]
            .iter()
            .filter(|f| listing.is_none_or(|l| l.may_have(f)))
            .filter_map(|f| fs::metadata(self.file(f)).ok()?.modified().ok())
            .max()
            .and_then(|t| jiff::Timestamp::try_from(t).ok())
    }
}

/// What `AgentDir::listing` found: whether a name may be there. "May": a listing that could
/// not be read whole answers yes to everything, and the caller's own read decides.
#[derive(Debug)]
pub struct Listing {
    names: std::collections::HashSet<std::ffi::OsString>,
    complete: bool,
}

impl Listing {
    const MAX_NAMES: usize = 4096;

    fn unknown() -> Self {
        Listing {
            names: Default::default(),
            complete: false,
        }
    }

    pub fn may_have(&self, name: &str) -> bool {
        !self.complete || self.names.contains(std::ffi::OsStr::new(name))
    }
}

pub fn now_rfc3339() -> String {
    rfc3339(jiff::Timestamp::now())
}

/// RFC 3339 in UTC with millisecond precision, the form of every timestamp phoenix writes.
pub fn rfc3339(ts: jiff::Timestamp) -> String {
    ts.round(jiff::Unit::Millisecond).unwrap_or(ts).to_string()
}

/// Create a directory in the state dir (and missing parents) mode 0700: the one way phoenix
/// creates one. A link or a dir of another user is refused.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    file::create_private_dir_checked(path, false)
}

/// Append one JSON value as a line. A single `write` on an `O_APPEND` file keeps
/// concurrent writers from interleaving inside a line. Never through a link (see `file`).
pub fn append_jsonl<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    line.push(b'\n');
    file::append(path, &line)
}

/// A stable 64-bit FNV-1a digest of `bytes`, as 16 hex digits: fingerprints, snapshot keys,
/// tool-call and screen digests. Stable across builds and Rust versions (std's hasher is not).
pub fn digest(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// What an append-only file gained after byte `offset` (empty if it cannot be read).
pub fn read_since(path: &Path, offset: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    if let Ok(mut f) = file::open_read(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_string(&mut text);
    }
    text
}

/// Write a file atomically and durably: temp file in the same dir, fsync, rename, fsync the
/// dir (see `file::write_atomic`); mode 0600.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    file::write_atomic(path, bytes, 0o600, true)
}

/// `atomic_write` with the mode the new file gets (files in a user's project are not private).
pub fn atomic_write_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    file::write_atomic(path, bytes, mode, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn agent_dirs_are_private() {
        let (_tmp, fleet) = testing::temp_fleet();
        let agent = fleet.agent("a");
        agent.ensure().unwrap();
        for p in [&fleet.root, &agent.path] {
            let mode = fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", p.display());
        }
        assert_eq!(fleet.agent_names(), ["a"]);
    }

    #[test]
    fn ops_are_appended_as_json_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let agent = FleetDir::new(tmp.path()).agent("a");
        agent.ensure().unwrap();
        agent
            .record_op(Op::AgentStart, serde_json::json!({"pane": "%1"}))
            .unwrap();
        agent.record_op(Op::OperatorStop, Value::Null).unwrap();
        let text = fs::read_to_string(agent.file(OPS_LOG)).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        // The form every earlier build wrote: ts, agent, event, then the fields.
        assert!(text.starts_with("{\"ts\":\""), "{text}");
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .ends_with("\"agent\":\"a\",\"event\":\"operator_stop\"}"),
            "{text}"
        );
        assert!(
            text.contains("\"agent\":\"a\",\"event\":\"agent_start\",\"pane\":\"%1\"}"),
            "{text}"
        );
        assert_eq!(lines[0]["event"], "agent_start");
        assert_eq!(lines[0]["pane"], "%1");
        assert_eq!(lines[1]["agent"], "a");
    }

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.json");
        atomic_write(&path, b"one").unwrap();
        atomic_write(&path, b"two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
