//! The real Claude Code inside phoenix's sandbox (bubblewrap, `network = "allow"`), driven by
//! the scripted model server: verify passes, apply starts it, its Bash call runs in the
//! workdir, its hooks record the call, the model is reached only through the allow-list proxy
//! (the sandbox has its own network), a host not on the list is refused and recorded, and a
//! kill -9 of the CLI inside the sandbox resumes the same session, whose next request reaches
//! the model. Runs with `PHOENIX_TEST_REAL_CLIS=1`, like real_cli.rs.

use crate::real_cli::{claude_bin, enabled, prepared_home, turn_requests, type_prompt};
use crate::support;

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use support::model_server::{ModelServer, Turn};
use support::{read_jsonl, wait_until_explained};

const WAIT: Duration = Duration::from_secs(90);

/// A loopback listener that only counts who connects: the host the sandbox may not reach.
fn forbidden_host() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            count.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (port, seen)
}

/// The argv of a process (NUL-separated), empty when it is gone.
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The children of every process, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        // `pid (comm) state ppid …`: comm may hold spaces, so read after its closing paren.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// The Claude Code process under `root` (breadth first: the first process that runs the CLI
/// itself, not bubblewrap or phoenix in front of it), with the chain of programs above it.
fn claude_under(root: u32, bin: &Path) -> Option<(u32, Vec<String>)> {
    let bin = bin.to_string_lossy().into_owned();
    let mut queue = vec![(root, Vec::new())];
    while !queue.is_empty() {
        let (pid, chain): (u32, Vec<String>) = queue.remove(0);
        let argv = cmdline(pid);
        let program = argv
            .first()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
            .unwrap_or_default();
        let mut chain = chain;
        chain.push(program.clone());
        let runs_cli = program != "bwrap"
            && !argv.iter().any(|a| a == "sandbox-inner" || a == "wrap")
            && argv
                .iter()
                .any(|a| a.contains(&bin) || a.contains("claude"));
        if runs_cli && chain.iter().filter(|p| *p == "bwrap").count() >= 1 {
            return Some((pid, chain));
        }
        for child in children_of(pid) {
            queue.push((child, chain.clone()));
        }
    }
    None
}

fn state(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap()
}

