//! Keeping the index in step with the files: the full rebuild, and the catch-up at each open
//! (pending handoffs, changed briefs and ledgers, new critical events).

use std::path::Path;

use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use super::{PENDING, Store, StoreError};
use crate::state::AgentDir;
use crate::state::{handoff, ledger};

/// A file's modification time (ns) and size, as the index records them.
type Stamp = (i64, i64);

fn mtime_and_size(path: &Path) -> Option<Stamp> {
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

    /// The stamp `path` had when it was last indexed, and the one it has now.
    fn stamps(&self, path: &Path) -> Result<(Option<Stamp>, Option<Stamp>), StoreError> {
        let before = self
            .conn
            .query_row(
                "SELECT mtime, size FROM sources WHERE path = ?1",
                params![path.to_string_lossy()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        Ok((before, mtime_and_size(path)))
    }

    /// Has `path` changed since it was last indexed? Records the new stamp if so.
    fn changed(&self, path: &Path) -> Result<bool, StoreError> {
        let key = path.to_string_lossy().to_string();
        let (before, now) = self.stamps(path)?;
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

    /// Whether the index already holds everything `catch_up` would add (nothing pending, no
    /// brief or ledger changed, no new critical event), found by reading only: a search of an
    /// index that is current needs no write at all.
    pub(super) fn is_current(&self) -> Result<bool, StoreError> {
        if self.fleet.root.join(PENDING).exists() {
            return Ok(false);
        }
        // Every stamp at once (two per agent and the events' offset): one statement.
        let mut stmt = self
            .conn
            .prepare("SELECT path, mtime, size FROM sources")
            .map_err(self.err())?;
        let indexed: std::collections::HashMap<String, (i64, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
            .map_err(self.err())?
            .collect::<Result<_, _>>()
            .map_err(self.err())?;
        for dir in self.agent_dirs() {
            for path in [dir.file("brief.md"), dir.file(ledger::LEDGER)] {
                let before = indexed.get(path.to_string_lossy().as_ref()).copied();
                if before != mtime_and_size(&path) {
                    return Ok(false);
                }
            }
        }
        let size =
            std::fs::metadata(self.fleet.critical_events_path()).map_or(0, |m| m.len() as i64);
        let offset = indexed.get("events-offset").map_or(0, |(_, size)| *size);
        Ok(size == offset)
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
