//! Ranked search over the index: the user's words and a task's words as FTS5 expressions,
//! bm25 ranking of the newest matches, and the hits with their snippets.

use rusqlite::{OptionalExtension, params};

use super::{Hit, RANK_AT_MOST, RELATED_AT_MOST, RELATED_WORDS, Store, StoreError};

impl Store {
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
