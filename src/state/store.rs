//! Safe reads and writes of `state.json`: an exclusive `flock` serialises writers between
//! processes, every write is atomic, read back and compared, and a last-good copy is kept.
//! A corrupt or truncated file is rolled back to that copy and recorded, never propagated
//! (Enhanced Agent Resilience Protocol §2.3).

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{Value, json};

use super::agent::{AgentState, OpenLoop, ResolvedItem, Retention, today};
use super::{AgentDir, FleetDir, append_jsonl, atomic_write, now_rfc3339};

pub const STATE: &str = "state.json";
pub const LAST_GOOD: &str = "state.json.last-good";
pub const LOCK: &str = ".lock";
pub const RESOLVED_LOG: &str = "resolved.jsonl";
pub const TOOL_USE: &str = "tool_use.jsonl";
pub const BRIEF: &str = "brief.md";
/// Problems hooks ran into; a hook reports them here and on stderr, never to the agent.
pub const HOOK_ERRORS: &str = "hook_errors.jsonl";
/// The hook files `apply` installed phoenix entries in, so they can be cleaned after the agent
/// moved, changed CLI or was pruned.
pub const INSTALLED_HOOKS: &str = "hook_files.json";

/// tool_use.jsonl is rotated to `tool_use.jsonl.1` past this size (one line per tool call).
const TOOL_USE_ROTATE_BYTES: u64 = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("`{}` did not read back as written; restored the last good copy", path.display())]
    ReadBack { path: PathBuf },
    /// The requested change does not fit the current state (unknown loop id, …).
    #[error("{0}")]
    Rejected(String),
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// What is on disk.
#[derive(Debug)]
pub enum Loaded {
    Missing,
    Valid(Box<AgentState>),
    Corrupt(String),
}

/// Read and parse a state file without locking (renames make every version whole).
pub fn read_state_file(path: &Path) -> Result<Loaded, StateError> {
    match fs::read(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Loaded::Missing),
        Err(e) => Err(io_err("read", path)(e)),
        Ok(bytes) => Ok(parse_state(&bytes)),
    }
}

fn parse_state(bytes: &[u8]) -> Loaded {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Loaded::Corrupt("the file is empty (truncated write?)".into());
    }
    match serde_json::from_slice::<AgentState>(bytes) {
        Ok(state) => Loaded::Valid(Box::new(state)),
        Err(e) => Loaded::Corrupt(format!("not a valid state document: {e}")),
    }
}

/// Holds the agent's state lock until dropped.
pub struct StateLock {
    _lock: Flock<fs::File>,
}

