//! Sandboxed agents with real bubblewrap: the escapes an agent tries fail inside its sandbox
//! (and work without it), `sandbox verify` proves each canary, apply refuses a sandbox that
//! does not hold, a changed profile is drift, and a sandboxed agent keeps its hooks, its
//! session and its crash handling.

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Fleet, kill9, wait_until};

/// bubblewrap is there (`.ci/run` installs it); without it these tests say so and pass.
fn have_bwrap() -> bool {
    let found = Path::new("/usr/bin/bwrap").exists()
        || std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bwrap").is_file()));
    if !found {
        eprintln!("skipped: bubblewrap (bwrap) is not installed");
    }
    found
}

const PYTHON: &str = "/usr/bin/python3";

/// The adversary: tries each escape and writes what happened to `escapes.json` in its
/// workdir, then sleeps. Its targets come from `targets.json`, written by the test once the
/// fleet runs.
const ADVERSARY: &str = r#"
import json, os, socket, sys, time, urllib.request
work = os.getcwd()
while not os.path.exists(os.path.join(work, "targets.json")):
    time.sleep(0.05)
time.sleep(0.1)
t = json.load(open(os.path.join(work, "targets.json")))
out = {}
def attempt(name, f):
    try:
        r = f()
        out[name] = "escaped" + (": " + str(r) if r else "")
    except Exception as e:
        out[name] = "stopped: " + type(e).__name__ + " " + str(e)[:120]
def read_secret():
    data = open(t["secret"]).read()
    if t["secret_text"] not in data:
        raise Exception("not the secret")
    return "read it"
def write_state():
    with open(t["victim_state"], "a") as f:
        f.write(" ")
def edit_settings():
    with open(t["settings"], "a") as f:
        f.write(" ")
def tap_socket():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect("\0" + t["tap_socket"])
def tmux_socket():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(t["tmux_socket"])
def loopback_direct():
    socket.create_connection(("127.0.0.1", t["port"]), timeout=3).close()
def loopback_via_proxy():
    r = urllib.request.urlopen("http://127.0.0.1:%d/" % t["port"], timeout=5)
    return r.status
def kill_wrapper():
    if t.get("wrapper"):
        os.kill(t["wrapper"], 9)
attempt("read a secret in ~/.ssh", read_secret)
attempt("write another agent's state.json", write_state)
attempt("edit its .claude/settings.json", edit_settings)
attempt("connect to another wrapper's tap socket", tap_socket)
attempt("connect to the fleet's tmux server", tmux_socket)
attempt("reach a loopback server directly", loopback_direct)
attempt("reach a loopback server through the proxy", loopback_via_proxy)
attempt("kill its own wrapper", kill_wrapper)
tmp = os.path.join(work, "escapes.tmp")
json.dump(out, open(tmp, "w"))
os.rename(tmp, os.path.join(work, "escapes.json"))
time.sleep(600)
"#;

/// A fleet of two agents: `evil` runs the adversary (inside `sandbox = "box"` when
/// `sandboxed`), `victim` a plain process with a wrapper and a tap. A loopback HTTP server
/// the profile does not allow.
struct Scene {
    fleet: Fleet,
    server: std::net::TcpListener,
    /// The one host the profile allows (its backlog answers the proxy's connect).
    _allowed: std::net::TcpListener,
    secret: String,
}

