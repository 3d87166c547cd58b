//! `phoenix plan` and `phoenix status --json` for a 200-agent spec against a 200-pane world
//! (`PHOENIX_BENCH_agents=1000` for more): wall time per run (median, p90, max) beside the floor,
//! `tmux list-panes -a` on the same server in the same rounds, and how many tmux calls one plan
//! makes. Then `plan` of 10,000, 20,000 and 50,000 agents with no tmux server, to show it grows
//! linearly (`PHOENIX_BENCH_BIG_PLAN=0` skips it). Run with `cargo bench --bench plan`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 50;

fn main() {
    let agents: usize = std::env::var("PHOENIX_BENCH_agents")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let exe = env!("CARGO_BIN_EXE_phoenix");
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-{}", std::process::id());
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    for i in 0..agents {
        toml.push_str(&format!(
            "[[agent]]\nname = \"agent-{i:03}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\n"
        ));
    }
    let config = dir.path().join("phoenix.toml");
    std::fs::write(&config, toml).unwrap();
    let _server = KillServer(socket.clone());

    let started = Instant::now();
    let apply = Command::new(exe)
        .arg("--config")
        .arg(&config)
        .args(["apply", "--yes"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(apply.success(), "apply failed");
    println!("apply of {agents} agents: {:.2?}", started.elapsed());
    std::thread::sleep(Duration::from_secs(1));

    // A tmux shim on PATH that counts calls, then runs the real tmux.
    let shim_dir = dir.path().join("shim");
    std::fs::create_dir(&shim_dir).unwrap();
    let counter = dir.path().join("tmux-calls");
    let real = which("tmux");
    let shim = shim_dir.join("tmux");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\necho x >> '{}'\nexec '{}' \"$@\"\n",
            counter.display(),
            real
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        shim_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let plan = |path: &str| {
        let t = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .arg("plan")
            .env("PATH", path)
            .output()
            .unwrap();
        let elapsed = t.elapsed();
        assert_eq!(
            out.status.code(),
            Some(0),
            "plan should have nothing to do:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        elapsed
    };

    plan(&path);
    let calls = std::fs::read_to_string(&counter).unwrap().lines().count();
    println!("tmux calls per plan: {calls}");

    let real_path = std::env::var("PATH").unwrap_or_default();
    let status = || {
        let t = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(["status", "--json"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        let elapsed = t.elapsed();
        assert!(out.code().is_some(), "status --json was killed");
        elapsed
    };
    let list_panes = || {
        let t = Instant::now();
        let out = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "list-panes",
                "-a",
                "-F",
                "#{pane_id} #{pane_pid}",
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(out.success(), "tmux list-panes failed");
        t.elapsed()
    };
    // Interleaved rounds: the floor sees the same load as phoenix.
    let (mut plans, mut statuses, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        plans.push(plan(&real_path));
        statuses.push(status());
        floors.push(list_panes());
    }
    let floor = median(&mut floors);
    for (what, times) in [("plan", &mut plans), ("status --json", &mut statuses)] {
        let m = median(times);
        println!(
            "{what}, {agents} agents / {agents} panes, {RUNS} runs: median {m:.1?}  p90 {:.1?}  max {:.1?}  | floor `tmux list-panes -a` median {floor:.1?}  ratio {:.2}x (goal ≤ 1.5x)",
            pct(times, 0.9),
            times[times.len() - 1],
            m.as_secs_f64() / floor.as_secs_f64()
        );
    }
    drop(_server);
    if std::env::var("PHOENIX_BENCH_BIG_PLAN").as_deref() != Ok("0") {
        big_plans(exe, dir.path());
    }
}

/// `plan` of a big file with no tmux server: linear growth, and 50,000 agents within 5 s.
fn big_plans(exe: &str, dir: &Path) {
    let mut previous: Option<(usize, Duration)> = None;
    for n in [10_000, 20_000, 50_000] {
        let socket = format!("phx-bench-big-{}-{n}", std::process::id());
        let mut toml = format!(
            "[fleet]\nname = \"big\"\ntmux_socket = \"{socket}\"\nstate_dir = \"{}\"\n\n",
            dir.join(format!("state-{n}")).display()
        );
        for i in 0..n {
            toml.push_str(&format!(
                "[[agent]]\nname = \"agent-{i:05}\"\ncommand = \"sleep 1000\"\n\n"
            ));
        }
        let config = dir.join(format!("big-{n}.toml"));
        std::fs::write(&config, toml).unwrap();
        let t = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .arg("plan")
            .output()
            .unwrap();
        let elapsed = t.elapsed();
        // 2: the plan has changes (every agent to start).
        assert_eq!(
            out.status.code(),
            Some(2),
            "plan of {n} agents failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let growth = previous.map_or(String::new(), |(m, d)| {
            format!(
                "  ({:.2}x the time of {m} for {:.1}x the agents)",
                elapsed.as_secs_f64() / d.as_secs_f64(),
                n as f64 / m as f64
            )
        });
        println!(
            "plan of {n} agents, no tmux server: {elapsed:.2?}, {:.1} µs per agent{growth}{}",
            elapsed.as_secs_f64() * 1e6 / n as f64,
            if n == 50_000 { "  (goal ≤ 5 s)" } else { "" }
        );
        previous = Some((n, elapsed));
    }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    pct(times, 0.5)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn which(program: &str) -> String {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(program))
        .find(|p| Path::new(p).is_file())
        .map(|p| p.display().to_string())
        .expect("tmux on PATH")
}

struct KillServer(String);

impl Drop for KillServer {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}
