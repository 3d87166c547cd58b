//! `[telemetry] otlp_endpoint`: the daemon exports the fleet's events as OTLP log records, its
//! reconcile passes and the agents' recoveries as spans, and the fleet's metrics, to a real
//! OTLP/HTTP receiver on loopback (protobuf decoded with the `opentelemetry-proto` messages).

use std::time::Duration;

use crate::supervise::Daemon;
use crate::support::otlp_receiver::{OtlpReceiver, Point, Received};
use crate::support::{Fleet, kill9, wait_until};

fn config(endpoint: &str) -> String {
    config_with(endpoint, "")
}

/// The demo fleet exporting to `endpoint`, with more `[telemetry]` keys (`telemetry`).
fn config_with(endpoint: &str, telemetry: &str) -> String {
    format!(
        "[telemetry]\notlp_endpoint = \"{endpoint}\"\n{telemetry}\n\
         [defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nmax_crashes = 5\n\n{}",
        Fleet::demo_agent("alpha", "")
    )
}

#[test]
fn a_crash_under_the_daemon_arrives_as_a_log_record_with_its_agent_and_a_pass_as_a_span() {
    let receiver = OtlpReceiver::start();
    let fleet = Fleet::new();
    fleet.toml(&config(&receiver.url));
    let daemon = Daemon::start(&fleet, &[]);
    let pid = fleet.wait_running(&["alpha"])[0];
    kill9(pid);

    let is_crash = |r: &Received| {
        r.attributes.get("event").map(String::as_str) == Some("agent_exit")
            && r.attributes.get("phoenix.reason").map(String::as_str) == Some("crash")
    };
    wait_until(
        Duration::from_secs(30),
        "the crash as an OTLP log record",
        || receiver.logs().iter().any(is_crash),
    );
    let logs = receiver.logs();
    let crash = logs.iter().find(|r| is_crash(r)).unwrap();
    assert_eq!(
        crash.attributes.get("agent").map(String::as_str),
        Some("alpha"),
        "{crash:?}"
    );
    assert_eq!(crash.severity, "WARN", "{crash:?}");
    assert!(crash.text.starts_with("agent_exit: crash"), "{crash:?}");
    assert_eq!(
        crash.resource.get("service.name").map(String::as_str),
        Some("phoenix")
    );
    assert_eq!(
        crash.resource.get("phoenix.fleet").map(String::as_str),
        Some("test")
    );
    assert!(
        crash
            .resource
            .get("host.name")
            .is_some_and(|h| !h.is_empty()),
        "{crash:?}"
    );

    // The restart that follows closes the recovery; the daemon's passes are spans too.
    let span_named = |name: &str| receiver.spans().into_iter().find(|s| s.text == name);
    wait_until(
        Duration::from_secs(30),
        "a recovery and a reconcile span",
        || span_named("recovery").is_some() && span_named("reconcile").is_some(),
    );
    let recovery = span_named("recovery").unwrap();
    assert_eq!(
        recovery.attributes.get("agent").map(String::as_str),
        Some("alpha")
    );
    assert_eq!(
        recovery.attributes.get("reason").map(String::as_str),
        Some("crash")
    );
    assert_eq!(
        recovery.attributes.get("outcome").map(String::as_str),
        Some("restarted")
    );
    let pass = span_named("reconcile").unwrap();
    assert_eq!(
        pass.resource.get("service.name").map(String::as_str),
        Some("phoenix")
    );
    assert!(pass.attributes.contains_key("changes"), "{pass:?}");

    let requests = receiver.requests();
    assert!(
        requests.iter().all(|r| [
            "POST /v1/logs HTTP/1.1",
            "POST /v1/traces HTTP/1.1",
            "POST /v1/metrics HTTP/1.1"
        ]
        .contains(&r.as_str())),
        "{requests:?}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// The facts of `/metrics`, under the same names, arrive as OTLP metrics: a restart the
/// operator asked for as a cumulative monotonic sum with the agent's attributes, the agent's
/// state as a gauge, the daemon's passes as a histogram.
#[test]
fn an_agents_restart_arrives_as_an_otlp_counter_with_its_agent() {
    let receiver = OtlpReceiver::start();
    let fleet = Fleet::new();
    fleet.toml(&config_with(&receiver.url, "metrics_interval = \"1s\"\n"));
    let daemon = Daemon::start(&fleet, &[]);
    fleet.wait_running(&["alpha"]);
    fleet.run(&["restart", "alpha"]).status(0);

    // The latest point of `metric` about alpha.
    let alphas = |metric: &str| -> Option<Point> {
        receiver.points().into_iter().rev().find(|p| {
            p.metric == metric && p.attributes.get("agent").map(String::as_str) == Some("alpha")
        })
    };
    wait_until(
        Duration::from_secs(30),
        "alpha's restart as an OTLP counter",
        || alphas("phoenix_agent_restarts_total").is_some_and(|p| p.value >= 1.0),
    );
    let restarts = alphas("phoenix_agent_restarts_total").unwrap();
    assert_eq!(restarts.kind, "sum", "{restarts:?}");
    assert!(restarts.monotonic_cumulative, "{restarts:?}");
    let attr = |p: &Point, key: &str| p.attributes.get(key).cloned().unwrap_or_default();
    assert_eq!(
        attr(&restarts, "reason"),
        "operator_restart",
        "{restarts:?}"
    );
    assert_eq!(attr(&restarts, "cli"), "custom", "{restarts:?}");
    let resource = |key: &str| restarts.resource.get(key).cloned().unwrap_or_default();
    assert_eq!(resource("service.name"), "phoenix");
    assert_eq!(resource("phoenix.fleet"), "test");
    assert!(!resource("host.name").is_empty(), "{restarts:?}");

    wait_until(Duration::from_secs(30), "alpha up again", || {
        alphas("phoenix_agent_up").is_some_and(|p| p.value == 1.0)
    });
    assert_eq!(alphas("phoenix_agent_up").unwrap().kind, "gauge");
    let health = alphas("phoenix_agent_health_check_failing").expect("alpha's health by check");
    assert!(health.attributes.contains_key("check"), "{health:?}");

    let passes = receiver
        .points()
        .into_iter()
        .rev()
        .find(|p| p.metric == "phoenix_reconcile_duration_seconds")
        .expect("the reconcile passes as a histogram");
    assert_eq!(passes.kind, "histogram", "{passes:?}");
    assert!(passes.value >= 1.0, "{passes:?}");
    assert!(!passes.bounds.is_empty(), "{passes:?}");
    assert_eq!(daemon.stop(), Some(0));
}

/// A collector that is not there costs nothing but the records: the daemon supervises as
/// always (the agent is restarted after its crash) and stops promptly.
#[test]
fn an_unreachable_collector_never_holds_up_the_daemon() {
    // A port that was free a moment ago: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fleet = Fleet::new();
    fleet.toml(&config(&format!("http://127.0.0.1:{port}")));
    let daemon = Daemon::start(&fleet, &[]);
    let pid = fleet.wait_running(&["alpha"])[0];
    kill9(pid);
    wait_until(Duration::from_secs(20), "the agent restarted", || {
        fleet.wait_running(&["alpha"])[0] != pid
    });
    let started = std::time::Instant::now();
    assert_eq!(daemon.stop(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn an_otlp_endpoint_must_be_an_http_url() {
    let fleet = Fleet::new();
    fleet.toml("[telemetry]\notlp_endpoint = \"grpc://localhost:4317\"\n");
    fleet
        .run(&["validate"])
        .status(1)
        .stderr_has("`otlp_endpoint` must be http or https");
    fleet.toml("[telemetry]\notlp_endpoint = \"http://localhost:4318\"\n");
    fleet.run(&["validate"]).status(0);
    fleet.toml(
        "[telemetry]\notlp_endpoint = \"http://localhost:4318\"\nmetrics_interval = \"100ms\"\n",
    );
    fleet
        .run(&["validate"])
        .status(1)
        .stderr_has("`metrics_interval` = \"100ms\" is too short: the minimum is 1s")
        .stderr_has("phoenix.toml:")
        .stderr_has("| metrics_interval = \"100ms\"");
}