fn scene(sandboxed: bool) -> Scene {
    let fleet = Fleet::new();
    let home = fleet.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let secret = format!("PRIVATE KEY {}", std::process::id());
    std::fs::write(home.join(".ssh/id_test"), &secret).unwrap();
    for dir in ["evil/.claude", "victim"] {
        std::fs::create_dir_all(fleet.path().join(dir)).unwrap();
    }
    std::fs::write(fleet.path().join("evil/adversary.py"), ADVERSARY).unwrap();
    std::fs::write(
        fleet.path().join("evil/.claude/settings.json"),
        "{\"model\": \"x\"}\n",
    )
    .unwrap();
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed_port = allowed.local_addr().unwrap().port();
    let sandbox = if sandboxed { "sandbox = \"box\"\n" } else { "" };
    fleet.toml(&format!(
        "[sandbox.box]\nnetwork = \"allow\"\nallow = [\"localhost:{allowed_port}\"]\n\n\
         [[agent]]\nname = \"evil\"\ncommand = \"{PYTHON} adversary.py\"\nworkdir = \"evil\"\n{sandbox}\n\
         [[agent]]\nname = \"victim\"\ncommand = \"phoenix demo-agent --interval 200ms\"\nworkdir = \"victim\"\n"
    ));
    Scene {
        fleet,
        server,
        _allowed: allowed,
        secret,
    }
}

/// The wrapper pid of `agent` (its pane's pid).
fn wrapper_pid(fleet: &Fleet, agent: &str) -> u32 {
    fleet
        .tagged_panes()
        .into_iter()
        .find(|(a, ..)| a == agent)
        .map(|(.., pid)| pid)
        .expect("the agent has a pane")
}

/// Start the scene, hand the adversary its targets, and read what it found.
fn run_adversary(s: &Scene, kill_wrapper: bool) -> serde_json::Map<String, Value> {
    let fleet = &s.fleet;
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["evil", "victim"]);
    let victim_state = fleet.agent_dir("victim").join("state.json");
    wait_until(Duration::from_secs(10), "the victim's state", || {
        victim_state.exists()
    });
    let targets = serde_json::json!({
        "secret": fleet.path().join("home/.ssh/id_test"),
        "secret_text": s.secret,
        "victim_state": victim_state,
        "settings": fleet.path().join("evil/.claude/settings.json"),
        "tap_socket": format!("phoenix-tap/{}", wrapper_pid(fleet, "victim")),
        "tmux_socket": phoenix::world::server_socket_path(&fleet.spec().fleet.socket),
        "port": s.server.local_addr().unwrap().port(),
        "wrapper": kill_wrapper.then(|| wrapper_pid(fleet, "evil")),
    });
    std::fs::write(fleet.path().join("evil/targets.json"), targets.to_string()).unwrap();
    let escapes = fleet.path().join("evil/escapes.json");
    wait_until(Duration::from_secs(30), "the adversary's report", || {
        escapes.exists()
    });
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&escapes).unwrap()).unwrap();
    report.as_object().unwrap().clone()
}

#[test]
fn every_escape_of_an_adversarial_agent_fails_inside_its_sandbox_and_the_fleet_is_unchanged() {
    if !have_bwrap() || !Path::new(PYTHON).exists() {
        return;
    }
    let s = scene(true);
    let settings_before = std::fs::read(s.fleet.path().join("evil/.claude/settings.json")).unwrap();
    let evil_wrapper_before = {
        s.fleet.run(&["apply", "--yes"]).status(0);
        s.fleet.wait_running(&["evil", "victim"]);
        wrapper_pid(&s.fleet, "evil")
    };
    let report = run_adversary(&s, true);
    assert_eq!(report.len(), 8, "{report:#?}");
    for (escape, outcome) in &report {
        assert!(
            outcome.as_str().unwrap_or("").starts_with("stopped"),
            "`{escape}` got through inside the sandbox: {outcome}\n{report:#?}"
        );
    }
    // The fleet is as it was: the victim's state parses, the settings are unchanged, the
    // adversary's wrapper is the one it tried to kill, and a plan has nothing to do.
    let state = std::fs::read_to_string(s.fleet.agent_dir("victim").join("state.json")).unwrap();
    assert!(
        serde_json::from_str::<Value>(&state).is_ok() && !state.ends_with(' '),
        "{state}"
    );
    assert_eq!(
        std::fs::read(s.fleet.path().join("evil/.claude/settings.json")).unwrap(),
        settings_before
    );
    assert_eq!(wrapper_pid(&s.fleet, "evil"), evil_wrapper_before);
    s.fleet.run(&["plan"]).status(0).stdout_has("No changes");
    // What the proxy refused is the agent's, recorded.
    let refused: Vec<Value> = s
        .fleet
        .ops("evil")
        .into_iter()
        .filter(|o| o["event"] == "sandbox_network")
        .collect();
    assert!(
        refused
            .iter()
            .any(|o| o["what"].as_str().unwrap_or("").contains("127.0.0.1")),
        "{refused:#?}"
    );
}

