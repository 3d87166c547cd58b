//! `phoenix plan` for a 200-agent spec against a 200-pane world: wall time per run (median,
//! p90, max) and how many tmux calls one plan makes. Run with `cargo bench --bench plan`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AGENTS: usize = 200;
const RUNS: usize = 50;

fn main() {
    let exe = env!("CARGO_BIN_EXE_phoenix");
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-{}", std::process::id());
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    for i in 0..AGENTS {
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
    println!("apply of {AGENTS} agents: {:.2?}", started.elapsed());
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
    let mut times: Vec<Duration> = (0..RUNS).map(|_| plan(&real_path)).collect();
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "plan, {AGENTS} agents / {AGENTS} panes, {RUNS} runs: median {:.1?}  p90 {:.1?}  max {:.1?}  (goal: median ≤ 200ms)",
        pct(0.5),
        pct(0.9),
        times[times.len() - 1]
    );
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
