//! Supervision numbers. Run with `cargo bench --bench supervise`.
//!
//! 1. Restart latency: `kill -9` of an agent's process → its replacement running in the same
//!    pane (exec'd, under the same wrapper), and → the replacement's session-start hook (it
//!    shows life). Median and max over `KILLS` kills. The cooldown is the shortest allowed
//!    (100 ms, the floor): the time the restart costs beyond it — the wait its `agent_exit`
//!    records (`delay_ms`) taken off — is what a cooldown of 0 would show (goal ≤ 10 ms).
//!    Beside it, the floor measured in the same run: `while :; do CMD; done` in a tmux pane.
//! 2. Idle wrappers: `IDLE_WRAPPERS` agents that print a line and sleep; over 20 s, each
//!    wrapper's wakeups (context switches of all its threads; goal ≤ 2), its CPU, and its
//!    memory (PSS and RSS; goal ≤ 300 kB PSS of phoenix's own per agent).
//! 3. Daemon idle cost: `phoenix run` with 10 agents for 60 s: CPU % and RSS.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KILLS: usize = 25;
const IDLE_AGENTS: usize = 10;
const IDLE_SECS: u64 = 60;
const IDLE_WRAPPERS: usize = 50;
const QUIET_SECS: u64 = 20;

fn main() {
    let exe = env!("CARGO_BIN_EXE_phoenix");
    restart_latency(exe);
    restart_floor(exe);
    idle_wrappers(exe);
    daemon_idle(exe);
}

fn restart_latency(exe: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-restart-{}", std::process::id());
    let _server = KillServer(socket.clone());
    let config = dir.path().join("phoenix.toml");
    std::fs::write(
        &config,
        format!(
            "[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n\
             [defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nmax_crashes = 1000\n\n\
             [[agent]]\nname = \"a\"\ncli = \"custom\"\n\
             command = \"phoenix demo-agent --interval 1s\"\n\
             resume_command = \"phoenix demo-agent --interval 1s --resume {{session_id}}\"\n"
        ),
    )
    .unwrap();
    phoenix(exe, &config, &["apply", "--yes"]);
    let wrapper: u32 = tmux(&socket, &["list-panes", "-a", "-F", "#{pane_pid}"])
        .trim()
        .parse()
        .expect("pane pid");
    let ops = dir.path().join(".phoenix/agents/a/ops.jsonl");
    let mut agent = wait_for_agent(wrapper, None, Duration::from_secs(10)).expect("agent up");
    wait_for(Duration::from_secs(10), || {
        count(&ops, "session_start") >= 1
    });

    let mut to_running = Vec::new();
    let mut beyond_cooldown = Vec::new();
    let mut to_life = Vec::new();
    for _ in 0..KILLS {
        // Let the run settle so it counts as a long one and resumes.
        std::thread::sleep(Duration::from_millis(300));
        let hooks_before = count(&ops, "session_start");
        let t0 = Instant::now();
        kill9(agent);
        let next = wait_for_agent(wrapper, Some(agent), Duration::from_secs(10))
            .expect("replacement process");
        let running = t0.elapsed();
        to_running.push(running);
        beyond_cooldown.push(running.saturating_sub(last_delay(&ops)));
        wait_for(Duration::from_secs(10), || {
            count(&ops, "session_start") > hooks_before
        });
        to_life.push(t0.elapsed());
        agent = next;
    }
    let resumed = std::fs::read_to_string(&ops)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"agent_start\"") && l.contains("\"mode\":\"resume\""))
        .count();
    println!(
        "restart latency over {KILLS} kills of the agent (cooldown 100 ms, the floor; same pane):"
    );
    report("  kill -9 → replacement running", &mut to_running);
    report(
        "  kill -9 → replacement running, the cooldown taken off",
        &mut beyond_cooldown,
    );
    report("  kill -9 → replacement shows life", &mut to_life);
    println!("  resumed runs: {resumed} of {KILLS}");
}

