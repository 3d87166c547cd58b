//! The fleet-wide sections of phoenix.toml once validated: `[fleet]`, `[thresholds]`,
//! `[clinic]`, `[notify]`, `[watchdog]`, `[brief]` and `[telemetry]`, with their defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// `[notify.webhook] retries` at most.
pub const MAX_WEBHOOK_RETRIES: u32 = 10;

/// `[brief]`: how briefs are generated (the `brief` schedule, `phoenix brief --generate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BriefSettings {
    /// Gets the rendered prompt on stdin; answers with the brief, a line `===STATE_JSON===`
    /// and a JSON object. The built-in generator when absent.
    pub command: Option<Vec<String>>,
    pub timeout: Duration,
}

impl Default for BriefSettings {
    fn default() -> Self {
        BriefSettings {
            command: None,
            timeout: Duration::from_secs(300),
        }
    }
}

/// `[telemetry]`: where phoenix exports its events over OpenTelemetry (off by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// The OTLP/HTTP base URL, without a trailing `/`: logs go to `<it>/v1/logs`, spans to
    /// `<it>/v1/traces`, metrics to `<it>/v1/metrics` (as `OTEL_EXPORTER_OTLP_ENDPOINT` is
    /// read by the OpenTelemetry SDKs).
    pub otlp_endpoint: Option<String>,
    /// How often the fleet's metrics (those of `/metrics`) are sampled and exported.
    pub metrics_interval: Duration,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings {
            otlp_endpoint: None,
            metrics_interval: Duration::from_secs(60),
        }
    }
}

/// `[notify]`: where investigation reports and failure messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifySettings {
    pub github: Option<GithubNotify>,
    pub webhook: Option<WebhookNotify>,
    /// Any program; the message arrives on its stdin.
    pub command: Option<Vec<String>>,
    /// At most one new GitHub issue per fleet (project) within this long.
    pub issue_cooldown: Duration,
    /// A push to an ntfy topic.
    pub ntfy: Option<NtfyNotify>,
    /// At most one "needs a human" notification per agent within this long.
    pub input_cooldown: Duration,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            github: None,
            webhook: None,
            command: None,
            issue_cooldown: Duration::from_secs(3600),
            ntfy: None,
            input_cooldown: Duration::from_secs(600),
        }
    }
}

impl NotifySettings {
    pub fn is_empty(&self) -> bool {
        self.github.is_none()
            && self.webhook.is_none()
            && self.command.is_none()
            && self.ntfy.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubNotify {
    /// `owner/name`.
    pub repo: String,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookFormat {
    /// `{"title", "text", "agent", "fleet", "kind", "url"}`.
    Json,
    /// `{"text": …}` (Slack incoming webhooks and compatible).
    Slack,
    /// `{"chat_id": …, "text": …}` (Telegram's sendMessage).
    Telegram,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookNotify {
    /// The environment variable holding the URL (a secret: never written to config or logs).
    pub url_env: String,
    pub format: WebhookFormat,
    pub chat_id: Option<String>,
    pub timeout: Duration,
    /// Extra attempts after a failed one.
    pub retries: u32,
}

/// `[notify] ntfy = { … }`: a push to an ntfy topic (ntfy.sh or a server of your own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NtfyNotify {
    /// The topic URL written in phoenix.toml.
    pub url: Option<String>,
    /// The environment variable holding the topic URL (a secret topic); when it is set, it
    /// wins over `url`. At least one of the two is given.
    pub url_env: Option<String>,
    /// 1 (min) to 5 (urgent).
    pub priority: u8,
    /// Where tapping the notification leads; the dashboard of a running `phoenix serve` when
    /// not set.
    pub click: Option<String>,
    /// The environment variable holding an access token.
    pub token_env: Option<String>,
    pub timeout: Duration,
}

/// `[watchdog]`: how the watchdog heals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchdogSettings {
    /// Revivals per task; a failure after that is unrecoverable.
    pub max_revivals: u32,
    /// Extra "stuck on screen" phrases per CLI (`claude`, `codex`, `gemini`, `custom`, or `all`),
    /// on top of the built-in ones.
    pub screen_patterns: BTreeMap<String, Vec<String>>,
}

impl Default for WatchdogSettings {
    fn default() -> Self {
        WatchdogSettings {
            max_revivals: 1,
            screen_patterns: BTreeMap::new(),
        }
    }
}

/// `[clinic]`: the recovery pipeline's limits and its optional external diagnostician.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClinicSettings {
    /// Recoveries per task before the Clinic aborts (safe mode + notification).
    pub max_recoveries: u32,
    /// Given the rendered TraumaContext on stdin, answers with a JSON diagnosis.
    pub diagnose_command: Option<Vec<String>>,
    pub diagnose_timeout: Duration,
}

impl Default for ClinicSettings {
    fn default() -> Self {
        ClinicSettings {
            max_recoveries: 2,
            diagnose_command: None,
            diagnose_timeout: Duration::from_secs(120),
        }
    }
}

/// What `phoenix run` does when phoenix.toml is edited (`[fleet] reload`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reload {
    /// Reconcile toward the edited file at once.
    #[default]
    Apply,
    /// Log the plan the edit makes and go on reconciling toward the last applied file until
    /// the operator's `phoenix apply`.
    Plan,
}

