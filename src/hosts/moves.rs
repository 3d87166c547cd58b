//! Where each agent runs, as the operator last placed it, and what follows from it: the moves
//! a spec asks for ([`planned`]) and the stale copies left on machines an agent was moved
//! away from ([`stale`]). The record is `<state_dir>/hosts/placements.json` on the operator's
//! machine: per agent its place (a host, or `local` for this machine) and a generation that
//! every move bumps. Hosts are told the generations (their fences, `state::fence`), so a
//! host that missed a move refuses its stale copy once it hears of it.
//!
//! Carrying a move out is [`carry_out`]; settling stale copies is [`settle`] and [`cleanup`]
//! (see `moving`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::spec::Spec;
use crate::state::fence::Fence;
use crate::state::{self, FleetDir};

pub use super::moving::{
    Carried, CleanupReport, MoveOptions, MoveReport, Preview, Settled, carry_out, cleanup, preview,
    settle, settle_owed,
};

/// The record, under the operator's state dir.
pub const PLACEMENTS: &str = "hosts/placements.json";
/// Held by a move (and a cleanup) from its first look to its record: one at a time.
pub const MOVE_LOCK: &str = "hosts/move.lock";
/// The word `--to` takes for the operator's own machine (no host may be named so).
pub const LOCAL: &str = "local";
const MAX_PLACEMENTS_BYTES: u64 = 4 << 20;

/// Where an agent runs: the operator's machine, or one of the spec's hosts. In JSON, the
/// host's name or `"local"`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Place {
    Local,
    Host(String),
}

impl From<String> for Place {
    fn from(s: String) -> Place {
        if s == LOCAL {
            Place::Local
        } else {
            Place::Host(s)
        }
    }
}

impl From<Place> for String {
    fn from(p: Place) -> String {
        p.to_string()
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Local => f.write_str(LOCAL),
            Place::Host(h) => f.write_str(h),
        }
    }
}

impl Place {
    /// Where `spec` declares `agent` (`None`: not declared at all).
    pub fn in_spec(spec: &Spec, agent: &str) -> Option<Place> {
        if spec.agent(agent).is_some() {
            return Some(Place::Local);
        }
        spec.remote_agents
            .iter()
            .find(|a| a.name == agent)
            .map(|a| Place::Host(a.host.clone()))
    }

    /// `--to`'s word: `local`, or a host the spec declares.
    pub fn parse(spec: &Spec, word: &str) -> crate::error::Result<Place> {
        if word == LOCAL {
            return Ok(Place::Local);
        }
        if spec.hosts.iter().any(|h| h.name == word) {
            return Ok(Place::Host(word.to_string()));
        }
        let mut names: Vec<&str> = spec.hosts.iter().map(|h| h.name.as_str()).collect();
        names.push(LOCAL);
        Err(Error::with_hint(
            format!("no host `{word}` in `{}`", spec.file.display()),
            format!(
                "{}; `local` is this machine",
                crate::diag::suggest(word, &names)
            ),
        ))
    }

    pub fn host(&self) -> Option<&str> {
        match self {
            Place::Local => None,
            Place::Host(h) => Some(h),
        }
    }

    /// For a host's fence messages: where the agent runs, seen from another machine.
    pub fn runs_on(&self) -> String {
        match self {
            Place::Local => "the operator's machine".into(),
            Place::Host(h) => h.clone(),
        }
    }
}

/// Every agent the operator placed, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Placements {
    #[serde(default)]
    pub agents: BTreeMap<String, Placement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub place: Place,
    /// Bumped by every move: a host holding a lower one for the agent runs a stale copy.
    pub generation: u64,
    /// When it was placed there (RFC 3339).
    pub since: String,
    /// Machines the agent was moved away from that have not been told yet (they were
    /// unreachable): [`cleanup`] tells them and stops their copies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owed_fences: Vec<Place>,
}

