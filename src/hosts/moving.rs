//! Carrying a move out: `phoenix move`, and the combined `apply` for the moves its plan
//! shows. In order: check the target can run the agent (its CLI, its workdir) and does not
//! run it already, stop the agent on the source as a planned stop and save a handoff there
//! (reason `move`: saved after the stop, it is the newest and holds all the session did),
//! carry its externalized state to the target, start it there fresh with that context,
//! record the placement, fence the source off and write the agent's new `host` into
//! phoenix.toml. Nothing stops before every check passed; once the agent stopped, a failing
//! step starts it again where it was. With `--from-unreachable` the context comes from the
//! operator's mirror and the source is owed its fence until it answers again ([`cleanup`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::carry::{AgentContext, Fenced, HandoffRef, Summary};
use super::fleet::{self, Link, READ_TIMEOUT};
use super::moves::{self, Move, Place, Placement, Placements, Stale};
use super::side::{Side, failure};
use crate::error::Error;
use crate::spec::Spec;
use crate::state::fence::Fence;

#[derive(Debug, Clone, Default)]
pub struct MoveOptions {
    /// The source host is gone: start from the operator's mirror of its context, and owe
    /// it the fence until it answers again.
    pub from_unreachable: bool,
    /// With `from_unreachable`: no copy of the context kept, start the agent without one.
    pub fresh: bool,
    /// phoenix.toml declares the move already (the combined `apply`): the text to move
    /// from, with the agent still where it is placed (and any move not carried out yet still
    /// at its source). Slices are cut from it, and phoenix.toml is not written.
    pub from_text: Option<String>,
}

/// What travelled.
#[derive(Debug, Clone, Serialize)]
pub struct Carried {
    pub files: usize,
    pub handoffs: usize,
    pub latest_handoff: Option<HandoffRef>,
    /// From the operator's mirror (`--from-unreachable`): when it was last refreshed.
    pub mirrored_at: Option<String>,
    pub left_out: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MoveReport {
    pub agent: String,
    pub from: Place,
    pub to: Place,
    pub generation: u64,
    /// `false`: it was placed there already; nothing ran.
    pub moved: bool,
    /// The handoff saved on the source before the stop (reason `move`).
    pub handoff: Option<String>,
    pub carried: Option<Carried>,
    /// phoenix.toml was rewritten to declare the agent on `to`.
    pub spec_written: bool,
    /// Machines still owed the fence (unreachable): `phoenix move --cleanup` tells them.
    pub owed_fences: Vec<Place>,
    pub warnings: Vec<String>,
}

/// One move, as the combined plan shows it before applying it.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    #[serde(flatten)]
    pub planned: Move,
    /// What the source has (`None`: unreachable, see `problems`).
    pub source: Option<Summary>,
    /// Why the move cannot run now (the workdir missing on the target, …).
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
}

impl Preview {
    /// `move gpu-1 → gpu-2 (latest handoff 2026-…, ledger and open loops carried)`.
    pub fn line(&self) -> String {
        let Move { from, to, .. } = &self.planned;
        let what = match &self.source {
            None => {
                "source unreachable: `phoenix move --from-unreachable` starts it from the mirror"
                    .to_string()
            }
            Some(s) => {
                let mut carried = vec!["ledger and open loops carried".to_string()];
                if let Some(h) = &s.latest_handoff {
                    carried.insert(0, format!("latest handoff {}", h.created_at));
                }
                carried.join(", ")
            }
        };
        format!("move {from} → {to} ({what})")
    }
}

