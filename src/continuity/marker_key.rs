//! The marker key of a custom CLI's session: a random word phoenix gives the agent when its
//! CLI starts (`$PHOENIX_MARKER_KEY`, and named in the startup context phoenix pastes), which
//! each `->continuity:VERB#KEY` line it prints must carry. Text the agent only shows — a file
//! it `cat`s, a `grep`, a diff — was written before the session began and cannot know the
//! key: a marker in it without the key (or with another session's) is refused, not acted on.
//!
//! The key lives in the agent's state dir (`marker_key`, 0600, written atomically); the tap
//! reads it there for each marker it finds. A new CLI start issues a new key, so one seen in an
//! old screen, handoff or transcript is worth nothing. CLIs with hooks have no key: their
//! markers come from the model's own text at the end of a turn (`super::turn_markers`).

use std::io;

use crate::state::AgentDir;
use crate::state::bounded::{self, Links};

/// The file of the current session's key.
pub const MARKER_KEY: &str = "marker_key";
/// The environment variable the CLI gets its key in.
pub const ENV: &str = "PHOENIX_MARKER_KEY";
/// Characters of a key: 20 of 32 symbols, 100 bits.
const LEN: usize = 20;
const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";

/// Issue a new key for the session that starts now (the old one stops counting).
pub fn issue(dir: &AgentDir) -> io::Result<String> {
    let mut bytes = [0u8; LEN];
    io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let key: String = bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    // Atomic, not synced: every start issues a new key, so one a power loss took is only
    // replaced by the next start's; the sync cost each restart two fsyncs.
    crate::state::file::write_atomic(&dir.file(MARKER_KEY), key.as_bytes(), 0o600, false)?;
    Ok(key)
}

/// The current session's key, if one was issued (a small regular file of ours, never read
/// through a link).
pub fn current(dir: &AgentDir) -> Option<String> {
    let bytes = bounded::read_whole(&dir.file(MARKER_KEY), 256, Links::Refuse).ok()?;
    let key = String::from_utf8(bytes).ok()?.trim().to_string();
    well_formed(&key).then_some(key)
}

fn well_formed(key: &str) -> bool {
    key.len() == LEN && key.bytes().all(|b| ALPHABET.contains(&b))
}

/// Why a marker said with `said` (the key after its verb, if any) is not the agent's own, or
/// `Ok` when it carries the session's key.
pub fn check(current: Option<&str>, said: Option<&str>) -> Result<(), &'static str> {
    match (current, said) {
        (None, _) => Err("no marker key was given to this session"),
        (Some(_), None) => Err("a marker without the session's marker key"),
        (Some(key), Some(said)) if constant_time_eq(key.as_bytes(), said.as_bytes()) => Ok(()),
        (Some(_), Some(_)) => Err("a marker with a wrong marker key"),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_start_issues_a_new_key_and_only_it_counts() {
        let (_tmp, dir) = crate::state::testing::temp_agent();
        assert_eq!(current(&dir), None);
        assert!(check(None, Some("anything")).is_err());
        let first = issue(&dir).unwrap();
        assert_eq!(current(&dir).as_deref(), Some(first.as_str()));
        assert!(well_formed(&first), "{first}");
        let second = issue(&dir).unwrap();
        assert_ne!(first, second);
        let now = current(&dir);
        assert_eq!(check(now.as_deref(), Some(&second)), Ok(()));
        assert_eq!(
            check(now.as_deref(), Some(&first)),
            Err("a marker with a wrong marker key")
        );
        assert_eq!(
            check(now.as_deref(), None),
            Err("a marker without the session's marker key")
        );
        // A file planted in its place that is no key is none.
        std::fs::write(dir.file(MARKER_KEY), "not a key\n").unwrap();
        assert_eq!(current(&dir), None);
    }
}
