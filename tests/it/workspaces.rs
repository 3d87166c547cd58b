//! Workspaces: each agent in a git worktree of its own, declared in phoenix.toml, made,
//! repaired and removed by plan/apply with the real git, on real repos in temp dirs and a
//! real tmux server.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::Fleet;

/// Run git in `dir` (argv, never a shell) and return its stdout; the test fails if git does.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit on `main`, at `rel` under the fleet's home.
fn repo(fleet: &Fleet, rel: &str) -> PathBuf {
    repo_at(fleet.path().join("home").join(rel))
}

/// A repository with one commit on `main`, at `dir`.
fn repo_at(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    git(&dir, &["config", "user.email", "test@example.com"]);
    git(&dir, &["config", "user.name", "Test"]);
    std::fs::write(dir.join("README.md"), "hello\n").unwrap();
    git(&dir, &["add", "README.md"]);
    git(&dir, &["commit", "-q", "-m", "first"]);
    dir
}

fn commit(dir: &Path, file: &str, message: &str) {
    std::fs::write(dir.join(file), message).unwrap();
    git(dir, &["add", file]);
    git(dir, &["commit", "-q", "-m", message]);
}

fn branch_of(worktree: &Path) -> String {
    git(worktree, &["rev-parse", "--abbrev-ref", "HEAD"])
        .trim()
        .to_string()
}

/// A demo agent of cli `claude` (so that hooks are installed) in a workspace of `repo`.
fn agent(name: &str, workspace: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"claude\"\ncommand = \"phoenix demo-agent --interval 200ms\"\nworkspace = {workspace}\n"
    )
}

#[test]
fn apply_makes_each_agents_worktree_on_its_branch_and_starts_it_there() {
    let fleet = Fleet::new();
    // A path with a space, two agents on one repo, the branch from a template in [defaults].
    let repo = repo(&fleet, "src/my app");
    fleet.toml(&format!(
        "[defaults]\nworkspace = {{ repo = \"home/src/my app\", branch = \"agent/{{name}}\", base = \"main\" }}\n\n{}\n{}",
        "[[agent]]\nname = \"auth\"\ncli = \"claude\"\ncommand = \"phoenix demo-agent --interval 200ms\"\n",
        "[[agent]]\nname = \"ui\"\ncli = \"claude\"\ncommand = \"phoenix demo-agent --interval 200ms\"\n",
    ));
    let plan = fleet.run(&["plan"]);
    plan.status(2)
        .stdout_has("+ worktree ~/src/my app/.worktrees/auth on branch agent/auth (from main) for agent `auth` — does not exist yet")
        .stdout_has("+ worktree ~/src/my app/.worktrees/ui on branch agent/ui (from main)")
        .stdout_has("2 worktrees to change");
    // The worktree comes before the agent's hooks and its start.
    let text = plan.stdout();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    assert!(at("+ worktree ~/src/my app/.worktrees/auth") < at("agent `auth`: install hooks"));
    assert!(at("agent `auth`: install hooks") < at("agent `auth`: start"));
    assert!(
        !repo.join(".worktrees").exists(),
        "plan must not touch anything"
    );

    fleet.run(&["apply", "--yes"]).status(0);
    for name in ["auth", "ui"] {
        let wt = repo.join(".worktrees").join(name);
        assert_eq!(branch_of(&wt), format!("agent/{name}"));
        assert!(
            wt.join(".claude/settings.json").is_file(),
            "hooks in the worktree"
        );
    }
    fleet.wait_running(&["auth", "ui"]);
    // The agent runs in its worktree.
    let cwd = fleet
        .tmux(&[
            "list-panes",
            "-a",
            "-F",
            "#{@phoenix_agent} #{pane_current_path}",
        ])
        .unwrap();
    assert!(
        cwd.lines()
            .any(|l| l.starts_with("auth ") && l.ends_with("/src/my app/.worktrees/auth")),
        "{cwd}"
    );
    // The repo's own status does not list the agents' worktrees.
    let exclude = std::fs::read_to_string(repo.join(".git/info/exclude")).unwrap();
    assert!(exclude.lines().any(|l| l == "/.worktrees/"), "{exclude}");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    // Converged: nothing more to do.
    fleet.run(&["plan"]).status(0);

    // Status: branch, ahead/behind the base, changed files (phoenix's hook file not counted).
    let wt = repo.join(".worktrees/auth");
    commit(&wt, "a.txt", "one");
    commit(&wt, "b.txt", "two");
    std::fs::write(wt.join("notes.md"), "draft").unwrap();
    commit(&repo, "c.txt", "on main");
    let row = fleet.agent_status("auth");
    let w = &row["worktree"];
    assert_eq!(w["branch"], "agent/auth", "{row}");
    assert_eq!(
        (w["ahead"].as_u64(), w["behind"].as_u64()),
        (Some(2), Some(1)),
        "{w}"
    );
    assert_eq!(w["dirty"].as_u64(), Some(1), "{w}");
    fleet
        .run(&["status"])
        .stdout_has("agent/auth")
        .stdout_has("+2 -1 main");
    fleet
        .run(&["status", "auth"])
        .stdout_has("branch agent/auth, +2 -1 main ahead/behind, 1 changed file(s)");
}

