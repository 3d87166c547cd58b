//! Fences: the operator's latest word, on this machine, about where each moved agent runs.
//! When the operator moves an agent to another machine it tells this one "agent X runs on
//! gpu-2 since generation N"; from then on this machine's plan, apply, daemon and restarts
//! refuse to run X here, and stop a copy that still runs (a host that was unreachable during
//! the move, back with its stale copy). A word of a lower generation never overrides a
//! higher one, so a late or repeated message cannot bring a stale copy back.
//!
//! The file is `<state_dir>/fences.json`; agents nobody moved have no entry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{FleetDir, JsonFile, StateError};

pub const FENCES: &str = "fences.json";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fences {
    #[serde(default)]
    pub agents: BTreeMap<String, Fence>,
}

/// Where the operator placed one agent, as this machine was told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The operator's placement generation: bumped on every move of the agent.
    pub generation: u64,
    /// The agent runs here (`false`: on another machine; a copy here is stale).
    pub here: bool,
    /// Where it runs, for messages: a host's name, or `the operator's machine`.
    pub runs_on: String,
    /// When the operator placed it there (RFC 3339).
    #[serde(default)]
    pub since: String,
}

impl Fences {
    /// The fence that keeps `agent` from running here, if the operator placed it elsewhere.
    pub fn refused(&self, agent: &str) -> Option<&Fence> {
        self.agents.get(agent).filter(|f| !f.here)
    }

    /// Take the operator's word for each agent of `incoming` unless this machine already
    /// holds a newer one. Returns the agents whose fence changed.
    pub fn merge(&mut self, incoming: &BTreeMap<String, Fence>) -> Vec<String> {
        let mut changed = Vec::new();
        for (agent, fence) in incoming {
            let newer = self
                .agents
                .get(agent)
                .is_none_or(|held| fence.generation >= held.generation && held != fence);
            if newer {
                self.agents.insert(agent.clone(), fence.clone());
                changed.push(agent.clone());
            }
        }
        changed
    }
}

impl Fence {
    /// The words plan, status and refusals use: `moved to gpu-2 (generation 3)`.
    pub fn describe(&self) -> String {
        format!("moved to {} (generation {})", self.runs_on, self.generation)
    }
}

pub fn file(fleet: &FleetDir) -> JsonFile<Fences> {
    JsonFile::fleet(fleet, FENCES, "fences")
}

/// This machine's fences (none when the file is missing).
pub fn load(fleet: &FleetDir) -> Result<Fences, StateError> {
    Ok(file(fleet).load()?.unwrap_or_default())
}

/// The fence that keeps `agent` from running here, read from the state dir.
pub fn refused(fleet: &FleetDir, agent: &str) -> Option<Fence> {
    load(fleet).ok()?.refused(agent).cloned()
}

/// Merge `incoming` into the file under its lock; the agents whose fence changed.
pub fn merge(
    fleet: &FleetDir,
    incoming: &BTreeMap<String, Fence>,
) -> Result<Vec<String>, StateError> {
    file(fleet).update(|held| held.get_or_insert_with(Fences::default).merge(incoming))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(generation: u64, here: bool) -> Fence {
        Fence {
            generation,
            here,
            runs_on: "gpu-2".into(),
            since: String::new(),
        }
    }

    #[test]
    fn a_lower_generation_never_overrides_a_higher_one() {
        let (_tmp, fleet) = crate::state::testing::temp_fleet();
        let moved = BTreeMap::from([("a".to_string(), fence(3, false))]);
        assert_eq!(merge(&fleet, &moved).unwrap(), ["a"]);
        assert_eq!(refused(&fleet, "a").unwrap().generation, 3);
        // A late word from before the move changes nothing; a repeated one neither.
        let late = BTreeMap::from([("a".to_string(), fence(2, true))]);
        assert!(merge(&fleet, &late).unwrap().is_empty());
        assert!(merge(&fleet, &moved).unwrap().is_empty());
        assert!(refused(&fleet, "a").is_some());
        // Moved back here later: a higher generation lifts the fence.
        let back = BTreeMap::from([("a".to_string(), fence(4, true))]);
        assert_eq!(merge(&fleet, &back).unwrap(), ["a"]);
        assert!(refused(&fleet, "a").is_none());
        assert!(refused(&fleet, "never-moved").is_none());
        assert_eq!(fence(3, false).describe(), "moved to gpu-2 (generation 3)");
    }
}
