//! `/metrics` end to end: `phoenix serve` and `phoenix run --metrics-listen` in front of a real
//! fleet (private tmux server, demo agents), their text checked by Debian's `promtool`, scraped
//! by a real Prometheus that answers PromQL for an agent the test restarted, and the token
//! rules of the API off loopback.

use crate::support;

use std::time::Duration;

use crate::supervise::Daemon;
use support::prometheus::{self, Prometheus};
use support::serve::Server;
use support::{Fleet, wait_until};

const FAST: &str = "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = 100\n\n";

fn agent(name: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 300ms\"\n\
         resume_command = \"phoenix demo-agent --interval 300ms --resume {{session_id}}\"\n"
    )
}

/// One running demo agent, `alpha`.
fn fleet() -> Fleet {
    let fleet = Fleet::new();
    fleet.toml(&format!("{FAST}{}", agent("alpha")));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["alpha"]);
    fleet
}

/// The value of the series written exactly as `series` (name and labels: `agent`, `cli`, then
/// the series' own), if the text has it.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

const ALPHA: &str = r#"agent="alpha",cli="custom""#;

fn restarts(text: &str, reason: &str) -> Option<f64> {
    value(
        text,
        &format!("phoenix_agent_restarts_total{{{ALPHA},reason=\"{reason}\"}}"),
    )
}

