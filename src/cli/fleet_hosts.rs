//! `plan` and `apply` of a fleet with `[[host]]`s: this machine's part as on one host, every
//! host's part asked in parallel ([`crate::hosts::combined`]), shown as one plan grouped by
//! host, this machine first (labelled `local`), then the hosts in the order written.

use serde_json::{Value, json};

use super::fleet;
use super::fleet_moves::{self, Done};
use super::output::{self, out};
use crate::context::FleetContext;
use crate::hosts::combined::{
    ApplyOutcome, Failure, HostApply, HostPlan, Hosts, LOCAL, Planned, SliceFile, Targets,
    local_json,
};
use crate::hosts::moves::{self, Place};
use crate::hosts::replan::{self, Moves};
use crate::plan::{self, Plan, Summary};
use crate::state::lock::FleetLock;

pub fn plan(
    ctx: &FleetContext,
    json: bool,
    prune: plan::Pruning,
    skip_unreachable: bool,
) -> anyhow::Result<i32> {
    let spec = &ctx.spec;
    let mut hosts = Hosts::prepare(spec, Targets::all())?;
    let placements = moves::load(&spec.fleet.state_dir)?;
    let planned = replan::planned(spec, &placements, &Targets::all());
    hosts.reslice(spec, &replan::text_before(spec, &planned)?)?;
    let (local, mut remote, previews) = std::thread::scope(|scope| {
        let remote = scope.spawn(|| hosts.plan(prune));
        let previews = scope.spawn(|| replan::previews(spec, &planned));
        let local = fleet::local_plan(ctx, prune);
        (
            local,
            remote.join().expect("planning the hosts does not panic"),
            previews
                .join()
                .expect("previewing the moves does not panic"),
        )
    });
    let mut local = local?;
    let found = Moves::found(
        &placements,
        previews,
        &mut local,
        &mut remote,
        &Targets::all(),
    );
    let combined = Combined {
        local: &local,
        hosts: &remote,
        moves: &found,
        skip_unreachable,
    };
    if json {
        output::json(combined.to_json());
    } else {
        out(&combined.render());
    }
    Ok(if combined.failed() {
        1
    } else if combined.is_empty() {
        0
    } else {
        2
    })
}

pub struct ApplyOptions {
    pub yes: bool,
    pub prune: plan::Pruning,
    pub json: bool,
    pub skip_unreachable: bool,
}

