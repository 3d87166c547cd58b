//! The table of real CLIs (Claude Code, Codex, Gemini) and the scenarios each goes through
//! alike: a model that hangs, six failing shell calls, a slow answer after a long idle, and
//! (from scenarios.rs) a kill -9 mid tool call and a killed wrapper. Each suite fills in one
//! row of [`RealCli`] (how its CLI is started, typed into and scripted); the steps and the
//! assertions are here, once.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::scenarios::{
    ORPHAN_JOB, killed_mid_tool_leaves_no_orphan, killed_wrapper_leaves_one_copy,
};
use super::scripted::{Protocol, Request, ScriptedServer, Turn};
use super::{Fleet, wait_until, wait_until_explained};

/// How long a real CLI gets for each step.
const WAIT: Duration = Duration::from_secs(30);

/// A real CLI agent that `phoenix apply` started and that was given its first prompt.
pub struct Run {
    /// The agent's state dir.
    pub dir: PathBuf,
    pub pane: String,
    /// The CLI's own home (its settings and sessions).
    pub home: PathBuf,
    /// Whatever must live as long as the run (Codex: what kills its leftover processes).
    pub guard: Option<Box<dyn std::any::Any>>,
}

/// One row of the table the scenarios run over: a real CLI, as its suite drives it.
pub struct RealCli<P: Protocol> {
    /// The agent's name in phoenix.toml.
    pub agent: &'static str,
    /// A scripted model server speaking the CLI's API.
    pub serve: fn(Vec<Turn>) -> ScriptedServer<P>,
    /// `phoenix apply` the agent (`extra` phoenix.toml text before it, fast restarts) and
    /// type `prompt` once it waits for input.
    pub start: fn(&Fleet, &ScriptedServer<P>, &str, &str) -> Run,
    /// Type `text` into the CLI waiting in `pane`, and submit it.
    pub submit: fn(&Fleet, &str, &str),
    /// The model's turn that runs `command` with the CLI's shell tool.
    pub shell: fn(&str) -> Turn,
    /// The requests that played a scripted turn (side requests, e.g. a title, left out).
    pub turns: fn(&ScriptedServer<P>) -> Vec<Request>,
    /// Whether a tool_use.jsonl line is the CLI's shell call that failed with exit code 2.
    pub failed_shell_call: fn(&Value) -> bool,
    /// The CLI outlives its terminal, so a killed wrapper always leaves one to stop.
    pub outlives_terminal: bool,
}

impl<P: Protocol> RealCli<P> {
    /// The request phoenix's continuation prompt made (it says the session was restarted),
    /// once it came: what a restarted session sent to the model without anybody typing.
    pub fn sent_with_the_continue_prompt(
        &self,
        fleet: &Fleet,
        server: &ScriptedServer<P>,
        pane: &str,
    ) -> String {
        let find = || {
            (self.turns)(server)
                .into_iter()
                .rfind(|r| r.text().contains("This session was restarted"))
                .map(|r| r.text())
        };
        wait_until_explained(
            WAIT,
            "the request of phoenix's continuation prompt",
            || find().is_some(),
            || fleet.explain(self.agent, pane),
        );
        find().unwrap()
    }
}