impl AgentDir {
    /// The fleet's state dir (`<state_dir>`), two levels above `agents/<name>`.
    pub fn fleet_root(&self) -> PathBuf {
        self.path
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.path.clone())
    }

    /// Take the agent's exclusive lock, blocking until it is free. The kernel releases it when
    /// the process dies, so a killed writer never leaves it held.
    pub fn lock(&self) -> Result<StateLock, StateError> {
        let path = self.file(LOCK);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("open lock file", &path))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| io_err("lock", &path)(io::Error::from(errno)))?;
        Ok(StateLock { _lock: lock })
    }

    /// The current state. A missing file is an empty state; a corrupt one is repaired (under
    /// the lock) before anything is returned.
    pub fn read_state(&self) -> Result<AgentState, StateError> {
        match read_state_file(&self.file(STATE))? {
            Loaded::Valid(state) => Ok(self.own(*state)),
            Loaded::Missing => Ok(AgentState::new(&self.name)),
            Loaded::Corrupt(_) => {
                let _lock = self.lock()?;
                self.load_locked()
            }
        }
    }

    /// The state as shown to people (`phoenix state show`, the HTTP API): open loops flagged
    /// stale and old resolved items left out, as of now. Nothing is written (a corrupt file
    /// is repaired, as by `read_state`).
    pub fn shown_state(&self, retention: Retention) -> Result<AgentState, StateError> {
        let mut state = self.read_state()?;
        state.normalize(jiff::Timestamp::now(), retention);
        Ok(state)
    }

    /// Read-modify-write under the lock. `change` sees the current state; the result is
    /// normalised (staleness, retention) and written only if it differs.
    pub fn update_state<T>(
        &self,
        retention: Retention,
        change: impl FnOnce(&mut AgentState) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        let _lock = self.lock()?;
        let before = self.load_locked()?;
        let mut state = before.clone();
        let out = change(&mut state)?;
        state.normalize(jiff::Timestamp::now(), retention);
        if state != before || !self.file(STATE).exists() {
            self.write_locked(&state)?;
        }
        Ok(out)
    }

    /// Add an open loop. Adding the same id with the same text again is a no-op (returns false).
    pub fn add_loop(&self, retention: Retention, id: &str, text: &str) -> Result<bool, StateError> {
        self.update_state(retention, |state| {
            if let Some(open) = state.open_loop(id) {
                if open.text == text {
                    return Ok(false);
                }
                return Err(StateError::Rejected(format!(
                    "loop `{id}` is already open (added {}): \"{}\"; resolve it first or pick another id",
                    open.added, open.text
                )));
            }
            state.open_loops.push(OpenLoop {
                id: id.to_string(),
                text: text.to_string(),
                added: today(jiff::Timestamp::now()),
                stale: false,
                extra: Default::default(),
            });
            Ok(true)
        })
    }

    /// Resolve an open loop: one line in `resolved.jsonl` and the loop moved to `resolved` in
    /// `state.json`, both under the lock so that readers never see one without the other.
    pub fn resolve(
        &self,
        retention: Retention,
        id: &str,
        reason: &str,
    ) -> Result<ResolvedItem, StateError> {
        self.update_state(retention, |state| {
            let Some(pos) = state.open_loops.iter().position(|l| l.id == id) else {
                let open = state.open_ids();
                let listed = if open.is_empty() {
                    "there are no open loops".to_string()
                } else {
                    format!(
                        "open loops: {}",
                        open.iter()
                            .map(|i| format!("`{i}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                return Err(StateError::Rejected(format!(
                    "agent `{}` has no open loop `{id}`; {listed}",
                    self.name
                )));
            };
            let now = jiff::Timestamp::now();
            let lp = state.open_loops.remove(pos);
            let path = self.file(RESOLVED_LOG);
            append_jsonl(
                &path,
                &json!({"id": id, "reason": reason, "ts": now_rfc3339(), "agent": self.name, "text": lp.text}),
            )
            .map_err(io_err("append to", &path))?;
            let item = ResolvedItem {
                id: id.to_string(),
                reason: reason.to_string(),
                resolved_date: today(now),
                extra: Default::default(),
            };
            state.resolved.retain(|r| r.id != id);
            state.resolved.push(item.clone());
            Ok(item)
        })
    }

    /// Append one line to tool_use.jsonl, rotating it once it grows large.
    pub fn append_tool_use(&self, line: &Value) -> Result<(), StateError> {
        let path = self.file(TOOL_USE);
        if fs::metadata(&path).is_ok_and(|m| m.len() > TOOL_USE_ROTATE_BYTES) {
            // Two hooks may rotate at once; a few lines then land in `.1`, none are lost.
            let _ = fs::rename(&path, self.file(&format!("{TOOL_USE}.1")));
        }
        append_jsonl(&path, line).map_err(io_err("append to", &path))
    }

    /// Hook files phoenix installed entries in for this agent.
    pub fn installed_hooks(&self) -> Vec<PathBuf> {
        fs::read(self.file(INSTALLED_HOOKS))
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<PathBuf>>(&b).ok())
            .unwrap_or_default()
    }

    /// Add `path` to (or take it off) the list of installed hook files.
    pub fn record_installed_hook(&self, path: &Path, installed: bool) -> Result<(), StateError> {
        let _lock = self.lock()?;
        let mut paths = self.installed_hooks();
        paths.retain(|p| p != path);
        if installed {
            paths.push(path.to_path_buf());
        }
        paths.sort();
        let file = self.file(INSTALLED_HOOKS);
        let bytes = serde_json::to_vec_pretty(&paths).expect("paths serialise");
        atomic_write(&file, &bytes).map_err(io_err("write", &file))
    }

    /// Record a problem a hook ran into (best effort: the hook must go on regardless).
    pub fn record_hook_error(&self, event: &str, error: &str) {
        let _ = append_jsonl(
            &self.file(HOOK_ERRORS),
            &json!({"ts": now_rfc3339(), "agent": self.name, "event": event, "error": error}),
        );
    }

    fn own(&self, mut state: AgentState) -> AgentState {
        if state.agent.is_empty() {
            state.agent = self.name.clone();
        }
        state
    }

    /// Load with the lock held, repairing a corrupt file.
    fn load_locked(&self) -> Result<AgentState, StateError> {
        let path = self.file(STATE);
        match read_state_file(&path)? {
            Loaded::Valid(state) => Ok(self.own(*state)),
            Loaded::Missing => Ok(AgentState::new(&self.name)),
            Loaded::Corrupt(reason) => self.roll_back(&reason),
        }
    }

    /// Put the last good copy back (or an empty state if there is none), keep the corrupt file
    /// for inspection, and record what happened in ops.jsonl and critical_events.jsonl.
    fn roll_back(&self, reason: &str) -> Result<AgentState, StateError> {
        let path = self.file(STATE);
        let stamp = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%S%.3fZ")
            .to_string();
        let kept = self.file(&format!("{STATE}.corrupt-{stamp}"));
        let kept = fs::rename(&path, &kept).ok().map(|_| kept);
        let last_good = match fs::read(self.file(LAST_GOOD)) {
            Ok(bytes) => match parse_state(&bytes) {
                Loaded::Valid(state) => Some((bytes, *state)),
                _ => None,
            },
            Err(_) => None,
        };
        let (state, action) = match last_good {
            Some((bytes, state)) => {
                atomic_write(&path, &bytes).map_err(io_err("restore", &path))?;
                (
                    self.own(state),
                    format!("rolled back to the last good copy `{LAST_GOOD}`"),
                )
            }
            None => {
                let state = AgentState::new(&self.name);
                self.write_locked(&state)?;
                (
                    state,
                    "no usable last good copy: started from an empty state".to_string(),
                )
            }
        };
        let details = json!({
            "file": path,
            "corrupt_copy": kept,
            "last_good": self.file(LAST_GOOD),
        });
        let _ = self.record_op(
            "state_rollback",
            json!({"reason": reason, "action_taken": action, "details": details}),
        );
        let _ = FleetDir::new(self.fleet_root()).record_critical(
            "state_corrupt",
            &self.name,
            &format!("`{STATE}` is corrupt: {reason}"),
            &action,
            details,
        );
        Ok(state)
    }

    /// Write the new state atomically (synced temp file, rename, directory sync), read it back
    /// and compare; a mismatch rolls back to the last good copy. Then the new content becomes
    /// the last good copy: a file of its own (never a hard link: a tool that rewrites
    /// `state.json` in place would corrupt both), written through a temp file and a rename but
    /// not synced. After a power cut it may be stale or empty, which a rollback detects; the
    /// synced `state.json` is what survives, and a rollback after any later corruption restores
    /// the latest good write, not the one before it.
    fn write_locked(&self, state: &AgentState) -> Result<(), StateError> {
        let path = self.file(STATE);
        let good = self.file(LAST_GOOD);
        let bytes = state.to_pretty_json();
        let pid = std::process::id();
        let tmp = self.file(&format!(".{STATE}.tmp.{pid}"));
        write_synced(&tmp, &bytes).map_err(io_err("write", &tmp))?;
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("replace", &path)(e));
        }
        fs::File::open(&self.path)
            .and_then(|d| d.sync_all())
            .map_err(io_err("sync", &self.path))?;
        let back = fs::read(&path).map_err(io_err("read back", &path))?;
        if back != bytes || !matches!(parse_state(&back), Loaded::Valid(_)) {
            self.roll_back("what was read back differs from what was written")?;
            return Err(StateError::ReadBack { path });
        }
        let copy = self.file(&format!(".{LAST_GOOD}.tmp.{pid}"));
        fs::write(&copy, &bytes)
            .and_then(|_| fs::rename(&copy, &good))
            .map_err(|e| {
                let _ = fs::remove_file(&copy);
                io_err("write", &good)(e)
            })?;
        Ok(())
    }
}