pub fn apply(ctx: &FleetContext, names: &[String], o: ApplyOptions) -> anyhow::Result<i32> {
    let spec = &ctx.spec;
    // Every name is checked, and every slice cut, before any host is asked anything.
    let targets = Targets::split(spec, names)?;
    let local_takes_part = !targets.named || !targets.local.is_empty();
    if local_takes_part {
        super::lifecycle::commands_exist(ctx, &targets.local)?;
    }
    let mut hosts = Hosts::prepare(spec, targets.clone())?;
    let placements = moves::load(&spec.fleet.state_dir)?;
    let planned = replan::planned(spec, &placements, &targets);
    // Until its move, a moved agent stays declared where it runs: no target starts it
    // without its context, no source removes it without its handoff.
    let before = replan::text_before(spec, &planned)?;
    hosts.reslice(spec, &before)?;
    let planning = Planning {
        ctx,
        hosts: &hosts,
        placements: &placements,
        planned: &planned,
        targets: &targets,
        prune: o.prune,
    };
    let (lock, round) = if o.yes {
        let (lock, round) = planning.round(true)?;
        let combined = round.combined(o.skip_unreachable);
        if !o.json {
            out(&combined.render());
        }
        refuse_unreachable(&combined)?;
        (lock, round)
    } else {
        let mut asking = HostsAsking {
            planning: &planning,
            options: &o,
        };
        match super::ask::ask_then_lock(&mut asking)? {
            super::ask::Answer::Apply { lock, shown, .. } => (Some(lock), shown),
            super::ask::Answer::Nothing(round) => (None, round),
            super::ask::Answer::Cancelled => {
                out("Apply cancelled.\n");
                return Ok(1);
            }
            super::ask::Answer::KeptChanging => return Err(super::ask::kept_changing()),
        }
    };
    fleet::bring_up(ctx, names);
    let empty = round.combined(o.skip_unreachable).is_empty();
    let Round {
        local,
        remote,
        found,
        ..
    } = round;
    let Some(lock) = lock.filter(|_| !empty) else {
        adopt(spec);
        let parts: Vec<HostApply> = remote.iter().map(unasked).collect();
        let report = crate::apply::ApplyReport { steps: vec![] };
        return Ok(self::report(&report, &parts, &Done::none(), &o));
    };
    // A stale copy on a host stops before that host applies (its copy is no part of it).
    let mut settled = settle(spec, &found, |on| on != &Place::Local)?;
    let (local_report, mut applied) = std::thread::scope(|scope| {
        let applied = scope.spawn(|| hosts.apply(&remote, o.prune));
        let local_report = fleet::apply_locally(ctx, &local, lock);
        (
            local_report,
            applied.join().expect("applying on hosts does not panic"),
        )
    });
    let local_report = local_report?;
    let carried = found.carry_out(spec, before, &|agent, step| {
        if !o.json {
            eprintln!("  {agent}: {step}…");
        }
    })?;
    settled.extend(settle(spec, &found, |on| on == &Place::Local)?);
    if !targets.named {
        // The sources of the moves get their slice without the agents that left.
        let left = hosts.outdated(spec, &carried.after, &carried.sent)?;
        hosts.reslice(spec, &carried.after)?;
        merge(&mut applied, hosts.apply_again(&remote, &left, o.prune));
    }
    adopt(spec);
    let done = Done {
        moves: &carried.done,
        settled: &settled,
    };
    Ok(report(&local_report, &applied, &done, &o))
}

/// What the combined plan is made from, the same for every round of asking.
struct Planning<'a> {
    ctx: &'a FleetContext,
    hosts: &'a Hosts,
    placements: &'a moves::Placements,
    planned: &'a [moves::Move],
    targets: &'a Targets,
    prune: plan::Pruning,
}

/// One combined plan: this machine's (the moves' lines taken out, and as it was planned,
/// to compare), every host's, and the moves.
struct Round {
    local: Plan,
    local_planned: Plan,
    remote: Vec<HostPlan>,
    found: Moves,
}

impl Round {
    fn combined(&self, skip_unreachable: bool) -> Combined<'_> {
        Combined {
            local: &self.local,
            hosts: &self.remote,
            moves: &self.found,
            skip_unreachable,
        }
    }
}

impl Planning<'_> {
    /// Plan this machine (under its lock when `locked`), every host and the moves, side by
    /// side.
    fn round(&self, locked: bool) -> anyhow::Result<(Option<FleetLock>, Round)> {
        let (local, mut remote, previews) = std::thread::scope(|scope| {
            let remote = scope.spawn(|| self.hosts.plan(self.prune));
            let previews = scope.spawn(|| replan::previews(&self.ctx.spec, self.planned));
            let local = if locked {
                fleet::lock_and_plan(self.ctx, self.prune).map(|(l, p)| (Some(l), p))
            } else {
                fleet::local_plan(self.ctx, self.prune).map(|p| (None, p))
            };
            (
                local,
                remote.join().expect("planning the hosts does not panic"),
                previews
                    .join()
                    .expect("previewing the moves does not panic"),
            )
        });
        let (lock, mut local) = local?;
        self.narrow(&mut local);
        let local_planned = local.clone();
        let found = Moves::found(
            self.placements,
            previews,
            &mut local,
            &mut remote,
            self.targets,
        );
        Ok((
            lock,
            Round {
                local,
                local_planned,
                remote,
                found,
            },
        ))
    }

    /// `apply AGENT…`: this machine's part of the plan about those agents only.
    fn narrow(&self, local: &mut Plan) {
        if self.targets.named {
            local.only(&self.targets.local);
        }
    }
}

