//! The web dashboard in a real headless Chromium (WebDriver through chromedriver): the page
//! loads and shows the demo fleet, handoffs are searched and read, a restart is confirmed and
//! the row's process changes. A screenshot is written to target/dashboard.png.
//! Runs only with `PHOENIX_TEST_BROWSER=1` (`.ci/run` sets it); plain `cargo test` says it
//! skipped the suite and why.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::browser::{self, Browser};
use support::serve::Server;
use support::{Fleet, read_jsonl, wait_until};

const FLEET: &str = r#"
[defaults]
cli = "custom"
[defaults.restart]
cooldown = "100ms"
backoff_max = "100ms"
life_deadline = "5s"
max_crashes = 2
crash_window = "10m"

[[agent]]
name = "scout"
command = "phoenix demo-agent --interval 2s"
resume_command = "phoenix demo-agent --interval 2s --resume {session_id}"

[[agent]]
name = "builder"
command = "phoenix demo-agent --interval 3s"

[[agent]]
name = "flaky"
command = "phoenix demo-agent --interval 500ms --crash-after 1s"
"#;

fn target_dir() -> std::path::PathBuf {
    // CARGO_TARGET_TMPDIR is target/tmp.
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf()
}

/// The suite runs only when asked for (see `support::opted_in`).
fn enabled() -> bool {
    support::opted_in(
        support::BROWSER,
        "tests/it/dashboard.rs (the web dashboard in Chromium)",
        "a headless Chromium and chromedriver (Debian: chromium, chromium-driver)",
    )
}

