//! Notifications: investigation reports and failure messages through the GitHub CLI, an HTTP
//! webhook or any command, with de-duplication and a cooldown.
//!
//! `Notifier::send` tries every configured channel and reports each one as a `Sent`: a channel
//! that fails (or is slow, up to its timeout) never stops the others, and nothing here panics
//! or returns an error to the caller. Only investigations open GitHub issues.

mod command;
mod github;
pub mod ntfy;
mod webhook;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::NotifySettings;
use crate::state::FleetDir;

/// How long one `gh` call may take before it is killed.
pub const GH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `[notify] command` may take before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// What a message is about (also `phoenix notify test --kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The Clinic investigated an agent: worth an issue.
    Investigation,
    /// Something failed (an unrecoverable agent, a failed recovery): a message, never an issue.
    Failure,
    /// An agent waits for a person (a permission prompt, idle with open loops): a message,
    /// never an issue.
    #[serde(rename = "needs_input")]
    #[value(name = "needs-input")]
    NeedsInput,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Investigation => "investigation",
            Kind::Failure => "failure",
            Kind::NeedsInput => "needs_input",
        }
    }
}

/// One notification, the same for every channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub kind: Kind,
    pub agent: String,
    pub fleet: String,
    /// One line; GitHub issues get `[Watchdog] agent `<agent>`: <title>`.
    pub title: String,
    /// Markdown.
    pub body: String,
}

/// What one channel did with a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sent {
    /// `github`, `webhook`, `ntfy` or `command`.
    pub channel: String,
    pub ok: bool,
    /// The GitHub issue (created or already open). Never a webhook URL: those are secrets.
    pub url: Option<String>,
    /// For people: what happened or what went wrong.
    pub detail: String,
}

impl Sent {
    fn new(channel: &str, ok: bool, detail: impl Into<String>) -> Self {
        Sent {
            channel: channel.to_string(),
            ok,
            url: None,
            detail: detail.into(),
        }
    }
}

/// Sends messages through the channels of `[notify]`.
pub struct Notifier<'a> {
    settings: &'a NotifySettings,
    fleet: &'a FleetDir,
    gh: PathBuf,
    gh_timeout: Duration,
    command_timeout: Duration,
    /// Variables looked up before the process environment (tests: `set_var` is unsafe while
    /// other test threads run).
    vars: Vec<(String, String)>,
    /// The channels this message may use (an agent's `notify`); all when `None`.
    channels: Option<Vec<String>>,
}

impl<'a> Notifier<'a> {
    pub fn new(settings: &'a NotifySettings, fleet: &'a FleetDir) -> Self {
        Notifier {
            settings,
            fleet,
            gh: PathBuf::from("gh"),
            gh_timeout: GH_TIMEOUT,
            command_timeout: COMMAND_TIMEOUT,
            vars: Vec::new(),
            channels: None,
        }
    }

    /// Use only these of the configured channels (`github`, `webhook`, `ntfy`, `command`).
    pub fn only(mut self, channels: Option<&[String]>) -> Self {
        self.channels = channels.map(<[String]>::to_vec);
        self
    }

    fn allowed(&self, channel: &str) -> bool {
        self.channels
            .as_ref()
            .is_none_or(|c| c.iter().any(|x| x == channel))
    }

    /// The GitHub CLI to run instead of `gh` from PATH.
    pub fn with_gh(mut self, program: impl Into<PathBuf>) -> Self {
        self.gh = program.into();
        self
    }

    /// How long one `gh` call may take (default `GH_TIMEOUT`).
    pub fn with_gh_timeout(mut self, timeout: Duration) -> Self {
        self.gh_timeout = timeout;
        self
    }

    /// How long `[notify] command` may take (default `COMMAND_TIMEOUT`).
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    #[cfg(test)]
    fn with_var(mut self, name: &str, value: &str) -> Self {
        self.vars.push((name.to_string(), value.to_string()));
        self
    }

    fn var(&self, name: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    }

    /// Send `msg` through every configured channel: GitHub first (investigations only), so the
    /// others can point to the issue, then the webhook, ntfy, then the command.
    pub fn send(&self, msg: &Message) -> Vec<Sent> {
        let mut sent = Vec::new();
        let mut issue_url = None;
        if let (Kind::Investigation, Some(gh), true) =
            (msg.kind, &self.settings.github, self.allowed("github"))
        {
            let github = github::Github {
                settings: gh,
                cooldown: self.settings.issue_cooldown,
                fleet: self.fleet,
                program: &self.gh,
                timeout: self.gh_timeout,
            };
            let s = guarded("github", || github.send(msg));
            if s.ok {
                issue_url = s.url.clone();
            }
            sent.push(s);
        }
        if let Some(w) = self
            .settings
            .webhook
            .as_ref()
            .filter(|_| self.allowed("webhook"))
        {
            let url = self.var(&w.url_env);
            sent.push(guarded("webhook", || {
                webhook::send(w, url.as_deref(), msg, issue_url.as_deref())
            }));
        }
        if let Some(n) = self.settings.ntfy.as_ref().filter(|_| self.allowed("ntfy")) {
            let from_env = n.url_env.as_deref().and_then(|v| self.var(v));
            let url = from_env.clone().or_else(|| n.url.clone());
            let token = n.token_env.as_deref().and_then(|v| self.var(v));
            sent.push(guarded("ntfy", || {
                ntfy::send(
                    n,
                    url.as_deref(),
                    from_env.is_some(),
                    token.as_deref(),
                    self.fleet,
                    msg,
                    issue_url.as_deref(),
                )
            }));
        }
        if let Some(argv) = self
            .settings
            .command
            .as_ref()
            .filter(|_| self.allowed("command"))
        {
            sent.push(guarded("command", || {
                command::send(argv, msg, issue_url.as_deref(), self.command_timeout)
            }));
        }
        for s in &sent {
            let (channel, agent, kind) = (&s.channel, &msg.agent, msg.kind.as_str());
            if s.ok {
                let url = s.url.as_deref().unwrap_or("");
                tracing::info!(channel, agent, kind, url, "notified: {}", s.detail);
            } else {
                tracing::warn!(channel, agent, kind, "notification failed: {}", s.detail);
            }
        }
        sent
    }
}

/// Run one channel; a panic in it (a bug) becomes a failed `Sent` instead of stopping the rest.
fn guarded(channel: &str, f: impl FnOnce() -> Sent) -> Sent {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Sent::new(
            channel,
            false,
            format!("internal error in the {channel} channel (see stderr)"),
        )
    })
}

/// The agent a test message names when none is given: not a real agent, so a test issue never
/// keeps a real agent's investigation from opening its own.
pub const TEST_AGENT: &str = "phoenix-test";
pub const TEST_TITLE: &str = "test notification from phoenix";

/// `ok   github   https://github.com/acme/fleet/issues/7  issue created` or
/// `FAIL webhook  PHOENIX_WEBHOOK_URL is not set`.
pub fn render_line(s: &Sent) -> String {
    let status = if s.ok { "ok" } else { "FAIL" };
    let what = match &s.url {
        Some(url) => format!("{url}  {}", s.detail),
        None => s.detail.clone(),
    };
    format!("{status:<4} {:<8} {what}", s.channel)
}
