//! `phoenix notify test`: a labelled test message through every configured channel, and a
//! line (or JSON) per channel on stdout.

use super::output;
use std::path::Path;

use super::out;
use crate::notify::{Kind, Message, Notifier, TEST_AGENT, TEST_TITLE, render_line};
use crate::state::FleetDir;

#[derive(Debug, clap::Subcommand)]
pub enum NotifyCommand {
    /// Send a test message through every configured channel and say how each one did.
    Test {
        /// The agent the message is about (default: the first one declared).
        #[arg(long)]
        agent: Option<String>,
        /// Send it as a failure message (webhook and command only) instead of an
        /// investigation report (also opens a GitHub issue).
        #[arg(long, conflicts_with = "needs_input")]
        failure: bool,
        /// Send it as a "needs a human" alert (webhook, ntfy and command) instead.
        #[arg(long)]
        needs_input: bool,
        /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

pub fn notify(config: &Path, cmd: NotifyCommand) -> anyhow::Result<i32> {
    match cmd {
        NotifyCommand::Test {
            agent,
            failure,
            needs_input,
            json,
        } => {
            let kind = if failure {
                Kind::Failure
            } else if needs_input {
                Kind::NeedsInput
            } else {
                Kind::Investigation
            };
            test(config, agent.as_deref(), kind, json)
        }
    }
}

/// `phoenix notify test`: send a clearly labelled test message through every channel and
/// report each. Exit code 0 when all delivered, 1 when one failed or none is configured.
fn test(config: &Path, agent: Option<&str>, kind: Kind, json: bool) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    let notify = &spec.notify;
    if notify.is_empty() {
        eprintln!(
            "error: [notify] in {} has no channel: nothing to test",
            spec.file.display()
        );
        eprintln!(
            "  = hint: add one, e.g. command = [\"notify-send\", \"phoenix\"], \
             webhook = {{ url_env = \"PHOENIX_WEBHOOK_URL\" }} or github = {{ repo = \"owner/name\" }}"
        );
        return Ok(1);
    }
    let agent = agent.unwrap_or(TEST_AGENT);
    if agent != TEST_AGENT && spec.agent(agent).is_none() {
        eprintln!(
            "warning: agent `{agent}` is not declared in {}; sending anyway",
            spec.file.display()
        );
    }
    let msg = Message {
        kind,
        agent: agent.to_string(),
        fleet: spec.fleet.name.clone(),
        title: TEST_TITLE.to_string(),
        body: format!(
            "This is a test notification ({}) sent by `phoenix notify test` for fleet `{}` at {}.\n\n\
             Nothing is wrong: you can ignore it (or close it, if it opened an issue).",
            kind.as_str(),
            spec.fleet.name,
            crate::state::now_rfc3339(),
        ),
    };
    let fleet = FleetDir::new(&spec.fleet.state_dir);
    let sent = Notifier::new(notify, &fleet).send(&msg);
    let skipped_github = kind != Kind::Investigation && notify.github.is_some();
    let failed = sent.is_empty() || sent.iter().any(|s| !s.ok);
    if json {
        let report = serde_json::json!({
            "kind": kind,
            "agent": agent,
            "fleet": spec.fleet.name,
            "channels": sent,
        });
        output::json(&report);
    } else {
        let mut text = String::new();
        for s in &sent {
            text.push_str(&render_line(s));
            text.push('\n');
        }
        if skipped_github {
            text.push_str(
                &format!(
                    "skip github   {} messages do not open issues (leave out --{} for an investigation)\n",
                    kind.as_str(),
                    if kind == Kind::Failure { "failure" } else { "needs-input" }
                ),
            );
        }
        out(&text);
    }
    if sent.is_empty() {
        eprintln!(
            "error: no channel takes `{}` messages: [notify.github] only opens issues for investigations",
            kind.as_str()
        );
    }
    Ok(if failed { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_test_without_channels_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("phoenix.toml");
        std::fs::write(&config, "[[agent]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
        assert_eq!(test(&config, None, Kind::Failure, false).unwrap(), 1);
    }
}