/// What the combined plan shows for `planned`: the source's context and the target's checks.
/// Asks both machines; changes nothing.
pub fn preview(spec: &Spec, planned: &Move) -> crate::error::Result<Preview> {
    let links = fleet::links(spec);
    let text = spec_text(&spec.file)?;
    let moved = moved_text(spec, &text, &planned.agent, &planned.to)?;
    let mut preview = Preview {
        planned: planned.clone(),
        source: None,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    match side(spec, &links, &planned.to)
        .and_then(|t| target_problems(&t, spec, &moved, &planned.agent))
    {
        Ok(problems) => preview.problems = problems,
        Err(e) => preview.problems.push(e.to_string()),
    }
    let before = spec_at(spec, &text, &planned.agent, &planned.from)?;
    match side(&before, &links, &planned.from).and_then(|s| s.summary(&planned.agent)) {
        Ok(summary) => {
            preview.warnings = git_warnings(&summary, &planned.from, &planned.to);
            preview.source = Some(summary);
        }
        Err(e) => preview.problems.push(e.to_string()),
    }
    Ok(preview)
}

/// Move `agent` to `to` (see the module's description). `on_step` hears each step as it
/// starts, for a person watching.
pub fn carry_out(
    spec: &Spec,
    agent: &str,
    to: &Place,
    options: &MoveOptions,
    on_step: &dyn Fn(&str),
) -> crate::error::Result<MoveReport> {
    if Place::in_spec(spec, agent).is_none() {
        let mut names: Vec<&str> = spec.agent_names();
        names.extend(spec.remote_agents.iter().map(|a| a.name.as_str()));
        return Err(Error::with_hint(
            format!("no agent `{agent}` in `{}`", spec.file.display()),
            crate::diag::suggest(agent, &names),
        ));
    }
    let state_dir = &spec.fleet.state_dir;
    let _lock = moves::lock(state_dir, &format!("move {agent}"), |holder| {
        on_step(&format!("waiting for another phoenix ({holder})"))
    })?;
    let mut placements = moves::load(state_dir)?;
    let from = placements
        .place_of(spec, agent)
        .expect("a declared agent has a place");
    let declared = options.from_text.is_some();
    let text = match &options.from_text {
        Some(text) => text.clone(),
        None => spec_text(&spec.file)?,
    };
    let moved = moved_text(spec, &text, agent, to)?;
    let links = fleet::links(spec);
    let (before, after) = (
        spec_at(spec, &text, agent, &from)?,
        spec_at(spec, &moved, agent, to)?,
    );
    let mut move_ = Moving {
        spec,
        before: &before,
        after: &after,
        declared,
        links: &links,
        agent,
        from: from.clone(),
        to: to.clone(),
        generation: placements.generation(agent) + 1,
        text,
        moved,
        spec_written: false,
        target_touched: false,
        rolled_back: None,
        on_step,
        report: MoveReport {
            agent: agent.to_string(),
            from: from.clone(),
            to: to.clone(),
            generation: placements.generation(agent),
            moved: false,
            handoff: None,
            carried: None,
            spec_written: false,
            owed_fences: Vec::new(),
            warnings: Vec::new(),
        },
    };
    if &from == to {
        if options.from_unreachable {
            return Err(Error::msg(format!(
                "agent `{agent}` is placed on {to} already: nothing to move"
            )));
        }
        // Only phoenix.toml may lag behind the record.
        move_.write_spec()?;
        move_.report.spec_written = move_.spec_written;
        return Ok(move_.report);
    }
    let result = move_.run(&mut placements, options);
    if let Some(owed_target) = move_.rolled_back {
        // Placed where it was, at this generation: the target's fence (delivered or owed)
        // is of the same generation, so it holds.
        let mut owed = placements
            .agents
            .get(agent)
            .map(|p| p.owed_fences.clone())
            .unwrap_or_default();
        if owed_target && !owed.contains(to) {
            owed.push(to.clone());
        }
        placements.agents.insert(
            agent.to_string(),
            Placement {
                place: from,
                generation: move_.generation,
                since: crate::state::now_rfc3339(),
                owed_fences: owed,
            },
        );
        moves::save(state_dir, &placements)?;
    }
    record_move(spec, &move_.report, options, result.as_ref().err());
    result?;
    Ok(move_.report)
}

/// A move, a move off a dead host, or a move rolled back, in the fleet's events
/// (`phoenix events`): where an agent runs is the operator's to find out afterwards.
fn record_move(spec: &Spec, report: &MoveReport, options: &MoveOptions, failed: Option<&Error>) {
    let (from, to) = (&report.from, &report.to);
    let (event, reason, action) = match (failed, options.from_unreachable) {
        (None, false) => (
            "agent_moved",
            format!("moved from {from} to {to} with its context"),
            "moved",
        ),
        (None, true) => (
            "agent_moved_off_unreachable_host",
            format!(
                "{from} did not answer: started on {to} from the context mirrored{}",
                report
                    .carried
                    .as_ref()
                    .and_then(|c| c.mirrored_at.as_deref())
                    .map(|at| format!(" at {at}"))
                    .unwrap_or_default()
            ),
            "moved; fenced off on its old host when it answers",
        ),
        (Some(e), _) => (
            "agent_move_failed",
            format!("move from {from} to {to} failed: {e}"),
            if report.moved {
                "moved"
            } else {
                "left where it was"
            },
        ),
    };
    let _ = crate::state::FleetDir::new(&spec.fleet.state_dir).record_critical(
        event,
        &report.agent,
        &reason,
        action,
        serde_json::json!({"from": from.to_string(), "to": to.to_string(),
                           "generation": report.generation}),
    );
}

/// A move under way.
struct Moving<'a> {
    spec: &'a Spec,
    /// The spec with the agent on `from`, and on `to`: what each end runs on when it is
    /// the operator's machine.
    before: &'a Spec,
    after: &'a Spec,
    /// phoenix.toml declares the move already: never written.
    declared: bool,
    links: &'a [Link],
    agent: &'a str,
    from: Place,
    to: Place,
    generation: u64,
    /// phoenix.toml as read, and with the agent declared on `to`.
    text: String,
    moved: String,
    spec_written: bool,
    /// The target was sent the context (it may hold it, or a half-started copy).
    target_touched: bool,
    /// Rolled back: `Some(true)` when the target could not be fenced off (it is owed).
    rolled_back: Option<bool>,
    on_step: &'a dyn Fn(&str),
    report: MoveReport,
}