/// `nothing applied: host `b` is unreachable` unless `--skip-unreachable` says to go on.
fn refuse_unreachable(combined: &Combined) -> anyhow::Result<()> {
    let unreachable = combined.blocking_unreachable();
    if unreachable.is_empty() {
        return Ok(());
    }
    Err(crate::Error::Failed {
        message: format!(
            "nothing applied: {} {} unreachable",
            list(&unreachable, "host", "hosts"),
            if unreachable.len() == 1 { "is" } else { "are" }
        ),
        hint: Some(
            "`--skip-unreachable` applies this machine and the other hosts without it".into(),
        ),
    }
    .into())
}

/// The combined apply asking the operator: every part planned and shown with no lock held,
/// then this machine's part planned again under its lock (each host plans its own part
/// again under its own lock when it applies).
struct HostsAsking<'a> {
    planning: &'a Planning<'a>,
    options: &'a ApplyOptions,
}

impl super::ask::Asking for HostsAsking<'_> {
    type Shown = Round;
    type Checked = Plan;
    type Lock = FleetLock;

    fn plan(&mut self) -> anyhow::Result<Round> {
        Ok(self.planning.round(false)?.1)
    }

    fn show(&mut self, round: &Round, again: bool) -> anyhow::Result<()> {
        let combined = round.combined(self.options.skip_unreachable);
        if again {
            if self.options.json {
                eprintln!("the plan changed while you were asked: asking again");
            } else {
                out("\nThe plan changed while you were asked. The plan now:\n");
            }
        }
        if !self.options.json {
            out(&combined.render());
        }
        refuse_unreachable(&combined)
    }

    fn is_empty(&self, round: &Round) -> bool {
        round.combined(self.options.skip_unreachable).is_empty()
    }

    fn ask(&mut self) -> anyhow::Result<bool> {
        fleet::confirm()
    }

    fn lock_and_check(&mut self) -> anyhow::Result<(FleetLock, Plan)> {
        let (lock, mut local) = fleet::lock_and_plan(self.planning.ctx, self.planning.prune)?;
        self.planning.narrow(&mut local);
        Ok((lock, local))
    }

    fn same(&self, round: &Round, checked: &Plan) -> bool {
        fleet::same_changes(&round.local_planned, checked)
    }
}

/// Stop the stale copies on the machines where `on` holds, and tell those machines.
fn settle(
    spec: &crate::spec::Spec,
    found: &Moves,
    on: impl Fn(&Place) -> bool,
) -> anyhow::Result<Vec<moves::Settled>> {
    let stale = found.to_settle(on);
    if stale.is_empty() {
        return Ok(Vec::new());
    }
    Ok(moves::settle(spec, &stale)?)
}

/// Record where every agent runs that has no record yet: from now on a change of its `host`
/// is a move. A record that cannot be written is worth a warning, not a failed apply.
fn adopt(spec: &crate::spec::Spec) {
    if let Err(e) = moves::adopt(spec) {
        eprintln!("warning: {e}");
    }
    keep_mirror(spec);
}

/// Every apply (and move) keeps this machine's copy of the hosts' agent contexts current,
/// so `phoenix move --from-unreachable` has one to start from without any setup step. A
/// host that does not answer keeps its last copy (the plan said why already).
pub(super) fn keep_mirror(spec: &crate::spec::Spec) {
    match crate::hosts::mirror::refresh(spec) {
        Ok(refreshed) => {
            for r in refreshed.iter().filter(|r| r.error.is_some()) {
                tracing::debug!(host = %r.host, error = ?r.error, "mirror not refreshed");
            }
        }
        Err(e) => eprintln!("warning: the mirror of the hosts' contexts was not refreshed: {e}"),
    }
}

