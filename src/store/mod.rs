//! The artifact index: SQLite with FTS5 over handoffs, briefs, ledger decisions and critical
//! events, for ranked search with snippets. A cache: the files are the truth. A missing or
//! corrupt `index.db` is rebuilt from them; new handoffs are noted in `index.pending` by
//! whoever writes them (hooks included, with no SQLite on their path) and indexed at the next
//! open; briefs, ledgers and the event log are re-read when they changed.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::Serialize;

use crate::state::{AgentDir, FleetDir};

mod query;
mod sync;

pub use query::{fts_any_query, fts_query};

pub const INDEX: &str = "index.db";
pub const PENDING: &str = "index.pending";
/// Matches ranked at most per search: the newest ones (see `Store::search`).
pub const RANK_AT_MOST: usize = 2_000;
/// The same for the startup context's related decisions: a session start waits for them.
const RELATED_AT_MOST: usize = 300;
/// Words of a task searched for related decisions: the longest (rarest) few; each more word
/// is another document list to merge.
const RELATED_WORDS: usize = 4;
/// Bumped when the schema changes: an index of another version is rebuilt.
const SCHEMA_VERSION: i64 = 6;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("index `{path}`: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// `handoff`, `brief`, `decision` or `event`.
    pub kind: String,
    pub agent: String,
    /// The handoff id, `brief`, the decision's text start, or the event's time.
    pub reference: String,
    pub ts: Option<String>,
    pub title: String,
    /// The matching passage, with the matched words in `[` `]`.
    pub snippet: String,
    /// bm25: lower is better.
    pub rank: f64,
}

/// Remember that `agent`'s handoff `id` needs indexing (cheap: one appended line).
pub fn note_pending(fleet: &FleetDir, dir: &AgentDir, id: &str) {
    let line = format!("{}\t{id}\n", dir.name);
    let _ = crate::state::file::append(&fleet.root.join(PENDING), line.as_bytes());
}

pub struct Store {
    conn: Connection,
    fleet: FleetDir,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    agent TEXT NOT NULL,
    ref TEXT NOT NULL,
    ts TEXT,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    -- The agent as one token, so a search can be narrowed to one agent inside the index.
    agent_key TEXT GENERATED ALWAYS AS ('a' || lower(hex(agent))) VIRTUAL,
    UNIQUE(kind, agent, ref)
);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
    title, body, agent_key, content='docs', content_rowid='id', tokenize='porter unicode61', prefix='3 4 5'
);
CREATE TRIGGER IF NOT EXISTS docs_ai AFTER INSERT ON docs BEGIN
    INSERT INTO docs_fts(rowid, title, body, agent_key) VALUES (new.id, new.title, new.body, new.agent_key);
END;
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
    INSERT INTO docs_fts(docs_fts, rowid, title, body, agent_key) VALUES ('delete', old.id, old.title, old.body, old.agent_key);
END;
CREATE TABLE IF NOT EXISTS sources(path TEXT PRIMARY KEY, mtime INTEGER NOT NULL, size INTEGER NOT NULL);
";

/// Serialises building and catching up the index between processes (a rebuild renames a new
/// file into place; nothing may open the old one meanwhile).
fn index_lock(fleet: &FleetDir) -> Result<crate::state::file::Held, StoreError> {
    let path = fleet.root.join(".index.lock");
    crate::state::file::lock(&path).map_err(|source| StoreError::Io { path, source })
}

fn ensure_dir(fleet: &FleetDir) -> Result<(), StoreError> {
    fleet.ensure().map_err(|source| StoreError::Io {
        path: fleet.root.clone(),
        source,
    })
}

/// The files SQLite opens for the index at `path`: the database, its WAL, its shared memory
/// and its rollback journal.
fn index_files(path: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    ["", "-wal", "-shm", "-journal"]
        .into_iter()
        .map(move |suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        })
}

/// Those of the index's files that exist and are not regular files. SQLite opens its files
/// blocking and follows links: a FIFO there would hang every search and session start, a
/// link would make it write where someone else chose. Checked with `lstat`, never opened.
fn planted(path: &Path) -> Vec<PathBuf> {
    index_files(path)
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_file()))
        .collect()
}