/// GET `/metrics` of `base` (`http://…`): status, content type and text.
fn scrape(base: &str, token: Option<&str>) -> (u16, String, String) {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    );
    let mut req = agent.get(format!("{base}/metrics"));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut res = req.call().expect("GET /metrics");
    let kind = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let status = res.status().as_u16();
    (
        status,
        kind,
        res.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// What a person scraping `phoenix serve` sees: the agent up, no restart before the first,
/// text `promtool` accepts, and the restart they made counted once, however often scraped.
#[test]
fn serve_exposes_metrics_promtool_accepts_and_counts_a_restart() {
    let fleet = fleet();
    let server = Server::start(&fleet, &[]);
    let (code, kind, text) = scrape(&server.url, None);
    assert_eq!(code, 200, "{text}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    assert_eq!(
        value(&text, &format!("phoenix_agent_up{{{ALPHA}}}")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &format!("phoenix_agent_safe_mode{{{ALPHA}}}")),
        Some(0.0)
    );
    assert!(
        !text.contains("phoenix_agent_restarts_total{"),
        "the first start is no restart:\n{text}"
    );
    if prometheus::available() {
        prometheus::check_metrics(&text).unwrap_or_else(|e| panic!("promtool: {e}\n{text}"));
    }

    fleet.run(&["restart", "alpha"]).status(0);
    let mut text = String::new();
    wait_until(Duration::from_secs(20), "the restart counted", || {
        text = scrape(&server.url, None).2;
        restarts(&text, "operator_restart").is_some()
    });
    assert_eq!(restarts(&text, "operator_restart"), Some(1.0), "{text}");
    fleet.wait_running(&["alpha"]);
    let again = scrape(&server.url, None).2;
    assert_eq!(
        restarts(&again, "operator_restart"),
        Some(1.0),
        "counted once:\n{again}"
    );
    assert_eq!(
        value(&again, &format!("phoenix_agent_up{{{ALPHA}}}")),
        Some(1.0)
    );
    if prometheus::available() {
        prometheus::check_metrics(&again).unwrap_or_else(|e| panic!("promtool: {e}\n{again}"));
    }
}

/// A real Prometheus scraping `phoenix serve` every second answers PromQL for the restarts of
/// the agent the test restarted.
#[test]
fn a_real_prometheus_answers_for_the_restarts_of_an_agent() {
    if !prometheus::available() {
        return;
    }
    let fleet = fleet();
    let server = Server::start(&fleet, &[]);
    let prom = Prometheus::start(&server.addr);
    let first = |promql: &str| -> Option<f64> {
        prom.query(promql)[0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
    };
    wait_until(
        Duration::from_secs(30),
        "prometheus scraping phoenix",
        || first(r#"phoenix_agent_up{agent="alpha"}"#) == Some(1.0),
    );

    fleet.run(&["restart", "alpha"]).status(0);
    let query = r#"phoenix_agent_restarts_total{agent="alpha"}"#;
    support::wait_until_explained(
        Duration::from_secs(30),
        "prometheus has alpha's restart",
        || first(query) == Some(1.0),
        || {
            format!(
                "{}\ntargets: {}\n{}",
                prom.query(query),
                prom.targets(),
                prom.log()
            )
        },
    );
    let result = prom.query(query);
    assert_eq!(
        result[0]["metric"]["reason"], "operator_restart",
        "{result}"
    );
    assert_eq!(result[0]["metric"]["job"], "phoenix", "{result}");
}

/// `http://ADDR` of the daemon's metrics listener, from its log.
fn metrics_url(daemon: &Daemon) -> String {
    let mut url = None;
    wait_until(Duration::from_secs(15), "the metrics listener", || {
        url = daemon
            .log()
            .split_whitespace()
            .find(|w| w.starts_with("http://") && w.ends_with("/metrics"))
            .map(|w| w.trim_end_matches("/metrics").to_string());
        url.is_some()
    });
    url.unwrap()
}

fn passes(text: &str) -> f64 {
    value(text, r#"phoenix_reconcile_passes_total{outcome="ok"}"#).unwrap_or(0.0)
}

/// The daemon serves the same metrics, with its reconcile passes and their durations; the
/// count goes on from where it was when the daemon is restarted, and `phoenix serve` reports
/// it too.
#[test]
fn the_daemon_serves_metrics_and_its_pass_count_survives_it() {
    let fleet = Fleet::new();
    fleet.raw_toml(&format!(
        "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nreconcile_interval = \"1s\"\n\n{FAST}{}",
        fleet.socket,
        agent("alpha")
    ));
    let daemon = Daemon::start(&fleet, &["--metrics-listen", "127.0.0.1:0"]);
    let url = metrics_url(&daemon);
    let mut text = String::new();
    wait_until(
        Duration::from_secs(20),
        "alpha up and passes counted",
        || {
            text = scrape(&url, None).2;
            value(&text, &format!("phoenix_agent_up{{{ALPHA}}}")) == Some(1.0)
                && passes(&text) >= 2.0
        },
    );
    let count = value(&text, "phoenix_reconcile_duration_seconds_count").unwrap();
    assert!(count >= passes(&text), "{text}");
    assert_eq!(
        value(
            &text,
            r#"phoenix_reconcile_duration_seconds_bucket{le="+Inf"}"#
        ),
        Some(count)
    );
    assert_eq!(value(&text, "phoenix_daemon_running"), Some(1.0), "{text}");
    if prometheus::available() {
        prometheus::check_metrics(&text).unwrap_or_else(|e| panic!("promtool: {e}\n{text}"));
    }
    let before = passes(&scrape(&url, None).2);
    daemon.stop();

    // `phoenix serve` reads the same count, and a new daemon counts on from it.
    let server = Server::start(&fleet, &[]);
    let served = scrape(&server.url, None).2;
    assert!(passes(&served) >= before, "{before}\n{served}");
    assert_eq!(
        value(&served, "phoenix_daemon_running"),
        Some(0.0),
        "{served}"
    );
    let daemon = Daemon::start(&fleet, &["--metrics-listen", "127.0.0.1:0"]);
    let url = metrics_url(&daemon);
    let first = passes(&scrape(&url, None).2);
    assert!(first >= before, "the count went down: {before} -> {first}");
}

/// Off loopback, `/metrics` follows the API's token rules: no token, no listener; with one,
/// a scrape without it is refused and a scrape with it answered.
#[test]
fn metrics_off_loopback_need_the_token() {
    let fleet = fleet();
    let refused = fleet.run_within(
        &["run", "--metrics-listen", "0.0.0.0:0"],
        Duration::from_secs(20),
    );
    refused
        .status(1)
        .stderr_has("refusing to listen on 0.0.0.0:0 without a token");
    assert!(
        !refused.stderr().contains("supervising the fleet"),
        "the daemon did not start:\n{}",
        refused.stderr()
    );

    let token = "0123456789abcdef0123456789abcdef";
    let server = Server::start_on(&fleet, "0.0.0.0:0", &[("PHOENIX_TOKEN", token)]);
    let (code, _, body) = scrape(&server.url, None);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("needs the token"), "{body}");
    let (code, _, body) = scrape(&server.url, Some(token));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        value(&body, &format!("phoenix_agent_up{{{ALPHA}}}")),
        Some(1.0),
        "{body}"
    );
}

/// Today's tokens by kind and their cost in `/metrics` are what `phoenix usage` counted (the
/// ledger the daemon's watchdog keeps up to date; here `usage` brings it up to date), and a
/// model without a price has tokens but no cost series.
#[test]
fn metrics_show_todays_tokens_and_cost_as_the_usage_ledger_counted_them() {
    let fleet = Fleet::new();
    let agent = |name: &str, flags: &str| {
        format!(
            "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
             command = \"phoenix demo-agent --interval 150ms {flags}\"\n"
        )
    };
    fleet.toml(&format!(
        "{FAST}{}{}",
        agent("priced", "--model claude-opus-4-6"),
        agent("plain", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["priced", "plain"]);
    wait_until(Duration::from_secs(20), "a few steps of both", || {
        let doc = fleet.run(&["usage", "--json"]).status(0).json();
        doc["agents"].as_array().is_some_and(|rows| {
            rows.iter()
                .all(|r| r["tokens"]["total"].as_u64().unwrap_or(0) > 0)
        })
    });
    // Stopped, then counted: the numbers hold still for the comparison.
    fleet.run(&["down"]).status(0);
    let usage = fleet.run(&["usage", "--json"]).status(0).json();
    let row = |name: &str| {
        usage["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["agent"] == name)
            .unwrap()
            .clone()
    };
    let server = Server::start(&fleet, &[]);
    let (code, _, text) = scrape(&server.url, None);
    assert_eq!(code, 200, "{text}");
    let series = |name: &str, agent: &str, extra: &str| {
        value(
            &text,
            &format!("{name}{{agent=\"{agent}\",cli=\"custom\",{extra}}}"),
        )
    };
    for name in ["priced", "plain"] {
        let tokens = &row(name)["tokens"];
        for kind in ["input", "output", "cache_read"] {
            assert_eq!(
                series(
                    "phoenix_agent_tokens_today",
                    name,
                    &format!("kind=\"{kind}\"")
                ),
                tokens[kind].as_f64(),
                "{name} {kind}:\n{text}"
            );
        }
    }
    let cost = series(
        "phoenix_agent_cost_usd_today",
        "priced",
        "unpriced=\"false\"",
    )
    .unwrap_or_else(|| panic!("no cost for priced:\n{text}"));
    assert!(
        (cost - row("priced")["cost_usd"].as_f64().unwrap()).abs() < 1e-6,
        "{cost} vs {}",
        row("priced")
    );
    assert!(
        !text.contains("phoenix_agent_cost_usd_today{agent=\"plain\""),
        "unpriced is no cost, never 0:\n{text}"
    );
    if prometheus::available() {
        prometheus::check_metrics(&text).unwrap_or_else(|e| panic!("promtool: {e}\n{text}"));
    }
}
