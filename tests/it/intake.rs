//! Work intake end to end: an `[[agent_set]]` whose source is a real script reading a file the
//! test edits, its agents started in real git worktrees on a real tmux server, retired with
//! a handoff when their item leaves, and sources that fail or give garbage changing nothing.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{Fleet, read_jsonl, wait_until};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo(fleet: &Fleet) -> PathBuf {
    let dir = fleet.path().join("home/src/app");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    git(&dir, &["config", "user.email", "test@example.com"]);
    git(&dir, &["config", "user.name", "Test"]);
    std::fs::write(dir.join("README.md"), "hello\n").unwrap();
    git(&dir, &["add", "README.md"]);
    git(&dir, &["commit", "-q", "-m", "first"]);
    dir
}

/// The source: a script printing what `items.json` holds (the test edits that file), as
/// `gh issue list --json …` prints an array.
fn source_script(fleet: &Fleet) -> PathBuf {
    let script = fleet.path().join("issues.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec cat '{}'\n",
            fleet.path().join("items.json").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn items(fleet: &Fleet, json: &str) {
    std::fs::write(fleet.path().join("items.json"), json).unwrap();
}

/// The script itself, replaced (a failing source, a huge one).
fn script_body(fleet: &Fleet, body: &str) {
    std::fs::write(
        fleet.path().join("issues.sh"),
        format!("#!/bin/sh\n{body}\n"),
    )
    .unwrap();
}

fn agent_set(script: &Path, extra: &str, template: &str) -> String {
    format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\n\n\
         [[agent_set]]\nname = \"issues\"\nsource = {{ command = [\"{}\", \"issue\", \"list\", \"--json\", \"number,title,body\"] }}\n\
         key = \"{{{{ item.number }}}}\"\n{extra}\n\
         [agent_set.template]\nname = \"issue-{{{{ item.number }}}}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 300ms\"\n{template}",
        script.display()
    )
}

fn screen(fleet: &Fleet, agent: &str) -> String {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap_or("")
        .to_string();
    fleet
        .tmux(&["capture-pane", "-p", "-J", "-S", "-500", "-t", &pane])
        .unwrap_or_default()
}

fn events(fleet: &Fleet, event: &str) -> Vec<Value> {
    read_jsonl(&fleet.state_dir().join("critical_events.jsonl"))
        .into_iter()
        .filter(|e| e["event"] == event)
        .collect()
}

fn running(fleet: &Fleet) -> Vec<String> {
    let mut names: Vec<String> = fleet
        .tagged_panes()
        .into_iter()
        .map(|(agent, ..)| agent)
        .collect();
    names.sort();
    names
}

#[test]
fn an_item_starts_in_its_own_worktree_and_retires_with_its_work_kept() {
    let fleet = Fleet::new();
    let repo = repo(&fleet);
    let script = source_script(&fleet);
    items(
        &fleet,
        r#"[{"number": 7, "title": "Fix login", "body": "The login form rejects valid passwords."}]"#,
    );
    fleet.toml(&agent_set(
        &script,
        "",
        "workspace = { repo = \"home/src/app\", branch = \"issue/{{ item.number }}\", base = \"main\" }\n",
    ));

    let plan = fleet.run(&["plan"]);
    plan.status(2)
        .stdout_has("(from agent_set \"issues\": #7 \"Fix login\")")
        .stdout_has("+ worktree ~/src/app/.worktrees/issue-7 on branch issue/7 (from main) for agent `issue-7`")
        .stderr_has("agent_set `issues`: #7 new, none retired");
    assert!(!repo.join(".worktrees").exists(), "plan touches nothing");

    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["issue-7"]);
    let worktree = repo.join(".worktrees/issue-7");
    assert_eq!(
        git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "issue/7"
    );
    // The item's body is in the startup context.
    wait_until(Duration::from_secs(15), "the work item in the pane", || {
        screen(&fleet, "issue-7").contains("The login form rejects valid passwords.")
    });
    assert!(screen(&fleet, "issue-7").contains("--- your work item ---"));
    // The agent's work: uncommitted, so removing the worktree would lose it.
    std::fs::write(worktree.join("fix.txt"), "half a fix\n").unwrap();

    // The issue is closed: it leaves the source.
    items(&fleet, "[]");
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("- agent `issue-7`: retire in")
        .stdout_has("item #7 left the source of agent_set \"issues\"");
    fleet
        .run(&["apply", "--yes"])
        .status(0)
        .stdout_has("handoff");
    wait_until(Duration::from_secs(10), "the agent stopped", || {
        running(&fleet).is_empty()
    });
    let handoffs: Vec<_> = std::fs::read_dir(fleet.agent_dir("issue-7").join("handoffs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        handoffs.iter().any(|h| h.contains("\"retired\"")),
        "{handoffs:?}"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("fix.txt")).unwrap(),
        "half a fix\n",
        "the worktree and its work are kept"
    );
    // Never started again while the item stays away; its worktree is kept, not removed.
    let plan = fleet.run(&["plan"]);
    plan.status(0)
        .stdout_has("! worktree ~/src/app/.worktrees/issue-7 of agent `issue-7`");
    assert!(!plan.stdout().contains("+ agent"), "{}", plan.stdout());
    fleet.run(&["apply", "--yes", "--prune"]).status(0);
    assert!(worktree.join("fix.txt").exists(), "--prune keeps work");

    // The item comes back: its agent starts again, in the same worktree.
    items(
        &fleet,
        r#"[{"number": 7, "title": "Fix login", "body": "Reopened."}]"#,
    );
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("+ agent `issue-7`: start");
}