#[test]
fn a_worktree_removed_by_hand_or_switched_away_is_repaired() {
    let fleet = Fleet::new();
    let repo = repo(&fleet, "app");
    fleet.toml(&agent("auth", "{ repo = \"home/app\" }"));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["auth"]);
    let wt = repo.join(".worktrees/auth");
    // The default base is the branch the repo has checked out.
    assert_eq!(branch_of(&wt), "agent/auth");

    // Removed by hand: the plan says so, apply makes it again (the branch and its commits
    // survive) and restarts the agent that ran in the deleted directory.
    commit(&wt, "work.txt", "agent work");
    std::fs::remove_dir_all(&wt).unwrap();
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("+ worktree ~/app/.worktrees/auth on branch agent/auth (existing branch) for agent `auth` — removed by hand")
        .stdout_has("restart in");
    fleet.run(&["apply", "--yes"]).status(0);
    assert_eq!(branch_of(&wt), "agent/auth");
    assert!(wt.join("work.txt").is_file(), "the branch's commit is back");
    fleet.run(&["plan"]).status(0);

    // On another branch, clean: switched back.
    git(&wt, &["switch", "-q", "-c", "detour"]);
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("~ worktree ~/app/.worktrees/auth back to branch agent/auth for agent `auth` — on branch `detour`, not `agent/auth`");
    fleet.run(&["apply", "--yes"]).status(0);
    assert_eq!(branch_of(&wt), "agent/auth");

    // On another branch with uncommitted work: never switched, the plan says why.
    git(&wt, &["switch", "-q", "detour"]);
    std::fs::write(wt.join("README.md"), "changed by a person\n").unwrap();
    let plan = fleet.run(&["plan"]);
    plan.stdout_has("worktree ~/app/.worktrees/auth is on branch `detour`, not `agent/auth`, with 1 uncommitted change (M README.md)");
    assert!(
        !plan.stdout().contains("back to branch"),
        "{}",
        plan.stdout()
    );
    fleet.run(&["apply", "--yes"]);
    assert_eq!(branch_of(&wt), "detour");
    assert_eq!(
        std::fs::read_to_string(wt.join("README.md")).unwrap(),
        "changed by a person\n"
    );
}