#[test]
fn the_same_adversary_without_a_sandbox_gets_through() {
    if !have_bwrap() || !Path::new(PYTHON).exists() {
        return;
    }
    let s = scene(false);
    let report = run_adversary(&s, false);
    for escape in [
        "read a secret in ~/.ssh",
        "write another agent's state.json",
        "edit its .claude/settings.json",
        "connect to another wrapper's tap socket",
        "connect to the fleet's tmux server",
        "reach a loopback server directly",
    ] {
        assert!(
            report[escape].as_str().unwrap().starts_with("escaped"),
            "`{escape}` without a sandbox: {report:#?}"
        );
    }
}

#[test]
fn sandbox_verify_proves_each_canary_and_plan_status_and_doctor_show_it() {
    if !have_bwrap() {
        return;
    }
    let fleet = Fleet::new();
    for dir in ["a/.claude", "b"] {
        std::fs::create_dir_all(fleet.path().join(dir)).unwrap();
    }
    std::fs::write(
        fleet.path().join("a/.claude/settings.json"),
        "{\"model\": \"x\"}\n",
    )
    .unwrap();
    std::fs::create_dir_all(fleet.path().join("home/.ssh")).unwrap();
    std::fs::write(fleet.path().join("home/.ssh/id_x"), "key").unwrap();
    fleet.toml(
        "[sandbox.strict]\n\n\
         [[agent]]\nname = \"a\"\ncommand = \"sleep 600\"\nworkdir = \"a\"\nsandbox = \"strict\"\n\n\
         [[agent]]\nname = \"b\"\ncommand = \"sleep 600\"\nworkdir = \"b\"\n",
    );
    fleet
        .run(&["plan"])
        .status(2)
        .stdout_has("Sandboxes (not changes):")
        .stdout_has("agent `a`: sandbox `strict`")
        .stdout_has("not verified for this layout yet");
    let json = fleet.run(&["sandbox", "verify", "--json"]).status(0).json();
    assert_eq!(json["passed"], true, "{json:#}");
    let checks = json["agents"][0]["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for canary in [
        "a planted secret in the fleet's state cannot be read",
        "another agent's state cannot be written",
        "the workdir can be written",
        "another wrapper's socket cannot be reached",
        "the wrapper outside cannot be signalled",
    ] {
        assert!(names.contains(&canary), "{canary}: {names:#?}");
    }
    assert!(
        names.iter().any(|n| n.contains(".ssh is hidden")),
        "{names:#?}"
    );
    assert!(
        names
            .iter()
            .any(|n| n.contains("a/.claude cannot be changed")),
        "{names:#?}"
    );
    assert!(
        names
            .iter()
            .any(|n| n.contains("cannot be reached directly")),
        "{names:#?}"
    );
    // By profile name too; an agent without one is said to have none.
    fleet.run(&["sandbox", "verify", "strict"]).status(0);
    fleet
        .run(&["sandbox", "verify", "b"])
        .status(1)
        .stderr_has("has no sandbox");
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a", "b"]);
    fleet
        .run(&["plan"])
        .status(0)
        .stdout_has("verified: every canary held");
    let status = fleet.agent_status("a");
    let doc = fleet.run(&["status", "a", "--json"]).json();
    assert_eq!(doc["agents"][0]["sandbox"]["profile"], "strict", "{doc:#}");
    assert_eq!(
        doc["agents"][0]["sandbox"]["verified"]["passed"], true,
        "{status:#}"
    );
    fleet.run(&["status", "a"]).status(0).stdout_has("Sandbox:");
    fleet
        .run(&["doctor"])
        .stdout_has("bubblewrap makes sandboxes here")
        .stdout_has("agent `a` sandbox");
    // The CLI really runs inside: its own pid namespace.
    let started = fleet
        .ops("a")
        .into_iter()
        .find(|o| o["event"] == "sandbox_entered")
        .expect("sandbox_entered");
    assert_eq!(started["profile"], "strict");
}

