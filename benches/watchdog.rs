//! The watchdog: one `phoenix watchdog --once` pass over 200 live agents (median, p90, max),
//! and, with `phoenix run` supervising one agent that goes silent, the time from crossing the
//! silence threshold to the `session_unhealthy` event. Run with `cargo bench --bench watchdog`
//! (about three minutes: the daemon's schedule is a one-minute cron).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AGENTS: usize = 200;
const RUNS: usize = 20;

fn main() {
    let exe = env!("CARGO_BIN_EXE_phoenix");
    pass_over_a_fleet(exe);
    // The latency part waits for a one-minute cron twice: `PASS_ONLY=1` skips it.
    if std::env::var_os("PASS_ONLY").is_none() {
        silence_detection_latency(exe);
    }
}

fn pass_over_a_fleet(exe: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-wd-{}", std::process::id());
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    for i in 0..AGENTS {
        toml.push_str(&format!(
            "[[agent]]\nname = \"agent-{i:03}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\n"
        ));
    }
    let config = dir.path().join("phoenix.toml");
    std::fs::write(&config, toml).unwrap();
    let _server = KillServer(socket);
    let ok = Command::new(exe)
        .arg("--config")
        .arg(&config)
        .args(["apply", "--yes"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "apply failed");
    std::thread::sleep(Duration::from_secs(1));
    let pass = || {
        let t = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(["watchdog", "--once"])
            .output()
            .unwrap();
        let elapsed = t.elapsed();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        elapsed
    };
    // The first pass has no baseline; from the second on, quiet agents' screens are read.
    pass();
    pass();
    let mut times: Vec<Duration> = (0..RUNS).map(|_| pass()).collect();
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "watchdog pass, {AGENTS} quiet agents (every screen read), {RUNS} runs: median {:.1?}  p90 {:.1?}  max {:.1?}",
        pct(0.5),
        pct(0.9),
        times[times.len() - 1]
    );
}

fn silence_detection_latency(exe: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-wd2-{}", std::process::id());
    let silence = 5;
    let toml = format!(
        "[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n\
         [thresholds]\nsilence = \"{silence}s\"\n\n[schedules]\nwatchdog = \"* * * * *\"\n\n\
         [[agent]]\nname = \"quiet\"\ncommand = \"phoenix demo-agent --interval 100ms --silent-after 2s\"\n"
    );
    let config = dir.path().join("phoenix.toml");
    std::fs::write(&config, toml).unwrap();
    let _server = KillServer(socket);
    let daemon = Daemon(
        Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(["run", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let events = dir.path().join(".phoenix/critical_events.jsonl");
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let event = std::fs::read_to_string(&events).ok().and_then(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|e| e["event"] == "session_unhealthy")
        });
        if let Some(e) = event {
            // From the event itself: when the last tool call was, and when it was recorded.
            let ts = |v: &serde_json::Value| {
                v.as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .expect("a timestamp")
            };
            let last_call = ts(&e["details"]["last_tool_call"]);
            let crossed = last_call.as_millisecond() + silence as i64 * 1000;
            let latency = ts(&e["ts"]).as_millisecond() - crossed;
            println!(
                "silence detection with `phoenix run` (schedule \"* * * * *\", two passes to confirm): {:.1}s after the threshold",
                latency as f64 / 1000.0
            );
            drop(daemon);
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("silence detection: no event within 4 minutes");
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
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