/// A second apply of a host (its slice after the moves) folded into its first.
fn merge(applied: &mut [HostApply], again: Vec<HostApply>) {
    for second in again {
        let Some(first) = applied.iter_mut().find(|h| h.host == second.host) else {
            continue;
        };
        first.outcome = match (
            std::mem::replace(&mut first.outcome, ApplyOutcome::Unchanged),
            second.outcome,
        ) {
            (ApplyOutcome::Applied(mut a), ApplyOutcome::Applied(b)) => {
                for file in b.pushed {
                    if !a.pushed.contains(&file) {
                        a.pushed.push(file);
                    }
                }
                a.failed += b.failed;
                a.steps.extend(b.steps);
                ApplyOutcome::Applied(a)
            }
            (ApplyOutcome::Applied(_) | ApplyOutcome::Unchanged, b) => b,
            (a, _) => a,
        };
    }
}

/// A host that is not asked to apply: nothing to do there, or its plan had no answer.
fn unasked(plan: &HostPlan) -> HostApply {
    HostApply {
        host: plan.host.clone(),
        outcome: match &plan.outcome {
            Ok(_) => ApplyOutcome::Unchanged,
            Err(failure) => ApplyOutcome::NotPlanned(failure.clone()),
        },
    }
}

/// Print what every part did; the exit code (1 when anything failed).
fn report(
    local: &crate::apply::ApplyReport,
    hosts: &[HostApply],
    done: &Done,
    o: &ApplyOptions,
) -> i32 {
    let failed = local.failed()
        + hosts
            .iter()
            .map(|h| h.failed(o.skip_unreachable))
            .sum::<usize>()
        + done.failed();
    if o.json {
        let mut parts = vec![json!({
            "host": LOCAL, "reachable": true, "error": null, "hint": null,
            "apply": {"pushed": [], "steps": local.steps, "failed": local.failed()},
        })];
        parts.extend(hosts.iter().map(HostApply::to_json));
        let (moves, stale) = done.json();
        output::json(json!({"hosts": parts, "moves": moves, "stale": stale, "failed": failed}));
    } else {
        out(&render_applied(
            local,
            hosts,
            done,
            failed,
            o.skip_unreachable,
        ));
    }
    i32::from(failed > 0)
}

fn render_applied(
    local: &crate::apply::ApplyReport,
    hosts: &[HostApply],
    done: &Done,
    failed: usize,
    skip_unreachable: bool,
) -> String {
    let labels = Labels::new(
        hosts
            .iter()
            .map(|h| h.host.clone())
            .chain(done.places())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    let mut text = String::from("\n");
    let mut succeeded = done.succeeded();
    let step = |ok, agent: &str, action: &str, detail: &str| {
        format!("  {}", fleet::step_line(ok, agent, action, detail))
    };
    let mut local_rows: Vec<String> = local
        .steps
        .iter()
        .map(|s| step(s.ok, &s.agent, &s.action, &s.detail))
        .collect();
    local_rows.extend(done.rows(LOCAL));
    succeeded += local.steps.iter().filter(|s| s.ok).count();
    text.push_str(&labels.rows(LOCAL, &local_rows, "nothing to do"));
    for host in hosts {
        let mut rows: Vec<String> = match &host.outcome {
            ApplyOutcome::Unchanged => vec![],
            ApplyOutcome::Applied(applied) => {
                let mut rows = Vec::new();
                if !applied.pushed.is_empty() {
                    succeeded += 1;
                    rows.push(format!("  ✓ slice: wrote {}", files(&applied.pushed)));
                }
                succeeded += applied.steps.iter().filter(|s| s.ok).count();
                rows.extend(
                    applied
                        .steps
                        .iter()
                        .map(|s| step(s.ok, &s.agent, &s.action, &s.detail)),
                );
                rows
            }
            ApplyOutcome::NotPlanned(f) if f.unreachable && skip_unreachable => {
                vec![format!("  - skipped: {}", f.message)]
            }
            ApplyOutcome::NotPlanned(f) => vec![failure_row("  ✗ not applied: ", f)],
            ApplyOutcome::Failed(f) => vec![failure_row("  ✗ ", f)],
        };
        rows.extend(done.rows(&host.host));
        text.push_str(&labels.rows(&host.host, &rows, "nothing to do"));
    }
    for place in done.places() {
        if place != LOCAL && !hosts.iter().any(|h| h.host == place) {
            text.push_str(&labels.rows(&place, &done.rows(&place), "nothing to do"));
        }
    }
    text.push_str(&format!("\n{}\n", fleet::apply_summary(succeeded, failed)));
    text
}

fn failure_row(prefix: &str, f: &Failure) -> String {
    match &f.hint {
        Some(hint) => format!("{prefix}{}\n  hint: {hint}", f.message),
        None => format!("{prefix}{}", f.message),
    }
}

/// The combined plan: this machine's and every host's, and the moves between them.
struct Combined<'a> {
    local: &'a Plan,
    hosts: &'a [HostPlan],
    moves: &'a Moves,
    skip_unreachable: bool,
}