#[test]
fn apply_refuses_to_start_an_agent_whose_sandbox_fails_its_canaries() {
    if !have_bwrap() {
        return;
    }
    let fleet = Fleet::new();
    for dir in ["a", "b"] {
        std::fs::create_dir_all(fleet.path().join(dir)).unwrap();
    }
    // A profile that lets the agent write another agent's state: a canary escapes.
    fleet.toml(
        "[sandbox.leaky]\nwrite = [\"{workdir}\", \"{state_dir}/../b\"]\n\n\
         [[agent]]\nname = \"a\"\ncommand = \"sleep 600\"\nworkdir = \"a\"\nsandbox = \"leaky\"\n\n\
         [[agent]]\nname = \"b\"\ncommand = \"sleep 600\"\nworkdir = \"b\"\n",
    );
    // b's state dir exists before a's sandbox is verified.
    fleet.run(&["apply", "--yes"]).status(1);
    let out = fleet.run(&["apply", "--yes"]);
    out.status(1)
        .stdout_has("not started: its sandbox `leaky` failed")
        .stdout_has("another agent's state cannot be written");
    let a = fleet.agent_status("a");
    assert_ne!(a["state"], "running", "{a:#}");
    fleet
        .run(&["sandbox", "verify", "a"])
        .status(1)
        .stdout_has("✗ another agent's state cannot be written");
    fleet
        .run(&["plan"])
        .stdout_has("FAILED its canaries (another agent's state cannot be written)");
}