/// Run `f` under the index lock, with anything planted among the index's files moved aside
/// first (so the index is rebuilt); the refusals are recorded once the lock is released.
fn locked<T>(fleet: &FleetDir, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let path = fleet.root.join(INDEX);
    let (result, refused) = {
        let _lock = index_lock(fleet)?;
        let mut refused = Vec::new();
        let mut failed = None;
        for file in planted(&path) {
            match crate::state::file::move_aside(&file) {
                Ok(aside) => refused.push((file, aside)),
                Err(source) => {
                    failed = Some(StoreError::Io { path: file, source });
                    break;
                }
            }
        }
        match failed {
            Some(e) => (Err(e), refused),
            None => (f(), refused),
        }
    };
    for (file, aside) in refused {
        crate::state::file::report_refused(&file, &aside);
    }
    result
}

/// Search the fleet's index; an index found corrupt on the way is rebuilt from the files and
/// the search made again (the CLI, the HTTP API and the tap search through this).
pub fn search(
    fleet: &FleetDir,
    query: &str,
    agent: Option<&str>,
    kind: Option<&str>,
    limit: usize,
) -> Result<Vec<Hit>, StoreError> {
    // A query only reads: an index that is there and current is opened read-only (no lock,
    // no write, no fsync); one that is behind the files is caught up first, as before.
    if let Some(store) = Store::open_for_read(fleet) {
        // One read transaction for the check and the queries: one snapshot, and SQLite takes
        // and drops its shared lock once rather than around each of their statements (three
        // system calls a statement, and the check makes two statements per agent).
        let searched = store.reading(|store| {
            if !store.is_current().unwrap_or(false) {
                return Ok(None);
            }
            Ok(Some(store.search(query, agent, kind, limit)))
        });
        match searched {
            Ok(Some(Err(e))) if e.is_corruption() => {}
            Ok(Some(other)) => return other,
            // Behind the files, or no read could begin: opened to write below, as before.
            Ok(None) | Err(_) => {}
        }
    }
    match Store::open(fleet)?.search(query, agent, kind, limit) {
        Err(e) if e.is_corruption() => Store::rebuild_fresh(fleet)?
            .0
            .search(query, agent, kind, limit),
        other => other,
    }
}

impl StoreError {
    /// Is this SQLite saying the file is damaged (not an I/O or a query problem)?
    pub fn is_corruption(&self) -> bool {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        matches!(
            self,
            StoreError::Sqlite {
                source: rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error {
                        code: DatabaseCorrupt | NotADatabase,
                        ..
                    },
                    _
                ),
                ..
            }
        )
    }
}

impl Store {
    /// Open the fleet's index, rebuilding it if it is missing, corrupt or of another schema,
    /// and bring it up to date with the files. A corrupt index is never repaired in place: a
    /// new one is built beside it and renamed over it (`rebuild_fresh`).
    pub fn open(fleet: &FleetDir) -> Result<Store, StoreError> {
        let path = fleet.root.join(INDEX);
        ensure_dir(fleet)?;
        locked(fleet, || {
            if !path.exists() {
                return Ok(Store::build_fresh(fleet)?.0);
            }
            let opened = Store::open_existing(fleet, &path).and_then(|store| {
                store.catch_up()?;
                Ok(store)
            });
            match opened {
                Ok(store) => Ok(store),
                // A cache that cannot be read (or is of another schema) is rebuilt from the files.
                Err(_) => Ok(Store::build_fresh(fleet)?.0),
            }
        })
    }

    /// `open`, then check the whole file (`PRAGMA quick_check`, every page): a partly corrupt
    /// index can answer without an error, from what is left of it. Rebuilt if it fails. The
    /// daemon calls this after each watchdog pass, off every command's path.
    pub fn open_checked(fleet: &FleetDir) -> Result<Store, StoreError> {
        let store = Store::open(fleet)?;
        if store.intact() {
            return Ok(store);
        }
        drop(store);
        locked(fleet, || Ok(Store::build_fresh(fleet)?.0))
    }

    /// Does the whole file pass SQLite's structural check?
    fn intact(&self) -> bool {
        let result: Result<String, _> = self.conn.query_row("PRAGMA quick_check", [], |r| r.get(0));
        matches!(result.as_deref(), Ok("ok"))
    }

    /// Build a new index from the files and put it in place of the old one, whatever state
    /// that one is in (`phoenix reindex`): the old file is never read, so a malformed one
    /// cannot make this fail. Returns the new index and the number of documents.
    pub fn rebuild_fresh(fleet: &FleetDir) -> Result<(Store, usize), StoreError> {
        ensure_dir(fleet)?;
        locked(fleet, || Store::build_fresh(fleet))
    }

