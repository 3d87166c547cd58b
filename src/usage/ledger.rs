//! One agent's usage ledger: `usage.jsonl` (tokens per hour and model, appended), and
//! `usage_state.json` (how far each session file was read, the days' totals). An update reads
//! what the agent's session files gained since the last one, appends it, then saves the state
//! (atomically, under its lock). A crash between the two leaves ledger lines the state does
//! not cover: the next update cuts them off (their bytes are read again), so nothing is
//! counted twice.
//!
//! The session files are found where the agent's hooks recorded them: each `session_start` in
//! ops.jsonl (read incrementally too) and state.json's current transcript; the CLI adds the
//! files it keeps beside one (Claude Code's subagents). `usage_reported.jsonl` holds what the
//! agent reported itself through the output tap.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::source::{self, Cursor, Entry, Kind, Source};
use crate::agent_cli::usage::Tokens;
use crate::spec::Cli;
use crate::state::bounded::{Links, ReadError};
use crate::state::file::{self as files, STATE_FILE_LIMIT};
use crate::state::store::{Loaded, read_state_file};
use crate::state::{self, AgentDir, FleetDir, JsonFile, OPS_LOG, Op};

/// Tokens per hour and model, appended.
pub const LEDGER: &str = "usage.jsonl";
/// How far the session files were read, and the last days' totals.
pub const STATE: &str = "usage_state.json";
/// What the agent reported itself (`->continuity:usage`).
pub const REPORTED: &str = "usage_reported.jsonl";

/// Files followed at most: the sessions that changed least recently are forgotten first.
const MAX_SOURCES: usize = 256;
/// Forgotten files whose offsets are kept at most (the oldest go first).
const MAX_FORGOTTEN: usize = 512;
/// A file unchanged this long keeps no response ids: its CLI repeats a response only within
/// its turn.
const RECENT_IDS_FOR_SECS: i64 = 86_400;
/// Bytes read from one file per update at most: a larger backlog is read over several.
pub const SOURCE_BUDGET: u64 = 256 << 20;
/// Bytes read from one file by a look that writes nothing (`phoenix status`, the dashboard's
/// stream, every few seconds): what is further behind waits for the next update.
const PEEK_BUDGET: u64 = 16 << 20;
/// Bytes of ops.jsonl read per update at most.
const OPS_BUDGET: u64 = 64 << 20;
/// Days whose totals the state keeps (today's for status and budgets, a week for a glance).
const DAYS_KEPT: usize = 8;
/// A ledger larger than this is compacted: its lines merged by hour and model.
const COMPACT_AT: u64 = 4 << 20;
/// A session file recorded but not there yet (Claude Code writes it with the first message)
/// is looked for this long.
const WAIT_FOR_FILE_SECS: i64 = 7 * 86_400;

/// The state of the ledger.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LedgerState {
    /// usage.jsonl's length after the last append this state covers.
    pub ledger_len: u64,
    /// How far ops.jsonl was read for the sessions' files.
    pub ops: Cursor,
    pub sources: Vec<Followed>,
    /// Where the files of sessions forgotten past `MAX_SOURCES` were read up to: a session
    /// resumed later goes on from there instead of being read again from its start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forgotten: Vec<Source>,
    /// Tokens per local day (`YYYY-MM-DD`) and model, the last `DAYS_KEPT` days.
    pub days: BTreeMap<String, BTreeMap<String, Tokens>>,
    /// The part of `days` the agent reported itself (`usage_reported.jsonl`): counted and
    /// shown, never enough alone to stop it (the budget check warns instead).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reported_days: BTreeMap<String, BTreeMap<String, Tokens>>,
}

/// A followed file and what the ledger keeps about it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Followed {
    #[serde(flatten)]
    pub source: Source,
    /// The session file it was found beside (a subagent's), not named by a hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beside: Option<String>,
    /// When it was first followed, and when it last gave usage (seconds since the epoch).
    pub added: i64,
    pub changed: i64,
}

/// One line of usage.jsonl: the tokens of one model within one hour (its local start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub hour: String,
    pub model: String,
    #[serde(flatten)]
    pub tokens: Tokens,
    #[serde(default)]
    pub responses: u64,
    /// Reported by the agent itself (`->continuity:usage`), not read from a CLI's records.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reported: bool,
}

