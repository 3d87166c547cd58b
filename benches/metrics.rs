//! `GET /metrics` of `phoenix serve` with 200 live agents: latency (p50, p99, max over
//! sequential scrapes; each observes tmux, reads every agent's state files and what its logs
//! gained since the scrape before), and the first scrape of a fresh server, which counts every
//! agent's whole ops.jsonl. The issue asks for a scrape within 20 ms. Run with
//! `cargo bench --bench metrics`.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::Fleet;
use support::serve::Server;

const AGENTS: usize = 200;
const SCRAPES: usize = 300;
/// Lines of history given to every agent's ops.jsonl before the first scrape.
const HISTORY: usize = 2_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn scrape(server: &Server) -> Duration {
    let t = Instant::now();
    let (code, text, _) = server.get_text("/metrics");
    let elapsed = t.elapsed();
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("phoenix_agent_up{"), "{text}");
    elapsed
}

fn main() {
    let fleet = Fleet::new();
    let mut toml = String::from("[defaults]\ncli = \"custom\"\n\n");
    for i in 0..AGENTS {
        toml.push_str(&format!(
            "[[agent]]\nname = \"agent-{i:03}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\n"
        ));
    }
    fleet.toml(&toml);
    let t = Instant::now();
    fleet.run(&["apply", "--yes"]).status(0);
    println!("applied {AGENTS} agents in {:.1?}", t.elapsed());
    // A history to count: restarts, prompts and turns, as a busy agent's log has them.
    let mut history = String::new();
    for n in 0..HISTORY {
        let event = match n % 4 {
            0 => "agent_exit\",\"reason\":\"crash",
            1 => "agent_start",
            2 => "prompt",
            _ => "turn_complete",
        };
        history.push_str(&format!(
            "{{\"ts\":\"2026-01-01T00:00:00Z\",\"agent\":\"x\",\"event\":\"{event}\"}}\n"
        ));
    }
    for i in 0..AGENTS {
        let path = fleet.agent_dir(&format!("agent-{i:03}")).join("ops.jsonl");
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, format!("{history}{old}")).unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));

    let server = Server::start(&fleet, &[]);
    let first = scrape(&server);
    println!(
        "first scrape (counts {AGENTS} ops logs of {HISTORY} lines each): {:.1?}",
        first
    );
    let (_, text, _) = server.get_text("/metrics");
    let up = text
        .lines()
        .filter(|l| l.starts_with("phoenix_agent_up{") && l.ends_with(" 1"))
        .count();
    println!(
        "{up} of {AGENTS} agents up; {} lines of metrics ({} bytes)",
        text.lines().count(),
        text.len()
    );
    for _ in 0..10 {
        scrape(&server); // warm up
    }
    // The work of a scrape, apart from how busy the machine is (on a shared machine the wall
    // time is mostly waiting for a core): the CPU time of the server (with the tmux clients it
    // ran) and of the tmux server, per scrape.
    let tmux = fleet
        .tmux(&["display-message", "-p", "#{pid}"])
        .and_then(|p| p.trim().parse::<u32>().ok())
        .expect("the tmux server's pid");
    let cpu = || (cpu_ms(server.child.id()), cpu_ms(tmux));
    let before = cpu();
    let mut times: Vec<Duration> = (0..SCRAPES).map(|_| scrape(&server)).collect();
    let after = cpu();
    let per = |a: f64, b: f64| (a - b) / SCRAPES as f64;
    times.sort();
    println!(
        "GET /metrics, {AGENTS} agents: p50 {:.1?}  p99 {:.1?}  max {:.1?}  ({SCRAPES} scrapes); \
         CPU per scrape: the server with its tmux clients {:.1} ms, the tmux server {:.1} ms",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1],
        per(after.0, before.0),
        per(after.1, before.1),
    );
    parts(&fleet);
}

/// CPU time of `pid` and its reaped children, in milliseconds (/proc/PID/stat).
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = after_name
        .split(' ')
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime, cstime: fields 14-17, the 12th-15th after the name.
    let ticks: f64 = fields.iter().skip(11).take(4).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks * 1000.0 / hz
}

/// Where a scrape's time goes, in this process: the look at tmux and /proc, the rows, the
/// logs, the encoding.
fn parts(fleet: &Fleet) {
    use phoenix::metrics::{Collector, encode};
    let spec = fleet.spec();
    let runtime = phoenix::world::runtime_for(&spec);
    let collector = Collector::new();
    collector.scrape(&spec, &*runtime).unwrap();
    let median = |f: &mut dyn FnMut()| {
        let mut times: Vec<Duration> = (0..50)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect();
        times.sort();
        percentile(&times, 0.5)
    };
    let world = phoenix::status::observe_lean(&spec, &*runtime).unwrap();
    let pids: Vec<u32> = world.panes.iter().map(|p| p.pid).collect();
    println!(
        "in process, p50: list the panes {:.1?}, the panes' process trees {:.1?}, every process {:.1?}",
        median(&mut || drop(runtime.list().unwrap())),
        median(&mut || drop(phoenix::world::ProcTable::trees(&pids))),
        median(&mut || drop(phoenix::world::ProcTable::read())),
    );
    let (fleet_sample, agents) = collector.sample(&spec, &*runtime).unwrap();
    println!(
        "in process, p50: observe {:.1?}, rows {:.1?}, sample (both and the logs) {:.1?}, encode {:.1?}, scrape {:.1?}",
        median(&mut || drop(phoenix::status::observe_lean(&spec, &*runtime).unwrap())),
        median(&mut || drop(phoenix::status::lean_rows(&spec, &world))),
        median(&mut || drop(collector.sample(&spec, &*runtime).unwrap())),
        median(&mut || drop(encode(&fleet_sample, &agents).unwrap())),
        median(&mut || drop(collector.scrape(&spec, &*runtime).unwrap())),
    );
}