impl Moving<'_> {
    fn run(&mut self, placements: &mut Placements, options: &MoveOptions) -> Result<(), Error> {
        let (agent, to) = (self.agent, self.to.clone());
        let target = side(self.after, self.links, &to)?;
        (self.on_step)(&format!("checking that {to} can run `{agent}`"));
        let problems = target_problems(&target, self.spec, &self.moved, agent)?;
        if !problems.is_empty() {
            return Err(Error::with_hint(
                format!(
                    "cannot move `{agent}` to {to}: {}; nothing was stopped",
                    problems.join("; ")
                ),
                format!(
                    "install the CLI or create the workdir on {to} (or fix `command` or `workdir` in phoenix.toml), then move again"
                ),
            ));
        }
        if to.host().is_some() {
            // The policies and templates its slice carries: a problem with them is found now.
            fleet::slice_files(self.spec)?;
        }
        let (context, mirrored_at) = if options.from_unreachable {
            self.context_in_mirror(options.fresh)?
        } else {
            (self.stop_source()?, None)
        };
        if options.from_unreachable && mirrored_at.is_none() {
            self.report.warnings.push(format!(
                "no copy of `{agent}`'s context was kept on this machine: it started on {to} without it (its handoffs, ledger and open loops are lost here; they stay on {} if it comes back)",
                self.from
            ));
        }
        // From here on the agent runs nowhere: a failure starts it again where it was.
        let carried = match self.carry_and_start(&target, &context) {
            Ok(imported) => imported,
            Err(e) => return Err(self.roll_back(e, !options.from_unreachable)),
        };
        self.report.carried = Some(Carried {
            files: carried.files,
            handoffs: carried.handoffs,
            latest_handoff: carried.latest_handoff,
            mirrored_at,
            left_out: context.left_out,
        });
        self.report.moved = true;
        self.report.generation = self.generation;
        self.settle_after(placements, options)
    }

    /// The context of an unreachable source, from the mirror; refused while it answers.
    fn context_in_mirror(&self, fresh: bool) -> Result<(AgentContext, Option<String>), Error> {
        let (agent, from) = (self.agent, &self.from);
        let Place::Host(host) = from else {
            return Err(Error::msg(format!(
                "agent `{agent}` runs on this machine: --from-unreachable moves an agent off a host that is gone"
            )));
        };
        if let Ok(source) = side(self.before, self.links, from)
            && source.hello().is_ok()
        {
            return Err(Error::with_hint(
                format!(
                    "host `{host}` answers: its context is current there, the mirror may not be"
                ),
                format!(
                    "move it without --from-unreachable: `phoenix move {agent} --to {}`",
                    self.to
                ),
            ));
        }
        let Some((context, at)) = super::mirror::read(&self.spec.fleet.state_dir, host, agent)
        else {
            if fresh {
                (self.on_step)(
                    "no copy of its context was kept: starting it fresh, its context is lost",
                );
                let nothing = AgentContext {
                    agent: agent.to_string(),
                    ..AgentContext::default()
                };
                return Ok((nothing, None));
            }
            return Err(Error::with_hint(
                format!(
                    "the operator has no copy of `{agent}`'s context from `{host}` (nothing was stopped or started)"
                ),
                format!(
                    "every apply and move keeps one while a host answers; without one, `phoenix move {agent} --to {} --from-unreachable --fresh` starts it there without its context (its context is lost)",
                    self.to
                ),
            ));
        };
        (self.on_step)(&format!("starting from the mirror of {host} (as of {at})"));
        Ok((context, Some(at)))
    }

    /// Check the source, stop the agent there, save the move handoff; its context as left.
    fn stop_source(&mut self) -> Result<AgentContext, Error> {
        let (agent, from, to) = (self.agent, self.from.clone(), self.to.clone());
        let source = side(self.before, self.links, &from)?;
        let summary = source.summary(agent).map_err(|e| {
            Error::with_hint(
                format!("cannot reach `{agent}` on {from}: {e}; nothing was stopped"),
                format!("if {from} is gone for good: `phoenix move {agent} --to {to} --from-unreachable` starts it from the operator's mirror"),
            )
        })?;
        self.report
            .warnings
            .extend(git_warnings(&summary, &from, &to));
        // Stopped first, the handoff after: it is then the newest, made from everything the
        // session did (the wrapper's own handoff as it stops comes before it).
        (self.on_step)(&format!(
            "stopping `{agent}` on {from} and saving its handoff"
        ));
        match source.leave(agent) {
            Ok(left) => {
                self.report.handoff = left.handoff.map(|h| h.id);
                Ok(left.context)
            }
            Err(e) => {
                let cause = Error::msg(format!("leaving {from} failed: {e}"));
                Err(self.roll_back(cause, true))
            }
        }
    }

    /// Import the context on the target and start the agent there fresh.
    fn carry_and_start(
        &mut self,
        target: &Side<'_>,
        context: &AgentContext,
    ) -> Result<super::carry::Imported, Error> {
        let (agent, to) = (self.agent, self.to.clone());
        (self.on_step)(&format!(
            "carrying its context to {to} ({} files)",
            context.files.len()
        ));
        let fence = self.fence(true);
        self.target_touched = true;
        let imported = target.import(agent, context, &fence)?;
        if to == Place::Local {
            // The operator's own apply reads phoenix.toml: it must declare the agent here.
            self.write_spec()?;
        }
        (self.on_step)(&format!("starting `{agent}` on {to}"));
        let ran = target.start(&self.moved, self.spec, agent)?;
        match failure(&ran) {
            Some(why) => Err(Error::msg(format!("cannot start it on {to}: {why}"))),
            None => Ok(imported),
        }
    }

    /// The fence of this move: for the target (`here`), or for the machine it left.
    fn fence(&self, here: bool) -> Fence {
        Fence {
            generation: self.generation,
            here,
            runs_on: self.to.runs_on(),
            since: crate::state::now_rfc3339(),
        }
    }

    /// Record the move, fence the source off (or owe it the fence), write phoenix.toml.
    fn settle_after(
        &mut self,
        placements: &mut Placements,
        options: &MoveOptions,
    ) -> Result<(), Error> {
        let (agent, from) = (self.agent, self.from.clone());
        let mut owed: Vec<Place> = placements
            .agents
            .get(agent)
            .map(|p| p.owed_fences.clone())
            .unwrap_or_default();
        owed.retain(|p| p != &self.to);
        let fences = BTreeMap::from([(agent.to_string(), self.fence(false))]);
        let delivered = !options.from_unreachable
            && side(self.before, self.links, &from)
                .and_then(|s| s.fence(&fences))
                .map_err(|e| {
                    self.report.warnings.push(format!(
                        "{from} was not told that `{agent}` moved ({e}): `phoenix move --cleanup` tells it"
                    ))
                })
                .is_ok();
        if !delivered && !owed.contains(&from) {
            owed.push(from);
        }
        self.report.owed_fences = owed.clone();
        placements.agents.insert(
            agent.to_string(),
            Placement {
                place: self.to.clone(),
                generation: self.generation,
                since: crate::state::now_rfc3339(),
                owed_fences: owed,
            },
        );
        moves::save(&self.spec.fleet.state_dir, placements)?;
        if let Err(e) = self.write_spec() {
            self.report.warnings.push(format!(
                "{e}: set `host` of agent `{agent}` in phoenix.toml yourself, or `phoenix apply` moves it back"
            ));
        }
        self.report.spec_written = self.spec_written;
        // `phoenix move` ends with the fleet as phoenix.toml declares it: the source gets
        // its slice without the agent (the combined `apply` sends it after all its moves).
        if delivered && self.spec_written {
            let from = self.from.clone();
            (self.on_step)(&format!("sending {from} its slice without `{agent}`"));
            let sent =
                side(self.spec, self.links, &from).and_then(|s| s.converge(&self.moved, self.spec));
            if let Err(e) = sent {
                self.report.warnings.push(format!(
                    "{from} keeps `{agent}` in its phoenix.toml ({e}): the next `phoenix apply` sends it the slice without it"
                ));
            }
        }
        Ok(())
    }

    /// The agent stopped (or, from the mirror, was about to start) and something failed:
    /// put phoenix.toml back, fence the target off if it was sent the context (it may hold a
    /// half-started copy), and start the agent again where it was (`restart`: the source
    /// answers).
    fn roll_back(&mut self, cause: Error, restart: bool) -> Error {
        let (agent, from, to) = (self.agent, self.from.clone(), self.to.clone());
        self.restore_spec();
        let mut owed_target = false;
        if self.target_touched {
            let fences = BTreeMap::from([(
                agent.to_string(),
                Fence {
                    runs_on: from.runs_on(),
                    ..self.fence(false)
                },
            )]);
            owed_target = side(self.after, self.links, &to)
                .and_then(|t| t.fence(&fences))
                .is_err();
        }
        self.rolled_back = Some(owed_target);
        if !restart {
            return Error::msg(format!(
                "moving `{agent}` to {to} failed: {cause}; it runs nowhere (its context is still in the mirror)"
            ));
        }
        if self.declared && from == Place::Local {
            // The panes here run on phoenix.toml, which places the agent on `to` now.
            return Error::msg(format!(
                "moving `{agent}` to {to} failed: {cause}; it stays stopped on this machine with its context (phoenix.toml places it on {to}: fix that and `phoenix apply` again, or set its `host` back)"
            ));
        }
        (self.on_step)(&format!("starting `{agent}` again on {from}"));
        let restarted = side(self.before, self.links, &from)
            .and_then(|s| s.phoenix(&["start", agent, "--json"], READ_TIMEOUT));
        let again = match restarted
            .as_ref()
            .map_or_else(|e| Some(e.to_string()), failure)
        {
            None => format!("it was started again on {from}"),
            Some(why) => format!(
                "starting it again on {from} failed too ({why}): its context is safe there; `phoenix start {agent}` on {from} starts it"
            ),
        };
        Error::msg(format!("moving `{agent}` to {to} failed: {cause}; {again}"))
    }

    /// Write phoenix.toml with the agent on `to`, unless someone changed the file meanwhile.
    fn write_spec(&mut self) -> Result<(), Error> {
        if self.declared || self.moved == self.text || self.spec_written {
            return Ok(());
        }
        let file = real_path(&self.spec.file);
        if spec_text(&file)? != self.text {
            return Err(Error::msg(format!(
                "`{}` changed during the move: not rewritten",
                self.spec.file.display()
            )));
        }
        write_keeping_mode(&file, &self.moved)?;
        self.spec_written = true;
        Ok(())
    }

    fn restore_spec(&mut self) {
        if self.spec_written {
            let _ = write_keeping_mode(&real_path(&self.spec.file), &self.text);
            self.spec_written = false;
        }
    }
}