impl Placements {
    /// Where `agent` runs: as recorded, else where the spec declares it (an agent nobody
    /// moved yet is where it was declared).
    pub fn place_of(&self, spec: &Spec, agent: &str) -> Option<Place> {
        self.agents
            .get(agent)
            .map(|p| p.place.clone())
            .or_else(|| Place::in_spec(spec, agent))
    }

    pub fn generation(&self, agent: &str) -> u64 {
        self.agents.get(agent).map_or(0, |p| p.generation)
    }
}

/// A move the spec asks for: the agent's `host` names another place than the one recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub agent: String,
    pub from: Place,
    pub to: Place,
}

/// The moves `spec` asks for against the record: every declared agent whose place in the
/// spec differs from its recorded one. An agent without a record is not a move (it is
/// started where declared). Pure.
pub fn planned(spec: &Spec, placements: &Placements) -> Vec<Move> {
    let declared = spec
        .agents
        .iter()
        .map(|a| (a.name.as_str(), Place::Local))
        .chain(
            spec.remote_agents
                .iter()
                .map(|a| (a.name.as_str(), Place::Host(a.host.clone()))),
        );
    declared
        .filter_map(|(agent, to)| {
            let from = placements.agents.get(agent)?.place.clone();
            (from != to).then(|| Move {
                agent: agent.to_string(),
                from,
                to,
            })
        })
        .collect()
}

/// A copy of an agent on a machine it was moved away from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stale {
    pub agent: String,
    /// The machine with the stale copy.
    pub on: Place,
    /// Where the agent is placed.
    pub placed: Place,
    pub generation: u64,
    /// Its pane runs there (`None`: that machine was not observed, the fence is owed).
    pub running: Option<bool>,
}

/// The stale copies: an agent `observed` running (per machine, the names of its running
/// agents) somewhere other than where it is placed, and every machine still owed a fence
/// (not observed running: unreachable, or down until its daemon starts the copy again).
/// Pure.
pub fn stale(placements: &Placements, observed: &[(Place, Vec<String>)]) -> Vec<Stale> {
    let mut found: Vec<Stale> = Vec::new();
    for (on, running) in observed {
        for agent in running {
            let Some(p) = placements.agents.get(agent) else {
                continue;
            };
            if &p.place != on {
                found.push(Stale {
                    agent: agent.clone(),
                    on: on.clone(),
                    placed: p.place.clone(),
                    generation: p.generation,
                    running: Some(true),
                });
            }
        }
    }
    for (agent, p) in &placements.agents {
        for on in &p.owed_fences {
            if found.iter().any(|s| &s.agent == agent && &s.on == on) {
                continue;
            }
            let seen = observed.iter().any(|(place, _)| place == on);
            found.push(Stale {
                agent: agent.clone(),
                on: on.clone(),
                placed: p.place.clone(),
                generation: p.generation,
                running: seen.then_some(false),
            });
        }
    }
    found
}

/// The fences `on` is owed: per agent moved away from it while it was unreachable, where
/// the agent runs now. Pure.
pub fn owed_to(placements: &Placements, on: &Place) -> BTreeMap<String, Fence> {
    placements
        .agents
        .iter()
        .filter(|(_, p)| p.owed_fences.contains(on) && &p.place != on)
        .map(|(agent, p)| (agent.clone(), p.fence_elsewhere()))
        .collect()
}

impl Placement {
    /// The word for a machine the agent was moved away from: it runs elsewhere, since when
    /// it was placed (the same word each time it is sent, so a host records it once).
    pub fn fence_elsewhere(&self) -> Fence {
        Fence {
            generation: self.generation,
            here: false,
            runs_on: self.place.runs_on(),
            since: self.since.clone(),
        }
    }
}

