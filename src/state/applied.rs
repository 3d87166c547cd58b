//! Which phoenix.toml the operator last applied: `phoenix apply` of the whole fleet writes the
//! digest of the file it applied to `<state_dir>/applied`, under the fleet lock. A daemon with
//! `[fleet] reload = "plan"` reconciles toward that file, not toward an edit nobody applied:
//! it takes an edit over once this names it.

use std::io;

use super::FleetDir;
use super::bounded::{self, Links};

/// The record, in the fleet's state dir.
pub const APPLIED: &str = "applied";

/// A digest and a newline: anything longer was not written by phoenix.
const MAX_BYTES: u64 = 256;

/// The digest (`state::digest`) of the config file last applied, if one was recorded and
/// can be read.
pub fn digest(fleet: &FleetDir) -> Option<String> {
    bounded::read_string(&fleet.root.join(APPLIED), MAX_BYTES, Links::Refuse)
        .ok()
        .map(|text| text.trim().to_string())
        .filter(|d| !d.is_empty())
}

/// Record that the config file with this digest was applied (the state dir must exist).
pub fn record(fleet: &FleetDir, digest: &str) -> io::Result<()> {
    super::atomic_write(&fleet.root.join(APPLIED), format!("{digest}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_then_read_and_a_link_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        fleet.ensure().unwrap();
        assert_eq!(digest(&fleet), None);
        record(&fleet, "abc").unwrap();
        assert_eq!(digest(&fleet).as_deref(), Some("abc"));
        std::fs::remove_file(tmp.path().join(APPLIED)).unwrap();
        std::fs::write(tmp.path().join("elsewhere"), "abc\n").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), tmp.path().join(APPLIED)).unwrap();
        assert_eq!(digest(&fleet), None);
    }
}
