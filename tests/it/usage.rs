//! Tokens and cost per agent end to end, with demo agents on a real private tmux server: the
//! demo agent writes a Claude Code-shaped transcript with `usage` on each response (2,150
//! tokens a step); `phoenix usage` counts each one once and prices it per model, `status`
//! shows today's, a custom CLI's keyed `->continuity:usage` lines are counted (never enough
//! alone to stop it), and a day past an
//! agent's budget stops it for a person.

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Fleet, read_jsonl, wait_until};

/// What one demo step's response used: input, output, cache write, cache read.
const STEP: (u64, u64, u64, u64) = (1200, 150, 0, 800);
const STEP_TOKENS: u64 = 2150;

const FAST: &str =
    "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\n\n";

fn agent(name: &str, flags: &str, extra: &str) -> String {
    format!(
        "[[agent]]\nname = \"{name}\"\ncli = \"custom\"\n\
         command = \"phoenix demo-agent --interval 150ms {flags}\"\n{extra}"
    )
}

/// The responses with usage in the agent's transcripts, counted by hand.
fn responses(fleet: &Fleet, agent: &str) -> u64 {
    let dir = fleet.agent_dir(agent).join("transcripts");
    std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .flat_map(|e| read_jsonl(&e.path()))
                .filter(|r| r["message"]["usage"].is_object())
                .count() as u64
        })
        .unwrap_or(0)
}

fn usage(fleet: &Fleet, args: &[&str]) -> Value {
    let mut all = vec!["usage", "--json"];
    all.extend_from_slice(args);
    fleet.run(&all).status(0).json()
}

fn row<'a>(doc: &'a Value, agent: &str) -> &'a Value {
    doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap_or_else(|| panic!("no {agent} in {doc}"))
}

/// Opus 4.6 list prices per token kind (USD per million): what a step costs.
fn opus_cost(steps: u64) -> f64 {
    let (input, output, _, cache_read) = STEP;
    steps as f64 * (input as f64 * 5.0 + output as f64 * 25.0 + cache_read as f64 * 0.5) / 1e6
}

#[test]
fn usage_counts_each_response_once_and_prices_it_per_model() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{FAST}{}{}",
        agent("priced", "--model claude-opus-4-6", ""),
        agent("plain", "", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["priced", "plain"]);
    wait_until(Duration::from_secs(20), "steps of both agents", || {
        responses(&fleet, "priced") >= 3 && responses(&fleet, "plain") >= 3
    });
    // While they work: an update, then more.
    let early = usage(&fleet, &[]);
    assert!(row(&early, "priced")["tokens"]["total"].as_u64().unwrap() >= 3 * STEP_TOKENS);
    fleet.run(&["down"]).status(0);

    // Stopped: every response of every session counted once, however many updates ran.
    let doc = usage(&fleet, &[]);
    assert_eq!(doc["format_version"], 1);
    assert_eq!(doc["by"], "agent");
    assert!(doc["since"].is_null(), "{doc}");
    for name in ["priced", "plain"] {
        let n = responses(&fleet, name);
        let a = row(&doc, name);
        assert_eq!(a["tokens"]["total"], n * STEP_TOKENS, "{a}");
        assert_eq!(a["tokens"]["input"], n * STEP.0, "{a}");
        assert_eq!(a["tokens"]["output"], n * STEP.1, "{a}");
        assert_eq!(a["tokens"]["cache_read"], n * STEP.3, "{a}");
        assert_eq!(a["cli"], "custom");
    }
    let steady = |mut d: Value| {
        d["until"] = Value::Null;
        d
    };
    assert_eq!(
        steady(usage(&fleet, &[])),
        steady(doc.clone()),
        "a second update adds nothing"
    );

    let priced = row(&doc, "priced");
    let n = responses(&fleet, "priced");
    let cost = priced["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - opus_cost(n)).abs() < 1e-6,
        "{cost} vs {}",
        opus_cost(n)
    );
    assert_eq!(priced["unpriced_models"], serde_json::json!([]));
    assert_eq!(priced["models"][0]["model"], "claude-opus-4-6");
    assert_eq!(priced["models"][0]["price"], "built_in");
    // A model no table knows is unpriced: counted, its cost null, never 0.
    let plain = row(&doc, "plain");
    assert!(plain["cost_usd"].is_null(), "{plain}");
    assert_eq!(plain["unpriced_models"], serde_json::json!(["claude-demo"]));
    assert!(plain["models"][0]["cost_usd"].is_null());
    assert_eq!(
        doc["total"]["unpriced_models"],
        serde_json::json!(["claude-demo"])
    );
    let total = doc["total"]["tokens"]["total"].as_u64().unwrap();
    assert_eq!(total, (n + responses(&fleet, "plain")) * STEP_TOKENS);

    // The table says the same for people, unpriced as such.
    let table = fleet.run(&["usage"]).status(0).stdout();
    assert!(table.contains("unpriced"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("plain")), "{table}");

    // Per day: today's local day holds it all; since an hour ago too.
    let by_day = usage(&fleet, &["--by", "day", "priced"]);
    assert_eq!(by_day["agents"].as_array().unwrap().len(), 1);
    let days = row(&by_day, "priced")["days"].as_array().unwrap().clone();
    let summed: u64 = days
        .iter()
        .map(|d| d["tokens"]["total"].as_u64().unwrap())
        .sum();
    assert_eq!(summed, n * STEP_TOKENS, "{days:?}");
    let recent = usage(&fleet, &["--since", "1h"]);
    assert!(recent["since"].is_string());
    assert_eq!(row(&recent, "plain")["tokens"], plain["tokens"]);

    // status shows today's, the same numbers (read, not written).
    let today = &fleet.agent_status("priced")["usage_today"];
    assert_eq!(today["tokens"]["total"], n * STEP_TOKENS, "{today}");
    assert!(today["day"].is_string());

    // [prices] prices a model the table does not know.
    let toml = std::fs::read_to_string(fleet.config()).unwrap();
    std::fs::write(
        fleet.config(),
        format!("{toml}\n[prices.\"claude-demo\"]\ninput = 1.0\noutput = 2.0\n"),
    )
    .unwrap();
    let priced_now = usage(&fleet, &["plain"]);
    let plain = row(&priced_now, "plain");
    assert_eq!(plain["models"][0]["price"], "config", "{plain}");
    let m = responses(&fleet, "plain") as f64;
    // Cache reads cost the input price when none is given.
    let expected = m * (1200.0 * 1.0 + 150.0 * 2.0 + 800.0 * 1.0) / 1e6;
    assert!((plain["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-6);

    let missing = fleet.run(&["usage", "nosuch", "--json"]);
    missing.status(1);
    let err = missing.json();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no agent `nosuch`")
    );
    assert!(err["error"]["hint"].as_str().unwrap().contains("priced"));
}

fn verdict<'a>(report: &'a Value, agent: &str) -> &'a Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap_or_else(|| panic!("no {agent} in {report}"))
}