#[test]
fn prune_removes_a_clean_worktree_and_keeps_one_with_work_until_forced() {
    let fleet = Fleet::new();
    let repo = repo(&fleet, "app");
    let ws = "{ repo = \"home/app\", base = \"main\" }";
    fleet.toml(&format!(
        "{}\n{}\n{}",
        agent("clean", ws),
        agent("dirty", ws),
        agent("ahead", ws)
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let wt = |n: &str| repo.join(".worktrees").join(n);
    std::fs::write(wt("dirty").join("notes.md"), "unsaved thoughts").unwrap();
    commit(&wt("ahead"), "feature.txt", "unpushed feature");

    // The agents leave phoenix.toml. Without --prune every worktree stays, and the plan says so.
    fleet.toml("");
    fleet
        .run(&["plan"])
        .stdout_has("! worktree ~/app/.worktrees/clean of agent `clean` (branch agent/clean) kept: no agent works in it any more (`--prune` removes it)");
    let plan = fleet.run(&["plan", "--prune"]);
    plan.status(2)
        .stdout_has("- worktree ~/app/.worktrees/clean (branch agent/clean stays) for agent `clean`")
        .stdout_has("! worktree ~/app/.worktrees/dirty of agent `dirty` (branch agent/dirty) kept: 1 uncommitted change (?? notes.md) (`--force-remove-worktrees` removes it anyway)")
        .stdout_has("! worktree ~/app/.worktrees/ahead of agent `ahead` (branch agent/ahead) kept: 1 commit not on `main` and not pushed (");
    fleet.run(&["apply", "--yes", "--prune"]).status(0);
    assert!(!wt("clean").exists());
    assert!(wt("dirty").join("notes.md").is_file());
    assert!(wt("ahead").join("feature.txt").is_file());
    // The branch of a removed worktree stays.
    git(&repo, &["rev-parse", "--verify", "refs/heads/agent/clean"]);

    // Pushed (on a remote-tracking branch): nothing would be lost any more.
    let remote = fleet.path().join("remote.git");
    git(
        fleet.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );
    git(
        &repo,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    git(&wt("ahead"), &["push", "-q", "origin", "agent/ahead"]);
    fleet
        .run(&["plan", "--prune"])
        .stdout_has("- worktree ~/app/.worktrees/ahead (branch agent/ahead stays)");

    // The flag is what removes the one with work.
    fleet
        .run(&["plan", "--prune", "--force-remove-worktrees"])
        .stdout_has("- worktree ~/app/.worktrees/dirty (branch agent/dirty stays) for agent `dirty` — --force-remove-worktrees: removed with 1 uncommitted change (?? notes.md)");
    fleet
        .run(&["apply", "--yes", "--prune", "--force-remove-worktrees"])
        .status(0);
    assert!(!wt("dirty").exists() && !wt("ahead").exists());
    fleet.run(&["plan", "--prune"]).status(0);
    // Without --prune the flag is refused.
    let run = fleet.run(&["plan", "--force-remove-worktrees"]);
    assert_ne!(run.code(), Some(0));
    run.stderr_has("--prune");
}

/// Ignored files are work: a worktree no agent works in that holds a gitignored
/// `secret.env` is kept by `--prune` (git's own removal would delete it without a word), listed
/// in the plan's text and JSON and in apply's, and removed only with
/// `--force-remove-worktrees`. phoenix's own hook file in an ignored directory is not work.
#[test]
fn prune_keeps_a_worktree_holding_ignored_files_until_forced() {
    let fleet = Fleet::new();
    let repo = repo(&fleet, "app");
    std::fs::write(repo.join(".gitignore"), "*.env\n.claude/\n.mcp.json\n").unwrap();
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "-q", "-m", "ignore secrets"]);
    let ws = "{ repo = \"home/app\", base = \"main\" }";
    fleet.toml(&format!("{}\n{}", agent("keeper", ws), agent("tidy", ws)));
    fleet.run(&["apply", "--yes"]).status(0);
    let wt = |n: &str| repo.join(".worktrees").join(n);
    // phoenix's hook file is there, in a directory git ignores.
    assert!(wt("tidy").join(".claude/settings.json").is_file());
    std::fs::write(wt("keeper").join("secret.env"), "TOKEN=only-copy\n").unwrap();
    // git itself sees nothing to keep: its status without --ignored is empty.
    assert_eq!(git(&wt("keeper"), &["status", "--porcelain"]), "");

    fleet.toml("");
    let kept = "! worktree ~/app/.worktrees/keeper of agent `keeper` (branch agent/keeper) kept: 1 ignored file (secret.env) (`--force-remove-worktrees` removes it anyway)";
    fleet
        .run(&["plan", "--prune"])
        .status(2)
        .stdout_has(kept)
        .stdout_has("- worktree ~/app/.worktrees/tidy (branch agent/tidy stays) for agent `tidy`");
    let plan = fleet.run(&["plan", "--prune", "--json"]).json();
    let keeper = plan["kept_worktrees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["agent"] == "keeper")
        .unwrap_or_else(|| panic!("{plan}"));
    assert_eq!(
        keeper["work"]["ignored"],
        serde_json::json!(["secret.env"]),
        "{plan}"
    );
    assert!(keeper["why"].as_str().unwrap().contains("secret.env"));

    fleet
        .run(&["apply", "--yes", "--prune"])
        .status(0)
        .stdout_has(kept);
    assert_eq!(
        std::fs::read_to_string(wt("keeper").join("secret.env")).unwrap(),
        "TOKEN=only-copy\n"
    );
    assert!(!wt("tidy").exists());

    fleet
        .run(&["plan", "--prune", "--force-remove-worktrees"])
        .stdout_has("- worktree ~/app/.worktrees/keeper (branch agent/keeper stays) for agent `keeper` — --force-remove-worktrees: removed with 1 ignored file (secret.env)");
    fleet
        .run(&["apply", "--yes", "--prune", "--force-remove-worktrees"])
        .status(0);
    assert!(!wt("keeper").exists());
}

/// A switch back to the agent's branch never overwrites an ignored file: git would, without a
/// word, where the agent's branch tracks a file of that name; the step fails instead and the
/// person's file stays.
#[test]
fn a_switch_back_never_overwrites_an_ignored_file() {
    let fleet = Fleet::new();
    let repo = repo(&fleet, "app");
    fleet.toml(&agent("auth", "{ repo = \"home/app\" }"));
    fleet.run(&["apply", "--yes"]).status(0);
    let wt = repo.join(".worktrees/auth");
    // The agent's branch tracks `local.env`; on `detour` the name is ignored and holds a
    // person's own copy.
    commit(&wt, "local.env", "the branch's copy\n");
    git(&wt, &["switch", "-q", "-c", "detour", "main"]);
    std::fs::write(wt.join(".gitignore"), "*.env\n.claude/\n.mcp.json\n").unwrap();
    git(&wt, &["add", ".gitignore"]);
    git(&wt, &["commit", "-q", "-m", "ignore env files"]);
    std::fs::write(wt.join("local.env"), "TOKEN=only-copy\n").unwrap();
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("back to branch agent/auth");
    let run = fleet.run(&["apply", "--yes"]);
    run.status(1).stdout_has("local.env");
    assert_eq!(branch_of(&wt), "detour");
    assert_eq!(
        std::fs::read_to_string(wt.join("local.env")).unwrap(),
        "TOKEN=only-copy\n"
    );
}

/// `--prune` and `--force-remove-worktrees` reach a host's own plan and apply: there too a
/// worktree with work is kept by `--prune` and removed only when forced.
#[test]
fn a_hosts_worktree_with_work_is_kept_by_prune_and_removed_only_when_forced() {
    let Some(net) = support::hosts::HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    let repo = repo_at(net.host("gpu-1").dir.join("app"));
    let ws = format!("{{ repo = \"{}\", base = \"main\" }}", repo.display());
    net.toml(&format!("{}host = \"gpu-1\"\n", agent("dirty", &ws)));
    net.run(&["apply", "--yes"]).status(0);
    let wt = repo.join(".worktrees").join("dirty");
    assert_eq!(branch_of(&wt), "agent/dirty");
    std::fs::write(wt.join("notes.md"), "unsaved thoughts").unwrap();

    net.toml("");
    net.run(&["plan", "--prune"]).stdout_has(
        "kept: 1 uncommitted change (?? notes.md) (`--force-remove-worktrees` removes it anyway)",
    );
    net.run(&["apply", "--yes", "--prune"]).status(0);
    assert!(wt.join("notes.md").is_file(), "kept without the flag");
    net.run(&["plan", "--prune", "--force-remove-worktrees"])
        .stdout_has("--force-remove-worktrees: removed with 1 uncommitted change (?? notes.md)");
    net.run(&["apply", "--yes", "--prune", "--force-remove-worktrees"])
        .status(0);
    assert!(!wt.exists(), "removed when forced");
}

#[test]
fn hostile_branch_names_are_refused_by_validate_at_their_line() {
    let fleet = Fleet::new();
    repo(&fleet, "app");
    for branch in [
        "--upload-pack=touch /tmp/pwned",
        "a b",
        "x..y",
        "a\\u001b[31mred",
        "feature/.hidden",
        "@{-1}",
    ] {
        fleet.toml(&format!(
            "[[agent]]\nname = \"a\"\ncommand = \"phoenix demo-agent\"\nworkspace = {{ repo = \"home/app\", branch = \"{branch}\" }}\n"
        ));
        let run = fleet.run(&["validate"]);
        run.status(1).stderr_has("workspace branch");
        // `[fleet]` takes three lines and a blank one: the workspace is on line 8.
        assert!(
            run.stderr().contains("phoenix.toml:8:"),
            "{branch}: {}",
            run.stderr()
        );
        fleet.run(&["plan"]).status(1);
    }
    assert!(!fleet.path().join("home/app/.worktrees").exists());
}