/// The floor: a shell loop restarting the same agent in a tmux pane, killed the same way.
fn restart_floor(exe: &str) {
    let socket = format!("phx-bench-floor-{}", std::process::id());
    let _server = KillServer(socket.clone());
    let script = format!("while :; do {exe} demo-agent --interval 1s; done");
    tmux(
        &socket,
        &["new-session", "-d", "-s", "floor", "sh", "-c", &script],
    );
    let shell: u32 = tmux(&socket, &["list-panes", "-a", "-F", "#{pane_pid}"])
        .trim()
        .parse()
        .expect("pane pid");
    let mut agent = wait_for_agent(shell, None, Duration::from_secs(10)).expect("agent up");
    let mut samples = Vec::new();
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        kill9(agent);
        agent = wait_for_agent(shell, Some(agent), Duration::from_secs(10)).expect("restarted");
        samples.push(t0.elapsed());
    }
    report(
        "  floor, `while :; do CMD; done` in a tmux pane: kill -9 → replacement running",
        &mut samples,
    );
}

fn idle_wrappers(exe: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-quiet-{}", std::process::id());
    let _server = KillServer(socket.clone());
    let config = dir.path().join("phoenix.toml");
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    for i in 0..IDLE_WRAPPERS {
        toml.push_str(&format!(
            "[[agent]]\nname = \"q-{i}\"\ncli = \"custom\"\n\
             command = \"sh -c 'echo ready; exec sleep infinity'\"\n\n"
        ));
    }
    std::fs::write(&config, toml).unwrap();
    phoenix(exe, &config, &["apply", "--yes"]);
    let agents = dir.path().join(".phoenix/agents");
    wait_for(Duration::from_secs(60), || {
        (0..IDLE_WRAPPERS)
            .all(|i| count(&agents.join(format!("q-{i}/ops.jsonl")), "agent_alive") > 0)
    });
    std::thread::sleep(Duration::from_secs(2));
    let wrappers: Vec<u32> = tmux(&socket, &["list-panes", "-a", "-F", "#{pane_pid}"])
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let sleepers: Vec<u32> = wrappers.iter().flat_map(|w| children(*w)).collect();
    let switches = |pids: &[u32]| -> Vec<((u32, u32), u64)> {
        pids.iter().flat_map(|p| context_switches(*p)).collect()
    };
    // Per thread: one that ended meanwhile counts no more, one started counts from nothing.
    let since = |before: &[((u32, u32), u64)], now: &[((u32, u32), u64)]| -> u64 {
        now.iter()
            .map(|(t, n)| n - before.iter().find(|(b, _)| b == t).map_or(0, |(_, m)| *m))
            .sum()
    };
    let ticks = |pids: &[u32]| -> u64 { pids.iter().map(|p| cpu_ticks(*p)).sum() };
    let (w0, s0, c0) = (switches(&wrappers), switches(&sleepers), ticks(&wrappers));
    let threads = w0.len();
    std::thread::sleep(Duration::from_secs(QUIET_SECS));
    let (w1, s1, c1) = (switches(&wrappers), switches(&sleepers), ticks(&wrappers));
    let n = wrappers.len() as f64;
    let pss: u64 = wrappers.iter().map(|p| rollup_kb(*p, "Pss:")).sum();
    let rss: u64 = wrappers.iter().map(|p| rollup_kb(*p, "Rss:")).sum();
    let cpu_pct = (c1 - c0) as f64 / clock_ticks() as f64 / QUIET_SECS as f64 * 100.0;
    println!(
        "{} idle wrappers over {QUIET_SECS} s ({:.1} threads each):",
        wrappers.len(),
        threads as f64 / n
    );
    println!(
        "  wakeups per wrapper: {:.2} (floor, the agent beside it: {:.2}; goal ≤ 2)",
        since(&w0, &w1) as f64 / n,
        since(&s0, &s1) as f64 / sleepers.len().max(1) as f64
    );
    println!(
        "  CPU of all wrappers: {cpu_pct:.3}% of a core ({} ticks)",
        c1 - c0
    );
    println!(
        "  memory per wrapper: PSS {:.0} kB (goal ≤ 300 kB), RSS {:.0} kB",
        pss as f64 / n,
        rss as f64 / n
    );
    phoenix(exe, &config, &["down"]);
}