fn handoffs(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("handoffs"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_day_past_the_budget_stops_the_agent_with_a_handoff_safe_mode_and_a_notification() {
    let fleet = Fleet::new();
    let notify = support::notify_recorder(&fleet);
    // 3 steps pass 5,000 tokens; one Opus step costs $0.01015.
    fleet.toml(&format!(
        "[notify]\ncommand = [\"{}\"]\n\n{FAST}{}{}{}",
        notify.display(),
        agent("tokens", "", "budget = { tokens_per_day = 5000 }\n"),
        agent(
            "dollars",
            "--model claude-opus-4-6",
            "budget = { usd_per_day = 0.01 }\n"
        ),
        agent("free", "", "budget = { tokens_per_day = 100000000 }\n"),
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["tokens", "dollars", "free"]);
    wait_until(Duration::from_secs(20), "three steps each", || {
        ["tokens", "dollars", "free"]
            .iter()
            .all(|a| responses(&fleet, a) >= 3)
    });
    let run = fleet.run(&["watchdog", "--once", "--json"]);
    assert_eq!(run.code(), Some(1), "{}", run.stdout());
    let report = run.json();
    for (name, reason) in [
        ("tokens", "daily_token_budget_exceeded"),
        ("dollars", "daily_cost_budget_exceeded"),
    ] {
        let a = verdict(&report, name);
        assert_eq!(a["verdict"], "unhealthy", "{a}");
        assert_eq!(a["findings"][0]["check"], "budget", "{a}");
        assert_eq!(a["findings"][0]["reason"], reason, "{a}");
        assert_eq!(a["action"], "safe_mode", "{a}");
        assert_eq!(a["decided_by"], "budget", "{a}");
    }
    assert_eq!(verdict(&report, "free")["verdict"], "healthy");

    // Stopped for a person: its session ended with a handoff, safe mode says why.
    for name in ["tokens", "dollars"] {
        wait_until(Duration::from_secs(20), "safe mode", || {
            fleet.agent_status(name)["state"] == "safe-mode"
        });
        assert!(handoffs(&fleet.agent_dir(name)) >= 1, "{name}: no handoff");
        let detail = fleet.run(&["status", name, "--json"]).json();
        let safe = detail["agents"][0]["supervision"].to_string();
        assert!(safe.contains("budget: "), "{name}: {safe}");
    }
    let one = fleet.run(&["status", "tokens", "--json"]).json();
    let safe = one["agents"][0]["supervision"].to_string();
    assert!(
        safe.contains("tokens used today (budget tokens_per_day = 5,000)"),
        "{safe}"
    );
    let log = std::fs::read_to_string(fleet.path().join("notified.log")).unwrap();
    for name in ["tokens", "dollars"] {
        assert!(log.contains(&format!("failure {name}")), "{log}");
    }
    assert!(!log.contains("failure free"), "{log}");
    assert_eq!(fleet.agent_status("free")["state"], "running");
}

#[test]
fn a_custom_cli_reports_its_usage_through_its_pane() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{FAST}{}",
        agent("bot", "--no-hooks", "budget = { tokens_per_day = 1000 }\n")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["bot"]);
    wait_until(Duration::from_secs(10), "the tap", || {
        fleet.ops("bot").iter().any(|o| o["event"] == "tap_started")
    });
    let pane = fleet.agent_status("bot")["pane"]
        .as_str()
        .unwrap()
        .to_string();
    let key = fleet.marker_key("bot");
    // `{}` is dropped by the demo agent: the typed (echoed) line holds no marker. An absurd
    // call and one without the key are refused.
    for text in [
        format!(
            "say ->conti{{}}nuity:usage#{key} model=my-model input=1000 output=200 cache_read=50"
        ),
        format!(
            "say ->conti{{}}nuity:usage#{key} model=claude-opus-4-6 input=18446744073709551615 output=18446744073709551615"
        ),
        "say ->conti{}nuity:usage model=claude-opus-4-6 input=5000000".to_string(),
        format!(
            "say ->conti{{}}nuity:usage#{key} model=my-model input=1000 output=200 cache_read=50"
        ),
    ] {
        fleet
            .tmux(&["send-keys", "-t", &pane, "-l", &text])
            .unwrap();
        fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
    }
    let reported = fleet.agent_dir("bot").join("usage_reported.jsonl");
    wait_until(Duration::from_secs(10), "two reports", || {
        read_jsonl(&reported).len() == 2
    });
    wait_until(Duration::from_secs(10), "two refused", || {
        fleet
            .ops("bot")
            .iter()
            .filter(|o| o["event"] == "marker_refused" && o["command"] == "usage")
            .count()
            == 2
    });
    let doc = usage(&fleet, &["bot"]);
    let models = row(&doc, "bot")["models"].as_array().unwrap().clone();
    let mine = models
        .iter()
        .find(|m| m["model"] == "my-model")
        .unwrap_or_else(|| panic!("{models:?}"));
    assert_eq!(
        mine["tokens"]["total"],
        2 * 1250,
        "both identical calls count"
    );
    assert_eq!(mine["tokens"]["cache_read"], 100);
    assert!(mine["cost_usd"].is_null(), "unpriced: {mine}");
    assert!(
        !models.iter().any(|m| m["model"] == "claude-opus-4-6"),
        "{models:?}"
    );

    // 2,500 reported tokens are past its budget of 1,000 a day: a warning, no stop.
    let report = fleet.run(&["watchdog", "--once", "--json"]).json();
    let bot = verdict(&report, "bot");
    assert_ne!(bot["verdict"], "unhealthy", "{bot}");
    assert!(bot["action"].is_null(), "{bot}");
    assert!(
        bot["notes"]
            .to_string()
            .contains("counting usage the agent reported itself"),
        "{bot}"
    );
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    let warned: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "usage_reported_over_budget")
        .collect();
    assert_eq!(warned.len(), 1, "{events:?}");
    // Once a day.
    fleet.run(&["watchdog", "--once", "--json"]);
    let events = read_jsonl(&fleet.state_dir().join("critical_events.jsonl"));
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"] == "usage_reported_over_budget")
            .count(),
        1
    );
    assert_eq!(fleet.agent_status("bot")["state"], "running");
}