/// Create (or truncate) `path`, write `bytes` and sync them to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

impl FleetDir {
    /// Append one event to `critical_events.jsonl`, the fleet-wide record of health events.
    pub fn record_critical(
        &self,
        event: &str,
        agent: &str,
        reason: &str,
        action_taken: &str,
        details: Value,
    ) -> io::Result<()> {
        self.append_event(&json!({
            "ts": now_rfc3339(), "event": event, "agent": agent, "reason": reason,
            "action_taken": action_taken, "details": details,
        }))
    }

    /// Append any event object to `critical_events.jsonl`, under the events lock so that
    /// pruning old events (which rewrites the file) never loses one.
    pub fn append_event(&self, event: &Value) -> io::Result<()> {
        if !self.root.is_dir() {
            self.ensure()?;
        }
        let _lock = self.events_lock()?;
        append_jsonl(&self.critical_events_path(), event)
    }

    /// The lock that serialises writers of `critical_events.jsonl`.
    pub fn events_lock(&self) -> io::Result<Flock<fs::File>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.root.join("critical_events.lock"))?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| io::Error::from(errno))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FleetDir;

    fn agent() -> (tempfile::TempDir, AgentDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path().join(".phoenix")).agent("a");
        dir.ensure().unwrap();
        (tmp, dir)
    }

    #[test]
    fn missing_state_reads_as_empty_and_first_write_creates_last_good() {
        let (_tmp, dir) = agent();
        assert_eq!(dir.read_state().unwrap(), AgentState::new("a"));
        assert!(dir.add_loop(Retention::default(), "x", "do x").unwrap());
        assert!(!dir.add_loop(Retention::default(), "x", "do x").unwrap());
        assert_eq!(
            fs::read(dir.file(STATE)).unwrap(),
            fs::read(dir.file(LAST_GOOD)).unwrap()
        );
    }

    #[test]
    fn last_good_is_the_latest_write_and_never_shares_an_inode_with_state() {
        use std::os::unix::fs::MetadataExt;
        let (_tmp, dir) = agent();
        dir.add_loop(Retention::default(), "one", "1").unwrap();
        dir.add_loop(Retention::default(), "two", "2").unwrap();
        let good: AgentState =
            serde_json::from_slice(&fs::read(dir.file(LAST_GOOD)).unwrap()).unwrap();
        assert_eq!(good.open_ids(), ["one", "two"]);
        // Corrupted in place (as `echo > state.json` would): the latest write comes back.
        fs::write(dir.file(STATE), b"{\"open_loops\": [").unwrap();
        assert_eq!(dir.read_state().unwrap().open_ids(), ["one", "two"]);
        let ino = |f: &str| fs::metadata(dir.file(f)).unwrap().ino();
        assert_ne!(ino(STATE), ino(LAST_GOOD));
        let leftovers = fs::read_dir(&dir.path)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .count();
        assert_eq!(leftovers, 0);
    }

    #[test]
    fn truncated_state_rolls_back_and_is_recorded() {
        let (_tmp, dir) = agent();
        dir.add_loop(Retention::default(), "x", "do x").unwrap();
        let good = fs::read(dir.file(STATE)).unwrap();
        fs::write(dir.file(STATE), &good[..good.len() / 2]).unwrap();

        let state = dir.read_state().unwrap();
        assert_eq!(state.open_ids(), ["x"]);
        assert_eq!(fs::read(dir.file(STATE)).unwrap(), good);
        let ops = fs::read_to_string(dir.file(crate::state::OPS_LOG)).unwrap();
        assert!(ops.contains("state_rollback"), "{ops}");
        let critical =
            fs::read_to_string(FleetDir::new(dir.fleet_root()).critical_events_path()).unwrap();
        let event: Value = serde_json::from_str(critical.lines().next().unwrap()).unwrap();
        assert_eq!(event["event"], "state_corrupt");
        assert_eq!(event["agent"], "a");
        assert!(
            event["action_taken"]
                .as_str()
                .unwrap()
                .contains("last good")
        );
        let kept = fs::read_dir(&dir.path)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".corrupt-"))
            .count();
        assert_eq!(kept, 1);
    }

    #[test]
    fn corrupt_state_without_last_good_starts_empty() {
        let (_tmp, dir) = agent();
        fs::write(dir.file(STATE), b"{\"open_loops\": [").unwrap();
        let state = dir.read_state().unwrap();
        assert_eq!(state, AgentState::new("a"));
        assert!(matches!(
            read_state_file(&dir.file(STATE)).unwrap(),
            Loaded::Valid(_)
        ));
    }

    #[test]
    fn resolve_unknown_id_lists_open_ones() {
        let (_tmp, dir) = agent();
        dir.add_loop(Retention::default(), "a-1", "one").unwrap();
        dir.add_loop(Retention::default(), "b-2", "two").unwrap();
        let err = dir.resolve(Retention::default(), "c", "why").unwrap_err();
        assert_eq!(
            err.to_string(),
            "agent `a` has no open loop `c`; open loops: `a-1`, `b-2`"
        );
        dir.resolve(Retention::default(), "a-1", "done").unwrap();
        let state = dir.read_state().unwrap();
        assert_eq!(state.open_ids(), ["b-2"]);
        assert_eq!(state.resolved[0].id, "a-1");
        let log = fs::read_to_string(dir.file(RESOLVED_LOG)).unwrap();
        assert!(log.contains("\"reason\":\"done\""), "{log}");
    }
}
