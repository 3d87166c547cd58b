//! Safe reads and writes of `state.json`: an exclusive `flock` serialises writers between
//! processes, every write is atomic, read back and compared, and a last-good copy is kept.
//! A corrupt or truncated file is rolled back to that copy and recorded, never propagated
//! (Enhanced Agent Resilience Protocol §2.3).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::agent::{AgentState, OpenLoop, ResolvedItem, Retention, today};
use super::file::{self, JsonFile};
use super::{AgentDir, FleetDir, Op, append_jsonl, now_rfc3339};

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
pub type Loaded = super::file::Loaded<AgentState>;

/// Read and parse a state file without locking (renames make every version whole); never
/// through a link, regular files only, bounded.
pub fn read_state_file(path: &Path) -> Result<Loaded, StateError> {
    match file::read_bounded(path, file::STATE_FILE_LIMIT) {
        Ok(bytes) => Ok(file::parse(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Loaded::Missing),
        Err(e) if file::is_refusal(&e) => Ok(Loaded::Corrupt(e.to_string())),
        Err(e) => Err(io_err("read", path)(e)),
    }
}

/// A resolve in progress: written before its two writes (the `resolved.jsonl` line, then
/// `state.json`) and removed after them, so that a resolve killed between them is finished by
/// the next reader instead of leaving the loop logged as resolved but still open.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct PendingResolve {
    id: String,
    reason: String,
    ts: String,
    #[serde(default)]
    text: String,
}

/// The resolve journal's file name.
pub const RESOLVE_PENDING: &str = "resolve.pending.json";

/// How much of the end of `resolved.jsonl` is searched for a pending resolve's line: it was
/// appended moments before the crash, so it is among the last lines.
const RESOLVED_TAIL_BYTES: u64 = 1 << 20;