/// Without a daemon and before any `phoenix usage`, `status` counts every session of the day
/// as `usage` does: it read only the current session, and showed 0 tokens after a restart
/// while `usage` counted the earlier sessions.
#[test]
fn status_counts_the_same_tokens_as_usage_across_sessions_without_a_daemon() {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{FAST}{}",
        agent("crashy", "--crash-after 800ms", "")
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    let sessions = || {
        std::fs::read_dir(fleet.agent_dir("crashy").join("transcripts"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    wait_until(Duration::from_secs(30), "three sessions with steps", || {
        sessions() >= 3 && responses(&fleet, "crashy") >= 4
    });
    fleet.run(&["down"]).status(0);
    let n = responses(&fleet, "crashy");
    assert!(!fleet.agent_dir("crashy").join("usage_state.json").exists());
    // status first: no ledger was made by anyone before it.
    let today = fleet.agent_status("crashy")["usage_today"].clone();
    assert_eq!(today["tokens"]["total"], n * STEP_TOKENS, "{today}");
    // Exit 3: it is down.
    let shown = fleet.run(&["status", "crashy"]).status(3).stdout();
    let total = (n * STEP_TOKENS).to_string();
    let grouped: String = {
        // `thousands`: 8,600 for 8600.
        let digits: Vec<char> = total.chars().collect();
        let mut out = String::new();
        for (i, c) in digits.iter().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(*c);
        }
        out
    };
    assert!(
        shown.contains(&format!("Today:          {grouped} tokens")),
        "{shown}"
    );
    let doc = usage(&fleet, &[]);
    assert_eq!(row(&doc, "crashy")["tokens"]["total"], n * STEP_TOKENS);
}
