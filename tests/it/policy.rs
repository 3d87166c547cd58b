//! The policy layer and the Clinic through the real binary: `phoenix policy test`,
//! `phoenix validate` on broken policies, `phoenix clinic` on realistic failures, and the full
//! loop with the demo agent failing with "prompt is too long".

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Fleet, read_jsonl, wait_until};

use crate::support;

const PHOENIX: &str = env!("CARGO_BIN_EXE_phoenix");
const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A temp dir with a phoenix.toml, and runs of the binary in it.
struct Project {
    tmp: tempfile::TempDir,
}

struct Run {
    out: Output,
    took: Duration,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    fn status(&self, code: i32) -> &Run {
        assert_eq!(
            self.out.status.code(),
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout())
            .unwrap_or_else(|e| panic!("{e}: not JSON:\n{}", self.stdout()))
    }
}

const BASE: &str = "[fleet]\nname = \"t\"\n[[agent]]\nname = \"a\"\ncommand = \"sleep 1000\"\n";

impl Project {
    fn new(toml: &str) -> Project {
        let p = Project {
            tmp: tempfile::tempdir().unwrap(),
        };
        p.write("phoenix.toml", toml);
        p
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    fn run(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(PHOENIX);
        cmd.args(args)
            .current_dir(self.tmp.path())
            .env("PHOENIX_CONFIG", self.path("phoenix.toml"))
            .env_remove("TMUX")
            .env_remove("PHOENIX_AGENT")
            .env_remove("PHOENIX_STATE_DIR")
            .stdin(Stdio::null());
        let started = Instant::now();
        let out = cmd.output().unwrap();
        Run {
            out,
            took: started.elapsed(),
        }
    }

    /// Pretend the wrapper saw agent `a` exit with `code`.
    fn exited(&self, agent: &str, code: i32) {
        let line = serde_json::json!({
            "ts": jiff::Timestamp::now().to_string(), "agent": agent, "event": "agent_exit",
            "code": code, "signal": null, "runtime_ms": 1234,
        });
        let path = self.path(&format!(".phoenix/agents/{agent}/ops.jsonl"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&format!("{line}\n"));
        std::fs::write(path, text).unwrap();
    }

    fn events(&self) -> Vec<Value> {
        self.read(".phoenix/critical_events.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn repo(rel: &str) -> String {
    Path::new(REPO).join(rel).display().to_string()
}

#[test]
fn policy_test_prints_the_decision_and_json() {
    let p = Project::new(BASE);
    let fixture = repo("policies/fixtures/on_exit_crash.json");
    let run = p.run(&["policy", "test", "recovery.lua", &fixture]);
    run.status(0);
    assert!(
        run.stdout().contains(r#""action":"resume""#),
        "{}",
        run.stdout()
    );
    assert!(run.stdout().contains("ok\n"));
    let json = p
        .run(&["policy", "test", "recovery.lua", &fixture, "--json"])
        .json();
    assert_eq!(json["decision"]["action"], "resume");
    assert_eq!(json["decision"]["delay"], 20.0);
    assert_eq!(json["by"], "builtin:policies/recovery.lua");
    assert_eq!(json["ok"], true);
}

#[test]
fn every_shipped_fixture_passes_against_the_shipped_policy() {
    let p = Project::new(BASE);
    let mut n = 0;
    for entry in std::fs::read_dir(repo("policies/fixtures")).unwrap() {
        let fixture = entry.unwrap().path();
        let run = p.run(&[
            "policy",
            "test",
            &repo("policies/recovery.lua"),
            fixture.to_str().unwrap(),
            "--json",
        ]);
        run.status(0);
        assert_eq!(run.json()["fell_back"], false);
        n += 1;
    }
    let calls: Vec<String> = std::fs::read_dir(repo("policies/fixtures"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .map(|t| serde_json::from_str::<Value>(&t).unwrap()["call"].to_string())
        .collect();
    for call in ["on_exit", "on_unhealthy", "diagnose", "prescribe"] {
        assert!(
            calls.iter().any(|c| c.contains(call)),
            "no fixture for `{call}`"
        );
    }
    assert!(n >= 4);
}

#[test]
fn a_policy_override_changes_the_decision() {
    let p = Project::new(BASE);
    p.write(
        "policies/recovery.lua",
        "function on_exit(agent, exit) return { action = 'fresh', delay = 1 } end\n",
    );
    let fixture = repo("policies/fixtures/on_exit_crash.json");
    let run = p.run(&["policy", "test", "policies/recovery.lua", &fixture]);
    run.status(1);
    assert!(
        run.stdout()
            .contains("`action`: expected \"resume\", got \"fresh\""),
        "{}",
        run.stdout()
    );

    // The same override steers the Clinic: a prescribe that always aborts.
    p.write(
        "policies/recovery.lua",
        "function prescribe(d, t) return { action = 'abort', reason = 'we never retry' } end\n",
    );
    p.exited("a", 1);
    p.write("out.txt", "API Error: 529 overloaded\n");
    let json = p
        .run(&["clinic", "a", "--json", "--output", "out.txt"])
        .status(0)
        .json();
    assert_eq!(json["diagnosis"]["root_cause"], "transient_error");
    assert_eq!(json["prescription"]["action"], "abort");
    assert_eq!(json["prescribed_by"], "policies/recovery.lua");
    assert_eq!(json["rehab"]["start"], "safe_mode");

    // And an agent's own policy overrides only what it defines.
    let p = Project::new(&format!("{BASE}policy = \"policies/careful.lua\"\n"));
    p.write(
        "policies/careful.lua",
        "return { prescribe = function() return 'retry' end }\n",
    );
    p.exited("a", 1);
    p.write("out.txt", "Error: prompt is too long\n");
    let json = p
        .run(&["clinic", "a", "--json", "--output", "out.txt"])
        .status(0)
        .json();
    assert_eq!(json["diagnosis"]["root_cause"], "context_length_exceeded");
    assert_eq!(json["diagnosed_by"], "builtin:policies/recovery.lua");
    assert_eq!(json["prescription"]["action"], "retry");
    assert_eq!(json["prescribed_by"], "policies/careful.lua");
}

#[test]
fn each_root_cause_from_a_realistic_error_gets_its_prescription() {
    let cases = [
        (
            r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215439 tokens > 200000 maximum"}}"#,
            "context_length_exceeded",
            "summarize_history",
            "fresh",
        ),
        (
            "<tool_use_error>Error: No such tool available: WebBrowse</tool_use_error>",
            "hallucinated_tool",
            "modify_prompt",
            "resume",
        ),
        (
            "InputValidationError: Edit failed: the required parameter `old_string` is missing",
            "invalid_tool_arguments",
            "modify_prompt",
            "resume",
        ),
        (
            r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "transient_error",
            "retry",
            "resume",
        ),
        (
            "Error: The instruction is ambiguous: two files are named config.toml",
            "ambiguous_instruction",
            "modify_prompt",
            "resume",
        ),
        (
            "thread 'main' panicked at src/main.rs:10:5: called `Option::unwrap()` on a `None` value",
            "logic_error",
            "modify_prompt",
            "resume",
        ),
        (
            r#"API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            "invalid_credentials",
            "abort",
            "safe_mode",
        ),
        (
            r#"API Error: 404 {"type":"error","error":{"type":"not_found_error","message":"model: claude-opus-9 model not found"}}"#,
            "model_unavailable",
            "abort",
            "safe_mode",
        ),
        (
            r#"Error: 429 {"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}"#,
            "quota_exhausted",
            "abort",
            "safe_mode",
        ),
    ];
    let p = Project::new(BASE);
    p.exited("a", 1);
    for (error, cause, action, start) in cases {
        p.write("out.txt", &format!("working…\n{error}\n"));
        let json = p
            .run(&["clinic", "a", "--dry-run", "--json", "--output", "out.txt"])
            .status(0)
            .json();
        assert_eq!(json["diagnosis"]["root_cause"], cause, "{error}");
        assert_eq!(json["prescription"]["action"], action, "{error}");
        assert_eq!(json["rehab"]["start"], start, "{error}");
        if start == "safe_mode" {
            assert!(
                json["rehab"]["notify"]
                    .as_str()
                    .unwrap()
                    .contains("stopped agent `a`")
            );
        }
    }
    // A dry run writes nothing.
    assert!(!p.path(".phoenix/critical_events.jsonl").exists());
    assert!(!p.path(".phoenix/agents/a/clinic.json").exists());
}

/// Each kind of broken policy: `validate` reports it with file:line, the Clinic still
/// decides (by the built-in default) and records a critical event.
#[test]
fn broken_policies_fall_back_and_phoenix_keeps_running() {
    let cases = [
        ("syntax", "function diagnose(t)\n  return {\nend\n", Some(3)),
        (
            "runtime",
            "function diagnose(t)\n  local x = nil\n  return x.field\nend\n",
            Some(3),
        ),
        (
            "budget",
            "function diagnose(t)\n  while true do end\nend\n",
            Some(2),
        ),
        (
            "memory",
            "function diagnose(t)\n  local s = string.rep('x', 1 << 28)\n  return s\nend\n",
            None,
        ),
        (
            "bad_return",
            "function diagnose(t)\n  return { root_cause = 'gremlins' }\nend\n",
            Some(1),
        ),
        (
            "runtime",
            "function diagnose(t)\n  return io.open('/etc/passwd'):read('a')\nend\n",
            Some(2),
        ),
    ];
    for (kind, source, line) in cases {
        let p = Project::new(&format!("{BASE}policy = \"policies/custom.lua\"\n"));
        p.write("policies/custom.lua", source);
        let location = match line {
            Some(l) => format!("policies/custom.lua:{l}"),
            None => "policies/custom.lua".to_string(),
        };

        let run = p.run(&["validate"]);
        run.status(1);
        assert!(run.stderr().contains(&location), "{kind}: {}", run.stderr());

        let json = p.run(&["validate", "--json"]).status(1).json();
        assert!(
            json["errors"][0]["file"]
                .as_str()
                .unwrap()
                .ends_with("policies/custom.lua"),
            "{json}"
        );

        p.exited("a", 1);
        p.write("out.txt", "API Error: 529 overloaded\n");
        let run = p.run(&["clinic", "a", "--json", "--output", "out.txt"]);
        run.status(0);
        assert!(
            run.took < Duration::from_secs(5),
            "{kind}: took {:?}",
            run.took
        );
        let json = run.json();
        assert_eq!(json["diagnosed_by"], "built-in default", "{kind}");
        assert_eq!(json["diagnosis"]["root_cause"], "transient_error", "{kind}");
        let events = p.events();
        let fallback = events
            .iter()
            .find(|e| e["event"] == "policy_error")
            .unwrap_or_else(|| panic!("{kind}: no policy_error event in {events:?}"));
        assert_eq!(fallback["details"]["kind"], kind, "{fallback}");
        assert!(
            fallback["reason"].as_str().unwrap().contains(&location),
            "{kind}: {fallback}"
        );
    }
}

#[test]
fn clinic_needs_something_to_recover_from() {
    let p = Project::new(BASE);
    let run = p.run(&["clinic", "a"]);
    run.status(1);
    assert!(
        run.stderr().contains("agent `a` has no recorded exit"),
        "{}",
        run.stderr()
    );
    p.run(&["clinic", "nobody"]).status(1);
    assert!(!p.path(".phoenix/critical_events.jsonl").exists());
}

#[test]
fn an_infinite_loop_policy_is_stopped_within_milliseconds() {
    let p = Project::new(BASE);
    p.write(
        "loop.lua",
        "function on_exit(agent, exit)\n  while true do end\nend\n",
    );
    let fixture = repo("policies/fixtures/on_exit_crash.json");
    let run = p.run(&["policy", "test", "loop.lua", &fixture, "--json"]);
    run.status(1);
    let json = run.json();
    assert_eq!(json["error"]["kind"], "budget");
    assert_eq!(json["error"]["line"], 2);
    // The fallback decision is still there.
    assert_eq!(json["decision"]["action"], "resume");
    assert!(
        json["elapsed_us"].as_u64().unwrap() < 1_000_000,
        "{}",
        json["elapsed_us"]
    );
}

#[test]
fn validate_reports_broken_templates_and_accepts_good_ones() {
    let p = Project::new(BASE);
    p.run(&["validate"]).status(0);
    p.write("templates/clinic_abort.md.j2", "ok line\n{% if %}\n");
    let run = p.run(&["validate"]);
    run.status(1);
    assert!(
        run.stderr().contains("templates/clinic_abort.md.j2"),
        "{}",
        run.stderr()
    );
}

#[test]
fn spec_checks_clinic_and_policy_keys() {
    let p = Project::new(&format!(
        "[clinic]\nmax_recoveries = 3\ndiagnose_comand = [\"x\"]\n{BASE}"
    ));
    let run = p.run(&["validate"]);
    run.status(1);
    assert!(
        run.stderr().contains("did you mean `diagnose_command`?"),
        "{}",
        run.stderr()
    );
    let p = Project::new(&format!("{BASE}policy = \"policies/missing.lua\"\n"));
    let run = p.run(&["validate"]);
    run.status(1);
    assert!(run.stderr().contains("does not exist"), "{}", run.stderr());
}

#[test]
fn diagnose_command_answers_and_falls_back_on_a_bad_answer() {
    let p = Project::new("");
    let script = p.path("diagnose.sh");
    p.write(
        "diagnose.sh",
        "#!/bin/sh\ncat > \"$(dirname \"$0\")/seen.txt\"\necho 'Here you go: {\"root_cause\": \"logic_error\", \"explanation\": \"the test asserts the wrong thing\", \"confidence\": 0.7}'\n",
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p.write(
        "phoenix.toml",
        &format!(
            "[clinic]\ndiagnose_command = [\"{}\"]\n{BASE}",
            script.display()
        ),
    );
    p.exited("a", 1);
    p.write("out.txt", "API Error: 529 overloaded\n");
    let json = p
        .run(&["clinic", "a", "--json", "--output", "out.txt"])
        .status(0)
        .json();
    assert_eq!(json["diagnosis"]["root_cause"], "logic_error");
    assert!(
        json["diagnosed_by"]
            .as_str()
            .unwrap()
            .starts_with("diagnose_command")
    );
    let seen = p.read("seen.txt");
    assert!(seen.contains("API Error: 529 overloaded"), "{seen}");
    assert!(seen.contains("\"root_cause\""), "{seen}");

    p.write("diagnose.sh", "#!/bin/sh\necho 'I think it is gremlins'\n");
    let json = p
        .run(&["clinic", "a", "--json", "--output", "out.txt"])
        .status(0)
        .json();
    assert_eq!(json["diagnosis"]["root_cause"], "transient_error");
    assert!(
        json["problems"][0]
            .as_str()
            .unwrap()
            .contains("without a JSON object"),
        "{json}"
    );
}

/// A demo agent in a real tmux pane that crashes after `crash_after` with `extra` flags, no
/// cooldown, and the given `[clinic]` and extra spec lines.
fn crashing_demo(fleet: &Fleet, crash_after: &str, flags: &str, more: &str) {
    fleet.toml(&format!(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = 10\ncrash_window = \"1h\"\n\n\
         {more}\n\
         [[agent]]\nname = \"demo\"\n\
         command = \"phoenix demo-agent --interval 50ms --crash-after {crash_after} --exit-code 1 {flags}\"\n"
    ));
}

fn event_names(fleet: &Fleet) -> Vec<String> {
    read_jsonl(&fleet.state_dir().join("critical_events.jsonl"))
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_string())
        .collect()
}

fn pane_text(fleet: &Fleet) -> String {
    let pane = fleet.agent_status("demo")["pane"]
        .as_str()
        .unwrap_or("")
        .to_string();
    fleet
        .tmux(&["capture-pane", "-p", "-J", "-S", "-500", "-t", &pane])
        .unwrap_or_default()
}

/// Anthropic's 404 for a model it does not know: not retried, safe mode at the first crash,
/// and the reason names the model and the fix.
#[test]
fn model_not_found_stops_at_the_first_crash_naming_the_model() {
    let fleet = Fleet::new();
    crashing_demo(
        &fleet,
        "700ms",
        r#"--task 'Refactor the parser module' --fail-with 'API Error: 404 {\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"model: claude-nope-4\"}}'"#,
        "",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(30), "the Clinic to stop it", || {
        event_names(&fleet).iter().any(|e| e == "clinic_abort")
    });
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let diagnosis = events
        .iter()
        .find(|e| e["event"] == "clinic_diagnosis")
        .unwrap();
    assert_eq!(
        diagnosis["details"]["diagnosis"]["root_cause"], "model_unavailable",
        "{diagnosis}"
    );
    wait_until(Duration::from_secs(10), "safe mode", || {
        fleet.ops("demo").iter().any(|o| o["event"] == "safe_mode")
    });
    let ops = fleet.ops("demo");
    let starts = ops.iter().filter(|o| o["event"] == "agent_start").count();
    assert_eq!(starts, 1, "no restart: {ops:?}");
    let safe = ops.iter().find(|o| o["event"] == "safe_mode").unwrap();
    let why = safe["why"].as_str().unwrap();
    assert!(why.contains("`claude-nope-4`"), "{why}");
    // A custom CLI: phoenix cannot tell where its model came from, so it names both places.
    assert!(
        why.contains(
            "fix the model the agent's `command` in phoenix.toml gives, or the one its CLI's own settings give"
        ),
        "{why}"
    );
    fleet
        .run(&["status", "demo"])
        .status(3)
        .stdout_has("model_unavailable")
        .stdout_has("claude-nope-4");
    // Nothing for an apply to do, yet the fleet is not what phoenix.toml asks for.
    let plan = fleet.run(&["plan"]);
    plan.status(0)
        .stdout_has("No changes to apply.")
        .stdout_has("! agent `demo` in pane %0: safe-mode")
        .stdout_has("`phoenix restart demo`");
    assert!(
        !plan.stdout().contains("The fleet matches"),
        "{}",
        plan.stdout()
    );
}

/// The 404 hint says where the model came from: a Claude Code agent whose `command` names no
/// `--model` has it from its settings (the hint named `--model` in phoenix.toml, which was not
/// where it came from), and one whose `command` gives `--model` is told to fix that flag.
#[test]
fn the_unknown_models_hint_names_where_the_model_came_from() {
    for (model_flag, hint) in [
        (
            "",
            "the agent's `command` gives no `--model`, so the model comes from Claude Code's settings (`model` in .claude/settings.json",
        ),
        (
            "--model claude-nope-4",
            "cannot be used: fix `--model` in the agent's `command` in phoenix.toml",
        ),
    ] {
        let fleet = Fleet::new();
        fleet.toml(&format!(
            "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\n\n\
             [[agent]]\nname = \"demo\"\ncli = \"claude\"\n\
             command = \"phoenix demo-agent --interval 50ms --crash-after 700ms --exit-code 1 {model_flag} \
             --fail-with 'API Error: 404 {{\\\"type\\\":\\\"error\\\",\\\"error\\\":{{\\\"type\\\":\\\"not_found_error\\\",\\\"message\\\":\\\"model: claude-nope-4\\\"}}}}'\"\n"
        ));
        fleet.run(&["apply", "--yes"]).status(0);
        wait_until(Duration::from_secs(30), "safe mode", || {
            fleet.ops("demo").iter().any(|o| o["event"] == "safe_mode")
        });
        let ops = fleet.ops("demo");
        let why = ops.iter().find(|o| o["event"] == "safe_mode").unwrap()["why"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(why.contains("`claude-nope-4`"), "{why}");
        assert!(why.contains(hint), "{model_flag:?}: {why}");
        // Said once: the cause, then the reason.
        assert_eq!(why.matches("model_unavailable").count(), 1, "{why}");
    }
}

/// The full loop in a real pane: the demo agent fails with "prompt is too long"; the wrapper's
/// Clinic prescribes a fresh session with the context carried over, the next session gets it
/// injected by its session-start hook, and after `max_recoveries` the Clinic stops the loop
/// (safe mode, quarantine) and says so. `phoenix restart` gives the task a new budget.
#[test]
fn prompt_too_long_gives_a_fresh_session_with_injected_context() {
    let fleet = Fleet::new();
    crashing_demo(
        &fleet,
        "700ms",
        "--task 'Refactor the parser module' --fail-with 'prompt is too long: 215439 tokens > 200000 maximum'",
        "[clinic]\nmax_recoveries = 2\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(
        Duration::from_secs(40),
        "the Clinic to stop the loop",
        || event_names(&fleet).iter().any(|e| e == "clinic_abort"),
    );

    let one = ["clinic_triage", "clinic_diagnosis", "clinic_prescription"];
    let mut expected: Vec<&str> = Vec::new();
    for end in [
        "clinic_rehabilitation",
        "clinic_rehabilitation",
        "clinic_abort",
    ] {
        expected.extend(one);
        expected.push(end);
    }
    assert_eq!(event_names(&fleet), expected);
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    for e in events.iter().filter(|e| e["event"] == "clinic_diagnosis") {
        assert_eq!(
            e["details"]["diagnosis"]["root_cause"], "context_length_exceeded",
            "{e}"
        );
    }
    let rehab: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "clinic_rehabilitation")
        .collect();
    assert_eq!(
        rehab[0]["action_taken"],
        "fresh session with injected context"
    );
    let abort = events.last().unwrap();
    assert_eq!(abort["action_taken"], "safe_mode");
    assert!(
        events[events.len() - 2]["reason"]
            .as_str()
            .unwrap()
            .contains("max_recoveries = 2"),
        "{:?}",
        events[events.len() - 2]
    );

    // Three runs, every one of them fresh; two of them got the Clinic's context.
    let ops = fleet.ops("demo");
    let starts: Vec<&Value> = ops.iter().filter(|o| o["event"] == "agent_start").collect();
    assert_eq!(starts.len(), 3, "{ops:?}");
    assert!(starts.iter().all(|o| o["mode"] == "fresh"), "{starts:?}");
    let injected = ops
        .iter()
        .filter(|o| o["event"] == "clinic_context_injected")
        .count();
    assert_eq!(injected, 2);
    // The wrapper saves a handoff after the Clinic's stop and only then says so in the pane.
    wait_until(Duration::from_secs(10), "the safe-mode banner", || {
        pane_text(&fleet).contains("in safe mode: ")
    });
    let text = pane_text(&fleet);
    assert!(text.contains("[context injected by phoenix]"), "{text}");
    assert!(
        text.contains("FRESH SESSION, CONTEXT CARRIED OVER"),
        "{text}"
    );
    assert!(text.contains("Refactor the parser module"), "{text}");
    assert!(text.contains("in safe mode: "), "{text}");
    assert!(!fleet.agent_dir("demo").join("clinic_context.md").exists());
    // The Clinic's stop is a quarantine, not a crash loop.
    assert!(!event_names(&fleet).iter().any(|e| e == "crash_loop"));
    let status = fleet.run(&["status", "demo"]);
    status
        .status(3)
        .stdout_has("clinic: context_length_exceeded");

    // A person reads why, per agent.
    let log = fleet.run(&["events", "--agent", "demo"]);
    log.status(0)
        .stdout_has("clinic_prescription")
        .stdout_has("summarize_history")
        .stdout_has("→ safe_mode");
    let json = fleet.run(&[
        "events",
        "--agent",
        "demo",
        "--event",
        "clinic_abort",
        "--json",
    ]);
    assert_eq!(json.status(0).json()["events"].as_array().unwrap().len(), 1);
    let none = fleet.run(&["events", "--agent", "other"]);
    none.stdout_has("no critical events for agent `other`");

    // An operator restart gives the task a new budget: the next failure is recovery 1 again.
    fleet.run(&["restart", "demo"]).status(0);
    wait_until(
        Duration::from_secs(20),
        "a new recovery after restart",
        || {
            event_names(&fleet)
                .iter()
                .filter(|e| *e == "clinic_rehabilitation")
                .count()
                == 3
        },
    );
    let last = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"))
        .into_iter()
        .rfind(|e| e["event"] == "clinic_prescription")
        .unwrap();
    assert_eq!(last["details"]["attempt"], 1, "{last}");
}

/// A crash nobody can diagnose (no error anywhere) is left to `on_exit`'s hybrid resume: no
/// Clinic events, no recovery spent, the session resumed.
#[test]
fn an_undiagnosed_crash_is_left_to_hybrid_resume() {
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\n\n\
         [[agent]]\nname = \"demo\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 100ms\"\n\
         resume_command = \"phoenix demo-agent --interval 100ms --resume {session_id}\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["demo"]);
    wait_until(Duration::from_secs(10), "a long enough run", || {
        fleet
            .ops("demo")
            .iter()
            .any(|o| o["event"] == "agent_alive")
    });
    let pids = fleet.wait_running(&["demo"]);
    support::kill9(pids[0]);
    wait_until(Duration::from_secs(10), "the second start", || {
        fleet
            .ops("demo")
            .iter()
            .filter(|o| o["event"] == "agent_start")
            .count()
            == 2
    });
    let ops = fleet.ops("demo");
    assert!(
        ops.iter().any(|o| o["event"] == "clinic_undiagnosed"),
        "{ops:?}"
    );
    let exit = ops.iter().rfind(|o| o["event"] == "agent_exit").unwrap();
    assert_eq!(
        exit["decided_by"], "builtin:policies/recovery.lua",
        "{exit}"
    );
    let start = ops.iter().rfind(|o| o["event"] == "agent_start").unwrap();
    assert_eq!(start["mode"], "resume", "{start}");
    assert!(event_names(&fleet).is_empty(), "{:?}", event_names(&fleet));
    assert!(!fleet.agent_dir("demo").join("clinic.json").exists());
}

/// The wrapper asks the fleet's own `on_exit`: a policy that wants a person after any crash
/// stops the agent at its first crash; a policy that breaks falls back to the built-in rules
/// (the agent is resumed) with a `policy_error` event naming the file and line.
#[test]
fn the_wrapper_follows_the_on_exit_policy_and_survives_a_broken_one() {
    let fleet = Fleet::new();
    std::fs::create_dir_all(fleet.path().join("policies")).unwrap();
    std::fs::write(
        fleet.path().join("policies/recovery.lua"),
        "function on_exit(agent, exit)\n  if exit.code == 0 then return 'safe_mode' end\n  \
         return { action = 'safe_mode', reason = 'crash ' .. exit.crashes_in_window .. ': a person looks first' }\nend\n",
    )
    .unwrap();
    crashing_demo(&fleet, "1s", "", "");
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(20), "safe mode", || {
        fleet.ops("demo").iter().any(|o| o["event"] == "safe_mode")
    });
    let ops = fleet.ops("demo");
    let exit = ops.iter().rfind(|o| o["event"] == "agent_exit").unwrap();
    assert_eq!(exit["decided_by"], "policies/recovery.lua", "{exit}");
    assert_eq!(exit["action"], "safe_mode");
    assert!(
        exit["explain"]
            .as_str()
            .unwrap()
            .contains("crash 1: a person looks first"),
        "{exit}"
    );
    assert_eq!(
        ops.iter().filter(|o| o["event"] == "agent_start").count(),
        1
    );
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let stop = events.iter().find(|e| e["event"] == "crash_loop").unwrap();
    assert!(
        stop["reason"]
            .as_str()
            .unwrap()
            .contains("a person looks first"),
        "{stop}"
    );

    // Now the policy breaks at run time: the built-in rules take over, the agent comes back.
    std::fs::write(
        fleet.path().join("policies/recovery.lua"),
        "function on_exit(agent, exit)\n  return agent.nope.deeper\nend\n",
    )
    .unwrap();
    fleet.run(&["restart", "demo"]).status(0);
    wait_until(
        Duration::from_secs(20),
        "a fallback decision and a new start",
        || {
            let ops = fleet.ops("demo");
            ops.iter().filter(|o| o["event"] == "agent_start").count() >= 3
        },
    );
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let fallback = events
        .iter()
        .find(|e| e["event"] == "policy_error")
        .expect("a policy_error event");
    assert!(
        fallback["reason"]
            .as_str()
            .unwrap()
            .contains("policies/recovery.lua:2"),
        "{fallback}"
    );
    let exit = fleet
        .ops("demo")
        .into_iter()
        .rfind(|o| o["event"] == "agent_exit" && o["reason"] == "crash")
        .unwrap();
    assert_eq!(exit["decided_by"], "built-in default", "{exit}");
    assert_eq!(exit["action"], "resume", "{exit}");
}

/// `phoenix events` filters by agent, event and age, keeps going over a corrupt line, and
/// prints JSON for scripts.
#[test]
fn events_filter_by_agent_event_and_age() {
    let p = Project::new(BASE);
    let line = |ts: &str, agent: &str, event: &str| {
        serde_json::json!({"ts": ts, "event": event, "agent": agent, "reason": "r",
                           "action_taken": "x", "details": {}})
        .to_string()
    };
    let now = jiff::Timestamp::now();
    let recent = now.to_string();
    let old = (now - jiff::SignedDuration::from_hours(3)).to_string();
    p.write(
        ".phoenix/critical_events.jsonl",
        &format!(
            "{}\n{{not json\n{}\n{}\n",
            line(&old, "a", "crash_loop"),
            line(&recent, "a", "clinic_triage"),
            line(&recent, "b", "policy_error"),
        ),
    );
    let all = p.run(&["events", "--json"]);
    let doc = all.status(0).json();
    assert_eq!(doc["format_version"], 1, "{doc}");
    assert_eq!(doc["events"].as_array().unwrap().len(), 3);
    assert!(all.stderr().contains("1 line(s)"), "{}", all.stderr());
    let a = p.run(&["events", "--agent", "a", "--json"]).json();
    assert_eq!(a["events"].as_array().unwrap().len(), 2);
    let recent_a = p
        .run(&["events", "--agent", "a", "--since", "1h", "--json"])
        .json();
    assert_eq!(recent_a["events"].as_array().unwrap().len(), 1);
    assert_eq!(recent_a["events"][0]["event"], "clinic_triage");
    let last = p.run(&["events", "-n", "1", "--json"]).json();
    assert_eq!(last["events"][0]["agent"], "b");

    // For one agent, each session's end is there too.
    p.exited("a", 3);
    let a = p.run(&["events", "--agent", "a", "--json"]).json();
    assert_eq!(a["events"].as_array().unwrap().len(), 3, "{a}");
    assert_eq!(a["events"][2]["event"], "agent_exit");
    let clinic = p.run(&["events", "--event", "clinic"]);
    assert!(clinic.stdout().contains("clinic_triage"));
    assert!(!clinic.stdout().contains("policy_error"));
    // And for the whole fleet: plain `events` shows a session's end (it once did only with
    // --agent).
    let last = p.run(&["events", "-n", "1", "--json"]).json();
    assert_eq!(last["events"][0]["agent"], "a", "{last}");
    assert_eq!(last["events"][0]["event"], "agent_exit", "{last}");
    let plain = p.run(&["events"]);
    assert!(
        plain.status(0).stdout().contains("agent_exit"),
        "{}",
        plain.stdout()
    );
    let bad = p.run(&["events", "--since", "soon"]);
    bad.status(64);
    assert!(bad.stderr().contains("30s"), "{}", bad.stderr());
}

/// CPU time (user + system, in clock ticks) of process `pid`, all its threads.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A policy whose first decision backtracks in C (`string.find` with `.-.-.-.-b`) and leaves
/// a looping `__gc` finalizer behind: the budget stops the match, the finalizer is refused,
/// the decision falls back, and once the agent waits in safe mode the wrapper uses no CPU (a
/// thread left spinning used a whole core for the wrapper's lifetime).
#[test]
fn a_runaway_policy_leaves_no_thread_spinning_in_the_wrapper() {
    let fleet = Fleet::new();
    std::fs::create_dir_all(fleet.path().join("policies")).unwrap();
    std::fs::write(
        fleet.path().join("policies/recovery.lua"),
        "function on_exit(agent, exit)\n  \
         if exit.crashes_in_window > 1 then return 'safe_mode' end\n  \
         pcall(setmetatable, {}, {__gc = function() while true do end end})\n  \
         string.find(string.rep('a', 400), '.-.-.-.-b')\n  return 'resume'\nend\n",
    )
    .unwrap();
    crashing_demo(&fleet, "500ms", "", "");
    fleet.run(&["apply", "--yes"]).status(0);
    wait_until(Duration::from_secs(30), "safe mode", || {
        fleet.ops("demo").iter().any(|o| o["event"] == "safe_mode")
    });
    let pane = fleet.agent_status("demo")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let wrapper: u32 = fleet
        .tmux(&["display-message", "-p", "-t", &pane, "#{pane_pid}"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let before = cpu_ticks(wrapper);
    // A measuring window on purpose: the CPU the idle wrapper uses in one second.
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(wrapper) - before;
    assert!(
        used <= 10,
        "the wrapper used {used} ticks of CPU in a second while idle"
    );
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let fallback = events
        .iter()
        .find(|e| e["event"] == "policy_error")
        .expect("a policy_error event");
    assert!(
        fallback["reason"].as_str().unwrap().contains("budget of"),
        "{fallback}"
    );
}
