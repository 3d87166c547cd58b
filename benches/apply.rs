//! `phoenix apply` from nothing, side by side with its floor: the same windows (same command,
//! same session) created by tmux alone in as few calls as a command line holds. Then `plan`
//! and `status` on the converged world. 200 agents; 1,000 with `PHOENIX_BENCH_1000=1`.
//! Run with `cargo bench --bench apply`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 3;
const READS: usize = 7;

fn main() {
    let mut sizes = vec![200];
    if std::env::var_os("PHOENIX_BENCH_1000").is_some_and(|v| v == "1") {
        sizes.push(1_000);
    } else {
        println!("(1,000 agents: set PHOENIX_BENCH_1000=1)");
    }
    for n in sizes {
        let floor: Vec<Duration> = (0..RUNS).map(|_| floor(n)).collect();
        let mut applies = Vec::new();
        let mut plans = Vec::new();
        let mut statuses = Vec::new();
        for _ in 0..RUNS {
            let (apply, plan, status) = apply(n);
            applies.push(apply);
            plans.extend(plan);
            statuses.extend(status);
        }
        println!(
            "{n} agents: apply from nothing median {:.2?} (goal ≤ {}), tmux floor median {:.2?}",
            median(applies),
            if n == 200 { "1.5 s" } else { "8 s" },
            median(floor)
        );
        println!(
            "{n} agents converged: plan median {:.1?}, status median {:.1?} (goal ≤ 100 ms each)",
            median(plans),
            median(statuses)
        );
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// `n` windows running `sleep` in one session, by tmux alone, chunked as apply chunks them.
fn floor(n: usize) -> Duration {
    let socket = fresh_socket("floor");
    let _server = KillServer(socket.clone());
    let started = Instant::now();
    let mut args: Vec<String> = [
        "new-session",
        "-d",
        "-s",
        "bench",
        "-n",
        "w0",
        "sleep",
        "86400",
    ]
    .map(String::from)
    .to_vec();
    for i in 1..n {
        if args.iter().map(|a| a.len() + 2).sum::<usize>() > 12 * 1024 {
            tmux(&socket, &args);
            args.clear();
        } else {
            args.push(";".into());
        }
        args.extend(
            [
                "new-window",
                "-t",
                "=bench:",
                "-n",
                &format!("w{i}"),
                "sleep",
                "86400",
            ]
            .map(String::from),
        );
    }
    tmux(&socket, &args);
    started.elapsed()
}

fn tmux(socket: &str, args: &[String]) {
    let ok = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .env_remove("TMUX")
        .status()
        .unwrap()
        .success();
    assert!(ok, "tmux failed");
}

/// One apply of `n` agents from nothing, then `READS` plans and statuses of the result.
fn apply(n: usize) -> (Duration, Vec<Duration>, Vec<Duration>) {
    let exe = env!("CARGO_BIN_EXE_phoenix");
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = fresh_socket("apply");
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    for i in 0..n {
        toml.push_str(&format!(
            "[[agent]]\nname = \"a{i:04}\"\ncli = \"custom\"\ncommand = \"sh -c 'echo ready; exec sleep 86400'\"\n\n"
        ));
    }
    let config = dir.path().join("phoenix.toml");
    std::fs::write(&config, toml).unwrap();
    // Dropped in reverse: the server is killed first, then its wrappers are waited for.
    let _wrappers = WaitForWrappers(config.to_string_lossy().into_owned());
    let _server = KillServer(socket.clone());
    let run = |args: &[&str], want: i32| {
        let t = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let elapsed = t.elapsed();
        assert_eq!(
            out.status.code(),
            Some(want),
            "{args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (elapsed, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (apply, out) = run(&["apply", "--yes"], 0);
    let confirmed = out.matches("(running, pid ").count();
    assert_eq!(confirmed, n, "every start confirmed");
    let plans = (0..READS).map(|_| run(&["plan"], 0).0).collect();
    let statuses = (0..READS).map(|_| run(&["status"], 0).0).collect();
    (apply, plans, statuses)
}

/// A socket name no earlier run used: a server told to `kill-server` still answers (and then
/// drops) clients on its socket for a moment, so a name is never reused.
fn fresh_socket(what: &str) -> String {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("phx-bench-{what}-{}-{run}", std::process::id())
}

/// After a run, its wrappers (each saving a handoff as its pane goes away) must be gone
/// before the next run starts: otherwise that run measures their ending too.
struct WaitForWrappers(String);

impl Drop for WaitForWrappers {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline
            && Command::new("pgrep")
                .args(["-f", &self.0])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

struct KillServer(String);

impl Drop for KillServer {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .env_remove("TMUX")
            .stderr(Stdio::null())
            .status();
    }
}