/// What an update found.
#[derive(Debug, Clone, Default)]
pub struct Update {
    /// The local day it is (`YYYY-MM-DD`).
    pub day: String,
    /// Today's tokens per model.
    pub today: BTreeMap<String, Tokens>,
    /// The part of `today` the agent reported itself.
    pub reported_today: BTreeMap<String, Tokens>,
    /// The tokens of the current session (state.json's transcript), once its file was read.
    pub session: Option<Tokens>,
    /// Why the current session's file cannot be read (not a regular file…).
    pub session_unreadable: Option<String>,
    /// Why some usage is not counted.
    pub notes: Vec<String>,
}

/// Whether the agent has a ledger yet (`phoenix usage` or the daemon made one).
pub fn exists(dir: &AgentDir) -> bool {
    dir.file(STATE).exists()
}

fn state_file(dir: &AgentDir) -> JsonFile<LedgerState> {
    // Unsynced: an update must cost a few milliseconds, and a state lost to a power cut
    // (with the ledger lines it covers) is read again from the session files.
    JsonFile::new(dir, STATE, "usage").unsynced()
}

/// Bring the agent's ledger up to date with its session files, or with `persist` false only
/// say what an update would find (nothing is written: `phoenix status` reads this way, at most
/// `PEEK_BUDGET` bytes of each file beyond what the ledger has).
pub fn update(dir: &AgentDir, cli: Cli, persist: bool) -> crate::error::Result<Update> {
    let now = jiff::Timestamp::now();
    let mut update = Update {
        day: super::local_day(now.as_second()),
        ..Update::default()
    };
    if !dir.exists() {
        return Ok(update);
    }
    let file = state_file(dir);
    let _lock = persist.then(|| file.lock()).transpose()?;
    let (mut state, kept) = if persist {
        let loaded = file.load_locked()?;
        let kept = loaded.is_some();
        (repair_ledger(dir, !kept, loaded.unwrap_or_default())?, kept)
    } else {
        match file.read()? {
            state::Loaded::Valid(s) => (s, true),
            _ => (LedgerState::default(), false),
        }
    };
    let before = Marks::of(&state);
    // A look without a ledger yet follows the current session only: reading all of ops.jsonl
    // on every `status` would cost more than it tells.
    let sessions = persist || kept;
    let current = discover(
        dir,
        cli,
        &mut state,
        sessions,
        now.as_second(),
        &mut update.notes,
    );
    let budget = if persist { SOURCE_BUDGET } else { PEEK_BUDGET };
    let (entries, reported) = read_sources(
        &mut state,
        current.as_deref(),
        now.as_second(),
        budget,
        &mut update,
    );
    let mut lines = by_hour(&entries, now.as_second(), false);
    let reported = by_hour(&reported, now.as_second(), true);
    add_to_days(&mut state.reported_days, &reported);
    lines.extend(reported);
    add_to_days(&mut state.days, &lines);
    if persist {
        if !lines.is_empty() {
            append(dir, &mut state, &lines)?;
        }
        if Marks::of(&state) != before {
            file.save_locked(&state)?;
        }
    }
    update.today = state.days.get(&update.day).cloned().unwrap_or_default();
    update.reported_today = state
        .reported_days
        .get(&update.day)
        .cloned()
        .unwrap_or_default();
    Ok(update)
}

/// What tells whether an update changed the state: every cursor and the days' totals.
#[derive(PartialEq)]
struct Marks(u64, Cursor, Vec<(String, Cursor)>, usize);

impl Marks {
    fn of(state: &LedgerState) -> Marks {
        Marks(
            state.ledger_len,
            state.ops.clone(),
            state
                .sources
                .iter()
                .map(|f| (f.source.path.clone(), f.source.cursor.clone()))
                .collect(),
            state
                .days
                .values()
                .chain(state.reported_days.values())
                .map(BTreeMap::len)
                .sum(),
        )
    }
}

