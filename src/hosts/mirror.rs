//! The operator's mirror of every host's agent contexts: read-only copies of each agent's
//! handoffs, ledger, state, brief and resolved log under
//! `<state_dir>/hosts/mirror/<host>/<agent>/`, refreshed by [`refresh`] (`phoenix hosts
//! mirror`, and the operator's daemon). The files on the host stay the truth; the mirror is
//! what `phoenix move --from-unreachable` starts an agent from when its host is gone.
//! Each refresh asks only for the handoffs newer than the mirror's newest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::carry::{self, AgentContext, Mirrored};
use super::fleet::{self, Link, READ_TIMEOUT};
use super::moves::{self, Place};
use super::protocol::Call;
use crate::continuity::handoff;
use crate::error::Error;
use crate::spec::Spec;
use crate::state::{self, AgentDir};

/// When an agent's copy was last refreshed (RFC 3339), in its mirror dir.
const MIRRORED_AT: &str = ".mirrored_at";
/// Mirrored files are copies, never written through: read-only.
const MIRROR_MODE: u32 = 0o400;

/// The mirror dir of `agent` as mirrored from `host`.
pub fn dir(state_dir: &Path, host: &str, agent: &str) -> PathBuf {
    state_dir
        .join("hosts")
        .join("mirror")
        .join(host)
        .join(agent)
}

fn agent_dir(state_dir: &Path, host: &str, agent: &str) -> AgentDir {
    AgentDir {
        name: agent.to_string(),
        path: dir(state_dir, host, agent),
    }
}

/// What one host's refresh brought.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Refreshed {
    pub host: String,
    /// The agents whose copy is current now.
    pub agents: Vec<String>,
    /// Handoffs new in the mirror.
    pub new_handoffs: usize,
    /// Agents left for the next refresh (the host's reply was full).
    pub deferred: Vec<String>,
    /// Why the host's copies could not be refreshed (they stay as they were).
    pub error: Option<String>,
}

/// The agents placed on `host`: as the operator's record has them, or as the spec declares
/// the ones nobody moved yet.
fn placed_on(spec: &Spec, placements: &moves::Placements, host: &str) -> Vec<String> {
    let here = Place::Host(host.to_string());
    let mut names: Vec<String> = spec
        .remote_agents
        .iter()
        .map(|a| a.name.clone())
        .chain(spec.agents.iter().map(|a| a.name.clone()))
        .chain(placements.agents.keys().cloned())
        .filter(|a| placements.place_of(spec, a).as_ref() == Some(&here))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Refresh the mirror of every host's agents, all hosts at once (an unreachable host keeps
/// its last copies and says why).
pub fn refresh(spec: &Spec) -> crate::error::Result<Vec<Refreshed>> {
    let placements = moves::load(&spec.fleet.state_dir)?;
    let links = fleet::links(spec);
    Ok(fleet::each(&links, |link| {
        let agents = placed_on(spec, &placements, link.name());
        let mut refreshed = Refreshed {
            host: link.name().to_string(),
            ..Refreshed::default()
        };
        if let Err(e) = refresh_host(spec, link, &agents, &mut refreshed) {
            refreshed.error = Some(e.to_string());
        }
        refreshed
    }))
}

fn refresh_host(
    spec: &Spec,
    link: &Link,
    agents: &[String],
    refreshed: &mut Refreshed,
) -> crate::error::Result<()> {
    if agents.is_empty() {
        return Ok(());
    }
    let state_dir = &spec.fleet.state_dir;
    let have: BTreeMap<String, Option<String>> = agents
        .iter()
        .map(|a| {
            let newest = handoff::list_ids(&agent_dir(state_dir, link.name(), a)).pop();
            (a.clone(), newest)
        })
        .collect();
    let reply = link.ask(
        Call::Mirror {
            dir: link.host.dir.clone(),
            agents: have,
        },
        READ_TIMEOUT,
    )?;
    let mirrored: Mirrored = serde_json::from_value(reply.result)?;
    let now = state::now_rfc3339();
    for (agent, context) in &mirrored.agents {
        // Only what was asked for: a host cannot fill the mirror with other names.
        if !agents.contains(agent) || carry::check(context, agent).is_err() {
            continue;
        }
        let root = dir(state_dir, link.name(), agent);
        carry::write_files(&root, context, MIRROR_MODE).map_err(Error::msg)?;
        state::file::write_atomic(&root.join(MIRRORED_AT), now.as_bytes(), 0o600, true)?;
        refreshed.new_handoffs += context.handoff_ids().len();
        refreshed.agents.push(agent.clone());
    }
    refreshed.deferred = mirrored.deferred;
    Ok(())
}

/// The mirrored context of `agent` from `host` and when it was refreshed; `None` when the
/// mirror has none.
pub fn read(state_dir: &Path, host: &str, agent: &str) -> Option<(AgentContext, String)> {
    let dir = agent_dir(state_dir, host, agent);
    let at =
        state::bounded::read_string(&dir.file(MIRRORED_AT), 100, state::bounded::Links::Refuse)
            .ok()?;
    Some((carry::export(&dir, None), at.trim().to_string()))
}