#[test]
fn the_dashboard_shows_the_fleet_searches_handoffs_and_restarts_an_agent() {
    if !enabled() {
        return;
    }
    let (chromium, chromedriver) = match browser::find_or_install() {
        Ok(found) => found,
        Err(why) => {
            eprintln!(
                "SKIPPED the_dashboard_…: no headless Chromium ({why}); install Debian's \
                 `chromium` and `chromium-driver` to run it"
            );
            return;
        }
    };
    let fleet = Fleet::new();
    fleet.toml(FLEET);
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["scout", "builder"]);
    let mut save = fleet.command(&["handoff", "save", "builder"]);
    save.stdin(std::process::Stdio::piped());
    let mut child = save.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Current task: Migrate the zebra tables\nCompleted: schema draft\nNext: backfill, then drop the old columns\nKey decision: online migration, no downtime\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    fleet
        .run(&[
            "loop",
            "add",
            "scout",
            "api-quota",
            "Ask for a higher API quota",
        ])
        .status(0);
    // `flaky` crashes twice and is put in safe mode: a crash_loop critical event.
    wait_until(Duration::from_secs(30), "flaky's crash loop", || {
        read_jsonl(&fleet.state_dir().join("critical_events.jsonl"))
            .iter()
            .any(|e| e["event"] == "crash_loop")
    });

    let server = Server::start(&fleet, &[]);
    let browser = Browser::start(&chromium, &chromedriver, 1400, 1000);
    browser.goto(&format!("{}/", server.url));

    // The fleet table: every agent, with its health.
    browser.wait_js(
        "the fleet table",
        Duration::from_secs(15),
        "return document.body.dataset.ready === 'true' && \
         document.querySelectorAll('#fleet-body tr[data-agent]').length === 3",
    );
    let health = |agent: &str| {
        browser.js(
            "const r = document.querySelector(`#fleet-body tr[data-agent='${arguments[0]}']`); \
             return r ? r.dataset.health + ' ' + r.dataset.state : null;",
            json!([agent]),
        )
    };
    assert_eq!(health("scout"), "healthy running");
    assert_eq!(health("builder"), "healthy running");
    assert!(
        health("flaky").as_str().unwrap().starts_with("down"),
        "{}",
        health("flaky")
    );
    // The context meter: builder has a fresh handoff, scout nothing saved yet.
    let meter = |agent: &str| {
        browser.js(
            "return document.querySelector(`#fleet-body tr[data-agent='${arguments[0]}'] .meter .label`).textContent;",
            json!([agent]),
        )
    };
    assert!(
        meter("builder").as_str().unwrap().starts_with("fresh"),
        "{}",
        meter("builder")
    );
    assert_eq!(meter("scout"), "no context");
    // The live stream is connected.
    browser.wait_js(
        "live updates",
        Duration::from_secs(10),
        "return document.querySelector('#live').textContent === 'live';",
    );
    // The critical events timeline has the crash loop.
    browser.wait_js(
        "the crash loop in the timeline",
        Duration::from_secs(10),
        "return !!document.querySelector('#events li[data-event=\"crash_loop\"]');",
    );
    // The selected agent's ledger, and its open loop on the next tab.
    browser.click("#fleet-body tr[data-agent='scout'] td");
    browser.click("#agent-tabs button[data-tab='loops']");
    browser.wait_js(
        "scout's open loop",
        Duration::from_secs(10),
        "return !!document.querySelector('#agent-body .loop[data-loop=\"api-quota\"]');",
    );

    // Search the handoffs and open the one found.
    browser.type_into("#search", "zebra");
    browser.wait_js(
        "a search result",
        Duration::from_secs(10),
        "return document.querySelector('#handoff-list').dataset.query === 'zebra' && \
         !!document.querySelector('#handoff-list li[data-kind=\"handoff\"]');",
    );
    browser.click("#handoff-list li[data-kind='handoff']");
    let body = browser.wait_js(
        "the handoff's text",
        Duration::from_secs(10),
        "const b = document.querySelector('#handoff-body'); return b ? b.textContent : null;",
    );
    assert!(
        body.as_str().unwrap().contains("online migration"),
        "{body}"
    );

    // Restart scout: confirm, then watch its row get a new process.
    let pid = browser.js(
        "return document.querySelector(\"#fleet-body tr[data-agent='scout'] td.pid\").textContent;",
        json!([]),
    );
    let pid = pid.as_str().unwrap().to_string();
    assert!(pid.parse::<u32>().is_ok(), "pid cell: {pid}");
    browser.click("button[data-action='restart'][data-agent='scout']");
    browser.wait_js(
        "the confirmation",
        Duration::from_secs(5),
        "return document.querySelector('#confirm').open;",
    );
    // Nothing happens before it is confirmed.
    assert!(
        !fleet
            .ops("scout")
            .iter()
            .any(|o| o["event"] == "operator_restart")
    );
    browser.click("#confirm-ok");
    let new_pid = browser.wait_js(
        "scout's new process in the table",
        Duration::from_secs(20),
        &format!(
            "const r = document.querySelector(\"#fleet-body tr[data-agent='scout']\"); \
             const p = r.querySelector('td.pid').textContent; \
             return (r.dataset.state === 'running' && /^[0-9]+$/.test(p) && p !== '{pid}') ? p : null;"
        ),
    );
    assert_ne!(new_pid.as_str().unwrap(), pid);
    browser.wait_js(
        "the restart toast",
        Duration::from_secs(10),
        "return [...document.querySelectorAll('.toast')].some(t => t.textContent.includes('Restarted scout'));",
    );
    assert!(
        fleet
            .ops("scout")
            .iter()
            .any(|o| o["event"] == "operator_restart")
    );

    // How long the page took: navigation to load, and to the first fleet table.
    let timing = browser.js(
        "const n = performance.getEntriesByType('navigation')[0]; \
         const m = performance.getEntriesByName('fleet-rendered')[0]; \
         return {load: n.loadEventEnd, dcl: n.domContentLoadedEventEnd, fleet: m ? m.startTime : null};",
        json!([]),
    );
    println!(
        "dashboard: DOMContentLoaded {:.0} ms, load {:.0} ms, fleet table rendered {:.0} ms",
        timing["dcl"].as_f64().unwrap_or(-1.0),
        timing["load"].as_f64().unwrap_or(-1.0),
        timing["fleet"].as_f64().unwrap_or(-1.0)
    );

    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let path = target_dir().join("dashboard.png");
    std::fs::write(&path, &png).unwrap();
    println!("screenshot: {}", path.display());
}

