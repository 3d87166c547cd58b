//! Test fixtures of the state dir: a fleet, or one agent of it, in a temp dir removed on drop.

use tempfile::TempDir;

use super::{AgentDir, FleetDir};

/// A fleet whose state dir (`<tmp>/.phoenix`) exists.
pub fn temp_fleet() -> (TempDir, FleetDir) {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path().join(".phoenix"));
    fleet.ensure().unwrap();
    (tmp, fleet)
}

/// Agent `a` of such a fleet, its dir created.
pub fn temp_agent() -> (TempDir, AgentDir) {
    let (tmp, fleet) = temp_fleet();
    let dir = fleet.agent("a");
    dir.ensure().unwrap();
    (tmp, dir)
}