/// `host` answered the fences `sent` (its stale copies are stopped, or never ran): those
/// still owed at the same generation are owed no more. Takes the record's lock without
/// waiting (a move or cleanup holding it settles the record itself; the fences are sent
/// again at the next contact, and a host records a word it holds once).
pub fn fences_delivered(
    state_dir: &Path,
    host: &str,
    sent: &BTreeMap<String, Fence>,
) -> crate::error::Result<()> {
    if sent.is_empty() {
        return Ok(());
    }
    let fleet = FleetDir::new(state_dir);
    let _lock = state::lock::FleetLock::acquire_file(
        &fleet,
        MOVE_LOCK,
        "record delivered fences",
        std::time::Duration::ZERO,
        |_| {},
    )?;
    let mut placements = load(state_dir)?;
    let on = Place::Host(host.to_string());
    let mut changed = false;
    for (agent, fence) in sent {
        if let Some(p) = placements.agents.get_mut(agent)
            && p.generation == fence.generation
            && p.owed_fences.contains(&on)
        {
            p.owed_fences.retain(|o| o != &on);
            changed = true;
        }
    }
    if changed {
        save(state_dir, &placements)?;
    }
    Ok(())
}

/// Record where `spec` places every agent that has no record yet (generation 0), so that a
/// later change of its `host` is a move. The combined `apply` calls this once the spec is
/// applied (an agent placed before the record existed is where it was declared); the agents
/// recorded now.
pub fn adopt(spec: &Spec) -> crate::error::Result<Vec<String>> {
    let state_dir = &spec.fleet.state_dir;
    let _lock = lock(state_dir, "adopt placements", |_| {})?;
    let mut placements = load(state_dir)?;
    let since = state::now_rfc3339();
    let declared = spec
        .agent_names()
        .into_iter()
        .map(str::to_string)
        .chain(spec.remote_agents.iter().map(|a| a.name.clone()));
    let mut adopted = Vec::new();
    for agent in declared {
        if placements.agents.contains_key(&agent) {
            continue;
        }
        let place = Place::in_spec(spec, &agent).expect("a declared agent has a place");
        placements.agents.insert(
            agent.clone(),
            Placement {
                place,
                generation: 0,
                since: since.clone(),
                owed_fences: Vec::new(),
            },
        );
        adopted.push(agent);
    }
    if !adopted.is_empty() {
        save(state_dir, &placements)?;
    }
    Ok(adopted)
}

fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(PLACEMENTS)
}

/// The record (empty before the first move). A record that cannot be read is an error, never
/// an empty one: forgetting the generations would let a stale copy look current.
pub fn load(state_dir: &Path) -> crate::error::Result<Placements> {
    let file = path(state_dir);
    match state::file::read_bounded(&file, MAX_PLACEMENTS_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            Error::with_hint(
                format!("`{}` is not a placement record: {e}", file.display()),
                "restore it from a backup, or fix it by hand: it holds where each moved agent runs and its generation",
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Placements::default()),
        Err(e) => Err(Error::msg(format!("cannot read `{}`: {e}", file.display()))),
    }
}

/// Write the record whole (the caller holds [`MOVE_LOCK`]).
pub fn save(state_dir: &Path, placements: &Placements) -> crate::error::Result<()> {
    let file = path(state_dir);
    let parent = file.parent().unwrap_or(state_dir);
    state::create_private_dir(parent)
        .map_err(|e| Error::msg(format!("cannot make `{}`: {e}", parent.display())))?;
    let bytes = serde_json::to_vec_pretty(placements)?;
    state::file::write_atomic(&file, &bytes, 0o600, true)
        .map_err(|e| Error::msg(format!("cannot write `{}`: {e}", file.display())))
}