/// Regression: every page kept its event stream's connection after it was left (Chromium
/// drains an abandoned response for about a minute), so the seventh load within a minute
/// waited ~58 s for one of the six connections a browser keeps per server.
#[test]
fn reloading_the_dashboard_again_and_again_never_stalls() {
    if !enabled() {
        return;
    }
    let Ok((chromium, chromedriver)) = browser::find_or_install() else {
        eprintln!("SKIPPED reloading_…: no headless Chromium");
        return;
    };
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults]\ncli = \"custom\"\n[[agent]]\nname = \"solo\"\ncommand = \"phoenix demo-agent --interval 1s\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    let server = Server::start(&fleet, &[]);
    let browser = Browser::start(&chromium, &chromedriver, 1200, 800);
    for i in 0..10 {
        browser.goto("about:blank");
        let started = std::time::Instant::now();
        browser.goto(&format!("{}/", server.url));
        browser.wait_js(
            "the fleet table",
            Duration::from_secs(30),
            "return document.body.dataset.ready === 'true' && \
             document.querySelector('#live').textContent === 'live';",
        );
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "load {i} took {took:?}: a connection was held"
        );
    }
}

/// The dashboard's fleet table shows each agent's tokens and estimated cost today, and who
/// waits for a person (a badge with the reason, the row marked, the count in the summary);
/// when the wait ends, so does the badge.
#[test]
fn the_dashboard_shows_spend_today_and_who_needs_a_human() {
    if !enabled() {
        return;
    }
    let Ok((chromium, chromedriver)) = browser::find_or_install() else {
        eprintln!("SKIPPED the_dashboard_shows_spend…: no headless Chromium");
        return;
    };
    let (fleet, pane) = support::spending_fleet_with_a_waiting_agent(
        "[defaults]\ncli = \"custom\"\n",
        "asker",
        "worker",
    );

    let server = Server::start(&fleet, &[]);
    let browser = Browser::start(&chromium, &chromedriver, 1400, 900);
    browser.goto(&format!("{}/", server.url));
    browser.wait_js(
        "the fleet table",
        Duration::from_secs(15),
        "return document.body.dataset.ready === 'true' && \
         document.querySelectorAll('#fleet-body tr[data-agent]').length === 2",
    );
    let cell = |agent: &str, class: &str| {
        browser.js(
            "const c = document.querySelector(`#fleet-body tr[data-agent='${arguments[0]}'] td.${arguments[1]}`); \
             return c ? c.textContent : null;",
            json!([agent, class]),
        )
    };
    for agent in ["asker", "worker"] {
        let today = cell(agent, "today");
        assert!(today.as_str().unwrap().contains('$'), "{agent}: {today}");
    }
    assert_eq!(cell("asker", "needs-input"), "permission prompt");
    assert_eq!(cell("worker", "needs-input"), "–");
    let marked = browser.js(
        "return [...document.querySelectorAll('#fleet-body tr.needs-input')].map(r => r.dataset.agent);",
        json!([]),
    );
    assert_eq!(marked, json!(["asker"]));
    let summary = browser.js(
        "return document.querySelector('#fleet-summary').textContent;",
        json!([]),
    );
    assert!(
        summary.as_str().unwrap().contains("1 needs a human"),
        "{summary}"
    );

    // The permission is given: the next tool call ends the wait, the live page follows.
    fleet
        .tmux(&["send-keys", "-t", &pane, "-l", "work"])
        .unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
    browser.wait_js(
        "the badge gone",
        Duration::from_secs(30),
        "return !document.querySelector('#fleet-body tr.needs-input');",
    );
}

