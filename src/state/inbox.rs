//! An agent's inbox (`inbox.jsonl`): messages from the operator and from other agents, kept
//! outside any session until they are delivered at a turn boundary, and kept a while after
//! (delivered ones) for `phoenix inbox`. One message a line, its delivery on the same line.
//!
//! Every change rewrites the file under its lock, atomically and durably (temp + fsync +
//! rename): a `kill -9` mid-write leaves the old inbox or the new one, never half of one. The
//! file is bounded (pending messages and their size are capped; delivered ones give way), and
//! so is every message. `inbox.pending` exists exactly while something is pending: a hook or
//! the wrapper knows an empty inbox from one `stat`, without parsing anything.

use std::io;

use serde::{Deserialize, Serialize};

use super::{AgentDir, file};

pub const INBOX: &str = "inbox.jsonl";
/// Exists while a message is pending; says `urgent` when one of them is.
pub const PENDING: &str = "inbox.pending";
/// Exists while a message handed to a session at its start waits for that session's first
/// prompt to confirm it reached the model.
pub const HANDED: &str = "inbox.handed";
const LOCK: &str = ".inbox.lock";
/// The largest message, in bytes (after sanitizing): a message is a note, not a file. A longer
/// text belongs in a file whose path the message names.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Pending messages an inbox holds at most: a recipient that never takes its messages must
/// not grow its inbox without end.
pub const MAX_PENDING: usize = 100;
/// Delivered messages kept for `phoenix inbox`.
const KEEP_DELIVERED: usize = 200;
/// The file is never read past this (it is far smaller: the caps above bound it).
const MAX_FILE_BYTES: u64 = 8 << 20;
/// A sender name: like an agent name, or `operator`.
const MAX_NAME: usize = 64;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub from: String,
    pub sent_at: String,
    pub text: String,
    #[serde(default)]
    pub urgent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<String>,
    /// How the delivery was confirmed: `prompt hook`, `input line cleared`, `screen changed`,
    /// `session start`, or `typed, unconfirmed` (pasted once, nothing confirmed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_by: Option<String>,
    /// The session whose startup context carried this message, until that session's first
    /// prompt confirms it: a session that ends (or is superseded) before any prompt never
    /// showed it to the model, and the message is pending again ([`reopen_handed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_to: Option<String>,
}

impl Message {
    pub fn is_pending(&self) -> bool {
        self.delivered_at.is_none()
    }
}

/// Why a message was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the message is empty (after removing control characters)")]
    Empty,
    #[error("the message contains control characters (only newlines and tabs may be kept)")]
    NotSanitized,
    #[error(
        "the message has {len} bytes, more than the {MAX_TEXT_BYTES} a message may have; write the text to a file and send its path"
    )]
    TooLong { len: usize },
    #[error(
        "sender name `{0}` is not valid: use at most {MAX_NAME} letters, digits, `-`, `_` or `.`"
    )]
    BadSender(String),
    #[error(
        "agent `{agent}` already has {MAX_PENDING} messages waiting; it takes them at its next turn boundary (see `phoenix inbox {agent}`)"
    )]
    Full { agent: String },
    #[error("cannot write the inbox `{path}`: {source}", path = path.display())]
    Io {
        path: std::path::PathBuf,
        source: io::Error,
    },
}