/// Voluntary and involuntary context switches of each of `pid`'s threads so far.
fn context_switches(pid: u32) -> Vec<((u32, u32), u64)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| {
            let tid: u32 = t.file_name().to_str()?.parse().ok()?;
            let n = std::fs::read_to_string(t.path().join("status"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
            Some(((pid, tid), n))
        })
        .collect()
}

fn rollup_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn daemon_idle(exe: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = format!("phx-bench-idle-{}", std::process::id());
    let _server = KillServer(socket.clone());
    let config = dir.path().join("phoenix.toml");
    let mut toml = format!("[fleet]\nname = \"bench\"\ntmux_socket = \"{socket}\"\n\n");
    for i in 0..IDLE_AGENTS {
        toml.push_str(&format!(
            "[[agent]]\nname = \"agent-{i}\"\ncommand = \"phoenix demo-agent --interval 2s\"\n\n"
        ));
    }
    std::fs::write(&config, toml).unwrap();
    let mut daemon = Command::new(exe)
        .arg("--config")
        .arg(&config)
        .args(["run", "-q"])
        .stdout(Stdio::null())
        .spawn()
        .expect("phoenix run");
    let pid = daemon.id();
    // Wait until the daemon has started all agents, then measure a quiet minute.
    wait_for(Duration::from_secs(30), || {
        tmux(&socket, &["list-panes", "-a", "-F", "#{pane_pid}"])
            .lines()
            .count()
            == IDLE_AGENTS
    });
    std::thread::sleep(Duration::from_secs(3));
    let (cpu0, t0) = (cpu_ticks(pid), Instant::now());
    let mut rss_max = 0;
    while t0.elapsed() < Duration::from_secs(IDLE_SECS) {
        std::thread::sleep(Duration::from_secs(1));
        rss_max = rss_max.max(status_kb(pid, "VmRSS:"));
    }
    let cpu1 = cpu_ticks(pid);
    let wall = t0.elapsed().as_secs_f64();
    let ticks = clock_ticks() as f64;
    let cpu_pct = (cpu1 - cpu0) as f64 / ticks / wall * 100.0;
    println!(
        "daemon idle with {IDLE_AGENTS} agents over {IDLE_SECS} s: CPU {cpu_pct:.3}% ({} ticks), RSS max {:.1} MB (peak {:.1} MB)",
        cpu1 - cpu0,
        rss_max as f64 / 1024.0,
        status_kb(pid, "VmHWM:") as f64 / 1024.0
    );
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = daemon.wait();
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let max = samples[samples.len() - 1];
    let min = samples[0];
    println!("{label}: median {median:.2?}, max {max:.2?}, min {min:.2?}");
}

/// The wrapper's child once it has exec'd the agent (not the fork before exec).
fn wait_for_agent(wrapper: u32, not: Option<u32>, timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        for pid in children(wrapper) {
            if Some(pid) == not {
                continue;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("demo-agent") {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// The cooldown the last `agent_exit` decided (`delay_ms`).
fn last_delay(ops: &Path) -> Duration {
    let text = std::fs::read_to_string(ops).unwrap_or_default();
    let ms = text
        .lines()
        .rev()
        .filter(|l| l.contains("\"event\":\"agent_exit\""))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["delay_ms"].as_u64())
        .unwrap_or(0);
    Duration::from_millis(ms)
}

fn count(path: &Path, event: &str) -> usize {
    let needle = format!("\"event\":\"{event}\"");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15; rest[0] is field 3.
    rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap()
}

fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn clock_ticks() -> i64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(100)
}

fn phoenix(exe: &str, config: &Path, args: &[&str]) {
    let status = Command::new(exe)
        .arg("--config")
        .arg(config)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "phoenix {args:?} failed");
}

fn tmux(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .env_remove("TMUX")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kill9(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
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
