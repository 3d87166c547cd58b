use super::*;
use crate::state::daemon::RECONCILE_BUCKETS;

fn sample(agent: &str, state: &'static str) -> AgentSample {
    let mut ops = OpsTally::default();
    ops.restarts.insert("crash".into(), 2);
    ops.restarts.insert("operator_restart".into(), 1);
    ops.recoveries
        .insert(("transient_error".into(), "rehabilitated".into()), 1);
    ops.injections.insert(("operator", "delivered"), 3);
    let mut hook_errors = HookErrors::default();
    hook_errors.0.insert("post_tool_use".into(), 4);
    AgentSample {
        labels: AgentLabels {
            agent: agent.into(),
            cli: "claude".into(),
            host: None,
        },
        row: AgentStatus {
            agent: agent.into(),
            state,
            health: if state == "running" {
                "warning"
            } else {
                "down"
            },
            watchdog: if state == "running" {
                vec!["silence"]
            } else {
                vec![]
            },
            open_loops: 3,
            stale_loops: 1,
            crashes: 2,
            ..AgentStatus::default()
        },
        ops,
        hook_errors,
        tokens: Some(1234),
        today: crate::usage::Spent::default(),
        idle_seconds: Some(12.5),
    }
}

#[test]
fn todays_tokens_by_kind_and_the_cost_of_priced_usage_only() {
    let prices = crate::usage::Prices::new(&Default::default());
    let tokens = crate::usage::Tokens {
        input: 1_000_000,
        output: 10,
        cache_write: 0,
        cache_read: 5,
    };
    let mut priced = sample("p", "running");
    let model = [("claude-sonnet-4-5".to_string(), tokens)].into();
    priced.today = crate::usage::Spent::of(&model, &prices);
    let usd = priced.today.cost_usd.expect("a built-in price");
    let mut unpriced = sample("u", "running");
    let model = [("a-model-nobody-prices".to_string(), tokens)].into();
    unpriced.today = crate::usage::Spent::of(&model, &prices);
    let text = encode(&FleetSample::default(), &[priced, unpriced]).unwrap();
    let p = "agent=\"p\",cli=\"claude\"";
    let u = "agent=\"u\",cli=\"claude\"";
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_tokens_today{{{p},kind=\"input\"}}")
        ),
        Some(1_000_000.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_tokens_today{{{u},kind=\"cache_read\"}}")
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_cost_usd_today{{{p},unpriced=\"false\"}}")
        ),
        Some(usd)
    );
    assert!(usd > 1.0, "a million input tokens cost dollars: {usd}");
    assert!(
        !text.contains(&format!("phoenix_agent_cost_usd_today{{{u}")),
        "an unpriced model has no cost series, never 0: {text}"
    );
}

/// The value of the sample line that starts with `series` (name and labels as written:
/// `agent`, `cli`, then the series' own).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn every_agent_fact_is_a_labelled_series() {
    let fleet = FleetSample::default();
    let text = encode(&fleet, &[sample("a", "running"), sample("b", "safe-mode")]).unwrap();
    let a = r#"agent="a",cli="claude""#;
    let b = r#"agent="b",cli="claude""#;
    assert_eq!(value(&text, &format!("phoenix_agent_up{{{a}}}")), Some(1.0));
    assert_eq!(value(&text, &format!("phoenix_agent_up{{{b}}}")), Some(0.0));
    assert_eq!(
        value(&text, &format!("phoenix_agent_safe_mode{{{b}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_restarts_total{{{a},reason=\"crash\"}}")
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_health_check_failing{{{a},check=\"silence\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_health_check_failing{{{b},check=\"silence\"}}")
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            &format!(
                "phoenix_agent_clinic_recoveries_total{{{a},diagnosis=\"transient_error\",outcome=\"rehabilitated\"}}"
            )
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            &format!(
                "phoenix_agent_injections_total{{{a},kind=\"operator\",outcome=\"delivered\"}}"
            )
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_hook_errors_total{{{a},event=\"post_tool_use\"}}")
        ),
        Some(4.0)
    );
    assert_eq!(
        value(&text, &format!("phoenix_agent_session_tokens{{{a}}}")),
        Some(1234.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("phoenix_agent_last_activity_age_seconds{{{a}}}")
        ),
        Some(12.5)
    );
    assert_eq!(
        value(&text, &format!("phoenix_agent_stale_loops{{{a}}}")),
        Some(1.0)
    );
    assert!(
        text.contains("# TYPE phoenix_agent_restarts_total counter"),
        "{text}"
    );
    assert!(text.contains("# HELP phoenix_agent_up "), "{text}");
    assert!(
        !text.contains("host="),
        "no host label without hosts: {text}"
    );
}

#[test]
fn the_host_label_appears_once_an_agent_has_a_host() {
    let mut remote = sample("r", "running");
    remote.labels.host = Some("gpu-1".into());
    let text = encode(&FleetSample::default(), &[sample("a", "running"), remote]).unwrap();
    assert!(
        text.contains(r#"phoenix_agent_up{agent="r",cli="claude",host="gpu-1"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"phoenix_agent_up{agent="a",cli="claude",host=""} 1"#),
        "{text}"
    );
}

#[test]
fn the_reconcile_histogram_is_cumulative() {
    let mut reconcile = ReconcileStats::default();
    reconcile.observe(0.001, true);
    reconcile.observe(0.3, true);
    reconcile.observe(100.0, false);
    let fleet = FleetSample {
        reconcile,
        daemon_running: true,
    };
    let text = encode(&fleet, &[]).unwrap();
    assert_eq!(
        value(&text, r#"phoenix_reconcile_passes_total{outcome="ok"}"#),
        Some(2.0)
    );
    assert_eq!(
        value(&text, r#"phoenix_reconcile_passes_total{outcome="error"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"phoenix_reconcile_duration_seconds_bucket{le="0.005"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"phoenix_reconcile_duration_seconds_bucket{le="0.5"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            r#"phoenix_reconcile_duration_seconds_bucket{le="30"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            r#"phoenix_reconcile_duration_seconds_bucket{le="+Inf"}"#
        ),
        Some(3.0)
    );
    assert_eq!(
        value(&text, "phoenix_reconcile_duration_seconds_count"),
        Some(3.0)
    );
    assert_eq!(value(&text, "phoenix_daemon_running"), Some(1.0));
    assert_eq!(
        text.matches("phoenix_reconcile_duration_seconds_bucket")
            .count(),
        RECONCILE_BUCKETS.len() + 1
    );
}

#[test]
fn label_values_are_escaped_by_the_encoder() {
    let mut odd = sample("a", "running");
    odd.labels.cli = "say \"hi\"\\\n".into();
    let text = encode(&FleetSample::default(), &[odd]).unwrap();
    assert!(text.contains(r#"cli="say \"hi\"\\\n""#), "{text}");
}

#[test]
fn the_catalogue_declares_every_family_a_sample_writes_once() {
    let prices = crate::usage::Prices::new(&Default::default());
    let mut agent = sample("a", "running");
    agent.ops.findings.insert("silence".into(), 1);
    agent.ops.handoffs.insert("pre_compact".into(), 1);
    let tokens = crate::usage::Tokens {
        input: 10,
        ..Default::default()
    };
    agent.today =
        crate::usage::Spent::of(&[("claude-sonnet-4-5".to_string(), tokens)].into(), &prices);
    let catalogue = catalogue();
    let families = families(&FleetSample::default(), &[agent]);
    assert_eq!(families.len(), catalogue.len(), "a sample with every fact");
    for f in &families {
        assert!(
            catalogue
                .iter()
                .any(|d| d.name == f.name() && d.kind == f.get_field_type() && d.help == f.help()),
            "{} is not declared as written",
            f.name()
        );
    }
}
