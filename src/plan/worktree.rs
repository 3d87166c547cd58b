//! Worktrees in the plan: each declared agent's worktree made, repaired (removed by hand, on
//! another branch) or explained when phoenix will not touch it; with `--prune`, the
//! worktrees phoenix made that no agent works in any more removed — only when nothing in them
//! would be lost, unless `--force-remove-worktrees` says so.

use crate::spec::{AgentSpec, Spec, WorkspaceSpec};
use crate::workspace::{Checkout, Recorded, WorktreeObs, display};
use crate::world::World;

use super::{Action, Attention, Change, KeptWorktree, PlanOptions, change};

/// What the plan holds about worktrees: changes, what holds an agent's worktree back, and
/// the worktrees kept.
#[derive(Default)]
pub(super) struct WorktreePlan {
    pub changes: Vec<Change>,
    pub attention: Vec<Attention>,
    pub kept: Vec<KeptWorktree>,
}

pub(super) fn plan(spec: &Spec, world: &World, options: &PlanOptions) -> WorktreePlan {
    let mut out = WorktreePlan::default();
    for agent in &spec.agents {
        let (Some(ws), Some(obs)) = (&agent.workspace, world.workspaces.declared.get(&agent.name))
        else {
            continue;
        };
        match declared(agent, ws, obs, world) {
            Ok(changes) => out.changes.extend(changes),
            Err(hint) => out.attention.push(Attention {
                agent: agent.name.clone(),
                pane: String::new(),
                state: "worktree",
                hint,
            }),
        }
    }
    for (rec, obs) in &world.workspaces.leftover {
        match leftover(rec, obs, options) {
            Ok(c) => out.changes.push(c),
            Err(why) => out.kept.push(KeptWorktree {
                agent: rec.agent.clone(),
                path: display(&rec.path),
                branch: rec.branch.clone(),
                why,
                work: obs.work.clone().filter(|w| !w.is_safe()),
            }),
        }
    }
    out
}

/// A declared agent's worktree: the changes that bring it where it should be, or why phoenix
/// leaves it for a person.
fn declared(
    agent: &AgentSpec,
    ws: &WorkspaceSpec,
    obs: &WorktreeObs,
    world: &World,
) -> Result<Vec<Change>, String> {
    let path = display(&ws.path);
    if let Some(problem) = &obs.problem {
        return Err(format!("worktree {path}: {problem}"));
    }
    let create = |removed_by_hand: bool| Action::CreateWorktree {
        repo: ws.repo.clone(),
        path: ws.path.clone(),
        branch: ws.branch.clone(),
        base: obs.base.clone(),
        new_branch: !obs.branch_exists,
        removed_by_hand,
    };
    let elsewhere = |p: &std::path::Path| {
        format!(
            "worktree {path}: branch `{}` is checked out in {}: switch that one to another branch, then apply",
            ws.branch,
            display(p)
        )
    };
    match &obs.checkout {
        Checkout::Worktree { branch } if branch.as_deref() == Some(ws.branch.as_str()) => {
            Ok(Vec::new())
        }
        Checkout::Missing => match &obs.branch_elsewhere {
            Some(p) => Err(elsewhere(p)),
            None => Ok(vec![change(
                &agent.name,
                create(false),
                "does not exist yet".into(),
            )]),
        },
        Checkout::RemovedByHand { locked: true } => Err(format!(
            "worktree {path} was removed by hand but git keeps it locked: `git worktree unlock {path}`, then apply"
        )),
        Checkout::RemovedByHand { .. } => {
            let mut changes = vec![change(
                &agent.name,
                create(true),
                "removed by hand (git still listed it): made again".into(),
            )];
            // An agent still running in the deleted directory cannot work there.
            if let Some(pane) = world.pane_of(&agent.name).filter(|p| !p.dead) {
                changes.push(change(
                    &agent.name,
                    Action::Restart {
                        pane: pane.id.clone(),
                    },
                    format!("its worktree {path} was removed under it"),
                ));
            }
            Ok(changes)
        }
        Checkout::Worktree { branch } => {
            let now = branch
                .as_ref()
                .map_or("a detached HEAD".to_string(), |b| format!("branch `{b}`"));
            if let Some(p) = &obs.branch_elsewhere {
                return Err(elsewhere(p));
            }
            let work = obs.work.clone().unwrap_or_default();
            let detached_commits = branch.is_none() && work.commit_count > 0;
            if !work.changes.is_empty() || detached_commits || work.unknown.is_some() {
                return Err(format!(
                    "worktree {path} is on {now}, not `{}`, with {}: commit or stash them, then apply switches it back",
                    ws.branch,
                    work.summary("any branch")
                ));
            }
            Ok(vec![change(
                &agent.name,
                Action::SwitchWorktree {
                    repo: ws.repo.clone(),
                    path: ws.path.clone(),
                    from: branch.clone(),
                    branch: ws.branch.clone(),
                    base: obs.base.clone(),
                },
                format!("on {now}, not `{}`", ws.branch),
            )])
        }
        Checkout::Foreign { what } => Err(format!(
            "{path} exists and is {what}: move it away (phoenix never deletes it), then apply makes the worktree"
        )),
    }
}

