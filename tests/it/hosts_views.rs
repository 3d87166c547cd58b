//! The live views of a fleet across hosts: `phoenix top`, the HTTP API and dashboard of
//! `phoenix serve`, `events --follow` and `usage` show every host's agents labelled with
//! their host and act on them there (real sshd servers on loopback, each host with its own
//! phoenix fleet), and a host that stops answering never holds up the others.

use std::io::BufRead;
use std::time::Duration;

use serde_json::{Value, json};

use crate::hosts_reads::{close_shared_connection, declared, start};
use crate::support::hosts::HostedFleet;
use crate::support::serve::Server;
use crate::support::{read_jsonl, wait_until};
use crate::top::Screen;

/// The pid of `agent` on `host`, as the host itself sees it.
fn pid_on(net: &HostedFleet, host: &str, agent: &str) -> Option<u64> {
    net.host(host)
        .status()
        .iter()
        .find(|r| r["agent"] == agent)
        .and_then(|r| r["pid"].as_u64())
}

fn row<'a>(doc: &'a Value, agent: &str) -> &'a Value {
    doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == agent)
        .unwrap_or_else(|| panic!("no row for {agent}: {doc}"))
}

/// The host `gpu-2` gone: its sshd stopped and the shared connection with it.
fn take_down(net: &mut HostedFleet, host: &str) {
    net.host_mut(host).sshd.stop();
    close_shared_connection(net, host);
}

#[test]
fn top_shows_every_hosts_agents_restarts_one_there_and_a_dead_host_does_not_freeze_it() {
    let Some(mut net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);
    let screen = Screen::start(&net.fleet);
    screen.wait_for("hosts 2/2");
    let text = screen.wait_for("far2");
    assert!(text.contains("HOST"), "{text}");
    for (host, agent) in [("(local)", "here"), ("gpu-1", "far1"), ("gpu-2", "far2")] {
        assert!(
            text.lines()
                .any(|l| l.contains(host) && l.contains(agent) && l.contains("running")),
            "{agent} on {host}:\n{text}"
        );
    }
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    // Restart far1 (the second row): it happens on gpu-1.
    let before = pid_on(&net, "gpu-1", "far1").unwrap();
    screen.keys(&["j", "r"]);
    screen.wait_for("Restart `far1`? y = yes");
    screen.keys(&["y"]);
    screen.wait_for("`far1` on gpu-1: restarted");
    wait_until(Duration::from_secs(20), "far1 runs again on gpu-1", || {
        pid_on(&net, "gpu-1", "far1").is_some_and(|p| p != before)
    });
    let ops = read_jsonl(&net.host("gpu-1").agent_dir("far1").join("ops.jsonl"));
    assert!(
        ops.iter().any(|o| o["event"] == "operator_restart"),
        "{ops:?}"
    );
    let new_pid = pid_on(&net, "gpu-1", "far1").unwrap();
    screen.wait_for(&new_pid.to_string());

    // gpu-2 takes connections and never speaks: each ask of it costs a connect timeout.
    // The keys and the other rows stay live meanwhile; gpu-2's rows are shown stale.
    let port = net.host("gpu-2").sshd.port;
    take_down(&mut net, "gpu-2");
    let silent = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let text = screen.wait_for("hosts 1/2");
    assert!(text.contains("gpu-2"), "{text}");
    screen.wait_for("unreachable");
    screen.keys(&["k", "r"]);
    screen.wait_for("Restart `here`? y = yes");
    screen.keys(&["n"]);
    screen.wait_for("cancelled");
    let text = screen.text();
    assert!(
        text.lines()
            .any(|l| l.contains("gpu-1") && l.contains("far1") && l.contains("healthy")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("gpu-2") && l.contains("far2") && l.contains("unknown")),
        "{text}"
    );
    drop(silent);
    screen.keys(&["q"]);
    screen.wait_for("top-exited-0");
}