/// `spec` with `agent` declared on `place` in `text` (the operator's machine runs on it),
/// or `spec` itself when `place` is a host (a host is sent its slice of the text).
fn spec_at(spec: &Spec, text: &str, agent: &str, place: &Place) -> Result<Spec, Error> {
    if place.host().is_some() {
        return Ok(spec.clone());
    }
    let text = moved_text(spec, text, agent, place)?;
    crate::spec::parse(
        &text,
        &spec.file,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .map_err(|e| Error::msg(e.to_string()))
}

/// One end of a move.
fn side<'a>(spec: &'a Spec, links: &'a [Link], place: &Place) -> Result<Side<'a>, Error> {
    match place {
        Place::Local => Ok(Side::Local(spec)),
        Place::Host(host) => links
            .iter()
            .find(|l| l.name() == host)
            .map(Side::Host)
            .ok_or_else(|| {
                Error::with_hint(
                    format!("host `{host}` is not declared in `{}`", spec.file.display()),
                    "declare it again as a [[host]] to reach it; `--from-unreachable` moves an agent off a host that is gone",
                )
            }),
    }
}

/// Why `target` cannot run `agent` as `moved` (the spec with it placed there) declares it,
/// or that it runs there already.
fn target_problems(
    target: &Side<'_>,
    spec: &Spec,
    moved: &str,
    agent: &str,
) -> Result<Vec<String>, Error> {
    let mut problems: Vec<String> = target
        .agent_checks(moved, spec, agent)?
        .into_iter()
        .filter(|r| !r.ok)
        .map(|r| {
            let what = r.check.replace(&format!("agent `{agent}` "), "");
            format!("{what} `{}` missing there", r.detail)
        })
        .collect();
    if target.summary(agent)?.running {
        problems.push(
            "it runs there already (stop that copy first: nothing is started twice)".to_string(),
        );
    }
    Ok(problems)
}

fn git_warnings(summary: &Summary, from: &Place, to: &Place) -> Vec<String> {
    let Some(git) = &summary.git else {
        return Vec::new();
    };
    let workdir = summary.workdir.as_deref().unwrap_or("?");
    let mut warnings = Vec::new();
    if git.unpushed_commits > 0 {
        warnings.push(format!(
            "the workdir `{workdir}` on {from} has {} commit(s) no remote has: push them, the workdir on {to} does not have them",
            git.unpushed_commits
        ));
    }
    if git.uncommitted_files > 0 {
        warnings.push(format!(
            "the workdir `{workdir}` on {from} has {} uncommitted file(s): they stay on {from}",
            git.uncommitted_files
        ));
    }
    warnings
}

fn spec_text(file: &Path) -> Result<String, Error> {
    crate::state::bounded::read_string(
        file,
        crate::spec::MAX_CONFIG_BYTES,
        crate::state::bounded::Links::Follow,
    )
    .map_err(Error::from)
}

/// phoenix.toml's text with `agent` declared on `to`.
fn moved_text(spec: &Spec, text: &str, agent: &str, to: &Place) -> Result<String, Error> {
    super::slice::with_host(text, agent, to.host())
        .map_err(|e| Error::msg(format!("cannot read `{}`: {e}", spec.file.display())))?
        .ok_or_else(|| {
            Error::msg(format!(
                "no [[agent]] named `{agent}` in `{}`",
                spec.file.display()
            ))
        })
}

/// A linked phoenix.toml is written where it points (the link is the user's own).
fn real_path(file: &Path) -> PathBuf {
    std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf())
}