/// A sender name as phoenix accepts it: `operator`, an agent name, a short label.
pub fn valid_sender(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The messages of `dir`'s inbox, oldest first (none when it has no inbox). Lines that do not
/// parse are skipped: one bad line must not hide the others.
pub fn read(dir: &AgentDir) -> io::Result<Vec<Message>> {
    match file::read_bounded(&dir.file(INBOX), MAX_FILE_BYTES) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The pending messages, oldest first; nothing (and no read) when `inbox.pending` is absent.
pub fn pending(dir: &AgentDir) -> Vec<Message> {
    if !has_pending(dir) {
        return Vec::new();
    }
    read(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(Message::is_pending)
        .collect()
}

/// Is anything pending? One `stat`.
pub fn has_pending(dir: &AgentDir) -> bool {
    std::fs::symlink_metadata(dir.file(PENDING)).is_ok()
}

/// Is an urgent message pending? Reads the few bytes of `inbox.pending` only when it exists.
pub fn urgent_pending(dir: &AgentDir) -> bool {
    has_pending(dir) && file::read_text(&dir.file(PENDING)).is_some_and(|t| t.trim() == "urgent")
}

/// Put a message in `dir`'s inbox: `text` must already follow the paste rule (no control
/// characters but newline and tab: `world::inert::keyboard_text` makes it so; the caller
/// sanitizes, this layer only checks) and is bounded, `from` validated. Returns it as stored.
pub fn send(dir: &AgentDir, from: &str, text: &str, urgent: bool) -> Result<Message, SendError> {
    if !valid_sender(from) {
        return Err(SendError::BadSender(from.chars().take(80).collect()));
    }
    let text = text.trim().to_string();
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(SendError::NotSanitized);
    }
    if text.is_empty() {
        return Err(SendError::Empty);
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(SendError::TooLong { len: text.len() });
    }
    let io = |source| SendError::Io {
        path: dir.file(INBOX),
        source,
    };
    dir.ensure_usable().map_err(io)?;
    let now = super::now_rfc3339();
    let mut message = Message {
        id: String::new(),
        from: from.to_string(),
        sent_at: now,
        text,
        urgent,
        delivered_at: None,
        confirmed_by: None,
        handed_to: None,
    };
    let _lock = file::lock(&dir.file(LOCK)).map_err(io)?;
    let mut messages = read(dir).map_err(io)?;
    if messages.iter().filter(|m| m.is_pending()).count() >= MAX_PENDING {
        return Err(SendError::Full {
            agent: dir.name.clone(),
        });
    }
    message.id = message_id(&message.sent_at, from, &message.text, messages.len());
    messages.push(message.clone());
    write_locked(dir, messages).map_err(io)?;
    Ok(message)
}

/// Mark the messages `ids` delivered (confirmed by `how`), if they still are pending.
/// `handed_to`: the session whose startup context carried them, which still has to confirm
/// them with its first prompt ([`confirm_handed`]).
pub fn mark_delivered(
    dir: &AgentDir,
    ids: &[String],
    how: &str,
    handed_to: Option<&str>,
) -> io::Result<()> {
    let _lock = file::lock(&dir.file(LOCK))?;
    let mut messages = read(dir)?;
    let now = super::now_rfc3339();
    for m in messages.iter_mut().filter(|m| m.is_pending()) {
        if ids.contains(&m.id) {
            m.delivered_at = Some(now.clone());
            m.confirmed_by = Some(how.to_string());
            m.handed_to = handed_to.map(str::to_string);
        }
    }
    write_locked(dir, messages)
}

/// Session `session` had its first prompt: what its startup context carried reached the model.
/// Nothing waiting costs one `stat`. Returns how many were confirmed.
pub fn confirm_handed(dir: &AgentDir, session: &str) -> io::Result<usize> {
    change_handed(dir, |to| to == session, |m| m.handed_to = None)
}

/// Messages handed to a session other than `session` that never confirmed them (it ended, or a
/// CLI started it and then superseded it, before any prompt) are pending again. Nothing waiting
/// costs one `stat`. Returns their ids.
pub fn reopen_handed(dir: &AgentDir, session: Option<&str>) -> io::Result<Vec<String>> {
    let mut reopened = Vec::new();
    change_handed(
        dir,
        |to| Some(to) != session,
        |m| {
            m.delivered_at = None;
            m.confirmed_by = None;
            m.handed_to = None;
            reopened.push(m.id.clone());
        },
    )?;
    Ok(reopened)
}

/// `inbox.jsonl` was just carried in from another machine (an agent's move): a session there
/// never confirmed what it was handed, so that is pending again, and the markers are made to
/// match the file (or cleared, with no inbox carried).
pub fn carried_in(dir: &AgentDir) -> io::Result<()> {
    let _lock = file::lock(&dir.file(LOCK))?;
    if std::fs::symlink_metadata(dir.file(INBOX)).is_err() {
        dir.clear_marker(HANDED)?;
        return dir.clear_marker(PENDING);
    }
    let mut messages = read(dir)?;
    for m in messages.iter_mut().filter(|m| m.handed_to.is_some()) {
        m.delivered_at = None;
        m.confirmed_by = None;
        m.handed_to = None;
    }
    write_locked(dir, messages)
}

/// Apply `change` to every message handed to a session `which` picks.
fn change_handed(
    dir: &AgentDir,
    which: impl Fn(&str) -> bool,
    mut change: impl FnMut(&mut Message),
) -> io::Result<usize> {
    if std::fs::symlink_metadata(dir.file(HANDED)).is_err() {
        return Ok(0);
    }
    let _lock = file::lock(&dir.file(LOCK))?;
    let mut messages = read(dir)?;
    let mut changed = 0;
    for m in messages.iter_mut() {
        if m.handed_to.as_deref().is_some_and(&which) {
            change(m);
            changed += 1;
        }
    }
    write_locked(dir, messages)?;
    Ok(changed)
}

/// Write the inbox (the lock held): the oldest delivered messages beyond the ones kept are
/// dropped, and `inbox.pending` is made to say whether anything is pending.
fn write_locked(dir: &AgentDir, mut messages: Vec<Message>) -> io::Result<()> {
    let delivered = messages.iter().filter(|m| !m.is_pending()).count();
    let mut drop = delivered.saturating_sub(KEEP_DELIVERED);
    messages.retain(|m| {
        let gone = drop > 0 && !m.is_pending();
        drop -= usize::from(gone);
        !gone
    });
    let mut bytes = Vec::new();
    for m in &messages {
        serde_json::to_writer(&mut bytes, m).map_err(io::Error::other)?;
        bytes.push(b'\n');
    }
    super::atomic_write(&dir.file(INBOX), &bytes)?;
    if messages.iter().any(|m| m.handed_to.is_some()) {
        super::atomic_write(&dir.file(HANDED), b"handed\n")?;
    } else {
        dir.clear_marker(HANDED)?;
    }
    let pending: Vec<&Message> = messages.iter().filter(|m| m.is_pending()).collect();
    if pending.is_empty() {
        dir.clear_marker(PENDING)
    } else {
        let kind = if pending.iter().any(|m| m.urgent) {
            "urgent\n"
        } else {
            "pending\n"
        };
        super::atomic_write(&dir.file(PENDING), kind.as_bytes())?;
        // The wrapper sleeps until told: a message waits for it.
        super::doorbell::ring(dir);
        Ok(())
    }
}

/// `m-<time>-<digest>`: sortable by time, unique enough (the digest covers sender and text).
/// `seq`: the messages already in the inbox, so that two equal sends in one millisecond differ.
fn message_id(now: &str, from: &str, text: &str, seq: usize) -> String {
    let stamp: String = now.chars().filter(char::is_ascii_digit).collect();
    let digest = super::digest(format!("{now}\0{from}\0{text}\0{seq}").as_bytes());
    format!("m-{stamp}-{}", &digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_message_is_pending_until_delivered_and_the_marker_follows() {
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
        let dir = fleet.agent("bob");
        assert!(!has_pending(&dir));
        assert!(matches!(
            send(&dir, "alice", "hello\x1b[201~ there", false),
            Err(SendError::NotSanitized)
        ));
        let m = send(&dir, "alice", " hello [201~ there\n", false).unwrap();
        assert_eq!(m.text, "hello [201~ there");
        assert!(has_pending(&dir) && !urgent_pending(&dir));
        let mode = std::fs::metadata(dir.file(INBOX)).unwrap().permissions();
        assert_eq!(mode.mode() & 0o777, 0o600);
        send(&dir, "operator", "now", true).unwrap();
        assert!(urgent_pending(&dir));
        assert_eq!(pending(&dir).len(), 2);
        mark_delivered(&dir, std::slice::from_ref(&m.id), "prompt hook", None).unwrap();
        let left = pending(&dir);
        assert_eq!(left.len(), 1);
        assert!(urgent_pending(&dir));
        mark_delivered(&dir, &[left[0].id.clone()], "prompt hook", None).unwrap();
        assert!(!has_pending(&dir));
        let all = read(&dir).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].confirmed_by.as_deref(), Some("prompt hook"));
    }

    #[test]
    fn oversize_empty_and_badly_signed_messages_are_refused() {
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
        let dir = fleet.agent("bob");
        let big = "x".repeat(MAX_TEXT_BYTES + 1);
        let err = send(&dir, "alice", &big, false).unwrap_err();
        assert!(err.to_string().contains("more than the 16384"), "{err}");
        assert!(matches!(
            send(&dir, "alice", " \n ", false),
            Err(SendError::Empty)
        ));
        assert!(matches!(
            send(&dir, "../x", "hi", false),
            Err(SendError::BadSender(_))
        ));
        assert!(!has_pending(&dir));
    }

    #[test]
    fn a_full_inbox_refuses_and_delivered_messages_give_way() {
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
        let dir = fleet.agent("bob");
        for i in 0..MAX_PENDING {
            send(&dir, "alice", &format!("m{i}"), false).unwrap();
        }
        let err = send(&dir, "alice", "one more", false).unwrap_err();
        assert!(matches!(err, SendError::Full { .. }), "{err}");
        for _ in 0..3 {
            let ids: Vec<String> = pending(&dir).into_iter().map(|m| m.id).collect();
            mark_delivered(&dir, &ids, "prompt hook", None).unwrap();
            for i in 0..MAX_PENDING {
                send(&dir, "alice", &format!("again {i}"), false).unwrap();
            }
        }
        let all = read(&dir).unwrap();
        assert_eq!(all.iter().filter(|m| m.is_pending()).count(), MAX_PENDING);
        assert_eq!(all.len(), MAX_PENDING + KEEP_DELIVERED);
    }

    #[test]
    fn a_link_in_place_of_the_inbox_is_refused() {
        let (tmp, fleet) = crate::state::testing::temp_fleet();
        let dir = fleet.agent("bob");
        dir.ensure().unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.file(INBOX)).unwrap();
        assert!(send(&dir, "alice", "hi", false).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    }

    #[test]
    fn a_message_handed_to_a_session_that_never_prompts_is_pending_again_for_the_next() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = super::super::FleetDir::new(tmp.path()).agent("a");
        dir.ensure().unwrap();
        let m = send(&dir, "ci", "the build is green", false).unwrap();
        let ids = std::slice::from_ref(&m.id);
        mark_delivered(&dir, ids, "session start", Some("s1")).unwrap();
        assert!(pending(&dir).is_empty());
        assert!(dir.file(HANDED).exists());
        // The same session starting again (a second announcement) keeps it.
        assert!(reopen_handed(&dir, Some("s1")).unwrap().is_empty());
        // Another session starts before s1 ever prompted: it is pending again.
        assert_eq!(reopen_handed(&dir, Some("s2")).unwrap(), vec![m.id.clone()]);
        assert_eq!(pending(&dir).len(), 1);
        assert!(!dir.file(HANDED).exists());
        // Handed to s2, whose first prompt confirms it: nothing reopens it afterwards.
        mark_delivered(&dir, ids, "session start", Some("s2")).unwrap();
        assert_eq!(confirm_handed(&dir, "s1").unwrap(), 0);
        assert_eq!(confirm_handed(&dir, "s2").unwrap(), 1);
        assert!(!dir.file(HANDED).exists());
        assert!(reopen_handed(&dir, Some("s3")).unwrap().is_empty());
        let kept = &read(&dir).unwrap()[0];
        assert_eq!(kept.confirmed_by.as_deref(), Some("session start"));
        assert_eq!(kept.handed_to, None);
    }
}