#[test]
fn max_holds_the_rest_and_a_bad_source_changes_nothing() {
    let fleet = Fleet::new();
    let script = source_script(&fleet);
    items(
        &fleet,
        r#"[{"number": 1, "title": "a"}, {"number": 2, "title": "b"}, {"number": 3, "title": "c"}]"#,
    );
    fleet.toml(&agent_set(&script, "max = 2", ""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["issue-1", "issue-2"]);
    assert_eq!(running(&fleet), ["issue-1", "issue-2"]);
    fleet
        .run(&["plan"])
        .status(0)
        .stdout_has("! agent `issue-3`: waiting; agent_set `issues` runs at most 2 at once");

    // Each bad source: a clear event, the last good list stands (nothing retired or started).
    let bad: [(&str, &str, &str); 6] = [
        (
            "exit 1",
            "echo 'gh: not logged in' >&2; exit 1",
            "intake_source_failed",
        ),
        (
            "50 MB",
            "head -c 50000000 /dev/zero",
            "intake_source_failed",
        ),
        (
            "not JSON",
            "echo '<html>rate limited</html>'",
            "intake_source_failed",
        ),
        (
            "duplicate keys",
            "echo '[{\"number\": 1}, {\"number\": 1}]'",
            "intake_list_rejected",
        ),
        (
            "../x",
            "echo '[{\"number\": \"../x\"}]'",
            "intake_list_rejected",
        ),
        (
            ";rm",
            "echo '[{\"number\": \";rm\"}]'",
            "intake_list_rejected",
        ),
    ];
    for (what, body, event) in bad {
        script_body(&fleet, body);
        let before = events(&fleet, event).len();
        let plan = fleet.run(&["plan"]);
        plan.status(0).stderr_has("the last good list stands");
        assert!(
            !plan.stdout().contains("retire in"),
            "{what}: {}",
            plan.stdout()
        );
        let after = events(&fleet, event);
        assert_eq!(after.len(), before + 1, "{what}: one {event} event");
        let reason = after.last().unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_string();
        match what {
            "exit 1" => assert!(reason.contains("gh: not logged in"), "{reason}"),
            "50 MB" => assert!(reason.contains("printed more than"), "{reason}"),
            "not JSON" => assert!(reason.starts_with("not JSON"), "{reason}"),
            "duplicate keys" => assert!(reason.contains("two items have the key `1`"), "{reason}"),
            _ => assert!(reason.contains("is not a valid name"), "{reason}"),
        }
        assert_eq!(running(&fleet), ["issue-1", "issue-2"], "{what}");
    }
}

/// A program that appends its arguments, one line per run, to `hook.log`.
fn recorder(fleet: &Fleet) -> PathBuf {
    let script = fleet.path().join("record.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\n",
            fleet.path().join("hook.log").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn hook_log(fleet: &Fleet) -> Vec<String> {
    std::fs::read_to_string(fleet.path().join("hook.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_crash_looping_item_agent_runs_on_failed_once_with_its_item() {
    let fleet = Fleet::new();
    let script = source_script(&fleet);
    let record = recorder(&fleet);
    items(&fleet, r#"[{"number": 5, "title": "Flaky; rm -rf /"}]"#);
    let set = agent_set(
        &script,
        &format!(
            "on_failed = [\"{}\", \"failed\", \"{{{{ item.number }}}}\", \"{{{{ item.title }}}}\"]",
            record.display()
        ),
        "",
    )
    .replace("--interval 300ms", "--interval 300ms --crash-after 300ms")
    .replace(
        "backoff_max = \"100ms\"\n",
        "backoff_max = \"100ms\"\nmax_crashes = 2\n",
    );
    fleet.toml(&set);
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(20), "on_failed ran", || {
        !hook_log(&fleet).is_empty()
    });
    // Each argument its own, never a shell's: the title's `;` is text.
    assert_eq!(hook_log(&fleet), ["failed 5 Flaky; rm -rf /"]);
    // The event is recorded once the command has ended, a moment after it wrote its line.
    wait_until(Duration::from_secs(10), "intake_on_failed recorded", || {
        !events(&fleet, "intake_on_failed").is_empty()
    });
    let ran = events(&fleet, "intake_on_failed");
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0]["agent"], "issue-5");

    // A new wrapper finds it still quarantined: safe mode again, told once only.
    let (.., pid) = fleet
        .tagged_panes()
        .into_iter()
        .find(|(a, ..)| a == "issue-5")
        .unwrap();
    support::kill9(pid);
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(10), "safe mode again", || {
        fleet.agent_status("issue-5")["state"] == "safe-mode"
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(hook_log(&fleet).len(), 1, "{:?}", hook_log(&fleet));
}

#[test]
fn phoenix_run_reads_the_source_on_its_schedule() {
    let fleet = Fleet::new();
    let script = source_script(&fleet);
    items(&fleet, r#"[{"number": 1, "title": "first"}]"#);
    // The body's first lines go into the harness's [fleet] table.
    fleet.toml(&format!(
        "reconcile_interval = \"1s\"\n\n{}",
        agent_set(&script, "every = \"10s\"", "")
    ));
    let daemon = crate::supervise::Daemon::start(&fleet, &[]);
    fleet.wait_running(&["issue-1"]);

    // The issue is closed and another labelled: at the next read (within `every`), the first
    // retires with a handoff and the second starts, with no `phoenix apply`.
    items(&fleet, r#"[{"number": 2, "title": "second"}]"#);
    wait_until(Duration::from_secs(30), "the new item's agent", || {
        running(&fleet) == ["issue-2"]
    });
    assert!(
        fleet
            .agent_dir("issue-1")
            .join("handoffs")
            .read_dir()
            .unwrap()
            .count()
            >= 1,
        "the retired agent saved a handoff"
    );
    // A source that breaks changes nothing, and says why in the log.
    script_body(&fleet, "exit 7");
    wait_until(Duration::from_secs(30), "the failure logged", || {
        daemon.log().contains("cannot read its source")
    });
    assert_eq!(running(&fleet), ["issue-2"]);
    assert_eq!(daemon.stop(), Some(0));
}