#[test]
fn the_api_reads_and_restarts_agents_of_hosts_and_labels_every_row() {
    let Some(mut net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);
    let server = Server::start(&net.fleet, &[]);

    let (code, doc) = server.get("/api/status");
    assert_eq!(code, 200, "{doc}");
    assert_eq!(row(&doc, "here")["host"], Value::Null);
    assert_eq!(row(&doc, "far1")["host"], "gpu-1");

    // One agent of a host, and its files, as its host has them.
    let (code, one) = server.get("/api/agents/far1");
    assert_eq!(code, 200, "{one}");
    assert_eq!(one["host"], "gpu-1", "{one}");
    assert_eq!(one["state"], "running", "{one}");
    for path in ["ledger", "state", "handoffs", "brief"] {
        let (code, doc) = server.get(&format!("/api/agents/far1/{path}"));
        assert_eq!(code, 200, "{path}: {doc}");
        assert_eq!(doc["host"], "gpu-1", "{path}: {doc}");
    }
    let (code, saved) = server.post("/api/agents/far2/handoffs", &json!({"reason": "manual"}));
    assert_eq!(code, 201, "{saved}");
    assert_eq!(saved["host"], "gpu-2", "{saved}");
    let (code, list) = server.get("/api/handoffs");
    assert_eq!(code, 200, "{list}");
    let mine = list["handoffs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == saved["id"])
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(mine["host"], "gpu-2", "{list}");
    let (code, shown) = server.get(&format!(
        "/api/handoffs/{}?agent=far2",
        saved["id"].as_str().unwrap()
    ));
    assert_eq!(code, 200, "{shown}");
    assert_eq!(shown["host"], "gpu-2", "{shown}");

    let body = net.host("gpu-2").dir.join("body.md");
    std::fs::write(
        &body,
        "Current task: feed the quokka colony\nNext: count them\n",
    )
    .unwrap();
    net.host("gpu-2")
        .run(&["handoff", "save", "far2", "--file", body.to_str().unwrap()])
        .status(0);
    let (code, found) = server.get("/api/search?q=quokka");
    assert_eq!(code, 200, "{found}");
    assert!(
        found["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["host"] == "gpu-2"),
        "{found}"
    );

    // /metrics: this machine's agents, with `host="local"` in a fleet across hosts.
    let (code, text, _) = server.get_text("/metrics");
    assert_eq!(code, 200, "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("phoenix_agent_up{")
            && l.contains(r#"agent="here""#)
            && l.contains(r#"host="local""#)),
        "{text}"
    );

    // Restart through the API: the agent restarts on its host.
    let before = pid_on(&net, "gpu-1", "far1").unwrap();
    let (code, report) = server.post("/api/agents/far1/restart", &json!({}));
    assert_eq!(code, 200, "{report}");
    assert_eq!(report["host"], "gpu-1", "{report}");
    wait_until(Duration::from_secs(20), "far1 runs again on gpu-1", || {
        pid_on(&net, "gpu-1", "far1").is_some_and(|p| p != before)
    });
    let ops = read_jsonl(&net.host("gpu-1").agent_dir("far1").join("ops.jsonl"));
    assert!(
        ops.iter().any(|o| o["event"] == "operator_restart"),
        "{ops:?}"
    );

    // Text injected through the API is pasted by far1's host (carried in the request).
    wait_until(Duration::from_secs(20), "far1 up again", || {
        pid_on(&net, "gpu-1", "far1").is_some()
    });
    // The demo agent prints until told `silent`: injection waits for a still screen.
    let pane = crate::hosts_move::row(net.host("gpu-1"), "far1")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    for keys in [&["-l", "silent"][..], &["Enter"]] {
        let sent = std::process::Command::new("tmux")
            .args(["-L", &net.host("gpu-1").socket, "send-keys", "-t", &pane])
            .args(keys)
            .env_remove("TMUX")
            .status()
            .unwrap();
        assert!(sent.success());
    }
    let (code, injected) = server.post(
        "/api/agents/far1/inject",
        &json!({"text": "look at the flaky test; then rest"}),
    );
    assert_eq!(code, 200, "{injected}");
    assert_eq!(
        (&injected["host"], &injected["agent"], &injected["chars"]),
        (&json!("gpu-1"), &json!("far1"), &json!(33)),
        "{injected}"
    );
    let ops = read_jsonl(&net.host("gpu-1").agent_dir("far1").join("ops.jsonl"));
    assert!(
        ops.iter()
            .any(|o| o["event"] == "context_injected" && o["chars"] == 33),
        "{ops:?}"
    );

    // A message for an agent of a host goes to its inbox there, and is read from there.
    let (code, sent) = server.post(
        "/api/agents/far2/messages",
        &json!({"text": "rebase onto main", "from": "ci"}),
    );
    assert_eq!(code, 201, "{sent}");
    assert_eq!(
        (&sent["host"], &sent["from"]),
        (&json!("gpu-2"), &json!("ci"))
    );
    let on_host = net.host("gpu-2").run(&["inbox", "far2", "--json"]).json();
    let texts = |doc: &Value| -> Vec<Value> {
        ["pending", "delivered"]
            .iter()
            .flat_map(|k| doc[*k].as_array().cloned().unwrap_or_default())
            .map(|m| m["text"].clone())
            .collect()
    };
    assert_eq!(texts(&on_host), [json!("rebase onto main")], "{on_host}");
    let (code, listed) = server.get("/api/agents/far2/messages");
    assert_eq!(code, 200, "{listed}");
    assert_eq!(listed["host"], "gpu-2", "{listed}");
    assert_eq!(texts(&listed), [json!("rebase onto main")], "{listed}");

    // The fleet's events: every host's, labelled.
    let (code, events) = server.get("/api/events?limit=1000");
    assert_eq!(code, 200, "{events}");
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["host"] == "gpu-1"),
        "{events}"
    );

    // gpu-2 goes away: it is shown as such, the rest as before, its agent's actions refused.
    take_down(&mut net, "gpu-2");
    let (code, doc) = server.get("/api/status");
    assert_eq!(code, 200, "{doc}");
    assert_eq!(row(&doc, "far1")["state"], "running", "{doc}");
    assert_eq!(row(&doc, "far2")["state"], "unknown", "{doc}");
    let gpu2 = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "gpu-2")
        .unwrap();
    assert_eq!(gpu2["reachable"], false, "{doc}");
    let (code, refused) = server.post("/api/agents/far2/restart", &json!({}));
    assert_eq!(code, 502, "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("unreachable"),
        "{refused}"
    );
    let (code, events) = server.get("/api/events");
    assert_eq!(code, 200, "{events}");
    assert!(
        events["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["host"] == "gpu-2"),
        "{events}"
    );
}

/// Events a host records while its stream is still being set up (an ssh connection, its
/// phoenix starting) are not lost: each host is followed from the moment the follow began,
/// and what the past read showed already is not shown twice.
#[test]
fn events_follow_shows_every_hosts_new_events_and_says_once_that_a_host_is_gone() {
    let Some(mut net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);
    let mut follow = net.fleet.command(&["events", "--follow"]);
    std::os::unix::process::CommandExt::process_group(&mut follow, 0);
    let mut child = follow
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let lines = lines_of(child.stdout.take().unwrap());
    let warnings = lines_of(child.stderr.take().unwrap());

    // A critical event recorded on gpu-1 after the follow began shows, labelled.
    let gpu1_events = net.host("gpu-1").state_dir().join("critical_events.jsonl");
    let recorded = |_host: &str, reason: &str| {
        let path = &gpu1_events;
        let event = json!({"ts": jiff::Timestamp::now().to_string(), "event": "crash_loop",
                           "agent": "far1", "reason": reason, "action_taken": "notified"});
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        use std::io::Write;
        writeln!(file, "{event}").unwrap();
    };
    // Recorded again until it shows: the first may come before the follow reached gpu-1.
    let mut last = std::time::Instant::now() - Duration::from_secs(10);
    wait_until(Duration::from_secs(30), "gpu-1's event", || {
        if last.elapsed() > Duration::from_secs(3) {
            recorded("gpu-1", "zanzibar-from-gpu-1");
            last = std::time::Instant::now();
        }
        lines.lock().unwrap().iter().any(|l| l.contains("zanzibar"))
    });
    let seen = wait_for_line(&lines, "zanzibar-from-gpu-1");
    assert!(seen.contains(" gpu-1 "), "{seen}");

    recorded("gpu-1", "pre-from-gpu-1");
    wait_for_line(&lines, "pre-from-gpu-1");
    // gpu-2 goes away: said once on stderr, and gpu-1 is still followed.
    take_down(&mut net, "gpu-2");
    let _ = wait_for_line(&warnings, "gpu-2");
    recorded("gpu-1", "second-from-gpu-1");
    wait_for_line(&lines, "second-from-gpu-1");
    std::thread::sleep(Duration::from_secs(6));
    let said = warnings.lock().unwrap().clone();
    let about = said
        .iter()
        .filter(|l| l.starts_with("warning:") && l.contains("gpu-2"));
    assert_eq!(about.count(), 1, "{said:?}");
    // Each event once, though the past read and the first stream overlap.
    let shown = lines.lock().unwrap().clone();
    let unique: std::collections::HashSet<&String> = shown.iter().collect();
    assert_eq!(unique.len(), shown.len(), "{shown:#?}");
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

type Lines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// The lines of `from`, gathered on a thread as they come.
fn lines_of(from: impl std::io::Read + Send + 'static) -> Lines {
    let lines: Lines = Default::default();
    let gathered = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            gathered.lock().unwrap().push(line);
        }
    });
    lines
}

fn wait_for_line(lines: &Lines, needle: &str) -> String {
    let mut found = String::new();
    let what = format!("{needle} among {:?}", lines.lock().unwrap());
    wait_until(Duration::from_secs(30), &what, || {
        let all = lines.lock().unwrap();
        match all.iter().find(|l| l.contains(needle)) {
            Some(l) => {
                found = l.clone();
                true
            }
            None => false,
        }
    });
    found
}

#[test]
fn usage_counts_every_hosts_agents_labelled_by_host() {
    let Some(net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);
    let doc = net.run(&["usage", "--json"]).status(0).json();
    let hosts: Vec<(String, Value)> = doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["agent"].as_str().unwrap().to_string(), a["host"].clone()))
        .collect();
    for (agent, host) in [
        ("here", Value::Null),
        ("far1", "gpu-1".into()),
        ("far2", "gpu-2".into()),
    ] {
        assert!(hosts.contains(&(agent.into(), host)), "{doc}");
    }
    let sum: u64 = doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["tokens"]["total"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(doc["total"]["tokens"]["total"], sum, "{doc}");
    let one = net.run(&["usage", "far2", "--json"]).status(0).json();
    let agents = one["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1, "{one}");
    assert_eq!(agents[0]["host"], "gpu-2", "{one}");
    let table = net.run(&["usage"]).status(0).stdout();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("gpu-1") && l.contains("far1")),
        "{table}"
    );
}

