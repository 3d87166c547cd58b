//! The artifact index: SQLite with FTS5 over handoffs, briefs, ledger decisions and critical
//! events, for ranked search with snippets. A cache: the files are the truth. A missing or
//! corrupt `index.db` is rebuilt from them; new handoffs are noted in `index.pending` by
//! whoever writes them (hooks included, with no SQLite on their path) and indexed at the next
//! open; briefs, ledgers and the event log are re-read when they changed.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use crate::continuity::{handoff, ledger};
use crate::state::{AgentDir, FleetDir};

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
fn index_lock(fleet: &FleetDir) -> Result<nix::fcntl::Flock<std::fs::File>, StoreError> {
    let path = fleet.root.join(".index.lock");
    crate::state::file::lock(&path).map_err(|source| StoreError::Io { path, source })
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

fn mtime_and_size(path: &Path) -> Option<(i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos() as i64;
    Some((mtime, m.len() as i64))
}

impl Store {
    /// Open the fleet's index, rebuilding it if it is missing, corrupt or of another schema,
    /// and bring it up to date with the files. A corrupt index is never repaired in place: a
    /// new one is built beside it and renamed over it (`rebuild_fresh`).
    pub fn open(fleet: &FleetDir) -> Result<Store, StoreError> {
        let path = fleet.root.join(INDEX);
        fleet.ensure().map_err(|source| StoreError::Io {
            path: fleet.root.clone(),
            source,
        })?;
        let _lock = index_lock(fleet)?;
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
        let _lock = index_lock(fleet)?;
        Ok(Store::build_fresh(fleet)?.0)
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
        fleet.ensure().map_err(|source| StoreError::Io {
            path: fleet.root.clone(),
            source,
        })?;
        let _lock = index_lock(fleet)?;
        Store::build_fresh(fleet)
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
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
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
        // `search` rebuild the index.
        conn.execute_batch(SCHEMA).map_err(err)?;
        if fresh {
            // `ORDER BY rank` then means bm25 with titles weighing four times the body; the
            // agent column is there to narrow a search, not to score it.
            conn.execute(
                "INSERT INTO docs_fts(docs_fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 0.0)')",
                [],
            )
            .map_err(err)?;
        }
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

    /// Empty the index and read every file again (`phoenix reindex`). Returns the number of
    /// documents indexed.
    pub fn rebuild(&self) -> Result<usize, StoreError> {
        self.conn
            .execute_batch("DELETE FROM docs; DELETE FROM sources; INSERT INTO docs_fts(docs_fts) VALUES ('rebuild');")
            .map_err(self.err())?;
        let _ = std::fs::remove_file(self.fleet.root.join(PENDING));
        let tx = self.conn.unchecked_transaction().map_err(self.err())?;
        // Oldest first across the fleet (ids start with their time), so that row order is
        // time order: `search` relies on it to rank the newest matches of a common word.
        let mut all: Vec<(String, AgentDir)> = self
            .agent_dirs()
            .into_iter()
            .flat_map(|dir| {
                handoff::list_ids(&dir)
                    .into_iter()
                    .map(move |id| (id, dir.clone()))
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let mut n = 0;
        for (id, dir) in &all {
            if let Some(h) = handoff::load(dir, id) {
                self.put_handoff(&h)?;
                n += 1;
            }
        }
        tx.commit().map_err(self.err())?;
        n += self.catch_up()?;
        Ok(n)
    }

    fn agent_dirs(&self) -> Vec<AgentDir> {
        let mut names: Vec<String> = std::fs::read_dir(self.fleet.root.join("agents"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .collect();
        names.sort();
        names.iter().map(|n| self.fleet.agent(n)).collect()
    }

    fn put(
        &self,
        kind: &str,
        agent: &str,
        reference: &str,
        ts: Option<&str>,
        title: &str,
        body: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "DELETE FROM docs WHERE kind = ?1 AND agent = ?2 AND ref = ?3",
                params![kind, agent, reference],
            )
            .map_err(self.err())?;
        self.conn
            .execute(
                "INSERT INTO docs(kind, agent, ref, ts, title, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![kind, agent, reference, ts, title, body],
            )
            .map_err(self.err())?;
        Ok(())
    }

    pub fn put_handoff(&self, h: &handoff::Handoff) -> Result<(), StoreError> {
        self.put(
            "handoff",
            &h.agent,
            &h.id,
            Some(&h.created_at),
            &h.summary,
            &h.body,
        )
    }

    /// Has `path` changed since it was last indexed? Records the new stamp if so.
    fn changed(&self, path: &Path) -> Result<bool, StoreError> {
        let key = path.to_string_lossy().to_string();
        let now = mtime_and_size(path);
        let before: Option<(i64, i64)> = self
            .conn
            .query_row(
                "SELECT mtime, size FROM sources WHERE path = ?1",
                params![key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        if now == before {
            return Ok(false);
        }
        match now {
            Some((m, s)) => self
                .conn
                .execute(
                    "INSERT OR REPLACE INTO sources(path, mtime, size) VALUES (?1, ?2, ?3)",
                    params![key, m, s],
                )
                .map_err(self.err())?,
            None => self
                .conn
                .execute("DELETE FROM sources WHERE path = ?1", params![key])
                .map_err(self.err())?,
        };
        Ok(true)
    }

    /// Index what changed since the last open: pending handoffs, changed briefs and ledgers,
    /// new critical events. Returns how many documents were (re)indexed.
    pub fn catch_up(&self) -> Result<usize, StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(self.err())?;
        let mut n = 0;
        let pending_path = self.fleet.root.join(PENDING);
        if let Some(text) = crate::state::file::read_text(&pending_path) {
            for line in text.lines() {
                let Some((agent, id)) = line.split_once('\t') else {
                    continue;
                };
                if let Some(h) = handoff::load(&self.fleet.agent(agent), id) {
                    self.put_handoff(&h)?;
                    n += 1;
                }
            }
        }
        for dir in self.agent_dirs() {
            let brief = dir.file("brief.md");
            if self.changed(&brief)? {
                match dir.brief() {
                    Some(text) => {
                        let title = text
                            .lines()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("brief");
                        self.put("brief", &dir.name, "brief", None, title, &text)?;
                    }
                    None => self.remove("brief", &dir.name)?,
                }
                n += 1;
            }
            let ledger_path = dir.file(ledger::LEDGER);
            if self.changed(&ledger_path)? {
                self.remove("decision", &dir.name)?;
                for d in ledger::load(&dir).decisions {
                    let reference: String = d.text.chars().take(80).collect();
                    self.put(
                        "decision",
                        &dir.name,
                        &reference,
                        d.ts.as_deref(),
                        "decision",
                        &d.text,
                    )?;
                    n += 1;
                }
            }
        }
        n += self.catch_up_events()?;
        tx.commit().map_err(self.err())?;
        if n > 0 || pending_path.exists() {
            let _ = std::fs::remove_file(&pending_path);
        }
        Ok(n)
    }

    fn remove(&self, kind: &str, agent: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "DELETE FROM docs WHERE kind = ?1 AND agent = ?2",
                params![kind, agent],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Critical events are appended; only the new ones are read (all again if the file was
    /// rewritten, e.g. pruned).
    fn catch_up_events(&self) -> Result<usize, StoreError> {
        let path = self.fleet.critical_events_path();
        let key = "events-offset";
        let size = std::fs::metadata(&path)
            .map(|m| m.len() as i64)
            .unwrap_or(0);
        let offset: i64 = self
            .conn
            .query_row(
                "SELECT size FROM sources WHERE path = ?1",
                params![key],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?
            .unwrap_or(0);
        if size == offset {
            return Ok(0);
        }
        let start = if size < offset {
            self.conn
                .execute("DELETE FROM docs WHERE kind = 'event'", [])
                .map_err(self.err())?;
            0
        } else {
            offset
        };
        let bytes = {
            use std::io::{Read, Seek, SeekFrom};
            let mut bytes = Vec::new();
            let read = crate::state::file::open_read(&path).and_then(|mut f| {
                f.seek(SeekFrom::Start(start as u64))?;
                f.take((size - start) as u64).read_to_end(&mut bytes)
            });
            if read.is_err() {
                return Ok(0);
            }
            // A line still being written is read next time.
            let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            bytes.truncate(complete);
            bytes
        };
        let size = start + bytes.len() as i64;
        let text = String::from_utf8_lossy(&bytes);
        let mut n = 0;
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            let reference = format!("{}|{}", s("ts"), s("event"));
            let body = format!("{} {} {}", s("reason"), s("action_taken"), e["details"]);
            self.put(
                "event",
                &s("agent"),
                &reference,
                Some(&s("ts")),
                &s("event"),
                &body,
            )?;
            n += 1;
        }
        self.conn
            .execute(
                "INSERT OR REPLACE INTO sources(path, mtime, size) VALUES (?1, 0, ?2)",
                params![key, size],
            )
            .map_err(self.err())?;
        Ok(n)
    }

    /// Ranked search: every word must appear (prefix match on the last one), best first.
    /// The ranking reads only the full-text index; documents and snippets are fetched for the
    /// top `limit` alone.
    pub fn search(
        &self,
        query: &str,
        agent: Option<&str>,
        kind: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let Some(expr) = fts_query(query) else {
            return Ok(Vec::new());
        };
        let expr = for_agent(&expr, agent);
        let top = self.ranked(&expr, agent, kind.map(|k| vec![k]), limit, RANK_AT_MOST)?;
        self.hits(&expr, top)
    }

    /// The documents and snippets of ranked rowids.
    fn hits(&self, expr: &str, top: Vec<(i64, f64)>) -> Result<Vec<Hit>, StoreError> {
        let mut doc = self
            .conn
            .prepare(
                "SELECT d.kind, d.agent, d.ref, d.ts, d.title,
                        snippet(docs_fts, 1, '[', ']', '…', 16)
                 FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid
                 WHERE docs_fts MATCH ?1 AND docs_fts.rowid = ?2",
            )
            .map_err(self.err())?;
        let mut hits = Vec::with_capacity(top.len());
        for (rowid, rank) in top {
            let hit = doc
                .query_row(params![expr, rowid], |r| {
                    Ok(Hit {
                        kind: r.get(0)?,
                        agent: r.get(1)?,
                        reference: r.get(2)?,
                        ts: r.get(3)?,
                        title: r.get(4)?,
                        snippet: r.get(5)?,
                        rank,
                    })
                })
                .optional()
                .map_err(self.err())?;
            hits.extend(hit);
        }
        Ok(hits)
    }

    /// The rowids and bm25 ranks of the best `limit` matches of `expr`, filtered exactly by
    /// agent and kinds. Ranking scores every match, so for a word in thousands of documents
    /// only the newest `at_most` matches are ranked (rows are in time order): a search
    /// stays in single-digit milliseconds and favours what is recent.
    fn ranked(
        &self,
        expr: &str,
        agent: Option<&str>,
        kinds: Option<Vec<&str>>,
        limit: usize,
        at_most: usize,
    ) -> Result<Vec<(i64, f64)>, StoreError> {
        let kinds = kinds.map(|k| serde_json::to_string(&k).unwrap_or_default());
        let filtered = agent.is_some() || kinds.is_some();
        // Without a filter the full-text index answers alone (a join would cost a lookup per
        // match).
        let (newest, best) = if filtered {
            let filter = "(?2 IS NULL OR d.agent = ?2)
                 AND (?3 IS NULL OR d.kind IN (SELECT value FROM json_each(?3)))";
            (
                format!(
                    "SELECT f.rowid FROM docs_fts f JOIN docs d ON d.id = f.rowid
                     WHERE docs_fts MATCH ?1 AND {filter}
                     ORDER BY f.rowid DESC LIMIT 1 OFFSET ?4"
                ),
                format!(
                    "SELECT f.rowid, f.rank FROM docs_fts f JOIN docs d ON d.id = f.rowid
                     WHERE docs_fts MATCH ?1 AND f.rowid >= ?5 AND {filter}
                     ORDER BY f.rank LIMIT ?4"
                ),
            )
        } else {
            (
                "SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?1 AND ?2 IS NULL AND ?3 IS NULL
                 ORDER BY rowid DESC LIMIT 1 OFFSET ?4"
                    .to_string(),
                "SELECT rowid, rank FROM docs_fts WHERE docs_fts MATCH ?1 AND rowid >= ?5
                   AND ?2 IS NULL AND ?3 IS NULL
                 ORDER BY rank LIMIT ?4"
                    .to_string(),
            )
        };
        let since: i64 = self
            .conn
            .query_row(
                &newest,
                params![expr, agent, kinds, at_most as i64 - 1],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?
            .unwrap_or(i64::MIN);
        let mut stmt = self.conn.prepare(&best).map_err(self.err())?;
        let rows = stmt
            .query_map(params![expr, agent, kinds, limit as i64, since], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// An existing index opened for one quick read (the session-start hook): no rebuild, no
    /// catch-up, read-only, a short busy timeout. `None` when there is no usable index: the
    /// caller does without, it never waits for one to be built.
    pub fn open_for_read(fleet: &FleetDir) -> Option<Store> {
        let path = fleet.root.join(INDEX);
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
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

    /// `agent`'s earlier decisions and handoffs that share words with `text` (a task), best
    /// first: any word may match, so a long task still finds something. Documents whose
    /// reference is in `exclude` (the handoff already shown) are skipped.
    pub fn related(
        &self,
        agent: &str,
        text: &str,
        exclude: &[&str],
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let Some(expr) = fts_any_query(text, RELATED_WORDS) else {
            return Ok(Vec::new());
        };
        let expr = for_agent(&format!("({expr})"), Some(agent));
        let top = self.ranked(
            &expr,
            Some(agent),
            Some(vec!["decision", "handoff"]),
            limit + exclude.len(),
            RELATED_AT_MOST,
        )?;
        let hits = self.hits(&expr, top)?;
        Ok(hits
            .into_iter()
            .filter(|h| !exclude.contains(&h.reference.as_str()))
            .take(limit)
            .collect())
    }

    pub fn count(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("SELECT count(*) FROM docs", [], |r| r.get(0))
            .map_err(self.err())
    }

    /// Insert many handoffs in one transaction (the benchmark's bulk load).
    pub fn put_handoffs(&self, handoffs: &[handoff::Handoff]) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(self.err())?;
        for h in handoffs {
            self.put_handoff(h)?;
        }
        tx.commit().map_err(self.err())
    }
}

/// Words too common to narrow anything down: searching for them costs a scan of most of
/// the index and ranks nothing.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on",
    "or", "the", "to", "was", "with",
];

/// `expr` narrowed to one agent's documents inside the full-text index (the `agent_key`
/// column: the name as one hex token), so ranking never scores the rest of the fleet; the
/// exact match is checked in SQL too.
fn for_agent(expr: &str, agent: Option<&str>) -> String {
    match agent {
        Some(agent) => {
            let key: String = agent.bytes().map(|b| format!("{b:02x}")).collect();
            format!("{expr} AND agent_key : \"a{key}\"")
        }
        None => expr.to_string(),
    }
}

/// Up to `max` distinct content words of `text` (3 letters or more, no stop words), any of
/// which may match: the "what else is this about" query behind the startup context's
/// relevant earlier decisions. Longer words first: they narrow more.
pub fn fts_any_query(text: &str, max: usize) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    for w in text.split(|c: char| !c.is_alphanumeric() && c != '_') {
        let w = w.to_lowercase();
        if w.chars().count() >= 3 && !STOP_WORDS.contains(&w.as_str()) && !words.contains(&w) {
            words.push(w);
        }
    }
    words.sort_by_key(|w| std::cmp::Reverse(w.chars().count()));
    words.truncate(max);
    (!words.is_empty()).then(|| {
        words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" OR ")
    })
}

/// A user's words as an FTS5 expression: each word quoted (no operator can sneak in), all
/// required; a word ending in `*` (3 letters or more) is a prefix. Common English words are
/// dropped unless they are all there is. `None` when there is no word at all.
pub fn fts_query(query: &str) -> Option<String> {
    let words: Vec<(String, bool)> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_' && c != '*')
        .filter_map(|w| {
            let prefix = w.ends_with('*');
            let w: String = w.chars().filter(|c| *c != '*').collect();
            (!w.is_empty()).then(|| (w.clone(), prefix && w.chars().count() >= 3))
        })
        .collect();
    let content: Vec<&(String, bool)> = words
        .iter()
        .filter(|(w, _)| !STOP_WORDS.contains(&w.to_lowercase().as_str()))
        .collect();
    let chosen: Vec<&(String, bool)> = if content.is_empty() {
        words.iter().collect()
    } else {
        content
    };
    if chosen.is_empty() {
        return None;
    }
    Some(
        chosen
            .iter()
            .map(|(w, prefix)| format!("\"{w}\"{}", if *prefix { "*" } else { "" }))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_cannot_inject_fts_syntax() {
        assert_eq!(
            fts_query("auth patterns").as_deref(),
            Some("\"auth\" \"patterns\"")
        );
        // Operators are words (`OR` and `a` are also stop words).
        assert_eq!(
            fts_query("NEAR(a b) OR \"x").as_deref(),
            Some("\"NEAR\" \"b\" \"x\"")
        );
        assert_eq!(fts_query("  ***  "), None);
        assert_eq!(fts_query("the auth* of it").as_deref(), Some("\"auth\"*"));
        // Only stop words: searched as they are; a short prefix is a word.
        assert_eq!(fts_query("a* the").as_deref(), Some("\"a\" \"the\""));
    }

    fn handoff(agent: &str, i: usize, summary: &str, body: &str) -> handoff::Handoff {
        handoff::Handoff {
            id: format!("20260101T{i:06}Z-x"),
            agent: agent.into(),
            cli: "claude".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            trigger: handoff::Trigger::Manual,
            related: vec![],
            summary: summary.into(),
            body: body.into(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_common_word_ranks_the_newest_matches_and_an_agent_is_searched_alone() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(dir.path().join(".phoenix"));
        let store = Store::open(&fleet).unwrap();
        // The oldest handoff is the best match for "deploy" (in its title), but 2,100 newer
        // ones mention it too.
        let mut all = vec![handoff("a", 0, "deploy deploy rollback", "deploy")];
        all.extend((1..=RANK_AT_MOST + 100).map(|i| handoff("a", i, "routine", "deploy done")));
        all.push(handoff(
            "b",
            9_999,
            "other agent",
            "deploy from b, rollback plan",
        ));
        store.put_handoffs(&all).unwrap();

        let newest = store.search("deploy", None, None, 10).unwrap();
        assert_eq!(newest.len(), 10);
        assert!(newest.iter().all(|h| h.reference != "20260101T000000Z-x"));
        // A second word narrows the matches below the cap: the old one is found again.
        let narrowed = store.search("deploy rollback", None, None, 10).unwrap();
        assert_eq!(narrowed[0].reference, "20260101T000000Z-x", "{narrowed:?}");

        let only_b = store.search("deploy", Some("b"), None, 10).unwrap();
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].agent, "b");
        assert!(only_b[0].snippet.contains("[deploy]"), "{:?}", only_b[0]);
        assert!(
            store
                .search("deploy", Some("a"), None, 50)
                .unwrap()
                .iter()
                .all(|h| h.agent == "a")
        );
        // The startup context's query: any word, this agent, the shown handoff left out.
        let related = store.related("b", "prepare the rollback", &[], 3).unwrap();
        assert_eq!(related.len(), 1);
        assert_eq!(related[0].reference, "20260101T009999Z-x");
        assert!(
            store
                .related("b", "prepare the rollback", &["20260101T009999Z-x"], 3)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn any_word_queries_keep_the_longest_content_words() {
        assert_eq!(
            fts_any_query("Fix the OAuth login (oauth) for \"users\" OR x", 2).as_deref(),
            Some("\"oauth\" OR \"login\"")
        );
        assert_eq!(fts_any_query("a to of", 8), None);
    }

    /// Overwrite the middle of a file (several pages of a database) with garbage.
    fn corrupt_middle(path: &Path) {
        use std::io::{Seek, SeekFrom, Write};
        let len = std::fs::metadata(path).unwrap().len();
        assert!(
            len > 64 * 1024,
            "the index is big enough to corrupt its middle: {len}"
        );
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.seek(SeekFrom::Start(len / 2 - 16 * 1024)).unwrap();
        f.write_all(&[0xab; 32 * 1024]).unwrap();
    }

    fn every_handoff_is_found(fleet: &FleetDir, n: usize) {
        let store = Store::open(fleet).unwrap();
        for i in 0..n {
            let hits = store.search(&format!("uniq{i}x"), None, None, 5).unwrap();
            assert_eq!(hits.len(), 1, "handoff {i}: {hits:?}");
        }
    }

    #[test]
    fn a_partly_corrupt_index_is_rebuilt_into_a_new_file() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path().join(".phoenix"));
        let dir = fleet.agent("a");
        dir.ensure().unwrap();
        let n = 400;
        for i in 0..n {
            let body = format!("uniq{i}x {}", "filler words about the deploy ".repeat(20));
            handoff::write(&dir, &handoff("a", i, &format!("handoff {i}"), &body)).unwrap();
        }
        drop(Store::open(&fleet).unwrap());
        let index = fleet.root.join(INDEX);

        // `reindex` never reads the damaged file: it builds a new one and renames it in place.
        corrupt_middle(&index);
        let (_, documents) = Store::rebuild_fresh(&fleet).unwrap();
        assert!(documents >= n, "{documents}");
        every_handoff_is_found(&fleet, n);

        // The whole-file check finds damage that no query of the moment may meet.
        corrupt_middle(&index);
        drop(Store::open_checked(&fleet).unwrap());
        every_handoff_is_found(&fleet, n);

        // A search that meets the damage rebuilds and answers in full.
        corrupt_middle(&index);
        for i in [0, n / 2, n - 1] {
            let hits = search(&fleet, &format!("uniq{i}x"), None, None, 5).unwrap();
            assert_eq!(hits.len(), 1, "handoff {i}: {hits:?}");
        }
        every_handoff_is_found(&fleet, n);
        // An empty file (a create that was cut short) is rebuilt, not taken as a new index.
        std::fs::write(&index, b"").unwrap();
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", index.display()));
        }
        every_handoff_is_found(&fleet, n);

        let leftovers: Vec<String> = std::fs::read_dir(&fleet.root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
