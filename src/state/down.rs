//! The operator's word that the fleet is down: `phoenix down` writes `<state_dir>/.down`
//! (when, RFC 3339) before it stops anything, and only the operator's `phoenix apply` of the
//! whole fleet takes it away. Until then nothing automatic brings an agent back: not the
//! daemon's reconcile, not a watchdog pass (`watchdog --once`, the daemon's, a cron's), not a
//! revival. A restart the operator asks for by name is the operator's own word, and goes.

use std::io;

use super::FleetDir;
use super::bounded::{self, Links};

/// The marker, in the fleet's state dir.
pub const DOWN: &str = ".down";

/// A timestamp, a line: anything longer was not written by phoenix.
const MAX_BYTES: u64 = 256;

/// Since when the fleet is down (`Some("")` when the marker says nothing readable), or `None`
/// when it is not.
pub fn since(fleet: &FleetDir) -> Option<String> {
    let path = fleet.root.join(DOWN);
    match bounded::read_string(&path, MAX_BYTES, Links::Refuse) {
        Ok(text) => Some(
            text.trim()
                .parse::<jiff::Timestamp>()
                .map(|t| t.to_string())
                .unwrap_or_default(),
        ),
        Err(e) if e.is_not_found() => None,
        // Something is there that cannot be read as the marker (a link, a FIFO, too big):
        // the fleet counts as down, as an unreadable word is still the operator's.
        Err(_) => Some(String::new()),
    }
}

/// Why automatic paths leave the fleet alone, for their output: `the fleet was taken down
/// with `phoenix down` (2026-12-01T21:00:00Z); `phoenix apply` brings it up`.
pub fn describe(since: &str) -> String {
    let when = if since.is_empty() {
        String::new()
    } else {
        format!(" ({since})")
    };
    format!("the fleet was taken down with `phoenix down`{when}; `phoenix apply` brings it up")
}

/// [`describe`] of the fleet, when it is down.
pub fn reason(fleet: &FleetDir) -> Option<String> {
    since(fleet).map(|s| describe(&s))
}

/// Record that the operator took the fleet down (the state dir must exist).
pub fn set(fleet: &FleetDir) -> io::Result<()> {
    super::atomic_write(
        &fleet.root.join(DOWN),
        jiff::Timestamp::now().to_string().as_bytes(),
    )
}

/// The operator brought the fleet up again.
pub fn clear(fleet: &FleetDir) -> io::Result<()> {
    match std::fs::remove_file(fleet.root.join(DOWN)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_until_cleared_and_an_unreadable_marker_still_counts() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        fleet.ensure().unwrap();
        assert_eq!(since(&fleet), None);
        set(&fleet).unwrap();
        let when = since(&fleet).unwrap();
        assert!(when.parse::<jiff::Timestamp>().is_ok(), "{when}");
        assert!(reason(&fleet).unwrap().contains("`phoenix down`"));
        clear(&fleet).unwrap();
        clear(&fleet).unwrap();
        assert_eq!(since(&fleet), None);
        // A link where the marker goes is not followed, and the fleet stays down.
        std::os::unix::fs::symlink("/etc/hostname", tmp.path().join(DOWN)).unwrap();
        assert_eq!(since(&fleet), Some(String::new()));
    }
}
