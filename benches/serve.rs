//! `phoenix serve` with 200 live agents: latency of `GET /api/status` (p50, p99, max over
//! sequential requests), its throughput and latency under `CLIENTS` concurrent keep-alive
//! clients (goal: ≥ 1,000 requests/s, p99 ≤ 50 ms), a few other reads, and the dashboard's
//! page load in headless Chromium (navigation to `load`, and to the first rendered fleet table
//! of 200 rows). Run with `cargo bench --bench serve`.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Fleet;
use support::browser::{self, Browser};
use support::serve::Server;

const AGENTS: usize = 200;
const REQUESTS: usize = 300;
const PAGE_LOADS: usize = 15;
/// Concurrent clients of the throughput run, and how long each round lasts.
const CLIENTS: usize = 20;
const LOAD_SECS: u64 = 5;
const LOAD_ROUNDS: usize = 3;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn time_get(server: &Server, path: &str, n: usize) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let (code, _) = server.get(path);
            let elapsed = t.elapsed();
            assert_eq!(code, 200, "{path}");
            elapsed
        })
        .collect();
    times.sort();
    times
}

fn report(what: &str, times: &[Duration]) {
    println!(
        "{what}: p50 {:.1?}  p99 {:.1?}  max {:.1?}  ({} requests)",
        percentile(times, 0.5),
        percentile(times, 0.99),
        times[times.len() - 1],
        times.len()
    );
}

/// `CLIENTS` threads, each with its own keep-alive connection, asking `path` for `secs`:
/// requests per second over all of them, and the sorted latencies.
fn load(server: &Server, path: &str, secs: u64) -> (f64, Vec<Duration>) {
    let url = format!("{}{path}", server.url);
    let until = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let agent = ureq::Agent::new_with_config(
                    ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .timeout_global(Some(Duration::from_secs(60)))
                        .build(),
                );
                let mut times = Vec::new();
                while Instant::now() < until {
                    let t = Instant::now();
                    let mut res = agent.get(&url).call().expect("GET");
                    let body = res.body_mut().read_to_vec().expect("body");
                    times.push(t.elapsed());
                    assert_eq!(
                        res.status().as_u16(),
                        200,
                        "{}",
                        String::from_utf8_lossy(&body)
                    );
                }
                times
            })
        })
        .collect();
    let mut times: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client thread"))
        .collect();
    let rate = times.len() as f64 / started.elapsed().as_secs_f64();
    times.sort();
    (rate, times)
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
    // Some continuity to read: a handoff for every tenth agent.
    for i in (0..AGENTS).step_by(10) {
        fleet
            .run(&["handoff", "save", &format!("agent-{i:03}"), "--no-input"])
            .status(0);
    }
    std::thread::sleep(Duration::from_secs(2));

    let server = Server::start(&fleet, &[]);
    let (_, status) = server.get("/api/status");
    let running = status["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["state"] == "running")
        .count();
    println!("{running} of {AGENTS} agents running");

    time_get(&server, "/api/status", 10); // warm up
    report(
        &format!("GET /api/status, {AGENTS} agents"),
        &time_get(&server, "/api/status", REQUESTS),
    );
    for round in 1..=LOAD_ROUNDS {
        let (rate, times) = load(&server, "/api/status", LOAD_SECS);
        println!(
            "GET /api/status, {AGENTS} agents, {CLIENTS} concurrent clients, round {round}: \
             {rate:.0} requests/s, p50 {:.1?}  p99 {:.1?}  max {:.1?}  ({} requests in {LOAD_SECS} s)",
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times[times.len() - 1],
            times.len()
        );
    }
    report(
        "GET /api/agents/agent-100",
        &time_get(&server, "/api/agents/agent-100", 100),
    );
    report(
        "GET /api/handoffs (20 handoffs)",
        &time_get(&server, "/api/handoffs", 100),
    );
    report(
        "GET /api/search?q=handoff",
        &time_get(&server, "/api/search?q=handoff", 100),
    );
    // The CLI, for comparison: a process, the same observation, the same rows.
    let mut cli: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            fleet.run(&["status", "--json"]).status(0);
            t.elapsed()
        })
        .collect();
    cli.sort();
    report("phoenix status --json (CLI, for comparison)", &cli);

    match browser::find_or_install() {
        Err(why) => println!("page load: skipped, no headless Chromium ({why})"),
        Ok((chromium, chromedriver)) => {
            let browser = Browser::start(&chromium, &chromedriver, 1400, 1000);
            let mut load = Vec::new();
            let mut rendered = Vec::new();
            for _ in 0..PAGE_LOADS {
                browser.goto("about:blank");
                browser.goto(&format!("{}/", server.url));
                browser.wait_js(
                    "the fleet table",
                    Duration::from_secs(30),
                    &format!(
                        "return document.querySelectorAll('#fleet-body tr[data-agent]').length === {AGENTS};"
                    ),
                );
                let t = browser.js(
                    "const n = performance.getEntriesByType('navigation')[0]; \
                     const m = performance.getEntriesByName('fleet-rendered')[0]; \
                     return {load: n.loadEventEnd, fleet: m ? m.startTime : null};",
                    json!([]),
                );
                load.push(Duration::from_secs_f64(
                    t["load"].as_f64().unwrap_or(0.0) / 1000.0,
                ));
                rendered.push(Duration::from_secs_f64(
                    t["fleet"].as_f64().unwrap_or(0.0) / 1000.0,
                ));
            }
            // The first load starts a cold browser (profile, fonts, caches): shown apart.
            println!(
                "page load, first (cold browser): `load` event {:.0?}, fleet table of {AGENTS} rows rendered {:.0?}",
                load[0], rendered[0]
            );
            let mut load = load.split_off(1);
            let mut rendered = rendered.split_off(1);
            load.sort();
            rendered.sort();
            println!(
                "page load (headless Chromium, {} warm loads): `load` event p50 {:.0?} max {:.0?}; \
                 fleet table of {AGENTS} rows rendered p50 {:.0?} max {:.0?}",
                load.len(),
                percentile(&load, 0.5),
                load[load.len() - 1],
                percentile(&rendered, 0.5),
                rendered[rendered.len() - 1]
            );
        }
    }
}
