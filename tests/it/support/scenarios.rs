//! Issue 15 scenarios that every real CLI goes through alike (Claude Code, Codex, Gemini):
//! a kill -9 of the agent in the middle of a shell call whose job left its process group,
//! and a kill -9 of the wrapper. Each suite starts its agent and says how to find what its CLI
//! sent; the steps and the assertions are here, once.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use super::{Fleet, kill9, wait_until, wait_until_explained};

/// The shell command the model asks for: a job in a process session of its own that appends
/// to `F` after 5 s, while the call itself takes a minute.
/// The job sleeps long enough that a sweep slowed down by a loaded machine still finds it
/// running (5 s was not, once, in CI); one the sweep missed is still running at the end.
pub const ORPHAN_JOB: &str = "setsid sh -c 'sleep 30; echo x >> F' >/dev/null 2>&1 & sleep 60";
/// What the job's shell runs, to find it by.
const ORPHAN_SCRIPT: &str = "sleep 30; echo x >> F";

/// Whether a copy of [`ORPHAN_JOB`]'s job runs in `work`. By its working directory: the
/// suites share one test process, and another CLI's copy of this scenario may run meanwhile.
/// The job's own shell (`sh -c SCRIPT`), not the shell that starts it, whose command line
/// holds the script too: a kill between the two leaves no job to stop (the test raced so).
fn is_the_job(cmdline: &[u8]) -> bool {
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    matches!(args.as_slice(), [sh, c, script] if sh.ends_with(b"sh") && c == b"-c" && *script == ORPHAN_SCRIPT.as_bytes())
}

fn job_running(work: &Path) -> bool {
    let work = work.canonicalize().unwrap();
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| is_the_job(&c))
            && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == work)
            && !gone(
                e.file_name()
                    .to_str()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
            )
    })
}