fn write_keeping_mode(file: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file).map_or(0o644, |m| m.permissions().mode() & 0o7777);
    crate::state::file::write_atomic(file, text.as_bytes(), mode, true)
        .map_err(|e| Error::msg(format!("cannot write `{}`: {e}", file.display())))
}

/// What telling one machine about its stale copies did.
#[derive(Debug, Clone, Serialize)]
pub struct Settled {
    pub on: Place,
    pub agents: Vec<String>,
    pub fenced: Option<Fenced>,
    pub error: Option<String>,
}

/// Tell each machine of `stale` where its stale agents run now (it records the fences and
/// stops the copies), and clear the fences it was owed.
pub fn settle(spec: &Spec, stale: &[Stale]) -> crate::error::Result<Vec<Settled>> {
    let links = fleet::links(spec);
    let mut by_place: BTreeMap<Place, BTreeMap<String, Fence>> = BTreeMap::new();
    for s in stale {
        by_place.entry(s.on.clone()).or_default().insert(
            s.agent.clone(),
            Fence {
                generation: s.generation,
                here: false,
                runs_on: s.placed.runs_on(),
                since: crate::state::now_rfc3339(),
            },
        );
    }
    let settled: Vec<Settled> = by_place
        .into_iter()
        .map(|(on, fences)| {
            let result = side(spec, &links, &on).and_then(|s| s.fence(&fences));
            Settled {
                agents: fences.keys().cloned().collect(),
                fenced: result.as_ref().ok().cloned(),
                error: result.err().map(|e| e.to_string()),
                on,
            }
        })
        .collect();
    let state_dir = &spec.fleet.state_dir;
    let _lock = moves::lock(state_dir, "move --cleanup", |_| {})?;
    let mut placements = moves::load(state_dir)?;
    // A copy whose stop failed stays owed: the next contact tries again.
    let done =
        |s: &&Settled| s.error.is_none() && s.fenced.as_ref().is_some_and(|f| f.failed.is_empty());
    for done in settled.iter().filter(done) {
        for agent in &done.agents {
            if let Some(p) = placements.agents.get_mut(agent) {
                p.owed_fences.retain(|o| o != &done.on);
            }
        }
    }
    moves::save(state_dir, &placements)?;
    // Delivered fences only: one still owed is tried again at each of the daemon's passes,
    // and is not news at each.
    let fleet = crate::state::FleetDir::new(state_dir);
    for s in settled.iter().filter(|s| s.error.is_none()) {
        for agent in &s.agents {
            let _ = fleet.record_critical(
                "fence_delivered",
                agent,
                &format!(
                    "{} was told where `{agent}` runs now; its copy there is stopped",
                    s.on
                ),
                "fenced",
                serde_json::json!({"on": s.on.to_string()}),
            );
        }
    }
    Ok(settled)
}