#[test]
fn the_dashboard_labels_each_agent_with_its_host_and_restarts_an_agent_of_a_host() {
    use crate::support::browser::{self, Browser};
    if !crate::support::opted_in(
        crate::support::BROWSER,
        "tests/it/hosts_views.rs (the dashboard of a fleet across hosts, in Chromium)",
        "a headless Chromium and chromedriver (Debian: chromium, chromium-driver)",
    ) {
        return;
    }
    let Ok((chromium, chromedriver)) = browser::find_or_install() else {
        eprintln!("SKIPPED the_dashboard_labels_…: no headless Chromium");
        return;
    };
    let Some(net) = declared() else {
        return;
    };
    start(&net, &["gpu-1", "gpu-2"]);
    let server = Server::start(&net.fleet, &[]);
    let browser = Browser::start(&chromium, &chromedriver, 1400, 1000);
    browser.goto(&format!("{}/", server.url));
    browser.wait_js(
        "the fleet table",
        Duration::from_secs(30),
        "return document.body.dataset.ready === 'true' && \
         document.querySelectorAll('#fleet-body tr[data-agent]').length === 3",
    );
    let host = |agent: &str| {
        browser.js(
            "const h = document.querySelector(`#fleet-body tr[data-agent='${arguments[0]}'] .host`); \
             return h ? h.textContent : null;",
            json!([agent]),
        )
    };
    assert_eq!(host("here"), "local");
    assert_eq!(host("far1"), "gpu-1");
    assert_eq!(host("far2"), "gpu-2");

    let before = pid_on(&net, "gpu-1", "far1").unwrap();
    browser.click("button[data-action='restart'][data-agent='far1']");
    browser.wait_js(
        "the confirmation",
        Duration::from_secs(5),
        "return document.querySelector('#confirm').open;",
    );
    browser.click("#confirm-ok");
    browser.wait_js(
        "the restart toast",
        Duration::from_secs(60),
        "return [...document.querySelectorAll('.toast')].some(t => t.textContent.includes('Restarted far1'));",
    );
    wait_until(Duration::from_secs(20), "far1 runs again on gpu-1", || {
        pid_on(&net, "gpu-1", "far1").is_some_and(|p| p != before)
    });
}
