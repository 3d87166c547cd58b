//! Test fixtures of the state dir: a fleet, or one agent of it, in a temp dir removed on drop.

use std::path::Path;

use tempfile::TempDir;

use super::{AgentDir, FleetDir};

/// A fleet whose state dir (`<tmp>/.phoenix`) exists.
pub fn temp_fleet() -> (TempDir, FleetDir) {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path().join(".phoenix"));
    fleet.ensure().unwrap();
    (tmp, fleet)
}

/// The names in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Agent `a` of such a fleet, its dir created.
pub fn temp_agent() -> (TempDir, AgentDir) {
    let (tmp, fleet) = temp_fleet();
    let dir = fleet.agent("a");
    dir.ensure().unwrap();
    (tmp, dir)
}