fn gone(pid: u64) -> bool {
    // A zombie waiting for init is gone too.
    !Path::new(&format!("/proc/{pid}/cmdline")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

/// `agent` (working in `work`) was asked to run [`ORPHAN_JOB`]: once the call is in flight and
/// the job runs, kill -9 the CLI. phoenix stops the job before the next start and records it,
/// the job never acts, and the resumed session is told what was stopped: `sent()` waits for
/// and returns the request of phoenix's continuation prompt.
pub fn killed_mid_tool_leaves_no_orphan(
    fleet: &Fleet,
    agent: &str,
    work: &Path,
    sent: impl FnOnce() -> String,
) {
    let dir = fleet.agent_dir(agent);
    // The PreToolUse (Gemini: BeforeTool) hook phoenix installed noted the call.
    wait_until(Duration::from_secs(60), "the shell call in flight", || {
        dir.join("in_flight.json").exists()
    });
    // Read before the job starts, so the kill follows it at once.
    let pid = fleet.agent_status(agent)["pid"].as_u64().unwrap() as u32;
    let wrapper = wrapper_of(fleet, agent);
    wait_until(Duration::from_secs(10), "the job", || job_running(work));
    kill9(pid);

    wait_until_explained(
        Duration::from_secs(30),
        "the interruption recorded",
        || {
            fleet
                .ops(agent)
                .iter()
                .any(|o| o["event"] == "tool_interrupted")
        },
        || {
            format!(
                "ops: {:#?}\ntool_use.jsonl: {}",
                fleet.ops(agent),
                std::fs::read_to_string(dir.join("tool_use.jsonl")).unwrap_or_default()
            )
        },
    );
    let ops = fleet.ops(agent);
    let strays = ops
        .iter()
        .find(|o| o["event"] == "strays_stopped")
        .unwrap_or_else(|| panic!("strays_stopped: {ops:?}"));
    let job = strays["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["argv"].to_string().contains(ORPHAN_SCRIPT))
        .unwrap_or_else(|| panic!("the job is recorded: {strays}"));
    assert!(
        gone(job["pid"].as_u64().unwrap()),
        "the job is gone once recorded"
    );
    let interrupted = ops
        .iter()
        .find(|o| o["event"] == "tool_interrupted")
        .unwrap();
    let tool = interrupted["tool"].as_str().unwrap().to_string();
    let sent = sent();
    assert!(
        sent.contains(&format!(
            "This command was interrupted and has been stopped: {tool}: setsid sh -c"
        )),
        "{interrupted}\n{sent}"
    );
    // No copy of the job is left to write F (the one recorded is gone, and no other runs).
    assert!(!job_running(work), "the orphaned job survived");
    assert!(!work.join("F").exists(), "the orphaned job acted");
    // Issue 32 item 7: what the killed launcher left (Codex's native binary under its node,
    // their git, bash and hook processes) ended reparented to the wrapper, its subreaper, and
    // was collected as it ended: no defunct child of the wrapper is left until the pane goes.
    wait_until_explained(
        Duration::from_secs(10),
        "no defunct child of the wrapper",
        || defunct_children(wrapper).is_empty(),
        || {
            format!(
                "defunct children of the wrapper {wrapper}: {:?}",
                defunct_children(wrapper)
            )
        },
    );
}

/// The pid of `agent`'s wrapper: its pane's process.
pub fn wrapper_of(fleet: &Fleet, agent: &str) -> u32 {
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap()
        .to_string();
    fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Children of `parent` that ended and were never collected (`ps -o stat` Z), with their
/// names.
pub fn defunct_children(parent: u32) -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
            (rest.first() == Some(&"Z") && rest.get(1) == Some(&parent.to_string().as_str()))
                .then(|| (pid, stat[open + 1..close].to_string()))
        })
        .collect()
}

/// `agent` is up and idle: kill -9 its wrapper (the pane's process) and run `phoenix apply`.
/// The new wrapper stops the CLI the old one left running (`previous_agent_stopped`, with its
/// pid) before it starts the next one, so no two processes share the session. `stays`: the
/// CLI outlives its terminal, so there is always one to stop (Claude Code does).
pub fn killed_wrapper_leaves_one_copy(fleet: &Fleet, agent: &str, stays: bool) {
    let old = fleet.agent_status(agent)["pid"].as_u64().unwrap();
    let pane = fleet.agent_status(agent)["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(wrapper);
    // `apply` acts on a dead pane: run it once tmux has seen the wrapper die (run at once, it
    // could still find the pane alive and do nothing).
    wait_until(Duration::from_secs(10), "the pane dead", || {
        fleet
            .tmux(&["display-message", "-p", "-t", &pane, "#{pane_dead}"])
            .is_some_and(|d| d.trim() == "1")
    });
    fleet.run(&["apply", "--yes"]);
    let second_start = || {
        fleet
            .ops(agent)
            .into_iter()
            .filter(|o| o["event"] == "agent_start")
            .nth(1)
    };
    // The moment the next start is recorded, the old CLI must be gone already.
    wait_until(Duration::from_secs(30), "a new start", || {
        second_start().is_some()
    });
    assert!(
        gone(old),
        "two copies: the old CLI {old} outlived the next start"
    );
    let ops = fleet.ops(agent);
    let second = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o["event"] == "agent_start")
        .nth(1)
        .unwrap()
        .0;
    // A CLI that ends with its terminal (Codex, often) leaves nothing to stop; one that stays
    // (Claude Code) is stopped by the new wrapper, and recorded, before it starts its own.
    let stopped = ops
        .iter()
        .position(|o| o["event"] == "previous_agent_stopped");
    // Claude Code usually stays when its terminal goes, but sometimes notices and ends its
    // session itself (its SessionEnd hook records it before the next start): then there is
    // nothing left to stop, and `gone(old)` above is what matters.
    let ended_itself = ops[..second].iter().any(|o| o["event"] == "session_end");
    assert!(
        stopped.is_some() || !stays || ended_itself,
        "the old CLI is stopped: {ops:?}"
    );
    if let Some(stopped) = stopped {
        assert_eq!(ops[stopped]["agent_pid"], old, "{:?}", ops[stopped]);
        assert!(stopped < second, "stopped before the next start");
    }
}
