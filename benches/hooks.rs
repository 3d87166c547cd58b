//! `phoenix-hook heartbeat` and `phoenix-hook session-start` (what installed hook files call;
//! `phoenix hook` of the full binary for comparison): wall time per call (median over
//! ≥ 200 runs), next to the Phoenix Protocol v2.0 seed's own hooks run on the same machine — the
//! Python one-liner heartbeat (system `/usr/bin/python3`, never a version-manager shim) and the
//! bash+jq start hook. Run with `cargo bench --bench hooks`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 300;
const WARMUP: usize = 10;

/// The seed's activity hook, minus the `&` that backgrounds it in the seed's bash wrapper
/// (backgrounded, its cost is still paid on the same cores).
const SEED_HEARTBEAT: &str = r#"
import json, os, tempfile
from datetime import datetime, timezone
f = 'STATE_FILE'
try:
    s = json.load(open(f))
    s['last_active'] = datetime.now(timezone.utc).isoformat()
    fd, t = tempfile.mkstemp(dir=os.path.dirname(f))
    os.fdopen(fd,'w').write(json.dumps(s, indent=2))
    os.rename(t, f)
except: pass
"#;

/// The seed's start hook (recovery detection + brief injection), with the domain fixed.
const SEED_START: &str = r#"#!/bin/bash
INPUT=$(cat)
CWD=$(echo "$INPUT" | jq -r '.cwd // ""')

DOMAIN=bench
STATE_FILE="$HOME/$DOMAIN/state.json"

# Recovery detection
if [ -f "$STATE_FILE" ]; then
    LAST_STATUS=$(jq -r '.status // "unknown"' "$STATE_FILE" 2>/dev/null)
    if [ "$LAST_STATUS" = "working" ]; then
        LAST_TASK=$(jq -r '.current_task // "unknown"' "$STATE_FILE" 2>/dev/null)
        OPEN_LOOPS=$(jq -r '.open_loops | length // 0' "$STATE_FILE" 2>/dev/null)
        echo "=== RECOVERY DETECTED ==="
        echo "You were interrupted mid-task. Last known state:"
        echo "  Task: $LAST_TASK"
        echo "  Open loops: $OPEN_LOOPS"
        echo "Review your brief below and continue where you left off."
        echo "==========================="
    fi
fi

# Inject brief
BRIEF="$HOME/$DOMAIN/brief.md"
[ -f "$BRIEF" ] && [ -s "$BRIEF" ] && cat "$BRIEF"
"#;

const BRIEF: &str = "bench — 2026-02-16\n\n**Changed:**\n- Built the multi-asset analysis\n- Restored the snapshot cron\n\n**Open loops:**\n- Portfolio rebalance\n- SCOTUS ruling ~Feb 20\n\n**Next:** Process the Feb 16 snapshot, update NAV.\n\n**Numbers:** NAV $266,691 | MTD PnL -$3,846\n";

fn state_json(agent: &str) -> String {
    serde_json::json!({
        "agent": agent, "last_active": "2026-02-17T02:12:53Z", "status": "working",
        "current_task": "rebalance the portfolio", "session_id": "bench-session",
        "open_loops": [
            {"id": "schwab-oauth", "text": "Schwab OAuth connection not set up", "added": "2026-02-01", "stale": true},
            {"id": "scotus-ieepa", "text": "SCOTUS IEEPA ruling ~Feb 20 — binary event", "added": "2026-02-14", "stale": false}
        ],
        "resolved": [{"id": "snapshot-failure", "reason": "Fixed cron schedule", "resolved_date": "2026-02-16"}],
        "numbers": {"nav": "$266,691", "mtd_pnl": "-$3,846", "active_crons": "4"}
    })
    .to_string()
}

struct Case {
    name: &'static str,
    program: String,
    args: Vec<String>,
    stdin: Vec<u8>,
    env: Vec<(String, String)>,
    /// Restores files before each run so that every run does the same work.
    reset: Option<Box<dyn Fn()>>,
}