/// Take [`MOVE_LOCK`] for `what`: one move or cleanup at a time.
pub fn lock(
    state_dir: &Path,
    what: &str,
    on_wait: impl FnOnce(&str),
) -> crate::error::Result<state::lock::FleetLock> {
    let fleet = FleetDir::new(state_dir);
    fleet.ensure()?;
    let hosts = state_dir.join("hosts");
    state::create_private_dir(&hosts)?;
    Ok(state::lock::FleetLock::acquire_file(
        &fleet,
        MOVE_LOCK,
        what,
        state::lock::LOCK_WAIT,
        on_wait,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        crate::spec::parse(
            "[[host]]\nname = \"gpu-1\"\nssh = \"a@b\"\n\n[[host]]\nname = \"gpu-2\"\nssh = \"a@c\"\n\n\
             [[agent]]\nname = \"here\"\ncommand = \"x\"\n\n\
             [[agent]]\nname = \"trades\"\ncommand = \"x\"\nhost = \"gpu-2\"\n\n\
             [[agent]]\nname = \"new\"\ncommand = \"x\"\nhost = \"gpu-1\"\n",
            Path::new("/tmp/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap()
    }

    fn placed(place: Place, generation: u64) -> Placement {
        Placement {
            place,
            generation,
            since: String::new(),
            owed_fences: Vec::new(),
        }
    }

    #[test]
    fn a_changed_host_is_a_move_and_an_unrecorded_agent_is_not() {
        let spec = spec();
        let mut placements = Placements::default();
        placements
            .agents
            .insert("trades".into(), placed(Place::Host("gpu-1".into()), 1));
        placements
            .agents
            .insert("here".into(), placed(Place::Host("gpu-2".into()), 4));
        let moves = planned(&spec, &placements);
        assert_eq!(
            moves,
            [
                Move {
                    agent: "here".into(),
                    from: Place::Host("gpu-2".into()),
                    to: Place::Local
                },
                Move {
                    agent: "trades".into(),
                    from: Place::Host("gpu-1".into()),
                    to: Place::Host("gpu-2".into())
                },
            ]
        );
        assert_eq!(
            placements.place_of(&spec, "new"),
            Some(Place::Host("gpu-1".into()))
        );
        assert_eq!(
            serde_json::to_value(&moves[0]).unwrap(),
            serde_json::json!({"agent": "here", "from": "gpu-2", "to": "local"})
        );
        assert!(Place::parse(&spec, "gpu-3").is_err());
        assert_eq!(Place::parse(&spec, "local").unwrap(), Place::Local);
    }

    #[test]
    fn a_copy_running_off_its_place_and_an_owed_fence_are_stale() {
        let mut placements = Placements::default();
        let mut trades = placed(Place::Host("gpu-2".into()), 3);
        trades.owed_fences.push(Place::Host("gpu-1".into()));
        placements.agents.insert("trades".into(), trades);
        placements
            .agents
            .insert("other".into(), placed(Place::Local, 2));
        let gpu1 = Place::Host("gpu-1".into());
        // gpu-1 unreachable: the owed fence, running unknown.
        let found = stale(&placements, &[(Place::Local, vec!["other".into()])]);
        assert_eq!(found.len(), 1);
        assert_eq!((&found[0].on, found[0].running), (&gpu1, None));
        // gpu-1 back with its copy running.
        let found = stale(
            &placements,
            &[
                (gpu1.clone(), vec!["trades".into(), "unplaced".into()]),
                (Place::Host("gpu-2".into()), vec!["trades".into()]),
            ],
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].running, Some(true));
        assert_eq!(found[0].generation, 3);
    }

    #[test]
    fn the_record_round_trips_and_a_broken_one_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(load(tmp.path()).unwrap(), Placements::default());
        let mut placements = Placements::default();
        placements
            .agents
            .insert("a".into(), placed(Place::Host("gpu-1".into()), 2));
        save(tmp.path(), &placements).unwrap();
        assert_eq!(load(tmp.path()).unwrap(), placements);
        std::fs::write(path(tmp.path()), "{").unwrap();
        assert!(load(tmp.path()).is_err());
        let _ = std::fs::remove_file(path(tmp.path()));
    }

    #[test]
    fn adopting_records_where_the_spec_places_the_unrecorded_agents() {
        let tmp = tempfile::tempdir().unwrap();
        let mut spec = spec();
        spec.fleet.state_dir = tmp.path().join(".phoenix");
        assert_eq!(adopt(&spec).unwrap(), ["here", "trades", "new"]);
        let placements = load(&spec.fleet.state_dir).unwrap();
        assert_eq!(
            placements.agents["trades"].place,
            Place::Host("gpu-2".into())
        );
        assert!(planned(&spec, &placements).is_empty());
        assert!(adopt(&spec).unwrap().is_empty());
    }
}
