//! Notifier tests against real processes (a recording fake `gh`, shell commands) and a real
//! HTTP server on 127.0.0.1, one module per channel; here, all channels together.

mod command;
mod github;
mod webhook;

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::spec::{WebhookFormat, WebhookNotify};
use github::FakeGh;

fn message(kind: Kind, agent: &str, title: &str) -> Message {
    Message {
        kind,
        agent: agent.to_string(),
        fleet: "demo".to_string(),
        title: title.to_string(),
        body: "the agent has been waiting on a permission prompt for 20m".to_string(),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `sh -c script` with `path` as its `$1` (a path with a space reaches it whole).
fn sh_with_path(script: &str, path: &Path) -> Vec<String> {
    strings(&["sh", "-c", script, "sh", path.to_str().unwrap()])
}

/// The one report of a send to one channel.
fn only(sent: Vec<Sent>) -> Sent {
    assert_eq!(sent.len(), 1, "{sent:?}");
    sent.into_iter().next().unwrap()
}

#[test]
fn one_failing_channel_does_not_stop_the_others_and_the_issue_url_is_passed_on() {
    let gh = FakeGh::new();
    let out = gh.dir.path().join("command-env");
    let settings = NotifySettings {
        webhook: Some(WebhookNotify {
            url_env: "PHOENIX_TEST_SURELY_UNSET_7F3A".into(),
            format: WebhookFormat::Json,
            chat_id: None,
            timeout: Duration::from_secs(1),
            retries: 0,
        }),
        command: Some(sh_with_path("env > \"$1\"", &out)),
        ..gh.settings.clone()
    };
    let notifier = gh.notifier_with(&settings);
    let sent = notifier.send(&message(Kind::Investigation, "alpha", "stuck"));
    let summary: Vec<(&str, bool)> = sent.iter().map(|s| (s.channel.as_str(), s.ok)).collect();
    assert_eq!(
        summary,
        [("github", true), ("webhook", false), ("command", true)]
    );
    let env = fs::read_to_string(&out).unwrap();
    assert!(
        env.lines()
            .any(|l| l == "PHOENIX_ISSUE_URL=https://github.com/acme/fleet/issues/1"),
        "{env}"
    );

    let hook = settings.webhook.as_ref().unwrap();
    let msg = message(Kind::Investigation, "alpha", "stuck");
    let body =
        crate::notify::webhook::payload(hook, &msg, Some("https://github.com/acme/fleet/issues/1"));
    assert_eq!(body["url"], "https://github.com/acme/fleet/issues/1");
}

#[test]
fn report_lines_show_status_channel_and_what_happened() {
    let ok = Sent {
        channel: "github".into(),
        ok: true,
        url: Some("https://github.com/acme/fleet/issues/7".into()),
        detail: "issue created".into(),
    };
    assert_eq!(
        render_line(&ok),
        "ok   github   https://github.com/acme/fleet/issues/7  issue created"
    );
    let failed = Sent::new("webhook", false, "PHOENIX_WEBHOOK_URL is not set");
    assert_eq!(
        render_line(&failed),
        "FAIL webhook  PHOENIX_WEBHOOK_URL is not set"
    );
    assert_eq!(
        serde_json::to_value(&failed).unwrap(),
        json!({"channel": "webhook", "ok": false, "url": null, "detail": "PHOENIX_WEBHOOK_URL is not set"})
    );
}

#[test]
fn an_agent_s_channels_limit_where_its_messages_go() {
    let gh = FakeGh::new();
    let out = gh.dir.path().join("command-ran");
    let settings = NotifySettings {
        command: Some(sh_with_path("cat > \"$1\"", &out)),
        ..gh.settings.clone()
    };
    let only_command = vec!["command".to_string()];
    let sent = gh
        .notifier_with(&settings)
        .only(Some(&only_command))
        .send(&message(Kind::Investigation, "alpha", "stuck"));
    let channels: Vec<&str> = sent.iter().map(|s| s.channel.as_str()).collect();
    assert_eq!(channels, ["command"]);
    assert!(out.exists());
    assert!(
        gh.calls().is_empty(),
        "github was not one of the agent's channels"
    );
}