/// One timed run: spawn, hand over the payload, wait for the exit.
fn run_once(case: &Case) -> Duration {
    if let Some(reset) = &case.reset {
        reset();
    }
    let started = Instant::now();
    let mut child = Command::new(&case.program)
        .args(&case.args)
        .envs(case.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", case.program));
    let _ = child.stdin.take().unwrap().write_all(&case.stdin);
    let status = child.wait().unwrap();
    let elapsed = started.elapsed();
    assert!(status.success(), "{} failed: {status}", case.name);
    elapsed
}

/// Round-robin over the cases, so that every case sees the same background load (this
/// machine is shared); returns each case's sorted times.
fn measure(cases: &[Case]) -> Vec<Vec<Duration>> {
    let mut times = vec![Vec::with_capacity(RUNS); cases.len()];
    for round in 0..WARMUP + RUNS {
        for (case, t) in cases.iter().zip(times.iter_mut()) {
            let elapsed = run_once(case);
            if round >= WARMUP {
                t.push(elapsed);
            }
        }
    }
    for t in &mut times {
        t.sort();
    }
    times
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn which(program: &str) -> Option<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let exe = env!("CARGO_BIN_EXE_phoenix").to_string();
    // What the installed hook files call.
    let hook_exe = env!("CARGO_BIN_EXE_phoenix-hook").to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let config = root.join("phoenix.toml");
    std::fs::write(
        &config,
        "[fleet]\nname = \"bench\"\ntmux_socket = \"phx-bench-hooks\"\n\n[[agent]]\nname = \"bench\"\ncli = \"claude\"\ncommand = \"claude\"\n",
    )
    .unwrap();
    let agent_dir = root.join(".phoenix/agents/bench");
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(agent_dir.join("brief.md"), BRIEF).unwrap();
    std::fs::write(agent_dir.join("state.json"), state_json("bench")).unwrap();
    // The seed's layout: $HOME/<domain>/state.json and brief.md.
    let home = root.join("home");
    std::fs::create_dir_all(home.join("bench")).unwrap();
    std::fs::write(home.join("bench/brief.md"), BRIEF).unwrap();
    let seed_state = home.join("bench/state.json");
    std::fs::write(&seed_state, state_json("bench")).unwrap();
    let seed_start = root.join("seed-start.sh");
    std::fs::write(&seed_start, SEED_START).unwrap();

    let post_tool = serde_json::json!({
        "session_id": "bench-session", "transcript_path": "/home/u/.claude/projects/-r/bench-session.jsonl",
        "cwd": "/home/u/r", "permission_mode": "default", "hook_event_name": "PostToolUse",
        "tool_name": "Bash", "tool_input": {"command": "cargo test", "description": "Run tests"},
        "tool_response": {"stdout": "test result: ok", "stderr": "", "interrupted": false, "isImage": false},
        "tool_use_id": "toolu_01ABC"
    })
    .to_string()
    .into_bytes();
    let pre_tool = serde_json::json!({
        "session_id": "bench-session", "transcript_path": "/home/u/.claude/projects/-r/bench-session.jsonl",
        "cwd": "/home/u/r", "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "cargo test", "description": "Run tests"},
        "tool_use_id": "toolu_01ABC"
    })
    .to_string()
    .into_bytes();
    let session_start = serde_json::json!({
        "session_id": "bench-session", "transcript_path": "/home/u/.claude/projects/-r/bench-session.jsonl",
        "cwd": "/home/u/r", "permission_mode": "default", "hook_event_name": "SessionStart",
        "source": "startup", "model": "claude-opus-4-6"
    })
    .to_string()
    .into_bytes();
    let prompt = serde_json::json!({
        "session_id": "bench-session", "transcript_path": "/home/u/.claude/projects/-r/bench-session.jsonl",
        "cwd": "/home/u/r", "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
        "prompt": "fix the failing test in src/parse.rs"
    })
    .to_string()
    .into_bytes();
    let stop = serde_json::json!({
        "session_id": "bench-session", "transcript_path": "/home/u/.claude/projects/-r/bench-session.jsonl",
        "cwd": "/home/u/r", "permission_mode": "default", "hook_event_name": "Stop",
        "stop_hook_active": false, "last_assistant_message": "done"
    })
    .to_string()
    .into_bytes();
    let phoenix_args = |event: &str| -> Vec<String> {
        [
            "--config",
            config.to_str().unwrap(),
            "hook",
            event,
            "--agent",
            "bench",
            "--cli",
            "claude",
        ]
        .map(String::from)
        .to_vec()
    };
    // A heartbeat that records the time of the call (the state's last activity is old): every
    // run does the same write, whichever hook ran before it in the round.
    // Every session-start run finds an interrupted agent: the recovery path, the heaviest.
    let reset_state = {
        let path = agent_dir.join("state.json");
        let text = state_json("bench");
        Box::new(move || std::fs::write(&path, &text).unwrap()) as Box<dyn Fn()>
    };

    // The same agent in a fleet with a search index: phoenix-hook hands its session start to
    // `phoenix`, which looks for related decisions.
    let indexed = tempfile::tempdir().expect("temp dir");
    let indexed_config = indexed.path().join("phoenix.toml");
    std::fs::copy(&config, &indexed_config).unwrap();
    let indexed_agent = indexed.path().join(".phoenix/agents/bench");
    std::fs::create_dir_all(&indexed_agent).unwrap();
    std::fs::write(indexed_agent.join("brief.md"), BRIEF).unwrap();
    std::fs::write(indexed_agent.join("state.json"), state_json("bench")).unwrap();
    phoenix::store::Store::open(&phoenix::state::FleetDir::new(
        indexed.path().join(".phoenix"),
    ))
    .expect("index");
    let reset_indexed = {
        let path = indexed_agent.join("state.json");
        let text = state_json("bench");
        Box::new(move || std::fs::write(&path, &text).unwrap()) as Box<dyn Fn()>
    };
    let mut indexed_args = phoenix_args("session-start");
    indexed_args[1] = indexed_config.to_str().unwrap().to_string();

    // What every hook call under phoenix has: its wrapper's environment (the agent and its
    // state dir) and the agent's own part of phoenix.toml, written by apply.
    let wrapped = |config: &Path, agent_dir: &Path| -> Vec<(String, String)> {
        phoenix::spec::narrow::write_part(config, "bench", agent_dir)
            .expect("the agent's part of phoenix.toml");
        vec![
            ("PHOENIX_AGENT".into(), "bench".into()),
            ("PHOENIX_STATE_DIR".into(), agent_dir.display().to_string()),
        ]
    };
    let under_wrapper = wrapped(&config, &agent_dir);
    let indexed_under_wrapper = wrapped(&indexed_config, &indexed_agent);
    // The state as phoenix itself writes it (the first write normalises the fixture: open
    // loops marked stale by age, …), its activity an hour old: each heartbeat run then
    // records the activity alone, as a running agent's heartbeat does once a minute, the
    // write a lost copy of costs nothing (not synced: see the CHANGELOG).
    let normalised_state = {
        let path = agent_dir.join("state.json");
        let mut run = Command::new(&hook_exe)
            .args(phoenix_args("heartbeat"))
            .envs(under_wrapper.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        run.stdin.take().unwrap().write_all(&post_tool).unwrap();
        assert!(run.wait().unwrap().success());
        let mut state: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
        state["last_active"] = hour_ago.to_string().into();
        serde_json::to_string_pretty(&state).unwrap()
    };
    let stale_activity = || -> Option<Box<dyn Fn()>> {
        let path = agent_dir.join("state.json");
        let text = normalised_state.clone();
        Some(Box::new(move || std::fs::write(&path, &text).unwrap()))
    };

    let mut cases = vec![
        Case {
            name: "process start floor: /bin/true",
            program: "/bin/true".into(),
            args: vec![],
            stdin: vec![],
            env: vec![],
            reset: None,
        },
        Case {
            name: "process start floor: phoenix --version",
            program: exe.clone(),
            args: vec!["--version".into()],
            stdin: vec![],
            env: vec![],
            reset: None,
        },
        Case {
            name: "phoenix-hook heartbeat",
            program: hook_exe.clone(),
            args: phoenix_args("heartbeat"),
            stdin: post_tool.clone(),
            env: under_wrapper.clone(),
            reset: stale_activity(),
        },
        Case {
            // Right after the run above: its activity is fresh, nothing to write (most calls
            // of a busy agent).
            name: "phoenix-hook heartbeat, activity just recorded",
            program: hook_exe.clone(),
            args: phoenix_args("heartbeat"),
            stdin: post_tool.clone(),
            env: under_wrapper.clone(),
            reset: None,
        },
        Case {
            // A hook run by hand or by a CLI phoenix did not start: phoenix.toml read whole.
            name: "phoenix-hook heartbeat, outside a wrapper",
            program: hook_exe.clone(),
            args: phoenix_args("heartbeat"),
            stdin: post_tool.clone(),
            env: vec![],
            reset: None,
        },
        Case {
            // Runs before every tool call (PostToolUse's heartbeat runs after it): notes the
            // call in flight, so a crash mid-call can name it to the next session.
            name: "phoenix-hook pre-tool (notes the call in flight)",
            program: hook_exe.clone(),
            args: phoenix_args("pre-tool"),
            stdin: pre_tool.clone(),
            env: under_wrapper.clone(),
            reset: None,
        },
        Case {
            name: "phoenix hook heartbeat (the full binary)",
            program: exe.clone(),
            args: phoenix_args("heartbeat"),
            stdin: post_tool.clone(),
            env: under_wrapper.clone(),
            reset: stale_activity(),
        },
        Case {
            name: "phoenix-hook tool-error (always writes state.json)",
            program: hook_exe.clone(),
            args: phoenix_args("tool-error"),
            stdin: post_tool.clone(),
            env: under_wrapper.clone(),
            reset: None,
        },
        Case {
            // The turn boundaries, where messages are given: an empty inbox costs a stat.
            name: "phoenix-hook prompt (empty inbox)",
            program: hook_exe.clone(),
            args: phoenix_args("prompt"),
            stdin: prompt.clone(),
            env: under_wrapper.clone(),
            reset: None,
        },
        Case {
            name: "phoenix-hook stop (empty inbox)",
            program: hook_exe.clone(),
            args: phoenix_args("stop"),
            stdin: stop.clone(),
            env: under_wrapper.clone(),
            reset: None,
        },
        Case {
            name: "phoenix-hook session-start (recovery + brief)",
            program: hook_exe.clone(),
            args: phoenix_args("session-start"),
            stdin: session_start.clone(),
            env: under_wrapper.clone(),
            reset: Some(reset_state),
        },
        Case {
            name: "phoenix-hook session-start, fleet with an index",
            program: hook_exe.clone(),
            args: indexed_args,
            stdin: session_start.clone(),
            env: indexed_under_wrapper.clone(),
            reset: Some(reset_indexed),
        },
    ];
    // Another build of phoenix-hook, timed in the same interleaved rounds (a fair comparison
    // on a busy machine), e.g. one built with a different release profile.
    if let Some(other) = std::env::var_os("PHOENIX_BENCH_OTHER_HOOK") {
        for (name, event, stdin) in [
            (
                "phoenix-hook heartbeat, PHOENIX_BENCH_OTHER_HOOK",
                "heartbeat",
                &post_tool,
            ),
            (
                "phoenix-hook prompt, PHOENIX_BENCH_OTHER_HOOK",
                "prompt",
                &prompt,
            ),
            ("phoenix-hook stop, PHOENIX_BENCH_OTHER_HOOK", "stop", &stop),
        ] {
            cases.push(Case {
                name,
                program: other.to_string_lossy().into_owned(),
                args: phoenix_args(event),
                stdin: stdin.clone(),
                env: under_wrapper.clone(),
                reset: if event == "heartbeat" {
                    stale_activity()
                } else {
                    None
                },
            });
        }
    }
    let python = Path::new("/usr/bin/python3");
    if python.exists() {
        cases.push(Case {
            name: "seed heartbeat: /usr/bin/python3 one-liner",
            program: python.display().to_string(),
            args: vec![
                "-c".into(),
                SEED_HEARTBEAT.replace("STATE_FILE", seed_state.to_str().unwrap()),
            ],
            stdin: post_tool.clone(),
            env: vec![],
            reset: None,
        });
    } else {
        println!("(no /usr/bin/python3: the seed's heartbeat baseline is skipped)");
    }
    let have_jq = which("jq").is_some();
    if have_jq {
        cases.push(Case {
            name: "seed start hook: bash + jq",
            program: "bash".into(),
            args: vec![seed_start.display().to_string()],
            stdin: session_start.clone(),
            env: vec![
                ("HOME".into(), home.display().to_string()),
                ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ],
            reset: None,
        });
    } else {
        println!(
            "(no jq on PATH: the seed's start hook baseline is skipped; `apt-get install jq`)"
        );
    }

    println!(
        "{RUNS} runs each after {WARMUP} warm-up rounds, cases interleaved; wall time of spawn + payload + exit\n"
    );
    println!(
        "{:<52} {:>10} {:>10} {:>10}",
        "hook", "median", "p90", "min"
    );
    let mut medians = std::collections::HashMap::new();
    for (case, t) in cases.iter().zip(measure(&cases)) {
        let median = t[t.len() / 2];
        medians.insert(case.name, median);
        println!(
            "{:<52} {:>10} {:>10} {:>10}",
            case.name,
            ms(median),
            ms(t[t.len() * 9 / 10]),
            ms(t[0])
        );
    }
    println!();
    let ratio = |slow: &str, fast: &str| {
        let (Some(s), Some(f)) = (medians.get(slow), medians.get(fast)) else {
            return;
        };
        let x = s.as_secs_f64() / f.as_secs_f64();
        println!(
            "{fast}: {x:.1}× faster than the {slow} (goal ≥ 20×: {})",
            if x >= 20.0 { "met" } else { "NOT met" }
        );
    };
    // Issue 34's goals: what a hook costs beyond starting a process at all.
    let floor = |case: &str, goal: f64| {
        let (Some(c), Some(f)) = (
            medians.get(case),
            medians.get("process start floor: /bin/true"),
        ) else {
            return;
        };
        let x = c.as_secs_f64() / f.as_secs_f64();
        println!(
            "{case}: {x:.2}× /bin/true (goal ≤ {goal}×: {})",
            if x <= goal { "met" } else { "NOT met" }
        );
    };
    floor("phoenix-hook heartbeat", 1.5);
    floor("phoenix-hook session-start (recovery + brief)", 3.0);
    floor("phoenix-hook session-start, fleet with an index", 3.0);
    ratio(
        "seed heartbeat: /usr/bin/python3 one-liner",
        "phoenix-hook heartbeat",
    );
    ratio(
        "seed start hook: bash + jq",
        "phoenix-hook session-start (recovery + brief)",
    );
}
