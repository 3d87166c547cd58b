//! Moves and stale copies in the combined plan and apply. An agent whose `host` in
//! phoenix.toml differs from where the placement record has it is a move: the plan shows it
//! once, with what travels ([`moves::preview`]), instead of a start on the target and a
//! removal on the source, and `apply` carries it out ([`moves::carry_out`]). A copy of an
//! agent on a machine it was moved away from is stale: the plan shows it, `apply` stops it
//! ([`moves::settle`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::combined::{HostPlan, Targets};
use super::moves::{self, Move, MoveOptions, MoveReport, Place, Placements, Preview, Stale};
use crate::error::{Error, Result};
use crate::plan::{Action, Plan};
use crate::spec::Spec;

/// Whether moves matter to a fleet without any `[[host]]`: its record places an agent off
/// this machine, or owes a machine its fence (the hosts were taken out of phoenix.toml).
pub fn record_places_elsewhere(spec: &Spec) -> Result<bool> {
    let placements = moves::load(&spec.fleet.state_dir)?;
    Ok(placements
        .agents
        .values()
        .any(|p| p.place != Place::Local || !p.owed_fences.is_empty()))
}

/// The moves phoenix.toml asks for against the record (of the agents `targets` names, when
/// it names some).
pub fn planned(spec: &Spec, placements: &Placements, targets: &Targets) -> Vec<Move> {
    moves::planned(spec, placements)
        .into_iter()
        .filter(|m| targets.takes(&m.agent))
        .collect()
}

/// phoenix.toml's text with every move of `planned` still undone: each moved agent where it
/// is placed. The hosts plan and apply their slices of it (a target does not start a moved
/// agent without its context, a source does not remove it before its handoff); each move
/// then sends its target the slice with the agent.
pub fn text_before(spec: &Spec, planned: &[Move]) -> Result<String> {
    let text = crate::state::bounded::read_string(
        &spec.file,
        crate::spec::MAX_CONFIG_BYTES,
        crate::state::bounded::Links::Follow,
    )?;
    planned
        .iter()
        .try_fold(text, |text, m| with_agent_on(spec, &text, m, &m.from))
}

/// Each move previewed; all asked at once, as each asks its two machines.
pub fn previews(spec: &Spec, planned: &[Move]) -> Vec<Preview> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = planned
            .iter()
            .map(|m| scope.spawn(move || preview(spec, m)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a move's preview does not panic"))
            .collect()
    })
}

fn preview(spec: &Spec, planned: &Move) -> Preview {
    moves::preview(spec, planned).unwrap_or_else(|e| Preview {
        planned: planned.clone(),
        source: None,
        problems: vec![said(&e)],
        warnings: Vec::new(),
    })
}

/// An error with its hint, in one line.
fn said(e: &Error) -> String {
    match e.hint() {
        Some(hint) => format!("{e} ({hint})"),
        None => e.to_string(),
    }
}

/// The moves and stale copies of one combined plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Moves {
    pub moves: Vec<Preview>,
    pub stale: Vec<Stale>,
}

impl Moves {
    /// The stale copies the answered parts' plans show (an agent running where phoenix.toml
    /// does not declare it, and placed elsewhere), plus the machines owed a fence; then every
    /// part's plan without what the moves and stale copies show in its stead.
    pub fn found(
        placements: &Placements,
        moves: Vec<Preview>,
        local: &mut Plan,
        hosts: &mut [HostPlan],
        targets: &Targets,
    ) -> Moves {
        let mut observed = vec![(Place::Local, undeclared_running(local))];
        for host in hosts.iter() {
            if let Ok(planned) = &host.outcome {
                observed.push((
                    Place::Host(host.host.clone()),
                    undeclared_running(&planned.plan),
                ));
            }
        }
        let stale: Vec<Stale> = moves::stale(placements, &observed)
            .into_iter()
            .filter(|s| targets.takes(&s.agent))
            .collect();
        let found = Moves { moves, stale };
        found.leave_out(local, &Place::Local);
        for host in hosts.iter_mut() {
            if let Ok(planned) = &mut host.outcome {
                found.leave_out(&mut planned.plan, &Place::Host(host.host.clone()));
            }
        }
        found
    }

    /// Take out of `place`'s plan every line of a moved agent (on this machine, planned on
    /// phoenix.toml as it is: its start here as a target, its removal as a source) and of a
    /// stale copy there: the move's or the copy's line says what happens to it.
    fn leave_out(&self, plan: &mut Plan, place: &Place) {
        let shown = |agent: &str| {
            self.moves.iter().any(|m| m.planned.agent == agent)
                || self
                    .stale
                    .iter()
                    .any(|s| s.agent == agent && &s.on == place)
        };
        plan.changes.retain(|c| !shown(&c.agent));
        plan.unmanaged.retain(|u| !shown(&u.agent));
        plan.attention.retain(|a| !shown(&a.agent));
    }