impl Combined<'_> {
    fn answered(&self) -> impl Iterator<Item = &Planned> {
        self.hosts.iter().filter_map(|h| h.outcome.as_ref().ok())
    }

    fn failures(&self) -> impl Iterator<Item = (&str, &Failure)> {
        self.hosts
            .iter()
            .filter_map(|h| Some((h.host.as_str(), h.outcome.as_ref().err()?)))
    }

    /// Nothing to change anywhere that answered.
    fn is_empty(&self) -> bool {
        self.local.is_empty() && self.answered().all(Planned::is_empty) && self.moves.is_empty()
    }

    /// A host answered with an error, or could not be reached without `--skip-unreachable`,
    /// or a move would be refused.
    fn failed(&self) -> bool {
        self.failures()
            .any(|(_, f)| !(f.unreachable && self.skip_unreachable))
            || self.moves.refused().next().is_some()
    }

    /// The unreachable hosts that stop an apply (none with `--skip-unreachable`).
    fn blocking_unreachable(&self) -> Vec<&str> {
        self.failures()
            .filter(|(_, f)| f.unreachable && !self.skip_unreachable)
            .map(|(host, _)| host)
            .collect()
    }

    fn to_json(&self) -> Value {
        let mut parts = vec![local_json(self.local)];
        parts.extend(self.hosts.iter().map(HostPlan::to_json));
        let (moves, stale) = fleet_moves::plan_json(self.moves);
        json!({"hosts": parts, "moves": moves, "stale": stale})
    }

    fn render(&self) -> String {
        let held = |p: &Plan| !p.unmanaged.is_empty() || !p.attention.is_empty();
        let quiet = self.is_empty()
            && self.failures().next().is_none()
            && self.moves.stale.is_empty()
            && !held(self.local)
            && !self.answered().any(|p| held(&p.plan));
        let names: Vec<&str> = self.hosts.iter().map(|h| h.host.as_str()).collect();
        if quiet && names.is_empty() {
            return "No changes. The fleet matches phoenix.toml.\n".into();
        }
        if quiet {
            return format!(
                "No changes. The fleet matches phoenix.toml here and on {}.\n",
                names.join(", ")
            );
        }
        let elsewhere: Vec<String> = fleet_moves::places(self.moves)
            .into_iter()
            .filter(|p| p != LOCAL && !names.contains(&p.as_str()))
            .collect();
        let labels = Labels::new(
            names
                .iter()
                .copied()
                .chain(elsewhere.iter().map(String::as_str)),
        );
        let mut text = String::from(if self.is_empty() {
            "No changes to apply.\n"
        } else {
            "phoenix will perform these actions:\n"
        });
        let mut local_rows = plan_rows(self.local);
        local_rows.extend(fleet_moves::plan_rows(self.moves, LOCAL));
        text.push_str(&labels.rows(LOCAL, &local_rows, "no changes"));
        let mut summary = self.local.summary();
        let mut slices = 0;
        for host in self.hosts {
            let mut rows = match &host.outcome {
                Ok(planned) => {
                    summary += planned.plan.summary();
                    slices += usize::from(!planned.push.is_empty());
                    let mut rows = push_row(&planned.push).into_iter().collect::<Vec<_>>();
                    rows.extend(plan_rows(&planned.plan));
                    rows
                }
                Err(failure) => unknown_rows(&host.agents, failure),
            };
            rows.extend(fleet_moves::plan_rows(self.moves, &host.host));
            text.push_str(&labels.rows(&host.host, &rows, "no changes"));
        }
        for place in &elsewhere {
            let rows = fleet_moves::plan_rows(self.moves, place);
            text.push_str(&labels.rows(place, &rows, "no changes"));
        }
        if !self.is_empty() {
            text.push_str(&format!(
                "\n{}{}.\n",
                summary_line(&summary, slices),
                fleet_moves::summary(self.moves)
            ));
        }
        text.push_str(&self.footer());
        text.push_str(&fleet_moves::footer(self.moves));
        text
    }

    /// Which hosts were not planned, and what that means for the exit code.
    fn footer(&self) -> String {
        let (unreachable, failed): (Vec<_>, Vec<_>) =
            self.failures().partition(|(_, f)| f.unreachable);
        let mut text = String::new();
        if !unreachable.is_empty() {
            let hosts = list(&names(&unreachable), "host", "hosts");
            text.push_str(&if self.skip_unreachable {
                format!("\nSkipped: {hosts}, unreachable.\n")
            } else {
                format!(
                    "\nNot planned: {hosts}, unreachable (`--skip-unreachable` plans without it).\n"
                )
            });
        }
        if !failed.is_empty() {
            text.push_str(&format!(
                "\nNot planned: {}, which answered with an error.\n",
                list(&names(&failed), "host", "hosts")
            ));
        }
        text
    }
}