#[test]
fn a_changed_profile_is_drift_that_names_the_keys_that_changed() {
    if !have_bwrap() {
        return;
    }
    let fleet = Fleet::new();
    std::fs::create_dir_all(fleet.path().join("a")).unwrap();
    let toml = |hide: &str| {
        format!(
            "[sandbox.box]\nhide = [{hide}]\n\n\
             [[agent]]\nname = \"a\"\ncommand = \"sleep 600\"\nworkdir = \"a\"\nsandbox = \"box\"\n"
        )
    };
    fleet.toml(&toml(""));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["a"]);
    fleet.run(&["plan"]).status(0).stdout_has("No changes");
    fleet.toml(&toml("\"~/notes\""));
    let json = fleet.run(&["plan", "--json"]).json();
    let change = &json["changes"][0];
    assert_eq!(change["action"]["type"], "replace", "{json:#}");
    let fields: Vec<&str> = change["action"]["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["sandbox.hide"], "{json:#}");
    fleet.run(&["plan"]).stdout_has("sandbox.hide");
}

#[test]
fn a_bad_profile_is_refused_at_validate_with_its_line_and_a_hint() {
    let fleet = Fleet::new();
    let cases = [
        (
            "[sandbox.box]\nnetwork = \"internet\"\n",
            "unknown network `internet`",
        ),
        (
            "[sandbox.box]\nallow = [\"api.anthropic.com\"]\n",
            "`allow` is only read with network = \"allow\"",
        ),
        (
            "[sandbox.box]\nnetwork = \"allow\"\nallow = [\"https://api.anthropic.com/v1\"]\n",
            "is a URL",
        ),
        (
            "[sandbox.box]\nwrite = [\"{home}/x\"]\n",
            "unknown placeholder",
        ),
        (
            "[sandbox.box]\nlimits = { memory = \"lots\" }\n",
            "is not a size",
        ),
        ("[sandbox.box]\nreed = [\"/\"]\n", "did you mean `read`?"),
    ];
    for (profile, message) in cases {
        fleet.toml(&format!(
            "{profile}\n[[agent]]\nname = \"a\"\ncommand = \"sleep 1\"\nsandbox = \"box\"\n"
        ));
        fleet
            .run(&["validate"])
            .status(1)
            .stderr_has(message)
            .stderr_has("phoenix.toml:");
    }
    fleet.toml(
        "[sandbox.box]\n\n[[agent]]\nname = \"a\"\ncommand = \"sleep 1\"\nsandbox = \"bx\"\n",
    );
    fleet
        .run(&["validate"])
        .status(1)
        .stderr_has("no sandbox profile `bx`")
        .stderr_has("did you mean `box`?");
    // Without bubblewrap: said at validate, with how to install it.
    fleet.toml(
        "[sandbox.box]\n\n[[agent]]\nname = \"a\"\ncommand = \"sleep 1\"\nsandbox = \"box\"\n",
    );
    let out = fleet
        .command(&["validate"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("bubblewrap (`bwrap`) is not installed")
            && stderr.contains("apt-get install bubblewrap"),
        "{stderr}"
    );
}

#[test]
fn a_sandboxed_agent_keeps_its_hooks_its_session_and_its_crash_handling() {
    if !have_bwrap() {
        return;
    }
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"10s\"\n\n\
         [sandbox.box]\n\n\
         [[agent]]\nname = \"alpha\"\ncli = \"custom\"\nsandbox = \"box\"\n\
         command = \"phoenix demo-agent --interval 200ms\"\n\
         resume_command = \"phoenix demo-agent --interval 200ms --resume {session_id}\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    let pid = fleet.wait_running(&["alpha"])[0];
    // Its hooks, run inside, keep its state: a session with a turn.
    let transcript = |id: &str| {
        fleet
            .agent_dir("alpha")
            .join("transcripts")
            .join(format!("{id}.jsonl"))
    };
    let session = || -> Option<String> {
        let text = std::fs::read_to_string(fleet.agent_dir("alpha").join("state.json")).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        v["session_id"].as_str().map(str::to_string)
    };
    let mut id = String::new();
    wait_until(Duration::from_secs(20), "a session with a turn", || {
        id = session().unwrap_or_default();
        !id.is_empty() && std::fs::metadata(transcript(&id)).is_ok_and(|m| m.len() > 0)
    });
    // kill -9 of the CLI inside the sandbox: a crash by signal 9, resumed as the same session.
    let cli_pid = child_named(pid, "phoenix").expect("the CLI under bwrap");
    kill9(cli_pid);
    let mut starts = Vec::new();
    wait_until(Duration::from_secs(20), "a second start", || {
        starts = fleet
            .ops("alpha")
            .into_iter()
            .filter(|o| o["event"] == "agent_start")
            .collect();
        starts.len() >= 2
    });
    assert_eq!(starts[1]["mode"], "resume", "{starts:#?}");
    assert_eq!(starts[1]["session_id"], id.as_str());
    let exit = fleet
        .ops("alpha")
        .into_iter()
        .find(|o| o["event"] == "agent_exit")
        .unwrap();
    assert_eq!(exit["reason"], "crash", "{exit:#}");
    assert_eq!(exit["signal"], 9, "{exit:#}");
    fleet.wait_running(&["alpha"]);
    assert_eq!(session().as_deref(), Some(id.as_str()));
}

/// The first process below `pid` (depth first) whose command is `name`.
fn child_named(pid: u32, name: &str) -> Option<u32> {
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{c}/comm")).unwrap_or_default();
            if comm.trim() == name {
                return Some(c);
            }
            stack.push(c);
        }
    }
    None
}

