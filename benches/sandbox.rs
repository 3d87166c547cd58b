//! What the sandbox costs. Run with `cargo bench --bench sandbox`.
//!
//! 1. Start cost: spawn + wait of `true`, plain (the floor) and inside the real bubblewrap
//!    argv phoenix builds for a sandboxed agent (`sandbox::layout` + `wrap_argv` on a spec
//!    loaded from phoenix.toml, network `none`). Mean and median of `STARTS` each, interleaved
//!    so both see the same load; the difference is the sandbox's (goal ≤ 20 ms).
//! 2. The hook fast path: one shell runs `phoenix-hook heartbeat` (what installed hook files
//!    call) `HOOKS` times with a PostToolUse payload on stdin and times itself, plain and inside
//!    the same sandbox (one bubblewrap start for the whole loop: only the per-hook cost is
//!    compared). Per-call means and the ratio (goal within 10 %).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STARTS: usize = 50;
const HOOKS: usize = 200;
const ROUNDS: usize = 3;

fn main() {
    if let Some(why) = phoenix::sandbox::unusable() {
        println!("sandbox bench skipped: {why}");
        return;
    }
    let hook_exe = env!("CARGO_BIN_EXE_phoenix-hook");
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = root.join("phoenix.toml");
    std::fs::write(
        &config,
        "[fleet]\nname = \"bench\"\ntmux_socket = \"phx-bench-sandbox\"\n\n\
         [sandbox.box]\nnetwork = \"none\"\n\n\
         [[agent]]\nname = \"bench\"\ncli = \"claude\"\ncommand = \"claude\"\nworkdir = \"work\"\nsandbox = \"box\"\n",
    )
    .unwrap();
    let spec = phoenix::spec::load(&config).expect("phoenix.toml loads");
    let agent = spec.agent("bench").expect("the agent").clone();
    let state_dir = root.join(".phoenix/agents/bench");
    std::fs::create_dir_all(&state_dir).unwrap();
    // What a start does first: the agent's part of phoenix.toml (what its hooks read inside).
    phoenix::spec::narrow::write_part(&config, "bench", &state_dir);
    let layout = phoenix::sandbox::layout(
        &spec,
        &agent,
        agent.sandbox.as_ref().expect("its sandbox"),
        &phoenix::sandbox::Context::of(&spec),
    );
    for d in &layout.make {
        std::fs::create_dir_all(d).unwrap();
    }
    let exe = Path::new(env!("CARGO_BIN_EXE_phoenix"));
    let sandboxed = |inner: &[String]| -> Command {
        let argv = phoenix::sandbox::wrap_argv(&layout, inner, None, exe);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).current_dir(&work);
        cmd
    };

    start_cost(&sandboxed);
    hook_cost(hook_exe, &config, &state_dir, &work, &sandboxed);
}

fn start_cost(sandboxed: &dyn Fn(&[String]) -> Command) {
    let truth = which("true");
    let mut plain = Vec::new();
    let mut inside = Vec::new();
    for _ in 0..STARTS {
        plain.push(time_run(Command::new(&truth)));
        inside.push(time_run(sandboxed(std::slice::from_ref(&truth))));
    }
    println!("start cost: spawn + wait of `{truth}`, {STARTS} runs each (interleaved):");
    let (pm, pd) = mean_median(&mut plain);
    let (im, id) = mean_median(&mut inside);
    println!("  plain (floor)        mean {pm:.2} ms  median {pd:.2} ms");
    println!("  inside the sandbox   mean {im:.2} ms  median {id:.2} ms");
    println!(
        "  the sandbox's cost   mean {:.2} ms  median {:.2} ms  (goal ≤ 20 ms)",
        im - pm,
        id - pd
    );
}

fn hook_cost(
    hook_exe: &str,
    config: &Path,
    state_dir: &Path,
    work: &Path,
    sandboxed: &dyn Fn(&[String]) -> Command,
) {
    let payload = work.join("post-tool.json");
    std::fs::write(
        &payload,
        serde_json::json!({
            "session_id": "bench-session", "transcript_path": "/tmp/bench-session.jsonl",
            "cwd": work, "permission_mode": "default", "hook_event_name": "PostToolUse",
            "tool_name": "Bash", "tool_input": {"command": "cargo test", "description": "Run tests"},
            "tool_response": {"stdout": "test result: ok", "stderr": "", "interrupted": false, "isImage": false},
            "tool_use_id": "toolu_01ABC"
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        state_dir.join("state.json"),
        r#"{"agent":"bench","status":"working","session_id":"bench-session"}"#,
    )
    .unwrap();
    // The shell times its own loop (bash's EPOCHREALTIME, µs) and prints the total in µs.
    let script = format!(
        "h='{hook_exe}'; c='{}'; p='{}'; s=$EPOCHREALTIME; \
         for i in $(seq {HOOKS}); do \"$h\" --config \"$c\" hook heartbeat --agent bench --cli claude < \"$p\" >/dev/null 2>&1 || exit 3; done; \
         e=$EPOCHREALTIME; echo $(( (${{e/./}} - ${{s/./}}) ))",
        config.display(),
        payload.display()
    );
    let bash = which("bash");
    let inner = [bash.clone(), "-c".into(), script.clone()];
    let mut plain = Vec::new();
    let mut inside = Vec::new();
    for _ in 0..ROUNDS {
        let mut cmd = Command::new(&bash);
        cmd.args(["-c", &script]).current_dir(work);
        plain.push(loop_micros(cmd) / HOOKS as f64 / 1000.0);
        inside.push(loop_micros(sandboxed(&inner)) / HOOKS as f64 / 1000.0);
    }
    let state = std::fs::read_to_string(state_dir.join("state.json")).unwrap_or_default();
    assert!(state.contains("last_active"), "the heartbeats ran: {state}");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (p, i) = (mean(&plain), mean(&inside));
    println!(
        "hook fast path: `phoenix-hook heartbeat` ×{HOOKS} in one shell, {ROUNDS} rounds each (interleaved):"
    );
    println!("  plain (floor)        {p:.3} ms per call  (rounds {plain:.3?})");
    println!("  inside the sandbox   {i:.3} ms per call  (rounds {inside:.3?})");
    println!(
        "  ratio inside/plain   {:.3}  ({:+.1} %, goal within 10 %)",
        i / p,
        (i / p - 1.0) * 100.0
    );
}

/// One timed run: spawn, wait; it must succeed.
fn time_run(mut cmd: Command) -> Duration {
    let started = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    let elapsed = started.elapsed();
    assert!(status.success(), "{cmd:?} failed: {status}");
    elapsed
}

/// The µs a self-timing shell loop printed.
fn loop_micros(mut cmd: Command) -> f64 {
    let out = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(
        out.status.success(),
        "the hook loop failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the loop's µs")
}

fn mean_median(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    (mean, ms(times[times.len() / 2]))
}

/// A program's absolute path (bubblewrap does not search PATH the way a shell does).
fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no `{program}` on PATH"))
        .to_string_lossy()
        .into_owned()
}