/// Make usage.jsonl what the state covers. Longer: an update appended and died before saving
/// the state; the extra lines are cut off (their bytes are read again). Shorter: the ledger
/// lost lines; recorded, and what is left is kept. A ledger without any state at all was left
/// by a state that is gone: it is set aside, since the session files are read again.
fn repair_ledger(
    dir: &AgentDir,
    no_state: bool,
    mut state: LedgerState,
) -> crate::error::Result<LedgerState> {
    let path = dir.file(LEDGER);
    // Opened as the append will be: a link or anything else planted there is moved aside
    // (and recorded) before its length means anything.
    let (ledger, refused) = files::open_append(&path)?;
    if let Some(aside) = refused {
        files::report_refused(&path, &aside);
    }
    let len = ledger.metadata()?.len();
    drop(ledger);
    let fleet = FleetDir::new(dir.fleet_root());
    if no_state && len > 0 {
        let stamp = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string();
        let aside = dir.file(&format!("{LEDGER}.orphan-{stamp}"));
        std::fs::rename(&path, &aside)?;
        let _ = fleet.record_critical(
            "usage_ledger_orphan",
            &dir.name,
            &format!("{LEDGER} had no {STATE}: its offsets are gone"),
            "set it aside; the session files are read again from their start",
            json!({"moved_to": aside}),
        );
        state.ledger_len = 0;
    } else if len > state.ledger_len {
        files::truncate(&path, state.ledger_len)?;
        let _ = dir.record_op(
            Op::UsageLedgerRepaired,
            json!({"from": len, "to": state.ledger_len,
                   "why": "lines of an update that did not finish; read again"}),
        );
    } else if len < state.ledger_len {
        let _ = fleet.record_critical(
            "usage_ledger_short",
            &dir.name,
            &format!(
                "{LEDGER} has {len} bytes, {} fewer than its state covers",
                state.ledger_len - len
            ),
            "kept what is left; the lost hours are not counted in `phoenix usage`",
            json!({"file": path, "len": len, "expected": state.ledger_len}),
        );
        state.ledger_len = len;
    }
    Ok(state)
}

/// Follow the files of every session started since the last update (with `sessions`), the
/// current one's, the ones the CLI keeps beside them, and the agent's own reports. Returns the
/// current session's file.
fn discover(
    dir: &AgentDir,
    cli: Cli,
    state: &mut LedgerState,
    sessions: bool,
    now: i64,
    notes: &mut Vec<String>,
) -> Option<String> {
    let mut named = Vec::new();
    let found = sessions.then(|| {
        let ops = dir.file(OPS_LOG);
        source::read_lines(&ops, &mut state.ops, OPS_BUDGET, Links::Refuse, |line| {
            if line.contains("\"transcript_path\"")
                && let Some(path) = started_session(line)
            {
                named.push(path);
            }
        })
    });
    match found {
        Some(Err(e)) if !e.is_not_found() => {
            notes.push(format!("{OPS_LOG}: {e}: new sessions not found"));
        }
        _ => {}
    }
    let current = match read_state_file(&dir.file(state::STATE)) {
        Ok(Loaded::Valid(s)) => s.transcript_path.filter(|p| !p.is_empty()),
        _ => None,
    };
    named.extend(current.clone());
    let mains: Vec<String> = state
        .sources
        .iter()
        .filter(|f| f.source.kind == Kind::Session && f.beside.is_none())
        .map(|f| f.source.path.clone())
        .chain(named.iter().cloned())
        .collect();
    for path in &named {
        follow(state, path, Kind::Session, None, now);
    }
    for main in mains {
        for file in cli
            .adapter()
            .usage_files(Path::new(&main))
            .into_iter()
            .skip(1)
        {
            let beside = Some(main.clone());
            follow(state, &file.to_string_lossy(), Kind::Session, beside, now);
        }
    }
    // What an agent reports itself counts only for a CLI read through its pane: one with hooks
    // has its own records, and a file it writes (or a line it shows) is no record of them.
    if cli.adapter().markers_at_turn_end() {
        state.sources.retain(|f| f.source.kind != Kind::Reported);
    } else {
        follow(
            state,
            &dir.file(REPORTED).to_string_lossy(),
            Kind::Reported,
            None,
            now,
        );
    }
    current
}

/// The transcript a `session_start` line of ops.jsonl names.
fn started_session(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    let event = v.get("event").and_then(Value::as_str)?;
    let op = Op::named(event, Value::Null);
    matches!(op, Op::SessionStart(_))
        .then(|| v.get("transcript_path")?.as_str().map(str::to_string))
        .flatten()
        .filter(|p| !p.is_empty())
}