fn names<'a>(parts: &[(&'a str, &Failure)]) -> Vec<&'a str> {
    parts.iter().map(|(host, _)| *host).collect()
}

/// `host `a`` or `hosts `a`, `b``.
fn list(names: &[&str], one: &str, many: &str) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    format!(
        "{} {}",
        if names.len() == 1 { one } else { many },
        quoted.join(", ")
    )
}

/// The summary line of one host's plan, plus the slices to write.
fn summary_line(summary: &Summary, slices: usize) -> String {
    let mut line = plan::summary_line(summary);
    if slices > 0 {
        line.push_str(&format!(
            ", {slices} host slice{} to write",
            plan::plural(slices)
        ));
    }
    line
}

/// A plan's rows: its changes, then what runs undeclared, what is held back, and the
/// worktrees kept that no agent works in.
fn plan_rows(plan: &Plan) -> Vec<String> {
    let mut rows: Vec<String> = plan
        .changes
        .iter()
        .map(|c| plan::render_change(c, 3))
        .collect();
    rows.extend(plan.unmanaged.iter().map(|u| {
        format!(
            "  {}: not in phoenix.toml (`--prune` removes it)",
            plan::unmanaged_line(u)
        )
    }));
    rows.extend(
        plan.attention
            .iter()
            .map(|a| format!("  {}", plan::attention_line(a))),
    );
    rows.extend(
        plan.kept_worktrees
            .iter()
            .map(|k| format!("  {}", plan::kept_worktree_line(k))),
    );
    rows
}

/// `+ slice: write phoenix.toml (new), policies/x.lua (changed)`.
fn push_row(push: &[SliceFile]) -> Option<String> {
    if push.is_empty() {
        return None;
    }
    let symbol = if push.iter().all(|f| f.new) { "+" } else { "~" };
    Some(format!("  {symbol} slice: write {}", files(push)))
}