/// The selected agent's overview: why it is down (flaky: safe mode after its crash loop), its
/// day (a bar of tokens this hour, a mark per crash), its pane's last lines; Stop and Start
/// in its row, each confirmed. A screenshot is written to target/dashboard-overview.png.
#[test]
fn the_dashboard_says_why_an_agent_is_down_charts_its_day_and_stops_and_starts_it() {
    if !enabled() {
        return;
    }
    let Ok((chromium, chromedriver)) = browser::find_or_install() else {
        eprintln!("SKIPPED the_dashboard_says_why…: no headless Chromium");
        return;
    };
    let fleet = support::worker_and_flaky_fleet();

    let server = Server::start(&fleet, &[]);
    let browser = Browser::start(&chromium, &chromedriver, 1400, 1100);
    browser.goto(&format!("{}/", server.url));
    browser.wait_js(
        "the fleet table",
        Duration::from_secs(15),
        "return document.body.dataset.ready === 'true' && \
         document.querySelectorAll('#fleet-body tr[data-agent]').length === 2",
    );

    // flaky: safe mode, and its crashes on the day's chart and in the list.
    browser.click("#fleet-body tr[data-agent='flaky'] td");
    let why = browser.wait_js(
        "why flaky is down",
        Duration::from_secs(10),
        "const w = document.querySelector(\"#agent-body[data-view='overview'][data-agent='flaky'] .why\"); \
         return w ? w.textContent : null;",
    );
    assert!(why.as_str().unwrap().starts_with("safe mode"), "{why}");
    let crashes = browser.js(
        "return document.querySelectorAll('#agent-body .day-chart g.crash').length;",
        json!([]),
    );
    assert!(crashes.as_u64().unwrap() >= 2, "{crashes}");
    let listed = browser.js(
        "return document.querySelectorAll('#agent-body ol.crashes li').length;",
        json!([]),
    );
    assert_eq!(listed, crashes);
    std::fs::write(
        target_dir().join("dashboard-crashes.png"),
        browser.screenshot(),
    )
    .unwrap();

    // worker: running, a bar of tokens this hour, its pane's text.
    browser.click("#fleet-body tr[data-agent='worker'] td");
    browser.wait_js(
        "worker's overview",
        Duration::from_secs(10),
        "return document.querySelector(\"#agent-body[data-view='overview'][data-agent='worker'] .why\")?.textContent.startsWith('running') && \
         document.querySelectorAll('#agent-body .day-chart rect.bar').length >= 1 && \
         document.querySelector('#agent-body pre.pane-preview')?.textContent.trim().length > 0;",
    );
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let path = target_dir().join("dashboard-overview.png");
    std::fs::write(&path, &png).unwrap();
    println!("screenshot: {}", path.display());

    // Stop worker: confirmed, then its row and its overview say stopped.
    browser.click("button[data-action='stop'][data-agent='worker']");
    browser.wait_js(
        "the confirmation",
        Duration::from_secs(5),
        "return document.querySelector('#confirm').open;",
    );
    assert_ne!(fleet.agent_status("worker")["state"], "stopped");
    browser.click("#confirm-ok");
    browser.wait_js(
        "worker stopped in the table and the overview",
        Duration::from_secs(20),
        "return document.querySelector(\"#fleet-body tr[data-agent='worker']\").dataset.state === 'stopped' && \
         document.querySelector('#agent-body .why')?.textContent.startsWith('stopped');",
    );
    assert_eq!(fleet.agent_status("worker")["state"], "stopped");
    let png = browser.screenshot();
    std::fs::write(target_dir().join("dashboard-stopped.png"), &png).unwrap();

    // Start it again.
    browser.click("button[data-action='start'][data-agent='worker']");
    browser.wait_js(
        "the confirmation",
        Duration::from_secs(5),
        "return document.querySelector('#confirm').open;",
    );
    browser.click("#confirm-ok");
    browser.wait_js(
        "worker running again",
        Duration::from_secs(20),
        "return document.querySelector(\"#fleet-body tr[data-agent='worker']\").dataset.state === 'running';",
    );
    fleet.wait_running(&["worker"]);
}