impl Reload {
    pub const NAMES: [&'static str; 2] = ["apply", "plan"];

    pub fn parse(text: &str) -> Option<Reload> {
        match text {
            "apply" => Some(Reload::Apply),
            "plan" => Some(Reload::Plan),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Fleet {
    pub name: String,
    /// Who owns a pane: the fleet name plus a short hash of phoenix.toml's canonical path, so
    /// two projects with the same fleet (and agent) names never take each other's panes, even
    /// on one tmux server. Every pane phoenix starts carries it (`@phoenix_fleet`).
    pub id: String,
    pub state_dir: PathBuf,
    /// Defaults to `phoenix-<id>`: a server of this fleet's own.
    pub socket: String,
    /// When no `tmux_socket` is set: the one earlier versions defaulted to (`phoenix-<name>`),
    /// where this fleet's agents may still run after an upgrade.
    pub legacy_socket: Option<String>,
    pub reconcile_interval: Duration,
    /// What the daemon does with an edited phoenix.toml.
    pub reload: Reload,
    /// `ssh -F` for reaching the hosts; `None`: ssh's own config.
    pub ssh_config: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Thresholds {
    #[serde(with = "human")]
    pub silence: Duration,
    pub error_cascade: u32,
    #[serde(with = "human")]
    pub runaway: Duration,
    #[serde(with = "human")]
    pub stale_after: Duration,
    #[serde(with = "human")]
    pub resolved_retention: Duration,
    /// The same tool call this many times in a row is a repetition loop.
    pub repeat: u32,
    /// Tokens per session before the watchdog stops the agent (off when `None`).
    pub max_tokens: Option<u64>,
    /// critical_events.jsonl keeps this long.
    #[serde(with = "human")]
    pub events_retention: Duration,
    /// Idle at its prompt with open loops for this long: the agent needs a person.
    #[serde(with = "human")]
    pub waiting: Duration,
}

impl From<&Thresholds> for crate::state::Retention {
    fn from(t: &Thresholds) -> Self {
        crate::state::Retention {
            stale_after: t.stale_after,
            resolved_retention: t.resolved_retention,
        }
    }
}

impl Default for crate::state::Retention {
    fn default() -> Self {
        Self::from(&Thresholds::default())
    }
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            silence: Duration::from_secs(10 * 60),
            error_cascade: 5,
            runaway: Duration::from_secs(2 * 3600),
            stale_after: Duration::from_secs(14 * 86_400),
            resolved_retention: Duration::from_secs(7 * 86_400),
            repeat: 5,
            max_tokens: None,
            events_retention: Duration::from_secs(30 * 86_400),
            waiting: Duration::from_secs(30 * 60),
        }
    }
}

/// `[prices."<model>"]`: what a model costs, in USD per million tokens of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    pub cache_read: f64,
}

/// `budget = { tokens_per_day, usd_per_day }` of an agent: what it may spend in a day (the
/// local calendar day) before the watchdog stops it for a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Budget {
    pub tokens_per_day: Option<u64>,
    /// Finite and above zero (validated), so equality is that of the numbers.
    pub usd_per_day: Option<f64>,
}

impl Eq for Budget {}

/// Durations serialised the way phoenix.toml writes them ("10m").
pub(super) mod human {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::spec::duration::format(*d))
    }
}