// Test-only failpoints: a resolve stops where a `kill -9` could have stopped it.
#[cfg(test)]
thread_local! {
    static FAIL_AT: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn failpoint(name: &'static str) -> Result<(), StateError> {
    if FAIL_AT.with(|f| f.get()) == Some(name) {
        return Err(StateError::Rejected(format!("failpoint `{name}`")));
    }
    Ok(())
}

#[cfg(not(test))]
#[inline(always)]
fn failpoint(_: &'static str) -> Result<(), StateError> {
    Ok(())
}

/// Holds the agent's state lock until dropped.
pub struct StateLock {
    _lock: file::Held,
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
        let lock = file::lock(&path).map_err(io_err("lock", &path))?;
        Ok(StateLock { _lock: lock })
    }

    /// `state.json` as a `JsonFile`: its last good copy, its rollback, under the agent lock.
    fn state_file(&self) -> JsonFile<AgentState> {
        JsonFile::new(self, STATE, "state").lock_file(LOCK)
    }

    fn resolve_journal(&self) -> JsonFile<PendingResolve> {
        JsonFile::new(self, RESOLVE_PENDING, "resolve_journal").lock_file(LOCK)
    }

    /// The current state. A missing file is an empty state; a corrupt one is repaired (under
    /// the lock) before anything is returned.
    pub fn read_state(&self) -> Result<AgentState, StateError> {
        // A resolve that was cut short is finished first (one failed `open` when there is none).
        let pending = self.resolve_journal().exists();
        match self.state_file().read()? {
            Loaded::Valid(state) if !pending => Ok(self.own(state)),
            Loaded::Missing if !pending => Ok(AgentState::new(&self.name)),
            _ => {
                let _lock = self.lock()?;
                let state = self.load_locked()?;
                if !self.file(STATE).exists() {
                    self.write_locked(&state, true)?;
                }
                Ok(state)
            }
        }
    }

    /// The state as it is on disk, without repairing anything (nothing is written, no lock
    /// taken): for readers that go on without it. `None` when missing or unusable.
    pub fn peek_state(&self) -> Option<AgentState> {
        match read_state_file(&self.file(STATE)) {
            Ok(Loaded::Valid(state)) => Some(self.own(state)),
            _ => None,
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
        let missing = || !self.file(STATE).exists();
        if state != before {
            // A first write is synced like any other change beyond the activity.
            let durable = !state.differs_only_in_activity(&before) || missing();
            self.write_locked(&state, durable)?;
        } else if missing() {
            self.write_locked(&state, true)?;
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
    /// `state.json`, under the lock and journaled (see `PendingResolve`): a resolve killed
    /// between the two writes is finished by the next reader. Resolving a loop that is
    /// already resolved returns its item and logs nothing (a retry logs it once).
    pub fn resolve(
        &self,
        retention: Retention,
        id: &str,
        reason: &str,
    ) -> Result<ResolvedItem, StateError> {
        let _lock = self.lock()?;
        let mut state = self.load_locked()?;
        let Some(lp) = state.open_loop(id) else {
            if let Some(done) = state.resolved.iter().find(|r| r.id == id) {
                return Ok(done.clone());
            }
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
        let pending = PendingResolve {
            id: id.to_string(),
            reason: reason.to_string(),
            ts: now_rfc3339(),
            text: lp.text.clone(),
        };
        let journal = self.resolve_journal();
        journal.save_locked(&pending)?;
        failpoint("resolve-journaled")?;
        if let Err(e) = self.log_resolved(&pending) {
            // Nothing was logged: the resolve failed as a whole, nothing to finish later.
            journal.remove_locked();
            return Err(e);
        }
        // From here on the loop is logged as resolved: a failure (or a kill) leaves the
        // journal, and the next reader finishes the resolve.
        failpoint("resolve-logged")?;
        let item = self.apply_resolve(&mut state, &pending);
        state.normalize(jiff::Timestamp::now(), retention);
        self.write_locked(&state, true)?;
        journal.remove_locked();
        Ok(item)
    }

    fn log_resolved(&self, p: &PendingResolve) -> Result<(), StateError> {
        let path = self.file(RESOLVED_LOG);
        append_jsonl(
            &path,
            &json!({"id": p.id, "reason": p.reason, "ts": p.ts, "agent": self.name, "text": p.text}),
        )
        .map_err(io_err("append to", &path))
    }

    /// Is the journaled resolve's line in `resolved.jsonl` already? (Its end is searched.)
    fn resolved_logged(&self, p: &PendingResolve) -> bool {
        let path = self.file(RESOLVED_LOG);
        let size = fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
        let text = super::read_since(&path, size.saturating_sub(RESOLVED_TAIL_BYTES));
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["id"] == p.id.as_str() && v["ts"] == p.ts.as_str())
    }

    fn apply_resolve(&self, state: &mut AgentState, p: &PendingResolve) -> ResolvedItem {
        state.open_loops.retain(|l| l.id != p.id);
        let day =
            p.ts.parse::<jiff::Timestamp>()
                .unwrap_or_else(|_| jiff::Timestamp::now());
        let item = ResolvedItem {
            id: p.id.clone(),
            reason: p.reason.clone(),
            resolved_date: today(day),
            extra: Default::default(),
        };
        state.resolved.retain(|r| r.id != p.id);
        state.resolved.push(item.clone());
        item
    }

    /// Finish a resolve that was cut short (see `PendingResolve`), with the lock held: the
    /// log line if it is missing, the loop moved in `state.json` if it is still open. If that
    /// fails too (a full disk), the journal stays for the next reader and the state is
    /// returned as it is: a reader is never stopped by someone else's interrupted resolve.
    fn finish_pending_resolve(&self, state: AgentState) -> Result<AgentState, StateError> {
        let journal = self.resolve_journal();
        let pending = match journal.load_locked() {
            Ok(Some(pending)) => pending,
            Ok(None) | Err(_) => return Ok(state),
        };
        let before = state.clone();
        match self.complete_resolve(state, &pending) {
            Ok(state) => {
                journal.remove_locked();
                Ok(state)
            }
            Err(e) => {
                let _ = self.record_op(
                    Op::ResolveCompletionFailed,
                    json!({"id": pending.id, "error": e.to_string()}),
                );
                Ok(before)
            }
        }
    }

    fn complete_resolve(
        &self,
        mut state: AgentState,
        pending: &PendingResolve,
    ) -> Result<AgentState, StateError> {
        let logged = self.resolved_logged(pending);
        if !logged {
            self.log_resolved(pending)?;
        }
        let was_open = state.open_loop(&pending.id).is_some();
        if was_open {
            self.apply_resolve(&mut state, pending);
            self.write_locked(&state, true)?;
        }
        let _ = self.record_op(
            Op::ResolveCompleted,
            json!({"id": pending.id, "logged_now": !logged, "state_updated_now": was_open,
                   "reason": "a resolve was interrupted between its writes"}),
        );
        Ok(state)
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

    fn hooks_file(&self) -> JsonFile<Vec<PathBuf>> {
        JsonFile::new(self, INSTALLED_HOOKS, "hook_files").lock_file(LOCK)
    }

    /// Hook files phoenix installed entries in for this agent.
    pub fn installed_hooks(&self) -> Vec<PathBuf> {
        self.hooks_file().load_or_default()
    }

    /// Add `path` to (or take it off) the list of installed hook files.
    pub fn record_installed_hook(&self, path: &Path, installed: bool) -> Result<(), StateError> {
        self.hooks_file().update(|paths| {
            let paths = paths.get_or_insert_with(Vec::new);
            paths.retain(|p| p != path);
            if installed {
                paths.push(path.to_path_buf());
            }
            paths.sort();
        })
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

    /// Load with the lock held, repairing a corrupt file (see `JsonFile::load_locked`) and
    /// finishing a resolve that was cut short.
    fn load_locked(&self) -> Result<AgentState, StateError> {
        let state = match self.state_file().load_locked()? {
            Some(state) => self.own(state),
            None => AgentState::new(&self.name),
        };
        self.finish_pending_resolve(state)
    }

    /// Write the new state (see `JsonFile::write_bytes_locked`: synced and read back when
    /// `durable`, atomic either way, last good copy kept).
    fn write_locked(&self, state: &AgentState, durable: bool) -> Result<(), StateError> {
        let file = self.state_file();
        let file = if durable { file } else { file.unsynced() };
        file.write_bytes_locked(&state.to_pretty_json())
    }
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
    /// pruning old events (which rewrites the file) never loses one. Something planted in
    /// place of the log or of its lock (a link, a FIFO) is moved aside and its refusal written
    /// into the new log here, under the lock already held: recording it as another event
    /// would take the lock a second time.
    pub fn append_event(&self, event: &Value) -> io::Result<()> {
        if !self.root.is_dir() {
            self.ensure()?;
        }
        let mut line = serde_json::to_vec(event).map_err(io::Error::other)?;
        line.push(b'\n');
        let path = self.critical_events_path();
        let (_lock, lock_refused) = self.events_lock_checked()?;
        let (mut log, refused) = file::open_append(&path)?;
        let mut text = Vec::new();
        for (what, aside) in [(self.events_lock_path(), lock_refused), (path, refused)] {
            if let Some(aside) = aside {
                let refusal = file::refusal_event(&what, &aside, "");
                text.extend(serde_json::to_vec(&refusal).map_err(io::Error::other)?);
                text.push(b'\n');
            }
        }
        text.extend(line);
        // One `write`: concurrent writers without the lock (none today) could not split it.
        log.write_all(&text)
    }

    pub fn events_lock_path(&self) -> PathBuf {
        self.root.join("critical_events.lock")
    }

    /// The lock that serialises writers of `critical_events.jsonl`.
    pub fn events_lock(&self) -> io::Result<file::Held> {
        self.events_lock_checked().map(|(lock, _)| lock)
    }

    /// `events_lock`, moving aside anything planted in place of the lock file (a FIFO, a
    /// link, a directory: refused, never waited on) and saying where it went, for the caller
    /// to record once it holds the lock. Two processes that both move a planted file aside at
    /// the same moment may each lock a file of their own, once: the lock only keeps a prune
    /// from dropping an event appended meanwhile, and an event is worth less than a hook that
    /// never finishes.
    pub fn events_lock_checked(&self) -> io::Result<(file::Held, Option<PathBuf>)> {
        let path = self.events_lock_path();
        match file::lock(&path) {
            Ok(lock) => Ok((lock, None)),
            Err(e) if file::is_refusal(&e) => {
                let aside = file::move_aside(&path).map_err(|_| e)?;
                Ok((file::lock(&path)?, Some(aside)))
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FleetDir;

    use crate::state::testing::{file_names, temp_agent as agent};

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
        let names = file_names(&dir.path);
        assert!(!names.iter().any(|n| n.contains(".tmp.")), "{names:?}");
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
        let names = file_names(&dir.path);
        let kept = names.iter().filter(|n| n.contains(".corrupt-")).count();
        assert_eq!(kept, 1, "{names:?}");
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

    /// Stop the next resolve at a failpoint, as a `kill -9` between its writes would.
    fn crash_resolve_at(dir: &AgentDir, point: &'static str, id: &str) {
        FAIL_AT.with(|f| f.set(Some(point)));
        let res = dir.resolve(Retention::default(), id, "done");
        FAIL_AT.with(|f| f.set(None));
        assert!(res.is_err(), "{point}: {res:?}");
        let on_disk: AgentState =
            serde_json::from_slice(&fs::read(dir.file(STATE)).unwrap()).unwrap();
        assert!(
            on_disk.open_ids().contains(&id),
            "{point}: the crash left it open on disk"
        );
    }

    fn resolved_lines(dir: &AgentDir) -> Vec<Value> {
        fs::read_to_string(dir.file(RESOLVED_LOG))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_resolve_killed_between_its_writes_is_finished_by_the_next_reader() {
        for point in ["resolve-journaled", "resolve-logged"] {
            let (_tmp, dir) = agent();
            dir.add_loop(Retention::default(), "x", "do x").unwrap();
            dir.add_loop(Retention::default(), "y", "do y").unwrap();
            crash_resolve_at(&dir, point, "x");

            let state = dir.read_state().unwrap();
            assert_eq!(state.open_ids(), ["y"], "{point}");
            assert_eq!(state.resolved.len(), 1, "{point}");
            assert_eq!(state.resolved[0].id, "x");
            let on_disk: AgentState =
                serde_json::from_slice(&fs::read(dir.file(STATE)).unwrap()).unwrap();
            assert_eq!(on_disk.open_ids(), ["y"], "{point}: repaired on disk");
            let lines = resolved_lines(&dir);
            assert_eq!(lines.len(), 1, "{point}: {lines:?}");
            assert_eq!(lines[0]["id"], "x");
            assert_eq!(lines[0]["text"], "do x");
            assert!(!dir.file(RESOLVE_PENDING).exists());

            // The operator's retry logs nothing more.
            let item = dir.resolve(Retention::default(), "x", "done").unwrap();
            assert_eq!(item.id, "x");
            assert_eq!(resolved_lines(&dir).len(), 1, "{point}");
        }
    }

    #[test]
    fn a_retry_right_after_a_killed_resolve_logs_it_once() {
        let (_tmp, dir) = agent();
        dir.add_loop(Retention::default(), "x", "do x").unwrap();
        crash_resolve_at(&dir, "resolve-logged", "x");
        // No reader came between: the retry itself finishes the first resolve.
        dir.resolve(Retention::default(), "x", "done again")
            .unwrap();
        let lines = resolved_lines(&dir);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["reason"], "done");
        assert!(dir.read_state().unwrap().open_ids().is_empty());
        // A hook's write (update_state) also finishes one.
        dir.add_loop(Retention::default(), "z", "do z").unwrap();
        crash_resolve_at(&dir, "resolve-logged", "z");
        dir.update_state(Retention::default(), |s| {
            s.current_task = Some("t".into());
            Ok(())
        })
        .unwrap();
        assert!(dir.read_state().unwrap().open_ids().is_empty());
        assert_eq!(resolved_lines(&dir).len(), 2);
    }

    #[test]
    fn resolving_twice_logs_once() {
        let (_tmp, dir) = agent();
        dir.add_loop(Retention::default(), "x", "do x").unwrap();
        let first = dir.resolve(Retention::default(), "x", "done").unwrap();
        let second = dir.resolve(Retention::default(), "x", "done").unwrap();
        assert_eq!(first, second);
        assert_eq!(resolved_lines(&dir).len(), 1);
        // The same id added again is a new loop: resolving it logs again.
        dir.add_loop(Retention::default(), "x", "x again").unwrap();
        dir.resolve(Retention::default(), "x", "done").unwrap();
        assert_eq!(resolved_lines(&dir).len(), 2);
    }
}
