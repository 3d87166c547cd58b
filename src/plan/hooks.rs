//! Hook files in the plan: which files may hold an agent's phoenix entries, and what each needs.

use std::path::{Path, PathBuf};

use crate::hooks::config::{self as hook_config, FileChange, Target};
use crate::spec::{AgentSpec, Spec};
use crate::world::{AgentObs, FileObs, World};

use super::{Action, Change, change};

/// The hook file changes of the whole fleet: every declared agent's files, and with `prune`
/// the files of agents no longer declared.
pub(super) fn fleet_hook_changes(
    spec: &Spec,
    world: &World,
    exe: &Path,
    prune: bool,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for agent in &spec.agents {
        let paths = hook_paths(
            Some(&agent.workdir),
            world.agents.get(&agent.name),
            hook_config::mcp_path_in(agent.cli, &agent.workdir),
        );
        changes.extend(hook_changes(
            spec,
            &agent.name,
            Some(agent),
            &paths,
            exe,
            world,
        ));
    }
    if prune {
        for (name, obs) in &world.agents {
            if spec.agent(name).is_none() {
                let workdir = obs.started.as_ref().map(|s| s.workdir.as_path());
                let paths = hook_paths(workdir, Some(obs), None);
                changes.extend(hook_changes(spec, name, None, &paths, exe, world));
            }
        }
    }
    changes
}

/// Every hook file that may hold phoenix entries for an agent: the CLIs' files in its
/// workdir and the files `apply` recorded installing (an old workdir, another CLI). Claude
/// Code's `.mcp.json` holds one entry for every agent of the workdir, not one per agent: it is
/// the agent's only when it is its own CLI's (`own_mcp`) or `apply` recorded writing it.
fn hook_paths(
    workdir: Option<&Path>,
    obs: Option<&AgentObs>,
    own_mcp: Option<PathBuf>,
) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = workdir
        .into_iter()
        .flat_map(|w| {
            hook_config::HOOKED
                .into_iter()
                .filter_map(move |cli| hook_config::path_in(cli, w))
        })
        .chain(own_mcp)
        .collect();
    for p in obs.into_iter().flat_map(|o| &o.installed_hooks) {
        if !paths.contains(p) {
            paths.push(p.clone());
        }
    }
    paths
}

/// Hook files that differ from what they should hold for agent `name`: the file of its own
/// CLI in its workdir gets phoenix's entries, every other file loses them (`agent` is `None`
/// for an agent being pruned).
fn hook_changes(
    spec: &Spec,
    name: &str,
    agent: Option<&AgentSpec>,
    paths: &[PathBuf],
    exe: &Path,
    world: &World,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for path in paths {
        let Some(cli) = hook_config::cli_of(path) else {
            continue;
        };
        let label = hook_config::label_of(path, cli);
        let own = agent.filter(|a| {
            a.cli == cli
                && (hook_config::path_in(cli, &a.workdir).as_ref() == Some(path)
                    || hook_config::mcp_path_in(cli, &a.workdir).as_ref() == Some(path))
        });
        let desired = own.and_then(|a| {
            let version = world.cli_versions.get(&a.name).and_then(|v| v.version);
            Target::new(exe, &spec.file, a, version).desired_for(path)
        });
        let existing = match world.hook_files.get(path) {
            Some(FileObs::Text(text)) => Some(text.as_str()),
            Some(FileObs::Unreadable(e)) => {
                if desired.is_some() {
                    changes.push(change(
                        name,
                        Action::InstallHooks {
                            path: path.clone(),
                            cli,
                            create: false,
                            diff: String::new(),
                        },
                        format!("cannot read `{label}` ({e}); fix its permissions"),
                    ));
                }
                continue;
            }
            Some(FileObs::Missing) | None => None,
        };
        let Some(file_change) = hook_config::plan_file(label, existing, name, desired.as_ref())
        else {
            continue;
        };
        let had_entries = existing.is_some_and(|t| hook_config::has_agent_entries(t, name));
        let path = path.clone();
        let (action, reason) = match file_change {
            FileChange::Write { create, diff } if desired.is_some() => (
                Action::InstallHooks {
                    path,
                    cli,
                    create,
                    diff,
                },
                {
                    let mcp_file = hook_config::own_mcp_file(cli) == Some(label);
                    let why = if create {
                        format!("`{label}` does not exist yet")
                    } else if mcp_file {
                        format!("phoenix's MCP server entry in `{label}` is missing or out of date")
                    } else if had_entries {
                        format!("phoenix's hooks in `{label}` are out of date")
                    } else {
                        format!("`{label}` has no phoenix hooks yet")
                    };
                    match own.and_then(|a| world.cli_versions.get(&a.name).map(|v| (a, v))) {
                        Some((a, installed)) => format!(
                            "{why}; {}",
                            crate::world::cli_version::made_for_text(a, installed)
                        ),
                        None => why,
                    }
                },
            ),
            FileChange::Write { diff, .. } | FileChange::Delete { diff } => (
                Action::RemoveHooks { path, diff },
                match agent {
                    None => "not declared in phoenix.toml".to_string(),
                    Some(a) if a.cli != cli => format!("the agent uses cli `{}` now", a.cli),
                    Some(_) => "the agent's workdir moved".to_string(),
                },
            ),
            FileChange::Unmergeable { problem } => (
                Action::InstallHooks {
                    path,
                    cli,
                    create: false,
                    diff: String::new(),
                },
                format!("cannot merge into `{label}`: it {problem}"),
            ),
        };
        changes.push(change(name, action, reason));
    }
    changes
}