fn follow(state: &mut LedgerState, path: &str, kind: Kind, beside: Option<String>, now: i64) {
    if state.sources.iter().any(|f| f.source.path == path) {
        return;
    }
    let source = match state.forgotten.iter().position(|s| s.path == path) {
        Some(k) => state.forgotten.remove(k),
        None => Source::new(path, kind),
    };
    state.sources.push(Followed {
        source,
        beside,
        added: now,
        changed: now,
    });
}

/// Read every followed file; forget those gone for good, and the sessions that changed least
/// recently past `MAX_SOURCES`.
fn read_sources(
    state: &mut LedgerState,
    current: Option<&str>,
    now: i64,
    budget: u64,
    update: &mut Update,
) -> (Vec<Entry>, Vec<Entry>) {
    let mut entries = Vec::new();
    let mut reported = Vec::new();
    state.sources.retain_mut(|f| {
        let is_current = current == Some(f.source.path.as_str());
        match f.source.read(budget) {
            Ok((new, lines)) => {
                if lines.skipped > 0 {
                    update.notes.push(format!(
                        "`{}`: {} line(s) longer than {} MiB skipped",
                        f.source.path,
                        lines.skipped,
                        source::MAX_LINE >> 20
                    ));
                }
                if lines.absurd > 0 {
                    update.notes.push(format!(
                        "`{}`: {} record(s) of more than {} tokens of a kind in one call not counted",
                        f.source.path,
                        lines.absurd,
                        source::MAX_PER_CALL
                    ));
                }
                if !new.is_empty() {
                    f.changed = now;
                }
                match f.source.kind {
                    Kind::Session => entries.extend(new),
                    Kind::Reported => reported.extend(new),
                }
                if is_current {
                    update.session = Some(f.source.session);
                }
                true
            }
            // Not written yet (a new session), or deleted: looked for a while, then forgotten.
            Err(e) if e.is_not_found() => {
                f.source.kind == Kind::Reported
                    || (f.source.cursor.ino == 0 && now - f.added < WAIT_FOR_FILE_SECS)
            }
            Err(e) => {
                if is_current {
                    update.session_unreadable = Some(e.to_string());
                } else {
                    update.notes.push(format!("{e}: its usage is not counted"));
                }
                is_current && !matches!(e, ReadError::TooLarge { .. })
            }
        }
    });
    for f in &mut state.sources {
        if now - f.changed > RECENT_IDS_FOR_SECS {
            f.source.recent.clear();
        }
    }
    evict(state, current);
    (entries, reported)
}

/// Forget the sessions that changed least recently until `MAX_SOURCES` files are followed: a
/// session goes with the files beside it (one of those forgotten alone would be found beside
/// it again, and read again from its start), and the current one stays.
fn evict(state: &mut LedgerState, current: Option<&str>) {
    if state.sources.len() <= MAX_SOURCES {
        return;
    }
    let mut sessions: Vec<(i64, String)> = state
        .sources
        .iter()
        .filter(|f| f.source.kind == Kind::Session && f.beside.is_none())
        .filter(|f| current != Some(f.source.path.as_str()))
        .map(|main| {
            let last = state
                .sources
                .iter()
                .filter(|f| f.beside.as_deref() == Some(main.source.path.as_str()))
                .map(|f| f.changed)
                .fold(main.changed, i64::max);
            (last, main.source.path.clone())
        })
        .collect();
    sessions.sort();
    for (_, main) in sessions {
        if state.sources.len() <= MAX_SOURCES {
            break;
        }
        let (gone, kept) = std::mem::take(&mut state.sources)
            .into_iter()
            .partition(|f| f.source.path == main || f.beside.as_deref() == Some(main.as_str()));
        state.sources = kept;
        state
            .forgotten
            .extend(gone.into_iter().map(|f: Followed| Source {
                recent: Vec::new(),
                ..f.source
            }));
    }
    let over = state.forgotten.len().saturating_sub(MAX_FORGOTTEN);
    state.forgotten.drain(..over);
}