    /// Nothing to move, and no stale copy to stop or machine to tell.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty() && self.to_settle(|_| true).is_empty()
    }

    /// A move would be refused (the workdir missing on its target, its source unreachable…).
    pub fn refused(&self) -> impl Iterator<Item = &Preview> {
        self.moves.iter().filter(|m| !m.problems.is_empty())
    }

    /// The stale copies on observed machines where `on` holds: the ones `apply` settles.
    pub fn to_settle(&self, on: impl Fn(&Place) -> bool) -> Vec<Stale> {
        self.stale
            .iter()
            .filter(|s| s.running.is_some() && on(&s.on))
            .cloned()
            .collect()
    }

    /// Carry out the moves one at a time, in the order planned: each is sent phoenix.toml as
    /// it stands after the moves before it (so a target's slice never declares an agent whose
    /// own move has not happened), and each takes the record's lock. A move the plan found
    /// a problem with is not tried; one that fails does not stop the others.
    pub fn carry_out(
        &self,
        spec: &Spec,
        before: String,
        on_step: &dyn Fn(&str, &str),
    ) -> Result<Carried> {
        let mut text = before;
        let mut done = Vec::new();
        let mut sent = BTreeMap::new();
        for m in &self.moves {
            let planned = &m.planned;
            if !m.problems.is_empty() {
                done.push(MoveDone::failed(
                    planned,
                    format!("not moved: {}", m.problems.join("; ")),
                ));
                continue;
            }
            let options = MoveOptions {
                from_unreachable: false,
                fresh: false,
                from_text: Some(text.clone()),
            };
            let step = |s: &str| on_step(&planned.agent, s);
            match moves::carry_out(spec, &planned.agent, &planned.to, &options, &step) {
                Ok(report) => {
                    text = with_agent_on(spec, &text, planned, &planned.to)?;
                    if let Place::Host(host) = &planned.to {
                        sent.insert(host.clone(), text.clone());
                    }
                    done.push(MoveDone {
                        planned: planned.clone(),
                        ok: true,
                        error: None,
                        report: Some(report),
                    });
                }
                Err(e) => done.push(MoveDone::failed(planned, said(&e))),
            }
        }
        Ok(Carried {
            done,
            after: text,
            sent,
        })
    }
}

/// What [`Moves::carry_out`] did.
pub struct Carried {
    pub done: Vec<MoveDone>,
    /// phoenix.toml's text with the moves that went through (those that did not, undone).
    pub after: String,
    /// Per host a move went to, the text its slice was last cut from.
    pub sent: BTreeMap<String, String>,
}

/// The agents a plan shows running where phoenix.toml does not declare them (or declares
/// them and the machine stops them): where a stale copy shows.
fn undeclared_running(plan: &Plan) -> Vec<String> {
    let stops = plan
        .changes
        .iter()
        .filter(|c| matches!(c.action, Action::Prune { .. } | Action::Stop { .. }))
        .map(|c| c.agent.clone());
    let names: BTreeSet<String> = plan
        .unmanaged
        .iter()
        .map(|u| u.agent.clone())
        .chain(stops)
        .collect();
    names.into_iter().collect()
}

fn with_agent_on(spec: &Spec, text: &str, planned: &Move, place: &Place) -> Result<String> {
    super::slice::with_host(text, &planned.agent, place.host())
        .map_err(|e| Error::msg(format!("cannot read `{}`: {e}", spec.file.display())))?
        .ok_or_else(|| {
            Error::msg(format!(
                "no [[agent]] named `{}` in `{}`",
                planned.agent,
                spec.file.display()
            ))
        })
}

/// What `apply` did of one move.
#[derive(Debug, Clone, Serialize)]
pub struct MoveDone {
    #[serde(flatten)]
    pub planned: Move,
    pub ok: bool,
    /// Why it did not go through (the agent then runs where it ran, unless this says not).
    pub error: Option<String>,
    /// The move's report, as `phoenix move --json` gives it (`null` when it failed).
    pub report: Option<MoveReport>,
}

impl MoveDone {
    fn failed(planned: &Move, error: String) -> MoveDone {
        MoveDone {
            planned: planned.clone(),
            ok: false,
            error: Some(error),
            report: None,
        }
    }
}