/// A worktree phoenix made that no agent works in: removed with `--prune` when nothing in it
/// would be lost (or with `--force-remove-worktrees`); otherwise why it stays.
fn leftover(rec: &Recorded, obs: &WorktreeObs, options: &PlanOptions) -> Result<Change, String> {
    let remove = |force: bool, reason: String| {
        change(
            &rec.agent,
            Action::RemoveWorktree {
                repo: rec.repo.clone(),
                path: rec.path.clone(),
                branch: rec.branch.clone(),
                base: rec.base.clone(),
                force,
            },
            reason,
        )
    };
    if let Some(problem) = &obs.problem {
        return Err(problem.clone());
    }
    if !options.prune {
        return Err("no agent works in it any more (`--prune` removes it)".into());
    }
    match &obs.checkout {
        Checkout::Missing => Ok(remove(false, "gone from disk already".into())),
        Checkout::RemovedByHand { locked: true } => Err(format!(
            "removed by hand but locked in git: `git worktree unlock {}`",
            display(&rec.path)
        )),
        Checkout::RemovedByHand { .. } => Ok(remove(
            false,
            "removed by hand: git's record of it goes".into(),
        )),
        Checkout::Foreign { what } => Err(format!("it is {what} now: phoenix leaves it alone")),
        Checkout::Worktree { .. } => {
            let work = obs.work.clone().unwrap_or_default();
            if work.is_safe() {
                return Ok(remove(
                    false,
                    "no agent works in it any more, and nothing in it would be lost".into(),
                ));
            }
            let summary = work.summary(&rec.base);
            if options.force_remove_worktrees {
                return Ok(remove(
                    true,
                    format!("--force-remove-worktrees: removed with {summary}"),
                ));
            }
            Err(format!(
                "{summary} (`--force-remove-worktrees` removes it anyway)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::Work;

    fn leftover_world(work: Work) -> (Spec, World) {
        let spec = crate::spec::parse(
            "",
            std::path::Path::new("/fleet/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        let rec = Recorded {
            agent: "old".into(),
            repo: "/src/app".into(),
            path: "/src/app/.worktrees/old".into(),
            branch: "agent/old".into(),
            base: "main".into(),
        };
        let obs = WorktreeObs {
            path: rec.path.clone(),
            checkout: Checkout::Worktree {
                branch: Some("agent/old".into()),
            },
            base: "main".into(),
            branch_exists: true,
            branch_elsewhere: None,
            work: Some(work),
            problem: None,
        };
        let mut world = World::default();
        world.workspaces.leftover.push((rec, obs));
        (spec, world)
    }

    fn options(prune: bool, force: bool) -> PlanOptions {
        PlanOptions {
            prune,
            hooks_exe: None,
            force_remove_worktrees: force,
        }
    }

    #[test]
    fn a_worktree_with_work_is_kept_with_the_reason_unless_forced() {
        let work = Work {
            changes: vec!["M src/a.rs".into(), "?? notes.md".into()],
            ignored: vec!["secret.env".into()],
            commits: vec!["3f2a1bc wip".into()],
            commit_count: 1,
            unknown: None,
        };
        let (spec, world) = leftover_world(work);
        let kept = plan(&spec, &world, &options(true, false));
        assert!(kept.changes.is_empty());
        assert_eq!(
            kept.kept[0].why,
            "2 uncommitted changes (M src/a.rs, ?? notes.md); 1 ignored file (secret.env); 1 commit not on `main` and not pushed (3f2a1bc wip) (`--force-remove-worktrees` removes it anyway)"
        );
        let forced = plan(&spec, &world, &options(true, true));
        assert!(matches!(
            forced.changes[0].action,
            Action::RemoveWorktree { force: true, .. }
        ));
        // Without --prune nothing is removed, whatever the flag.
        let not_pruning = plan(&spec, &world, &options(false, true));
        assert!(not_pruning.changes.is_empty() && not_pruning.kept.len() == 1);
    }

    #[test]
    fn ignored_files_alone_keep_a_worktree_and_are_listed() {
        let work = Work {
            ignored: vec!["secret.env".into(), "target/".into()],
            ..Work::default()
        };
        let (spec, world) = leftover_world(work.clone());
        let kept = plan(&spec, &world, &options(true, false));
        assert!(kept.changes.is_empty());
        assert_eq!(
            kept.kept[0].why,
            "2 ignored files (secret.env, target/) (`--force-remove-worktrees` removes it anyway)"
        );
        assert_eq!(kept.kept[0].work.as_ref(), Some(&work));
        let forced = plan(&spec, &world, &options(true, true));
        assert!(matches!(
            forced.changes[0].action,
            Action::RemoveWorktree { force: true, .. }
        ));
    }

    #[test]
    fn a_clean_worktree_is_removed_with_prune_and_a_git_failure_keeps_it() {
        let (spec, world) = leftover_world(Work::default());
        let p = plan(&spec, &world, &options(true, false));
        assert!(matches!(
            p.changes[0].action,
            Action::RemoveWorktree { force: false, .. }
        ));
        let (spec, world) = leftover_world(Work {
            unknown: Some("git failed".into()),
            ..Work::default()
        });
        let p = plan(&spec, &world, &options(true, false));
        assert!(p.changes.is_empty(), "cannot tell: nothing counts as safe");
    }
}
