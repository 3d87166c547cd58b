//! The diff's unit tests: worlds built by hand, plans checked as values and as text.

use std::path::{Path, PathBuf};

use super::*;
use crate::hooks::config::{self as hook_config, Target};
use crate::spec::{LoadOptions, Spec, parse};
use crate::world::{AgentObs, FileObs, PaneObs, ProcInfo, World};

fn spec(src: &str) -> Spec {
    parse(
        src,
        std::path::Path::new("/fleet/phoenix.toml"),
        LoadOptions {
            check_filesystem: false,
        },
    )
    .unwrap()
}

fn two_agents() -> Spec {
    spec(
        "[[agent]]\nname = \"a\"\ncommand = \"claude\"\n[[agent]]\nname = \"b\"\ncommand = \"x\"\n",
    )
}

fn pane(agent: &str, fp: &str, alive_child: bool) -> PaneObs {
    PaneObs {
        id: format!("%{}", agent.len()),
        session: "phoenix".into(),
        window: agent.into(),
        pid: 100,
        dead: false,
        dead_status: None,
        dead_signal: None,
        agent: Some(agent.into()),
        fleet: None,
        fingerprint: Some(fp.into()),
        phase: None,
        started: Some(0),
        processes: if alive_child {
            vec![ProcInfo {
                pid: 101,
                ppid: 100,
                comm: "claude".into(),
                started: 0,
                pgid: 101,
            }]
        } else {
            vec![]
        },
    }
}

fn world_with(spec: &Spec, panes: Vec<PaneObs>) -> World {
    World {
        observed_at: 1_000_000,
        server_running: true,
        location: String::new(),
        hook_files: Default::default(),
        workspaces: Default::default(),
        cli_versions: Default::default(),
        sandboxes: Default::default(),
        panes_by_agent: Default::default(),
        panes,
        agents: spec
            .agents
            .iter()
            .map(|a| {
                (
                    a.name.clone(),
                    AgentObs {
                        state_dir: true,
                        ..Default::default()
                    },
                )
            })
            .collect(),
    }
}

#[test]
fn empty_world_starts_everything() {
    let s = two_agents();
    let plan = diff(&s, &World::default(), &PlanOptions::default());
    assert_eq!(plan.summary().start, 2);
    assert!(plan.to_string().contains("Plan: 2 to start, 0 to restart"));
}

#[test]
fn converged_world_has_nothing_to_do() {
    let s = two_agents();
    let panes = s
        .agents
        .iter()
        .map(|a| pane(&a.name, &a.launch().fingerprint(), true))
        .collect();
    let plan = diff(&s, &world_with(&s, panes), &PlanOptions::default());
    assert!(plan.is_empty(), "{plan}");
}

#[test]
fn missing_process_is_a_restart_with_reason() {
    let s = two_agents();
    let a = &s.agents[0];
    let plan = diff(
        &s,
        &world_with(&s, vec![pane("a", &a.launch().fingerprint(), false)]),
        &PlanOptions::default(),
    );
    let c = plan.changes.iter().find(|c| c.agent == "a").unwrap();
    assert_eq!(c.symbol, "~");
    assert!(
        c.reason.contains("no `claude` process under it"),
        "{}",
        c.reason
    );
}