    /// With the index lock held: build into a private temp file (no WAL, so the file is
    /// whole once closed), drop the old file's WAL and shared memory (they must never be
    /// applied to the new file), rename the new file into place and open it.
    fn build_fresh(fleet: &FleetDir) -> Result<(Store, usize), StoreError> {
        let path = fleet.root.join(INDEX);
        let tmp = crate::state::file::temp_path(&path);
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| StoreError::Io { path: p, source }
        };
        // Created 0600 here, so SQLite keeps that mode (its journal files copy it).
        crate::state::file::write_atomic(&tmp, b"", 0o600, false).map_err(io(&tmp))?;
        let built = (|| {
            let conn = Connection::open(&tmp).map_err(|source| StoreError::Sqlite {
                path: tmp.clone(),
                source,
            })?;
            let store = Store::init(conn, fleet, &tmp, true)?;
            let n = store.rebuild()?;
            drop(store);
            Ok::<usize, StoreError>(n)
        })();
        let n = match built {
            Ok(n) => n,
            Err(e) => {
                for suffix in ["", "-journal"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
                }
                return Err(e);
            }
        };
        for suffix in ["-wal", "-shm", "-journal"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        Ok((Store::open_existing(fleet, &path)?, n))
    }

    fn open_existing(fleet: &FleetDir, path: &Path) -> Result<Store, StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        // Only a file `build_fresh` made: a missing file is not created here, and one without
        // the schema (empty, of another version) is rebuilt, never filled in place.
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
                | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        Store::init(conn, fleet, path, false)
    }

    /// Check or create the schema of a new connection.
    fn init(
        conn: Connection,
        fleet: &FleetDir,
        path: &Path,
        new: bool,
    ) -> Result<Store, StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err)?;
        // An empty file (just created) has no schema yet.
        let fresh = new;
        if !fresh && version != SCHEMA_VERSION {
            return Err(err(rusqlite::Error::InvalidQuery));
        }
        // No integrity scan here (it reads the whole file, 100s of ms for a big index): a file
        // that is not a database fails just above, and a query that meets corruption makes
        // `search` rebuild the index. A file of this version has its schema (the version is
        // set after it): parsing the schema again and writing the version on every open cost
        // every search a write transaction.
        if !fresh {
            return Ok(Store {
                conn,
                fleet: fleet.clone(),
                path: path.to_path_buf(),
            });
        }
        conn.execute_batch(SCHEMA).map_err(err)?;
        // `ORDER BY rank` then means bm25 with titles weighing four times the body; the agent
        // column is there to narrow a search, not to score it.
        conn.execute(
            "INSERT INTO docs_fts(docs_fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 0.0)')",
            [],
        )
        .map_err(err)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(err)?;
        Ok(Store {
            conn,
            fleet: fleet.clone(),
            path: path.to_path_buf(),
        })
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// `f` inside one read transaction (rolled back after: it only reads).
    pub(crate) fn reading<T>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(self.err())?;
        let result = f(self);
        drop(tx);
        result
    }

    /// An existing index opened for one quick read (the session-start hook): no rebuild, no
    /// catch-up, read-only, a short busy timeout. `None` when there is no usable index: the
    /// caller does without, it never waits for one to be built.
    pub fn open_for_read(fleet: &FleetDir) -> Option<Store> {
        let path = fleet.root.join(INDEX);
        // A FIFO would hang the open (or the first read), a link would be followed: refused
        // and recorded; whoever opens the index to write next moves it aside and rebuilds.
        let planted = planted(&path);
        if !planted.is_empty() {
            for file in planted {
                let _ = fleet.append_event(&serde_json::json!({
                    "ts": crate::state::now_rfc3339(), "event": "state_file_refused", "agent": "",
                    "reason": format!("`{}` is not a regular file of phoenix's own (a symbolic link, a FIFO?)", file.display()),
                    "action_taken": "did not open the index; the next search moves it aside and rebuilds the index",
                    "details": {"file": file},
                }));
            }
            return None;
        }
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
                | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .ok()?;
        conn.busy_timeout(std::time::Duration::from_millis(200))
            .ok()?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .ok()?;
        (version == SCHEMA_VERSION).then(|| Store {
            conn,
            fleet: fleet.clone(),
            path,
        })
    }
}

#[cfg(test)]
mod tests;