/// The entries as ledger lines: per local hour and model, in order.
fn by_hour(entries: &[Entry], now: i64, reported: bool) -> Vec<Line> {
    let mut merged: BTreeMap<(i64, String), (Tokens, u64)> = BTreeMap::new();
    for e in entries {
        let hour = super::hour_start(e.at.unwrap_or(now));
        let slot = merged.entry((hour, e.model.clone())).or_default();
        slot.0.add(&e.tokens);
        slot.1 = slot.1.saturating_add(1);
    }
    merged
        .into_iter()
        .map(|((hour, model), (tokens, responses))| Line {
            hour: super::timestamp(hour),
            model,
            tokens,
            responses,
            reported,
        })
        .collect()
}

fn add_to_days(days: &mut BTreeMap<String, BTreeMap<String, Tokens>>, lines: &[Line]) {
    for line in lines {
        let Some(at) = super::seconds(&line.hour) else {
            continue;
        };
        days.entry(super::local_day(at))
            .or_default()
            .entry(line.model.clone())
            .or_default()
            .add(&line.tokens);
    }
    while days.len() > DAYS_KEPT {
        days.pop_first();
    }
}

/// Append the lines to usage.jsonl in one write, and compact it once it is large.
fn append(dir: &AgentDir, state: &mut LedgerState, lines: &[Line]) -> io::Result<()> {
    let path = dir.file(LEDGER);
    let mut bytes = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut bytes, line).map_err(io::Error::other)?;
        bytes.push(b'\n');
    }
    files::append(&path, &bytes)?;
    state.ledger_len = std::fs::symlink_metadata(&path)?.len();
    if state.ledger_len > COMPACT_AT {
        state.ledger_len = compact(&path)?;
    }
    Ok(())
}

/// Merge the ledger's lines by hour and model (one update appends a line per hour and model
/// it saw, so an agent at work for hours has many); returns the new length.
fn compact(path: &Path) -> io::Result<u64> {
    let bytes = files::read_bounded(path, STATE_FILE_LIMIT)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut merged: BTreeMap<(String, String, bool), (Tokens, u64)> = BTreeMap::new();
    let mut unreadable = Vec::new();
    for raw in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Line>(raw) {
            Ok(l) => {
                let slot = merged.entry((l.hour, l.model, l.reported)).or_default();
                slot.0.add(&l.tokens);
                slot.1 = slot.1.saturating_add(l.responses);
            }
            // Kept as they are: what they held is for a person to look at.
            Err(_) => unreadable.push(raw.to_string()),
        }
    }
    let mut out = Vec::new();
    for raw in unreadable {
        out.extend_from_slice(raw.as_bytes());
        out.push(b'\n');
    }
    for ((hour, model, reported), (tokens, responses)) in merged {
        let line = Line {
            hour,
            model,
            tokens,
            responses,
            reported,
        };
        serde_json::to_writer(&mut out, &line).map_err(io::Error::other)?;
        out.push(b'\n');
    }
    files::write_atomic(path, &out, 0o600, false)?;
    Ok(out.len() as u64)
}

/// Today's tokens per model as the last update saved them (the daemon's watchdog updates
/// every pass): one small file read, nothing followed, nothing written. For `/metrics`, whose
/// scrapes of a large fleet cannot afford to follow every session file.
pub fn saved_today(dir: &AgentDir) -> BTreeMap<String, Tokens> {
    let today = super::local_day(jiff::Timestamp::now().as_second());
    match state_file(dir).read() {
        Ok(state::Loaded::Valid(mut s)) => s.days.remove(&today).unwrap_or_default(),
        _ => BTreeMap::new(),
    }
}

/// Every line of the agent's ledger, and what could not be read.
pub fn lines(dir: &AgentDir) -> (Vec<Line>, Option<String>) {
    let path = dir.file(LEDGER);
    match files::read_bounded(&path, STATE_FILE_LIMIT) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let mut bad = 0;
            let lines = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .filter_map(|l| {
                    let parsed = serde_json::from_str::<Line>(l).ok();
                    bad += usize::from(parsed.is_none());
                    parsed
                })
                .collect();
            let note = (bad > 0).then(|| format!("{}: {bad} line(s) unreadable", path.display()));
            (lines, note)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), None),
        Err(e) => (Vec::new(), Some(format!("{}: {e}", path.display()))),
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