#[test]
fn real_claude_in_a_sandbox_runs_its_tools_reaches_only_allowed_hosts_and_resumes_after_kill9() {
    if !enabled() {
        return;
    }
    let bin = claude_bin();
    let fleet = support::Fleet::new();
    let work = fleet.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(fleet.path(), &work, key);
    let (other_port, other_seen) = forbidden_host();
    // Direct (no proxy): the sandbox's own loopback, where nothing listens. Through the
    // proxy: a host not on the allow list, refused (403).
    let network_probe = format!(
        "curl -s -m 10 --noproxy '*' http://127.0.0.1:{other_port}/ ; echo direct=$? > net.txt; \
         curl -s -m 10 -o /dev/null -w 'proxied=%{{http_code}}' http://127.0.0.1:{other_port}/ >> net.txt"
    );
    let server = ModelServer::start(vec![
        Turn::bash("echo inside > proof.txt"),
        Turn::bash(&network_probe),
        Turn::text("Wrote it."),
        Turn::text("Back again."),
    ]);
    let port = server.base_url().rsplit(':').next().unwrap().to_string();
    // `localhost`, so the name the CLI asks the proxy for is the allow entry's.
    let base_url = format!("http://localhost:{port}");
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"30s\"\n\n\
         [sandbox.box]\nnetwork = \"allow\"\nallow = [\"localhost:{port}\"]\n\n\
         [[agent]]\nname = \"cc\"\ncli = \"claude\"\nsandbox = \"box\"\n\
         command = \"'{}' --dangerously-skip-permissions\"\nworkdir = \"work\"\n\
         env = {{ HOME = \"{}\", ANTHROPIC_BASE_URL = \"{base_url}\", ANTHROPIC_API_KEY = \"{key}\", IS_SANDBOX = \"1\", \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_TELEMETRY = \"1\", \
         DISABLE_ERROR_REPORTING = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
        bin.display(),
        home.display(),
    ));

    let verify = fleet.run(&["sandbox", "verify", "--json"]);
    let out = verify.stdout();
    verify.status(0);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["passed"], true, "{report}");
    assert_eq!(report["agents"][0]["agent"], "cc", "{report}");

    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["cc"]);
    let pane = fleet.agent_status("cc")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = fleet.agent_dir("cc");
    let explain = || {
        format!(
            "--- screen\n{}\n--- ops\n{:?}\n--- hook errors\n{}\n--- requests {}",
            fleet
                .tmux(&["capture-pane", "-p", "-t", &pane])
                .unwrap_or_default(),
            fleet.ops("cc"),
            std::fs::read_to_string(dir.join("hook_errors.jsonl")).unwrap_or_default(),
            server.message_requests().len()
        )
    };
    assert!(
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "sandbox_entered" && o["profile"] == "box"),
        "{}",
        explain()
    );
    type_prompt(&fleet, &pane, "write the proof file");

    wait_until_explained(
        WAIT,
        "the Bash call ran inside",
        || std::fs::read_to_string(work.join("proof.txt")).is_ok_and(|t| t.trim() == "inside"),
        explain,
    );
    wait_until_explained(
        WAIT,
        "the hooks recorded the call",
        || {
            read_jsonl(&dir.join("tool_use.jsonl"))
                .iter()
                .any(|t| t["tool"] == "Bash" && t["ok"] == true)
        },
        explain,
    );
    wait_until_explained(
        WAIT,
        "the turn finished",
        || state(&dir)["status"] == "idle",
        explain,
    );
    let id = state(&dir)["session_id"].as_str().unwrap().to_string();
    assert!(!id.is_empty());
    assert_eq!(state(&dir)["current_task"], "write the proof file");

    // The network: the model was reached (only the proxy leads out of the sandbox's own
    // network), the forbidden host never was, and the proxy's refusal is recorded.
    assert!(turn_requests(&server).len() >= 3, "{}", explain());
    let net = std::fs::read_to_string(work.join("net.txt")).unwrap_or_default();
    assert!(!net.contains("direct=0"), "{net}");
    assert!(net.contains("proxied=403"), "{net}");
    assert_eq!(other_seen.load(Ordering::SeqCst), 0, "{net}");
    assert!(
        fleet
            .ops("cc")
            .iter()
            .any(|o| o["event"] == "sandbox_network"
                && o["what"]
                    .as_str()
                    .is_some_and(|w| w.contains(&other_port.to_string()))),
        "{}",
        explain()
    );
    assert!(!dir.join("hook_errors.jsonl").exists(), "{}", explain());

    // kill -9 the CLI inside the sandbox (pane → wrapper → bwrap → bwrap → … → claude).
    let pane_pid: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (claude, chain) = claude_under(pane_pid, &bin)
        .unwrap_or_else(|| panic!("no claude under the pane: {}", explain()));
    assert!(
        chain.iter().filter(|p| *p == "bwrap").count() >= 1,
        "{chain:?}"
    );
    let starts = || {
        fleet
            .ops("cc")
            .iter()
            .filter(|o| o["event"] == "agent_start")
            .count()
    };
    assert_eq!(starts(), 1);
    support::kill9(claude);
    wait_until_explained(WAIT, "the resume", || starts() == 2, explain);
    let second = fleet
        .ops("cc")
        .into_iter()
        .filter(|o| o["event"] == "agent_start")
        .nth(1)
        .unwrap();
    assert_eq!(second["mode"], "resume", "{second}");
    assert_eq!(second["session_id"], id.as_str(), "{second}");
    wait_until_explained(
        WAIT,
        "the resumed session's start",
        || {
            fleet.ops("cc").iter().any(|o| {
                o["event"] == "session_start"
                    && o["source"] == "resume"
                    && o["session_id"] == id.as_str()
            })
        },
        explain,
    );
    assert_eq!(
        fleet
            .ops("cc")
            .iter()
            .filter(|o| o["event"] == "sandbox_entered")
            .count(),
        2,
        "{}",
        explain()
    );
    let before = turn_requests(&server).len();
    type_prompt(&fleet, &pane, "are you back");
    wait_until_explained(
        WAIT,
        "the resumed session's first request",
        || {
            turn_requests(&server).iter().skip(before).any(|r| {
                r.text().contains("are you back") && r.text().contains("write the proof file")
            })
        },
        explain,
    );
    wait_until_explained(
        WAIT,
        "the resumed turn finished",
        || state(&dir)["status"] == "idle" && state(&dir)["session_id"] == id.as_str(),
        explain,
    );
}