/// A sandboxed agent in a git worktree of its own commits on its branch (the repository's
/// objects and refs are writable), but cannot plant a git hook or change the repository's
/// config (git would run them outside, for phoenix or a person).
#[test]
fn a_sandboxed_agent_in_a_worktree_commits_but_cannot_plant_git_hooks_or_config() {
    if !have_bwrap() {
        return;
    }
    let fleet = Fleet::new();
    let repo = fleet.path().join("home/app");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["config", "user.name", "T"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    git(&repo, &["add", "README.md"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let script = "echo work > work.txt; git add work.txt; \
         git -c user.email=a@example.com -c user.name=a commit -q -m agent-work && echo committed > /tmp/ok; \
         (echo evil > $(git rev-parse --git-common-dir)/hooks/post-checkout) 2>/dev/null && echo hook-planted > /tmp/bad; \
         git config core.fsmonitor 'touch /tmp/pwned' 2>/dev/null && echo config-changed >> /tmp/bad; \
         cat /tmp/ok /tmp/bad > result.txt 2>/dev/null; sleep 600";
    fleet.toml(&format!(
        "[sandbox.box]\n\n\
         [[agent]]\nname = \"a\"\nsandbox = \"box\"\ncommand = \"sh -c \\\"{script}\\\"\"\n\
         workspace = {{ repo = \"home/app\", branch = \"agent/a\", base = \"main\" }}\n"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let worktree = repo.join(".worktrees/a");
    let result = worktree.join("result.txt");
    wait_until(Duration::from_secs(20), "the agent's result", || {
        result.exists()
    });
    let text = std::fs::read_to_string(&result).unwrap();
    assert_eq!(text.trim(), "committed", "{text}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "agent/a"]).trim(),
        "agent-work"
    );
    assert!(!repo.join(".git/hooks/post-checkout").exists());
    assert!(!git(&repo, &["config", "--list"]).contains("fsmonitor"));
}

/// `phoenix exec`: a command runs where and as the agent's CLI runs: its workdir, its
/// environment, its exit code, and inside its sandbox (another agent's workdir is hidden
/// there, and seen by the same command of an agent without one).
#[test]
fn exec_runs_a_command_in_the_agents_workdir_environment_and_sandbox() {
    let fleet = Fleet::new();
    for dir in ["a", "b"] {
        std::fs::create_dir_all(fleet.path().join(dir)).unwrap();
    }
    std::fs::write(fleet.path().join("b/secret.txt"), "b's").unwrap();
    let sandboxed = have_bwrap();
    fleet.toml(&format!(
        "[sandbox.tight]\n\n\
         [[agent]]\nname = \"a\"\ncommand = \"sleep 600\"\nworkdir = \"a\"\nenv = {{ FOO = \"bar\" }}\n{}\n\n\
         [[agent]]\nname = \"b\"\ncommand = \"sleep 600\"\nworkdir = \"b\"\n",
        if sandboxed { "sandbox = \"tight\"" } else { "" }
    ));
    let run = fleet.run(&[
        "exec",
        "a",
        "--",
        "sh",
        "-c",
        "pwd; echo \"$FOO $PHOENIX_AGENT\"",
    ]);
    run.status(0).stdout_has("bar a");
    assert!(
        run.stdout().lines().next().unwrap().ends_with("/a"),
        "{}",
        run.stdout()
    );
    fleet
        .run(&["exec", "a", "--", "sh", "-c", "exit 7"])
        .status(7);
    let b_secret = fleet.path().join("b/secret.txt");
    let peek = |agent: &str| {
        fleet.run(&[
            "exec",
            agent,
            "--",
            "sh",
            "-c",
            &format!("cat '{}' 2>/dev/null || echo hidden", b_secret.display()),
        ])
    };
    peek("b").status(0).stdout_has("b's");
    if sandboxed {
        let inside = peek("a");
        inside.status(0).stdout_has("hidden");
        assert!(!inside.stdout().contains("b's"), "{}", inside.stdout());
    }
    fleet
        .run(&["exec", "nobody", "--", "true"])
        .stderr_has("nobody");
}