/// The agent's state.json, or Null while it is not there yet (Codex runs its SessionStart
/// hook only with the first prompt).
pub fn state_of(dir: &Path) -> Value {
    std::fs::read(dir.join("state.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// Scenario 4, first half: the model hangs mid-turn. The CLI waits on the stream, no tool
/// call comes → the watchdog reports silence, records it, and revives the session (resumed),
/// which is told why and sent on its way.
pub fn hanging_model_is_found_silent_and_revived<P: Protocol>(cli: &RealCli<P>) {
    let fleet = Fleet::new();
    let server = (cli.serve)(vec![Turn::Hang, Turn::text("Back after the hang.")]);
    let run = (cli.start)(
        &fleet,
        &server,
        "[thresholds]\nsilence = \"3s\"\n",
        "index the archive",
    );
    wait_until(WAIT, "the request that hangs", || {
        !(cli.turns)(&server).is_empty()
    });
    // A pass while the turn is young: it is not silent yet, and the passes that follow
    // compare screens (a ticking spinner is not a sign of life).
    let young = fleet.run(&["watchdog", "--once", "--json"]).json();
    assert_eq!(young["agents"][0]["verdict"], "healthy", "{young}");
    // Past the 3 s silence threshold: time has to pass, silence is about time.
    std::thread::sleep(Duration::from_secs(4));
    let found = fleet.watchdog_until_confirmed();
    assert_eq!(found["verdict"], "unhealthy", "{found}");
    assert_eq!(found["findings"][0]["check"], "silence", "{found}");
    assert_eq!(found["action"], "revive", "{found}");
    let events = fleet.unhealthy_events(cli.agent);
    assert!(events.contains("silent_for_"), "{events}");
    let sent = cli.sent_with_the_continue_prompt(&fleet, &server, &run.pane);
    assert!(sent.contains("YOU WERE REVIVED"), "{sent}");
    assert!(sent.contains("index the archive"), "{sent}");
    let ops = fleet.ops(cli.agent);
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    super::wait_for_screen(&fleet, &run.pane, "Back after the hang.", WAIT);
    assert_eq!(state_of(&run.dir)["current_task"], "index the archive");
}

/// Scenario 4, second half: six shell calls fail in a row (however the CLI's hook reports it;
/// Codex and Gemini say nothing of a failure, phoenix reads the exit code) → the watchdog finds
/// an error cascade and records it as a critical event.
pub fn failing_shell_calls_are_an_error_cascade<P: Protocol>(cli: &RealCli<P>) {
    let fleet = Fleet::new();
    let mut script: Vec<Turn> = (0..6)
        .map(|i| (cli.shell)(&format!("ls /nonexistent-phoenix-{i}")))
        .collect();
    script.push(Turn::text("Giving up on the listing."));
    let server = (cli.serve)(script);
    let run = (cli.start)(
        &fleet,
        &server,
        "[thresholds]\nerror_cascade = 5\n",
        "list the missing dirs",
    );
    wait_until_explained(
        Duration::from_secs(60),
        "six failed tool calls",
        || {
            super::read_jsonl(&run.dir.join("tool_use.jsonl"))
                .iter()
                .filter(|t| t["ok"] == false)
                .count()
                == 6
        },
        || fleet.explain(cli.agent, &run.pane),
    );
    let found = fleet.watchdog_until_confirmed();
    assert_eq!(found["verdict"], "unhealthy", "{found}");
    let checks: Vec<&str> = found["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["check"].as_str())
        .collect();
    assert!(checks.contains(&"error_cascade"), "{found}");
    let events = fleet.unhealthy_events(cli.agent);
    assert!(events.contains("6_consecutive_tool_errors"), "{events}");
    let failed = super::read_jsonl(&run.dir.join("tool_use.jsonl"));
    assert!(failed.iter().all(cli.failed_shell_call), "{failed:?}");
    // The CLI's own session record was read into the usage ledger: the six responses, each
    // at least the 10 input tokens the scripted server reports, under the model it named.
    let usage = fleet.run(&["usage", cli.agent, "--json"]).status(0).json();
    let counted = &usage["agents"][0];
    assert!(
        counted["tokens"]["total"].as_u64().unwrap_or(0) >= 60,
        "{usage}"
    );
    let models = counted["models"].as_array().unwrap();
    assert!(
        !models.is_empty() && models.iter().all(|m| m["model"] != "unknown"),
        "{usage}"
    );
}

/// An agent idle for longer than the silence threshold gets a prompt whose answer is slow:
/// its last tool call is from the turn before, and the watchdog must not call the new turn
/// silent (it once revived such an agent 2 s into the turn).
pub fn idle_past_silence_then_a_slow_answer_is_not_silent<P: Protocol>(cli: &RealCli<P>) {
    let fleet = Fleet::new();
    let server = (cli.serve)(vec![
        (cli.shell)("echo one > one.txt"),
        Turn::text("Wrote it."),
        Turn::text("Here is the summary."),
    ]);
    let run = (cli.start)(
        &fleet,
        &server,
        "[thresholds]\nsilence = \"5s\"\n",
        "write one file",
    );
    let (dir, pane) = (&run.dir, &run.pane);
    wait_until_explained(
        Duration::from_secs(60),
        "the first turn done",
        || state_of(dir)["status"] == "idle" && dir.join("tool_use.jsonl").exists(),
        || fleet.explain(cli.agent, pane),
    );
    wait_until(WAIT, "idle past the silence threshold", || {
        fleet.quiet_for(cli.agent) > 6.0
    });
    let asked = (cli.turns)(&server).len();
    server.delay_next(Duration::from_secs(4));
    (cli.submit)(&fleet, pane, "summarize what you did");
    wait_until(WAIT, "the slow request", || {
        (cli.turns)(&server).len() > asked && state_of(dir)["status"] == "working"
    });
    for pass in 0..2 {
        let report = fleet.run(&["watchdog", "--once", "--json"]).json();
        assert_eq!(
            report["agents"][0]["verdict"], "healthy",
            "pass {pass}: {report}"
        );
    }
    super::wait_for_screen(&fleet, pane, "Here is the summary.", WAIT);
    let report = fleet.run(&["watchdog", "--once", "--json"]).json();
    assert_eq!(report["agents"][0]["verdict"], "healthy", "{report}");
    assert_eq!(
        fleet
            .unhealthy_events(cli.agent)
            .matches("session_unhealthy")
            .count(),
        0
    );
}

/// Issue 15 item 6: the CLI is killed in the middle of a shell call whose job left its process
/// group; the job is stopped and recorded before the resume, never acts, and the resumed
/// session is told which command was stopped.
pub fn killed_mid_tool<P: Protocol>(cli: &RealCli<P>) {
    let fleet = Fleet::new();
    let server = (cli.serve)(vec![
        (cli.shell)(ORPHAN_JOB),
        Turn::text("Checked F before running it again."),
    ]);
    let run = (cli.start)(&fleet, &server, "", "append x to F");
    killed_mid_tool_leaves_no_orphan(&fleet, cli.agent, &fleet.path().join("work"), || {
        cli.sent_with_the_continue_prompt(&fleet, &server, &run.pane)
    });
}

/// Issue 15 item 7: the wrapper is killed with the CLI still running; the wrapper that
/// replaces it stops that CLI (recorded) before it starts one of its own, so one session
/// never runs in two processes.
pub fn killed_wrapper<P: Protocol>(cli: &RealCli<P>) {
    let fleet = Fleet::new();
    let server = (cli.serve)(vec![Turn::text("Done.")]);
    let run = (cli.start)(&fleet, &server, "", "say done");
    wait_until_explained(
        Duration::from_secs(60),
        "the turn",
        || state_of(&run.dir)["status"] == "idle",
        || fleet.explain(cli.agent, &run.pane),
    );
    killed_wrapper_leaves_one_copy(&fleet, cli.agent, cli.outlives_terminal);
}