#[test]
fn a_second_pane_for_an_agent_is_removed_and_the_oldest_live_one_stays() {
    let s = two_agents();
    let fp = |i: usize| s.agents[i].launch().fingerprint();
    let with_id = |mut p: PaneObs, id: &str| {
        p.id = id.into();
        p
    };
    let mut dead_first = with_id(pane("a", &fp(0), true), "%1");
    dead_first.dead = true;
    let panes = vec![
        with_id(pane("a", &fp(0), true), "%9"),
        dead_first,
        with_id(pane("a", &fp(0), true), "%4"),
        with_id(pane("b", &fp(1), true), "%2"),
    ];
    let world = world_with(&s, panes);
    assert_eq!(world.pane_of("a").unwrap().id, "%4");
    let plan = diff(&s, &world, &PlanOptions::default());
    let removed: Vec<(&str, &str)> = plan
        .changes
        .iter()
        .map(|c| match &c.action {
            Action::RemoveExtra { pane, keep } => (pane.as_str(), keep.as_str()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(removed, [("%9", "%4"), ("%1", "%4")]);
    assert_eq!(plan.summary().remove, 2);
    let text = plan.to_string();
    assert!(
        text.contains("- agent `a`: remove %9 — a second pane for the agent, which runs in %4"),
        "{text}"
    );
}

#[test]
fn a_stopped_agent_is_neither_started_nor_left_running() {
    let s = two_agents();
    let fp = |i: usize| s.agents[i].launch().fingerprint();
    let mut world = world_with(&s, vec![pane("b", &fp(1), false)]);
    for name in ["a", "b"] {
        let obs = world.agents.entry(name.into()).or_default();
        obs.state_dir = true;
        obs.stopped = true;
    }
    let plan = diff(&s, &world, &PlanOptions::default());
    let actions: Vec<_> = plan
        .changes
        .iter()
        .map(|c| (&*c.agent, c.action.symbol()))
        .collect();
    assert_eq!(actions, [("b", "-")], "{plan}");
    let held: Vec<_> = plan
        .attention
        .iter()
        .map(|a| (&*a.agent, a.state))
        .collect();
    assert_eq!(held, [("a", "stopped")]);
    let text = plan.to_string();
    assert!(text.contains("`phoenix start a`"), "{text}");
    assert!(text.contains("stopped with `phoenix stop`"), "{text}");
}

/// The operator moved `a` and `gone` to another machine: a copy here is stale. Declared or
/// not, it is stopped (without `--prune`) and never started again.
#[test]
fn an_agent_moved_elsewhere_is_stopped_here_and_never_started() {
    let s = two_agents();
    let fp = |i: usize| s.agents[i].launch().fingerprint();
    let mut world = world_with(&s, vec![pane("b", &fp(1), true), pane("gone", "x", true)]);
    world.panes[1].id = "%9".into();
    let fence = crate::state::fence::Fence {
        generation: 3,
        here: false,
        runs_on: "gpu-2".into(),
        since: String::new(),
    };
    for name in ["a", "gone"] {
        world.agents.entry(name.into()).or_default().fenced = Some(fence.clone());
    }
    let plan = diff(&s, &world, &PlanOptions::default());
    let actions: Vec<_> = plan
        .changes
        .iter()
        .map(|c| (&*c.agent, c.action.symbol(), c.reason.as_str()))
        .collect();
    assert_eq!(
        actions,
        [(
            "gone",
            "-",
            "moved to gpu-2 (generation 3): this copy is stale"
        )],
        "{plan}"
    );
    assert!(plan.unmanaged.is_empty(), "{plan}");
    let held: Vec<_> = plan
        .attention
        .iter()
        .map(|a| (&*a.agent, a.state))
        .collect();
    assert_eq!(held, [("a", "moved")]);
}

#[test]
fn held_back_agents_are_listed_but_not_counted_as_changes() {
    let s = two_agents();
    let fp = |i: usize| s.agents[i].launch().fingerprint();
    let mut a = pane("a", &fp(0), false);
    a.phase = Some("safe".into());
    let mut b = pane("b", &fp(1), false);
    b.phase = Some("cooldown".into());
    let plan = diff(&s, &world_with(&s, vec![a, b]), &PlanOptions::default());
    assert!(plan.is_empty(), "{plan}");
    let states: Vec<_> = plan
        .attention
        .iter()
        .map(|a| (&*a.agent, a.state))
        .collect();
    assert_eq!(states, [("a", "safe-mode"), ("b", "cooldown")]);
    let text = plan.to_string();
    assert!(text.starts_with("No changes to apply."), "{text}");
    assert!(text.contains("`phoenix restart a`"), "{text}");
    assert!(!text.contains("matches phoenix.toml"), "{text}");
    // Undeclared panes are no converged fleet either.
    let plan = diff(
        &s,
        &world_with(
            &s,
            vec![
                pane("a", &fp(0), true),
                pane("b", &fp(1), true),
                pane("old", "x", true),
            ],
        ),
        &PlanOptions::default(),
    );
    assert!(plan.is_empty() && plan.attention.is_empty());
    assert!(
        plan.to_string().starts_with("No changes to apply."),
        "{plan}"
    );
}

#[test]
fn waiting_wrapper_is_left_alone() {
    let s = two_agents();
    let mut p = pane("a", &s.agents[0].launch().fingerprint(), false);
    p.phase = Some("cooldown".into());
    let plan = diff(&s, &world_with(&s, vec![p]), &PlanOptions::default());
    assert!(plan.changes.iter().all(|c| c.agent != "a"));
}

#[test]
fn an_agent_someone_restarts_is_starting_not_missing_or_dead() {
    let s = two_agents();
    let fp = |i: usize| s.agents[i].launch().fingerprint();
    // `a`: its wrapper is between the old CLI and the new one, no phase set yet; `b`: its
    // pane is not there yet. Both are being restarted by someone else right now.
    let mut w = world_with(&s, vec![pane("a", &fp(0), false)]);
    let claim = crate::state::claim::Claim {
        owner: crate::state::claim::Owner::Operator,
        pid: 1,
        id: "1".into(),
        until_ms: i64::MAX,
        acting: false,
        started: false,
    };
    for agent in ["a", "b"] {
        w.agents.get_mut(agent).unwrap().restarting = Some(claim.clone());
    }
    let plan = diff(&s, &w, &PlanOptions::default());
    assert!(plan.is_empty(), "{plan}");
    let held: Vec<_> = plan
        .attention
        .iter()
        .map(|a| (&*a.agent, a.state))
        .collect();
    assert_eq!(held, [("a", "restarting"), ("b", "restarting")]);
    assert!(
        plan.to_string()
            .contains("starting after a restart by a person (pid 1)"),
        "{plan}"
    );
    // A pane that died after its owner was done is a start that failed: restarted.
    w.panes[0].dead = true;
    let plan = diff(&s, &w, &PlanOptions::default());
    let symbols: Vec<_> = plan.changes.iter().map(|c| (&*c.agent, c.symbol)).collect();
    assert_eq!(symbols, [("a", "~")], "{plan}");
    w.agents
        .get_mut("a")
        .unwrap()
        .restarting
        .as_mut()
        .unwrap()
        .acting = true;
    assert!(diff(&s, &w, &PlanOptions::default()).is_empty());
    w.panes[0].dead = false;
    // Without the claim the same world is a pane to restart and an agent to start.
    for agent in ["a", "b"] {
        w.agents.get_mut(agent).unwrap().restarting = None;
    }
    let plan = diff(&s, &w, &PlanOptions::default());
    let symbols: Vec<_> = plan.changes.iter().map(|c| (&*c.agent, c.symbol)).collect();
    assert_eq!(symbols, [("b", "+"), ("a", "~")], "{plan}");
}

#[test]
fn dead_pane_with_clean_exit_is_left_alone() {
    let s = two_agents();
    let mut p = pane("a", &s.agents[0].launch().fingerprint(), false);
    p.dead = true;
    let mut w = world_with(&s, vec![p]);
    w.agents.get_mut("a").unwrap().clean_exit = true;
    let plan = diff(&s, &w, &PlanOptions::default());
    assert!(plan.changes.iter().all(|c| c.agent != "a"), "{plan}");
}

#[test]
fn drift_is_a_replacement_listing_fields() {
    let s = two_agents();
    let mut old = s.agents[0].launch();
    old.command = "claude --model opus".into();
    let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
    w.agents.get_mut("a").unwrap().started = Some(old);
    let plan = diff(&s, &w, &PlanOptions::default());
    let c = plan.changes.iter().find(|c| c.agent == "a").unwrap();
    assert_eq!(c.symbol, "-/+");
    assert!(c.reason.contains("command"));
    assert!(
        plan.to_string()
            .contains("command: \"claude --model opus\" → \"claude\"")
    );
}

#[test]
fn a_workdir_recorded_with_dot_steps_is_not_drift() {
    let s = two_agents();
    let mut old = s.agents[0].launch();
    old.workdir = old.workdir.join("sub/..").join(".");
    assert_ne!(old.fingerprint(), s.agents[0].launch().fingerprint());
    let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
    w.agents.get_mut("a").unwrap().started = Some(old.clone());
    let plan = diff(&s, &w, &PlanOptions::default());
    assert!(plan.changes.iter().all(|c| c.agent != "a"), "{plan}");
    // A real change of workdir still is.
    old.workdir = old.workdir.join("elsewhere");
    let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
    w.agents.get_mut("a").unwrap().started = Some(old);
    let plan = diff(&s, &w, &PlanOptions::default());
    assert!(
        plan.changes
            .iter()
            .any(|c| c.agent == "a" && c.symbol == "-/+"),
        "{plan}"
    );
}

#[test]
fn drift_in_env_shows_which_variable_changed_but_not_its_value() {
    let s = two_agents();
    let mut old = s.agents[0].launch();
    old.env.insert("API_TOKEN".into(), "sk-old-secret".into());
    let mut w = world_with(&s, vec![pane("a", &old.fingerprint(), true)]);
    w.agents.get_mut("a").unwrap().started = Some(old);
    let text = diff(&s, &w, &PlanOptions::default()).to_string();
    assert!(text.contains("env: {\"API_TOKEN\":\"(hidden #"), "{text}");
    assert!(!text.contains("sk-old-secret"), "{text}");
}

#[test]
fn undeclared_agents_are_only_removed_with_prune() {
    let s = two_agents();
    let w = world_with(&s, vec![pane("old", "x", true)]);
    let plan = diff(&s, &w, &PlanOptions::default());
    assert!(plan.changes.iter().all(|c| c.agent != "old"));
    assert_eq!(plan.unmanaged.len(), 1);
    let plan = diff(
        &s,
        &w,
        &PlanOptions {
            prune: true,
            ..Default::default()
        },
    );
    let c = plan.changes.iter().find(|c| c.agent == "old").unwrap();
    assert!(matches!(c.action, Action::Prune { .. }));
}

#[test]
fn json_has_format_version_and_summary() {
    let s = two_agents();
    let v = diff(&s, &World::default(), &PlanOptions::default()).to_json();
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["summary"]["start"], 2);
    assert_eq!(v["changes"][0]["action"]["type"], "start");
}

fn with_hooks(prune: bool) -> PlanOptions {
    PlanOptions {
        prune,
        hooks_exe: Some("/bin/phoenix".into()),
        force_remove_worktrees: false,
    }
}

fn claude_agent() -> Spec {
    spec("[[agent]]\nname = \"a\"\ncli = \"claude\"\nworkdir = \"/w\"\n")
}

#[test]
fn hook_files_are_planned_before_starts_and_only_with_an_exe() {
    let s = claude_agent();
    let plan = diff(&s, &World::default(), &PlanOptions::default());
    assert_eq!(plan.summary().hooks, 0);
    let plan = diff(&s, &World::default(), &with_hooks(false));
    // Its settings, and `.mcp.json` with phoenix's MCP server.
    assert_eq!(plan.summary().hooks, 2);
    let Action::InstallHooks { path, diff, .. } = &plan.changes[1].action else {
        panic!("{plan}");
    };
    assert_eq!(path, Path::new("/w/.mcp.json"));
    assert!(diff.contains("\"mcpServers\""), "{diff}");
    let first = &plan.changes[0];
    assert_eq!(first.symbol, "+");
    let Action::InstallHooks {
        path,
        cli,
        create,
        diff,
    } = &first.action
    else {
        panic!("{plan}");
    };
    assert_eq!(path, Path::new("/w/.claude/settings.json"));
    assert_eq!((*cli, *create), (Cli::Claude, true));
    assert!(diff.contains("--agent a --cli claude"), "{diff}");
    assert!(matches!(plan.changes[2].action, Action::Start));
    assert!(
        plan.to_string().contains("2 hook files to update"),
        "{plan}"
    );
}

#[test]
fn installed_hooks_are_converged() {
    let s = claude_agent();
    let desired = Target::new(Path::new("/bin/phoenix"), &s.file, &s.agents[0], None)
        .desired()
        .unwrap();
    let mut w = World::default();
    w.hook_files.insert(
        "/w/.claude/settings.json".into(),
        FileObs::Text(hook_config::pretty(&desired)),
    );
    let server = Target::new(Path::new("/bin/phoenix"), &s.file, &s.agents[0], None)
        .desired_for(Path::new("/w/.mcp.json"))
        .unwrap();
    w.hook_files.insert(
        "/w/.mcp.json".into(),
        FileObs::Text(hook_config::pretty(&server)),
    );
    let plan = diff(&s, &w, &with_hooks(false));
    assert_eq!(plan.summary().hooks, 0, "{plan}");
}

#[test]
fn a_pruned_agent_loses_only_its_hook_entries() {
    let s = claude_agent();
    let old = spec("[[agent]]\nname = \"old\"\ncli = \"claude\"\nworkdir = \"/o\"\n");
    let theirs = Target::new(Path::new("/bin/phoenix"), &old.file, &old.agents[0], None)
        .desired()
        .unwrap();
    let path = PathBuf::from("/o/.claude/settings.json");
    let mut text = hook_config::merge(
        Some(r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}}"#),
        "old",
        Some(&theirs),
    )
    .unwrap()
    .unwrap();
    text["model"] = "opus".into();
    let mut w = World::default();
    w.hook_files
        .insert(path.clone(), FileObs::Text(hook_config::pretty(&text)));
    w.agents.insert(
        "old".into(),
        AgentObs {
            state_dir: true,
            installed_hooks: vec![path.clone()],
            ..Default::default()
        },
    );
    let plan = diff(&s, &w, &with_hooks(false));
    assert!(plan.changes.iter().all(|c| c.agent != "old"), "{plan}");
    let plan = diff(&s, &w, &with_hooks(true));
    let c = plan.changes.iter().find(|c| c.agent == "old").unwrap();
    assert_eq!(c.symbol, "-");
    let Action::RemoveHooks { diff, .. } = &c.action else {
        panic!("{plan}");
    };
    assert!(
        diff.contains("-            \"command\": \"/bin/phoenix"),
        "{diff}"
    );
    assert!(
        !diff.contains("-            \"command\": \"echo mine"),
        "{diff}"
    );
}

#[test]
fn an_actions_name_is_its_json_type() {
    let pane = || "%1".to_string();
    let path = || PathBuf::from("/w/.claude/settings.json");
    let actions = [
        Action::InitState,
        Action::Start,
        Action::Restart { pane: pane() },
        Action::Replace {
            pane: pane(),
            changed: Vec::new(),
        },
        Action::Stop { pane: pane() },
        Action::Prune { pane: pane() },
        Action::RemoveExtra {
            pane: pane(),
            keep: "%2".into(),
        },
        Action::InstallHooks {
            path: path(),
            cli: Cli::Claude,
            create: true,
            diff: String::new(),
        },
        Action::RemoveHooks {
            path: path(),
            diff: String::new(),
        },
    ];
    for action in actions {
        assert_eq!(
            serde_json::to_value(&action).unwrap()["type"],
            action.name()
        );
    }
}

#[test]
fn a_plan_read_back_from_its_json_is_the_same_plan() {
    // A host of a multi-host fleet sends its plan as JSON; the operator renders it as its own.
    let s = two_agents();
    let mut a = pane("a", "stale", true);
    a.phase = Some("safe".into());
    let mut undeclared = pane("x", "f", true);
    undeclared.id = "%7".into();
    let world = world_with(&s, vec![a, undeclared]);
    let mut plan = diff(
        &s,
        &world,
        &PlanOptions {
            prune: false,
            hooks_exe: None,
            force_remove_worktrees: false,
        },
    );
    plan.attention.push(Attention {
        agent: "b".into(),
        pane: String::new(),
        state: "cooldown",
        hint: "wait".into(),
    });
    assert!(
        !plan.changes.is_empty() && !plan.unmanaged.is_empty(),
        "{plan}"
    );
    let back: Plan = serde_json::from_value(plan.to_json()).unwrap();
    assert_eq!(back.changes, plan.changes);
    assert_eq!(back.unmanaged, plan.unmanaged);
    assert_eq!(back.attention, plan.attention);
    assert_eq!(back.to_string(), plan.to_string());
}

/// A fleet of one `[[agent_set]]` of `max` 2, expanded from `numbers`.
fn intake_spec(numbers: &[u32]) -> Spec {
    let source = "[[agent_set]]\nname = \"issues\"\nsource = { file = \"work.json\" }\nkey = \"{{ item.number }}\"\nmax = 2\n[agent_set.template]\nname = \"issue-{{ item.number }}\"\ncommand = \"claude\"\n";
    let items: Vec<crate::spec::intake::Item> = numbers
        .iter()
        .map(|n| {
            serde_json::json!({"number": n, "title": format!("Fix {n}")})
                .as_object()
                .unwrap()
                .clone()
        })
        .collect();
    let mut lists = crate::spec::ItemLists::new();
    lists.insert("issues".into(), items);
    crate::spec::parse_with_items(
        source,
        Path::new("/fleet/phoenix.toml"),
        LoadOptions {
            check_filesystem: false,
        },
        &lists,
    )
    .unwrap()
}

#[test]
fn an_agent_set_holds_the_agents_past_its_max_and_says_where_each_came_from() {
    let spec = intake_spec(&[1, 2, 3]);
    let world = world_with(&spec, vec![]);
    let plan = diff(&spec, &world, &PlanOptions::default());
    let started: Vec<&str> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.action, Action::Start))
        .map(|c| c.agent.as_str())
        .collect();
    assert_eq!(started, ["issue-1", "issue-2"]);
    let text = plan.to_string();
    assert!(
        text.contains("+ agent `issue-1`: start — not running (no window `phoenix:issue-1`) (from agent_set \"issues\": #1 \"Fix 1\")"),
        "{text}"
    );
    assert!(
        text.contains("! agent `issue-3`: waiting; agent_set `issues` runs at most 2 at once"),
        "{text}"
    );

    // Those at work keep their places: a new item first in the source's order waits.
    let spec = intake_spec(&[4, 1, 2]);
    let fp = spec.agent("issue-1").unwrap().launch().fingerprint();
    let fp2 = spec.agent("issue-2").unwrap().launch().fingerprint();
    let world = world_with(
        &spec,
        vec![pane("issue-1", &fp, true), {
            let mut p = pane("issue-2", &fp2, true);
            p.id = "%9".into();
            p
        }],
    );
    let plan = diff(&spec, &world, &PlanOptions::default());
    assert!(plan.changes.is_empty(), "{plan}");
    assert_eq!(plan.attention[0].agent, "issue-4");
    assert_eq!(plan.attention[0].state, "waiting");
}

#[test]
fn an_item_that_left_is_retired_without_prune() {
    let spec = intake_spec(&[1]);
    let fp = spec.agent("issue-1").unwrap().launch().fingerprint();
    let mut gone = intake_spec(&[]);
    gone.retired.push(crate::spec::intake::Retired {
        agent: "issue-1".into(),
        set: "issues".into(),
        key: "1".into(),
        cli: crate::spec::Cli::Custom,
    });
    let world = world_with(&spec, vec![pane("issue-1", &fp, true)]);
    let plan = diff(&gone, &world, &PlanOptions::default());
    assert_eq!(plan.changes.len(), 1, "{plan}");
    assert!(matches!(plan.changes[0].action, Action::Retire { .. }));
    assert!(plan.unmanaged.is_empty());
    assert!(
        plan.to_string().contains(
            "- agent `issue-1`: retire in %7 — item #1 left the source of agent_set \"issues\""
        ),
        "{plan}"
    );
}