fn files(push: &[SliceFile]) -> String {
    push.iter()
        .map(|f| format!("{} ({})", f.path, if f.new { "new" } else { "changed" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A host without a plan: why, and its agents as unknown.
fn unknown_rows(agents: &[String], failure: &Failure) -> Vec<String> {
    let mut rows = vec![format!(
        "{} {}",
        output::paint(output::ERROR, "error:"),
        failure_row("", failure)
    )];
    let why = if failure.unreachable {
        "host unreachable"
    } else {
        "no plan from the host"
    };
    rows.extend(
        agents
            .iter()
            .map(|a| format!("  ? agent `{a}`: unknown ({why})")),
    );
    rows
}

/// Rows labelled with their part: `gpu-1:   + agent `a`: start — …`, the labels padded to
/// one width so the symbols line up, a row's further lines indented under it.
struct Labels {
    width: usize,
}

impl Labels {
    fn new<'a>(hosts: impl Iterator<Item = &'a str>) -> Labels {
        Labels {
            width: hosts.map(str::len).chain([LOCAL.len()]).max().unwrap_or(0) + 1,
        }
    }

    /// One part's group (after a blank line); `none` when it has no rows.
    fn rows(&self, label: &str, rows: &[String], none: &str) -> String {
        let head = format!("{:<width$} ", format!("{label}:"), width = self.width);
        let under = " ".repeat(head.len());
        let mut text = String::from("\n");
        if rows.is_empty() {
            text.push_str(&format!("{head}    {none}\n"));
        }
        for row in rows {
            for (i, line) in output::plan(row).lines().enumerate() {
                text.push_str(if i == 0 { &head } else { &under });
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Action, Change};
    use crate::spec::FieldChange;

    fn replace(agent: &str) -> Change {
        let action = Action::Replace {
            pane: "%3".into(),
            changed: vec![FieldChange {
                field: "command".into(),
                before: "a".into(),
                after: "b".into(),
            }],
        };
        Change {
            agent: agent.into(),
            symbol: action.symbol(),
            action,
            reason: "spec changed: command".into(),
        }
    }

    #[test]
    fn every_part_is_a_group_of_lines_labelled_with_it_and_aligned() {
        let local = Plan::of(vec![]);
        let hosts = vec![
            HostPlan {
                host: "gpu-10".into(),
                agents: vec!["a".into()],
                outcome: Ok(Planned {
                    plan: Plan::of(vec![replace("a")]),
                    warnings: vec![],
                    push: vec![SliceFile {
                        path: "policies/p.lua".into(),
                        new: false,
                    }],
                    digests: Default::default(),
                }),
            },
            HostPlan {
                host: "g".into(),
                agents: vec!["b".into(), "c".into()],
                outcome: Err(Failure {
                    message: "host `g` is unreachable: refused".into(),
                    hint: None,
                    unreachable: true,
                }),
            },
        ];
        let moves = Moves::default();
        let combined = Combined {
            local: &local,
            hosts: &hosts,
            moves: &moves,
            skip_unreachable: true,
        };
        // Colour is stripped on the way out where it is off; here, by hand.
        let text = crate::cli::output::unstyled(&combined.render());
        let expected = "\
phoenix will perform these actions:

local:      no changes

gpu-10:   ~ slice: write policies/p.lua (changed)
gpu-10: -/+ agent `a`: replace in %3 — spec changed: command
                command: \"a\" → \"b\"

g:      error: host `g` is unreachable: refused
g:        ? agent `b`: unknown (host unreachable)
g:        ? agent `c`: unknown (host unreachable)

Plan: 0 to start, 0 to restart, 1 to replace, 0 to remove, 1 host slice to write.

Skipped: host `g`, unreachable.
";
        assert_eq!(text, expected);
        assert!(!combined.failed() && !combined.is_empty());
        let strict = Combined {
            skip_unreachable: false,
            ..combined
        };
        assert!(strict.failed());
        assert_eq!(strict.blocking_unreachable(), ["g"]);
    }
}