/// Tell every machine the record owes a fence where its moved agents run now (it records
/// the fences and stops their stale copies): the operator's daemon does at each pass, so a
/// host that comes back is settled without anyone running a command. Machines that cannot
/// be reached stay owed; nothing owed, nothing asked.
pub fn settle_owed(spec: &Spec) -> crate::error::Result<Vec<Settled>> {
    let placements = moves::load(&spec.fleet.state_dir)?;
    let owed: Vec<Stale> = placements
        .agents
        .iter()
        .flat_map(|(agent, p)| {
            p.owed_fences.iter().map(move |on| Stale {
                agent: agent.clone(),
                on: on.clone(),
                placed: p.place.clone(),
                generation: p.generation,
                running: None,
            })
        })
        .collect();
    if owed.is_empty() {
        return Ok(Vec::new());
    }
    settle(spec, &owed)
}

/// What `phoenix move --cleanup` found and did.
#[derive(Debug, Clone, Serialize)]
pub struct CleanupReport {
    pub stale: Vec<Stale>,
    pub settled: Vec<Settled>,
    /// Machines that could not be observed, and why (their fences stay owed).
    pub unreachable: Vec<(String, String)>,
}

/// Observe every machine, report the stale copies of moved agents and stop them.
pub fn cleanup(spec: &Spec) -> crate::error::Result<CleanupReport> {
    let placements = moves::load(&spec.fleet.state_dir)?;
    let links = fleet::links(spec);
    let mut observed: Vec<(Place, Vec<String>)> = Vec::new();
    let mut unreachable = Vec::new();
    let runtime = crate::world::runtime_for(spec);
    let world = crate::status::observe(spec, &*runtime)?;
    observed.push((
        Place::Local,
        world
            .running_agents()
            .map(|(name, _)| name.to_string())
            .collect(),
    ));
    for (link, running) in links.iter().zip(fleet::each(&links, running_on)) {
        match running {
            Ok(names) => observed.push((Place::Host(link.name().to_string()), names)),
            Err(e) => unreachable.push((link.name().to_string(), e.to_string())),
        }
    }
    // The first contact with each host delivered the fences it was owed: the copies it
    // stopped then are settled already.
    let mut first_contact: Vec<Settled> = Vec::new();
    for link in &links {
        for fenced in link.fenced.lock().map(|f| f.clone()).unwrap_or_default() {
            if !fenced.stopped.is_empty() || !fenced.failed.is_empty() {
                first_contact.push(Settled {
                    on: Place::Host(link.name().to_string()),
                    agents: fenced.stopped.clone(),
                    error: None,
                    fenced: Some(fenced),
                });
            }
        }
    }
    let stale = moves::stale(&placements, &observed);
    // What is owed to a machine that cannot be reached stays owed.
    let reachable: Vec<Stale> = stale
        .iter()
        .filter(|s| {
            !unreachable
                .iter()
                .any(|(h, _)| Some(h.as_str()) == s.on.host())
        })
        .cloned()
        .collect();
    let mut settled = first_contact;
    settled.extend(settle(spec, &reachable)?);
    Ok(CleanupReport {
        stale,
        settled,
        unreachable,
    })
}

/// The agents whose pane runs on `link`'s host (`status --json` there).
fn running_on(link: &Link) -> crate::error::Result<Vec<String>> {
    let ran = link.run(&["status", "--json"], READ_TIMEOUT)?;
    let doc: serde_json::Value = serde_json::from_str(ran.stdout.trim()).map_err(|e| {
        Error::msg(format!(
            "host `{}`: `status --json` printed no status ({e})",
            link.name()
        ))
    })?;
    Ok(doc["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|row| row["pane"].is_string() && row["state"] != "dead")
        .filter_map(|row| row["agent"].as_str().map(str::to_string))
        .collect())
}
