//! What workspaces cost: `phoenix plan` and `phoenix status --json` for a fleet of agents in
//! git worktrees of one repository, against the same fleet with plain workdirs; wall time per
//! run (median, p90) and how many git processes one run starts. Run with
//! `cargo bench --bench workspaces`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AGENTS: usize = 20;
const FILES: usize = 500;
const RUNS: usize = 30;

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A repository of `FILES` files in a few directories, one commit on `main`.
fn repository(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.email", "bench@example.com"]);
    git(dir, &["config", "user.name", "Bench"]);
    for i in 0..FILES {
        let sub = dir.join(format!("src/m{}", i % 10));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}.rs")), format!("// file {i}\n")).unwrap();
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "start"]);
}

fn fleet(dir: &Path, socket: &str, workspaces: bool) -> std::path::PathBuf {
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    if workspaces {
        toml.push_str("[defaults]\nworkspace = { repo = \"repo\", base = \"main\" }\n\n");
    }
    for i in 0..AGENTS {
        toml.push_str(&format!(
            "[[agent]]\nname = \"agent-{i:02}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\n"
        ));
    }
    let config = dir.join("phoenix.toml");
    std::fs::write(&config, toml).unwrap();
    config
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

fn which(program: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Median and p90 of `RUNS` runs of `phoenix <args>`, and git processes per run.
fn measure(exe: &str, config: &Path, args: &[&str], path: &str, counter: &Path) -> String {
    let _ = std::fs::remove_file(counter);
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let out = Command::new(exe)
                .arg("--config")
                .arg(config)
                .args(args)
                .env("PATH", path)
                .output()
                .unwrap();
            assert!(out.status.code().is_some_and(|c| c == 0), "{args:?}");
            t.elapsed()
        })
        .collect();
    let calls = std::fs::read_to_string(counter)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    times.sort();
    format!(
        "median {:.1?}, p90 {:.1?}, {:.1} git processes per run",
        times[RUNS / 2],
        times[RUNS * 9 / 10],
        calls as f64 / RUNS as f64
    )
}

fn main() {
    let exe = env!("CARGO_BIN_EXE_phoenix");
    let dir = tempfile::tempdir().expect("temp dir");
    // A git shim on PATH that counts calls, then runs the real git.
    let shim_dir = dir.path().join("shim");
    std::fs::create_dir(&shim_dir).unwrap();
    let counter = dir.path().join("git-calls");
    let shim = shim_dir.join("git");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\necho x >> '{}'\nexec '{}' \"$@\"\n",
            counter.display(),
            which("git")
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

    for workspaces in [false, true] {
        let root = dir.path().join(if workspaces { "ws" } else { "plain" });
        std::fs::create_dir_all(&root).unwrap();
        repository(&root.join("repo"));
        let socket = format!("phx-bench-ws-{}-{workspaces}", std::process::id());
        let _server = KillServer(socket.clone());
        let config = fleet(&root, &socket, workspaces);
        let started = Instant::now();
        let ok = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(["apply", "--yes"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "apply failed");
        let label = if workspaces {
            "in worktrees"
        } else {
            "plain workdirs"
        };
        println!("{AGENTS} agents {label}: apply {:.2?}", started.elapsed());
        std::thread::sleep(Duration::from_secs(1));
        println!(
            "  plan:          {}",
            measure(exe, &config, &["plan"], &path, &counter)
        );
        println!(
            "  status --json: {}",
            measure(exe, &config, &["status", "--json"], &path, &counter)
        );
    }
}
