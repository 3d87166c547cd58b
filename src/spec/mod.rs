//! phoenix.toml: the declared fleet. Parsing, defaults, and validation with precise errors.

pub mod duration;
mod raw;
pub mod schema;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::de::{DeTable, DeValue};

use crate::diag::{Diagnostic, FileDiagnostics, Located, did_you_mean, suggest};
use raw::{
    RawAgent, RawBrief, RawClinic, RawFleet, RawGithub, RawNotify, RawRestart, RawSchedules,
    RawSpec, RawThresholds, RawTmux, RawWatchdog, RawWebhook, Spanned, Whole, fields_of,
};

pub const DEFAULT_CONFIG: &str = "phoenix.toml";

/// `[notify.webhook] retries` at most.
pub const MAX_WEBHOOK_RETRIES: u32 = 10;

/// Where `resume_command` takes the recorded session id.
pub const SESSION_ID: &str = "{session_id}";

/// The validated, effective fleet specification.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Absolute path of the phoenix.toml this came from.
    pub file: PathBuf,
    /// Directory of that file; relative paths in the spec are relative to it.
    pub dir: PathBuf,
    pub fleet: Fleet,
    pub thresholds: Thresholds,
    pub schedules: Schedules,
    pub clinic: ClinicSettings,
    pub notify: NotifySettings,
    pub watchdog: WatchdogSettings,
    pub brief: BriefSettings,
    pub agents: Vec<AgentSpec>,
    /// What is allowed but probably not meant (`cooldown` longer than `backoff_max`); shown by
    /// `validate`, `plan` and `apply`, never fatal.
    pub warnings: Vec<Located>,
}

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

/// `[notify]`: where investigation reports and failure messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifySettings {
    pub github: Option<GithubNotify>,
    pub webhook: Option<WebhookNotify>,
    /// Any program; the message arrives on its stdin.
    pub command: Option<Vec<String>>,
    /// At most one new GitHub issue per fleet (project) within this long.
    pub issue_cooldown: Duration,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            github: None,
            webhook: None,
            command: None,
            issue_cooldown: Duration::from_secs(3600),
        }
    }
}

impl NotifySettings {
    pub fn is_empty(&self) -> bool {
        self.github.is_none() && self.webhook.is_none() && self.command.is_none()
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
        }
    }
}

#[derive(Debug, Clone)]
pub struct Schedules {
    pub watchdog: Option<Schedule>,
    pub brief: Option<Schedule>,
}

/// A standard 5-field cron expression or a nickname (`@hourly`), parsed.
#[derive(Clone)]
pub struct Schedule {
    pub expr: String,
    pub cron: croner::Cron,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({:?})", self.expr)
    }
}

impl Schedule {
    /// The nicknames cron has always had (croner expands them); `@reboot` has no time.
    pub const NICKNAMES: [&'static str; 6] = [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@hourly",
    ];

    pub fn parse(expr: &str) -> Result<Schedule, String> {
        let expr = expr.trim();
        if expr.starts_with('@') {
            let lower = expr.to_ascii_lowercase();
            if !Self::NICKNAMES.contains(&lower.as_str()) {
                return Err(format!(
                    "unknown cron nickname `{expr}` ({})",
                    suggest(&lower, &Self::NICKNAMES)
                ));
            }
        }
        let fields = expr.split_whitespace().count();
        if fields != 5 && !expr.starts_with('@') {
            return Err(format!(
                "cron expression `{expr}` has {fields} field{}, expected 5",
                if fields == 1 { "" } else { "s" }
            ));
        }
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build();
        let cron = parser
            .parse(expr)
            .map_err(|e| format!("invalid cron expression `{expr}`: {e}"))?;
        Ok(Schedule {
            expr: expr.to_string(),
            cron,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cli {
    Claude,
    Codex,
    Gemini,
    Custom,
}

impl Cli {
    pub const NAMES: [&'static str; 4] = ["claude", "codex", "gemini", "custom"];

    pub fn parse(s: &str) -> Option<Cli> {
        match s {
            "claude" => Some(Cli::Claude),
            "codex" => Some(Cli::Codex),
            "gemini" => Some(Cli::Gemini),
            "custom" => Some(Cli::Custom),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Custom => "custom",
        }
    }

    /// The command used when an agent names a CLI but no command.
    fn default_command(self) -> Option<&'static str> {
        match self {
            Cli::Custom => None,
            other => Some(other.as_str()),
        }
    }
}

impl fmt::Display for Cli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestartSettings {
    #[serde(with = "human")]
    pub cooldown: Duration,
    #[serde(with = "human")]
    pub backoff_max: Duration,
    pub max_crashes: u32,
    #[serde(with = "human")]
    pub crash_window: Duration,
    /// How long a started agent has to show life (a session-start or heartbeat hook; for
    /// custom CLIs also output in its pane) before the start counts as failed.
    #[serde(with = "human")]
    pub life_deadline: Duration,
    /// Typed into a hooked CLI once it is up again after an interruption (crash, watchdog
    /// revival, a fresh start for a full context), so that the work goes on without a person.
    /// Empty: wait for a person instead.
    pub continue_prompt: String,
}

/// What a revived session is told, after the context its session-start hook gave it.
pub const DEFAULT_CONTINUE_PROMPT: &str = "[phoenix] This session was restarted after an interruption. \
Continue the task where it stopped: the context phoenix gave you at session start says where. \
Check what the interrupted work left behind and do not redo finished steps.";

impl Default for RestartSettings {
    fn default() -> Self {
        RestartSettings {
            cooldown: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            max_crashes: 5,
            crash_window: Duration::from_secs(3600),
            life_deadline: Duration::from_secs(60),
            continue_prompt: DEFAULT_CONTINUE_PROMPT.to_string(),
        }
    }
}

/// One agent with every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    pub name: String,
    pub cli: Cli,
    /// The base command as written; the wrapper rebuilds its argv from this every start.
    pub command: String,
    pub argv: Vec<String>,
    /// `resume_command` as written, and split; `{session_id}` is substituted per argument.
    pub resume_command: Option<String>,
    pub resume_argv: Option<Vec<String>>,
    pub workdir: PathBuf,
    pub env: BTreeMap<String, String>,
    pub session: String,
    pub window: String,
    pub enabled: bool,
    pub restart: RestartSettings,
    /// Snapshot .json/.toml/.yaml files before the agent edits them and restore them if the
    /// edit leaves them unparsable (installs a pre-tool hook).
    pub guard_structured_files: bool,
    /// Read the pane's output for `->continuity:` commands (`tmux pipe-pane` → `phoenix tap`).
    pub tap: bool,
    /// The `[notify]` channels this agent's reports and failure messages go to (all when
    /// `None`): `github`, `webhook`, `command`.
    pub notify: Option<Vec<String>>,
    /// `[[agent]] policy`: a Lua policy file of its own (entry points it lacks come from
    /// policies/recovery.lua).
    pub policy: Option<PathBuf>,
}

/// The part of an agent's spec that, when changed, means the running agent must be replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub cli: Cli,
    pub command: String,
    /// Left out when unset so fingerprints of agents without it do not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<String>,
    pub workdir: PathBuf,
    pub env: BTreeMap<String, String>,
    pub session: String,
    pub window: String,
}

impl LaunchSpec {
    /// A stable 64-bit FNV-1a hash of the canonical JSON form, as 16 hex digits.
    pub fn fingerprint(&self) -> String {
        crate::state::digest(&serde_json::to_vec(self).expect("launch spec serialises"))
    }

    /// This launch as an older phoenix recorded it, with `.` and `..` steps left in its
    /// workdir: equal to what phoenix.toml declares now means the same agent (no drift).
    pub fn tidied(&self) -> LaunchSpec {
        LaunchSpec {
            workdir: tidy(&self.workdir),
            ..self.clone()
        }
    }

    /// Names and values of fields that differ, for showing drift.
    pub fn diff(&self, other: &LaunchSpec) -> Vec<FieldChange> {
        let a = serde_json::to_value(self).expect("serialises");
        let b = serde_json::to_value(other).expect("serialises");
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        // Environment values are often secrets: a plan shows which changed, never what to.
        let shown = |k: &str, v: serde_json::Value| {
            if k == "env" { hide_values(v) } else { v }
        };
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| FieldChange {
                field: k.clone(),
                before: shown(k, v.clone()),
                after: shown(k, b.get(k).cloned().unwrap_or(serde_json::Value::Null)),
            })
            .collect()
    }
}

/// `{"TOKEN": "abc"}` → `{"TOKEN": "(hidden #3f2a)"}`: a short digest tells a changed value
/// from an unchanged one without showing either.
fn hide_values(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| {
                let digest = crate::state::digest(v.as_str().unwrap_or_default().as_bytes());
                (
                    k,
                    serde_json::Value::String(format!("(hidden #{})", &digest[..4])),
                )
            })
            .collect(),
        other => other,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

impl AgentSpec {
    pub fn launch(&self) -> LaunchSpec {
        LaunchSpec {
            cli: self.cli,
            command: self.command.clone(),
            resume_command: self.resume_command.clone(),
            workdir: self.workdir.clone(),
            env: self.env.clone(),
            session: self.session.clone(),
            window: self.window.clone(),
        }
    }

    /// The program name that should be running under the agent's pane, for messages.
    pub fn program(&self) -> &str {
        self.argv
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or("agent")
    }
}

impl AgentSpec {
    /// Why the agent's command cannot run here, if it cannot: not on the `PATH` it will get
    /// (its own `env` PATH, else phoenix's), or a path that is not an executable file. `None`
    /// when it can (or for `phoenix` itself, which the wrapper runs as this binary).
    pub fn command_problem(&self) -> Option<String> {
        let program = self.argv.first().map(String::as_str).unwrap_or("");
        if program == "phoenix" {
            return None;
        }
        let executable = |p: &Path| {
            p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
        };
        if program.contains('/') {
            let path = expand_path(program, &self.workdir);
            return (!executable(&path)).then(|| {
                format!(
                    "agent `{}`: command `{}` is not an executable file",
                    self.name,
                    path.display()
                )
            });
        }
        let path = self
            .env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        let found = std::env::split_paths(&path).any(|d| executable(&d.join(program)));
        (!found).then(|| {
            format!(
                "agent `{}`: command `{program}` is not on PATH (cli `{}`)",
                self.name, self.cli
            )
        })
    }
}

impl Spec {
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|a| a.name == name)
    }

    pub fn agent_names(&self) -> Vec<&str> {
        self.agents.iter().map(|a| a.name.as_str()).collect()
    }

    /// For an agent name that is not declared: the likely typo's fix, then every name.
    pub fn declared_hint(&self, name: &str) -> String {
        let names = self.agent_names();
        match did_you_mean(name, &names) {
            Some(s) => format!("did you mean `{s}`? declared: {}", names.join(", ")),
            None => format!("declared: {}", names.join(", ")),
        }
    }

    /// The state directory of one agent: `<state_dir>/agents/<name>`.
    pub fn agent_dir(&self, name: &str) -> PathBuf {
        self.fleet.state_dir.join("agents").join(name)
    }
}

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(FileDiagnostics),
}

impl LoadError {
    pub fn hint(&self) -> Option<String> {
        match self {
            LoadError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Some(
                "run `phoenix init` to create one, or point to it with --config / PHOENIX_CONFIG"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// What loading checks beyond the file itself.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Check that workdirs exist. Hooks skip this: they must work even if a workdir moved.
    pub check_filesystem: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            check_filesystem: true,
        }
    }
}

pub fn load(path: &Path) -> Result<Spec, LoadError> {
    load_with(path, LoadOptions::default())
}

pub fn load_with(path: &Path, options: LoadOptions) -> Result<Spec, LoadError> {
    load_inner(path, options, true)
}

/// The spec as `phoenix hook` needs it, on every tool call: no filesystem checks, and
/// `[schedules]` left unparsed (`Spec::schedules` is empty). Hooks never schedule anything,
/// and a typo in a cron expression must not stop every agent's state tracking.
pub fn load_for_hook(path: &Path) -> Result<Spec, LoadError> {
    load_inner(
        path,
        LoadOptions {
            check_filesystem: false,
        },
        false,
    )
}

/// The copy of the last valid phoenix.toml that wrappers keep in the fleet's state dir.
pub const LAST_GOOD_CONFIG: &str = "phoenix.toml.last-good";

/// Keep a copy of `spec`'s file in its state dir (when it changed): hooks fall back to it
/// while someone's edit leaves phoenix.toml invalid, so agents' state keeps being recorded.
pub fn remember_good(spec: &Spec) -> std::io::Result<()> {
    let copy = spec.fleet.state_dir.join(LAST_GOOD_CONFIG);
    let text = read_config(&spec.file)?.into_bytes();
    let limit = crate::state::file::STATE_FILE_LIMIT;
    if crate::state::file::read_bounded(&copy, limit)
        .ok()
        .as_deref()
        == Some(text.as_slice())
    {
        return Ok(());
    }
    // Only if it still is the file that was validated (it may have changed since).
    match std::str::from_utf8(&text) {
        Ok(source)
            if parse_inner(
                source,
                &spec.file,
                LoadOptions {
                    check_filesystem: false,
                },
                false,
            )
            .is_ok() =>
        {
            crate::state::atomic_write(&copy, &text)
        }
        _ => Ok(()),
    }
}

/// The last good copy of `path` kept in `fleet_root` (see [`remember_good`]), read as the
/// hook reads its config, with relative paths still relative to `path`.
pub fn load_last_good_for_hook(path: &Path, fleet_root: &Path) -> Option<Spec> {
    // Never through a link planted in the state dir: this text decides what runs.
    let bytes = crate::state::file::read_bounded(
        &fleet_root.join(LAST_GOOD_CONFIG),
        crate::state::file::STATE_FILE_LIMIT,
    )
    .ok()?;
    let source = String::from_utf8(bytes).ok()?;
    parse_inner(
        &source,
        &absolute(path),
        LoadOptions {
            check_filesystem: false,
        },
        false,
    )
    .ok()
}

/// A config file is read on every hook call, and an agent may be able to write the directory
/// it lives in: only a regular file (a FIFO put in its place would hang every hook), at most
/// `MAX_CONFIG_BYTES`. A symlinked config is fine: it is the operator's own.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

fn read_config(path: &Path) -> std::io::Result<String> {
    use crate::state::bounded::{self, Links, ReadError};
    bounded::read_string(path, MAX_CONFIG_BYTES, Links::Follow).map_err(|e| match e {
        ReadError::Io { source, .. } => source,
        other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
    })
}

fn load_inner(path: &Path, options: LoadOptions, schedules: bool) -> Result<Spec, LoadError> {
    let source = read_config(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = absolute(path);
    parse_inner(&source, &file, options, schedules).map_err(LoadError::Invalid)
}

/// A fleet's identity: `<name>-<8 hex digits>` from the config file's canonical path (so a
/// symlinked or relative spelling of the same file is the same fleet). A file that cannot be
/// resolved (a test's made-up path) hashes as given.
pub fn fleet_id(name: &str, file: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = std::fs::canonicalize(file).unwrap_or_else(|_| absolute(file));
    let hash = crate::state::digest(path.as_os_str().as_bytes());
    format!("{name}-{}", &hash[..8])
}

fn absolute(path: &Path) -> PathBuf {
    tidy(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// Parse and validate a phoenix.toml. `file` is used for messages and for relative paths.
pub fn parse(source: &str, file: &Path, options: LoadOptions) -> Result<Spec, FileDiagnostics> {
    parse_inner(source, file, options, true)
}

fn parse_inner(
    source: &str,
    file: &Path,
    options: LoadOptions,
    schedules: bool,
) -> Result<Spec, FileDiagnostics> {
    let fail = |mut diagnostics: Vec<Diagnostic>| {
        diagnostics.sort_by_key(|d| d.span.as_ref().map(|s| s.start));
        FileDiagnostics {
            file: file.to_path_buf(),
            source: source.to_string(),
            diagnostics,
        }
    };

    let document = DeTable::parse(source).map_err(|e| fail(vec![toml_error(&e)]))?;
    let mut diags = Vec::new();
    check_keys(document.get_ref(), Section::Root, &mut diags);

    let (raw, type_errors) = deserialize_all(source);
    let Some(raw) = raw else {
        diags.extend(type_errors);
        return Err(fail(diags));
    };
    let had_type_errors = !type_errors.is_empty();
    diags.extend(type_errors);
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let spec = Validator {
        diags: &mut diags,
        warnings: Vec::new(),
        source,
        dir: &dir,
        options,
        schedules,
    }
    .spec(raw, file);
    if diags.is_empty() && !had_type_errors {
        Ok(spec)
    } else {
        Err(fail(diags))
    }
}

/// Deserialize the document, reporting every value of the wrong type rather than the first:
/// after each type error the offending line is blanked (offsets kept) and the rest is read
/// again. The spec read without those lines still goes through validation, so one run of
/// `phoenix validate` shows every problem. `None` when the document cannot be read at all.
fn deserialize_all(source: &str) -> (Option<RawSpec>, Vec<Diagnostic>) {
    const MAX_TYPE_ERRORS: usize = 50;
    let mut text = source.to_string();
    let mut errors = Vec::new();
    loop {
        match toml::from_str::<RawSpec>(&text) {
            Ok(raw) => return (Some(raw), errors),
            Err(e) => {
                let Some(span) = e.span().filter(|_| errors.len() < MAX_TYPE_ERRORS) else {
                    errors.push(toml_error(&e));
                    return (None, errors);
                };
                let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
                let end = text[span.start..]
                    .find('\n')
                    .map_or(text.len(), |i| span.start + i);
                // Byte for byte, so that every later span still points at the original text.
                let blanked: String = text.as_bytes()[start..end]
                    .iter()
                    .map(|&b| {
                        if b.is_ascii_whitespace() {
                            b as char
                        } else {
                            ' '
                        }
                    })
                    .collect();
                let before = text.clone();
                text.replace_range(start..end, &blanked);
                // A value spanning lines cannot be cut out this way: report what we have.
                if text == before || toml::de::DeTable::parse(&text).is_err() {
                    errors.push(toml_error(&e));
                    return (None, errors);
                }
                errors.push(toml_error(&e));
            }
        }
    }
}

fn toml_error(e: &toml::de::Error) -> Diagnostic {
    let message = e.message().trim().to_string();
    let hint = if message.contains("invalid type") {
        Some("check the value's type: durations and names are quoted strings, counts are bare numbers".to_string())
    } else {
        None
    };
    let mut d = Diagnostic::new(message, e.span());
    d.hint = hint;
    d
}

/// Sections of the document whose keys are checked, each tied to the struct that reads it.
#[derive(Clone, Copy)]
enum Section {
    Root,
    Fleet,
    Defaults,
    Agent,
    Tmux,
    Restart,
    Thresholds,
    Schedules,
    Clinic,
    Notify,
    Github,
    Webhook,
    Watchdog,
    Brief,
}

impl Section {
    fn fields(self) -> &'static [&'static str] {
        match self {
            Section::Root => fields_of::<RawSpec>(),
            Section::Fleet => fields_of::<RawFleet>(),
            Section::Defaults | Section::Agent => fields_of::<RawAgent>(),
            Section::Tmux => fields_of::<RawTmux>(),
            Section::Restart => fields_of::<RawRestart>(),
            Section::Thresholds => fields_of::<RawThresholds>(),
            Section::Schedules => fields_of::<RawSchedules>(),
            Section::Clinic => fields_of::<RawClinic>(),
            Section::Notify => fields_of::<RawNotify>(),
            Section::Github => fields_of::<RawGithub>(),
            Section::Webhook => fields_of::<RawWebhook>(),
            Section::Watchdog => fields_of::<RawWatchdog>(),
            Section::Brief => fields_of::<RawBrief>(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Section::Root => "the top level",
            Section::Fleet => "[fleet]",
            Section::Defaults => "[defaults]",
            Section::Agent => "[[agent]]",
            Section::Tmux => "the `tmux` table",
            Section::Restart => "the `restart` table",
            Section::Thresholds => "[thresholds]",
            Section::Schedules => "[schedules]",
            Section::Clinic => "[clinic]",
            Section::Notify => "[notify]",
            Section::Github => "[notify.github]",
            Section::Webhook => "[notify.webhook]",
            Section::Watchdog => "[watchdog]",
            Section::Brief => "[brief]",
        }
    }

    fn child(self, key: &str) -> Option<Section> {
        match (self, key) {
            (Section::Root, "fleet") => Some(Section::Fleet),
            (Section::Root, "defaults") => Some(Section::Defaults),
            (Section::Root, "agent") => Some(Section::Agent),
            (Section::Root, "thresholds") => Some(Section::Thresholds),
            (Section::Root, "schedules") => Some(Section::Schedules),
            (Section::Root, "clinic") => Some(Section::Clinic),
            (Section::Root, "notify") => Some(Section::Notify),
            (Section::Root, "watchdog") => Some(Section::Watchdog),
            (Section::Root, "brief") => Some(Section::Brief),
            (Section::Notify, "github") => Some(Section::Github),
            (Section::Notify, "webhook") => Some(Section::Webhook),
            (Section::Defaults | Section::Agent, "tmux") => Some(Section::Tmux),
            (Section::Defaults | Section::Agent, "restart") => Some(Section::Restart),
            _ => None,
        }
    }
}

fn check_keys(table: &DeTable<'_>, section: Section, diags: &mut Vec<Diagnostic>) {
    let known = section.fields();
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        if !known.contains(&name) {
            let mut d = Diagnostic::new(
                format!("unknown key `{name}` in {}", section.label()),
                Some(key.span()),
            );
            d.hint = Some(match did_you_mean(name, known) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("known keys here: {}", known.join(", ")),
            });
            diags.push(d);
            continue;
        }
        let Some(child) = section.child(name) else {
            continue;
        };
        match value.get_ref() {
            DeValue::Table(t) => check_keys(t, child, diags),
            DeValue::Array(items) => {
                for item in items.iter() {
                    if let DeValue::Table(t) = item.get_ref() {
                        check_keys(t, child, diags);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The smallest value a duration key accepts, and what the key protects (for the hint).
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub min: Duration,
    pub why: &'static str,
}

const fn floor(millis: u64, why: &'static str) -> Floor {
    Floor {
        min: Duration::from_millis(millis),
        why,
    }
}

/// Floors of the duration keys. None has an "off": a value of zero switched its protection
/// off (`crash_window = "0s"` never counted a crash: 1,282 restarts a minute) or made phoenix
/// spin (`reconcile_interval = "0s"`). Each floor is the least that still does the key's job.
pub mod floors {
    use super::{Floor, floor};

    pub const RECONCILE_INTERVAL: Floor = floor(
        1000,
        "how often `phoenix run` reconciles the fleet; a shorter interval keeps the daemon busy",
    );
    pub const COOLDOWN: Floor = floor(
        100,
        "the wait before restarting a crashed agent (doubled per crash up to `backoff_max`)",
    );
    pub const BACKOFF_MAX: Floor = floor(100, "the longest wait between restarts");
    pub const CRASH_WINDOW: Floor = floor(
        60_000,
        "crashes within this long count towards `max_crashes`; a shorter window never stops a crash loop",
    );
    pub const LIFE_DEADLINE: Floor = floor(
        1000,
        "how long a started agent has to show life before the start counts as failed",
    );
    pub const SILENCE: Floor = floor(
        1000,
        "no sign of life (tool call, prompt, transcript write, screen change) for this long in a working turn is unhealthy; for a very patient watchdog use a long value like \"1d\"",
    );
    pub const RUNAWAY: Floor = floor(
        1000,
        "working this long without finishing a turn is reported; for no report in practice use a long value like \"7d\"",
    );
    pub const STALE_AFTER: Floor = floor(60_000, "open loops older than this are flagged stale");
    pub const RESOLVED_RETENTION: Floor = floor(
        60_000,
        "resolved items are kept this long; zero would drop them at once",
    );
    pub const EVENTS_RETENTION: Floor = floor(
        3_600_000,
        "critical_events.jsonl keeps this long; zero would delete the record of every failure",
    );
    pub const ISSUE_COOLDOWN: Floor = floor(
        1000,
        "at most one new GitHub issue per fleet within this long; zero would open one per report",
    );
    pub const TIMEOUT: Floor = floor(
        1000,
        "how long the command or request may take; zero would fail every time",
    );
}

struct Validator<'a> {
    diags: &'a mut Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    source: &'a str,
    dir: &'a Path,
    options: LoadOptions,
    /// Parse `[schedules]` (everything but hooks).
    schedules: bool,
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A valid agent (or session, window) name: letters, digits, `_` and `-`, at most 64. Names
/// end up in tmux targets, paths and hook commands, so anything else is refused.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub const NAME_HINT: &str = "use only letters, digits, `_` and `-` (at most 64 characters): names end up in tmux targets, paths and hook commands";

impl Validator<'_> {
    fn error(&mut self, message: String, span: Option<std::ops::Range<usize>>, hint: &str) {
        self.diags
            .push(Diagnostic::new(message, span).with_hint(hint.to_string()));
    }

    fn warn(&mut self, message: String, span: Option<std::ops::Range<usize>>, hint: &str) {
        self.warnings
            .push(Diagnostic::new(message, span).with_hint(hint.to_string()));
    }

    fn duration(
        &mut self,
        value: &Option<Spanned<String>>,
        what: &str,
        default: Duration,
    ) -> Duration {
        match value {
            None => default,
            Some(v) => match duration::parse(v.get_ref()) {
                Ok(d) => d,
                Err(e) => {
                    self.error(format!("{what}: {e}"), Some(v.span()), duration::HINT);
                    default
                }
            },
        }
    }

    /// A duration with a floor: zero (or anything below `floor`) would switch a protection
    /// off or make phoenix spin, so it is refused with the minimum and what the key does.
    fn duration_min(
        &mut self,
        value: &Option<Spanned<String>>,
        what: &str,
        default: Duration,
        floor: Floor,
    ) -> Duration {
        let d = self.duration(value, what, default);
        match value {
            Some(v) if d < floor.min => {
                self.error(
                    format!(
                        "`{what}` = \"{}\" is too short: the minimum is {}",
                        v.get_ref(),
                        duration::format(floor.min)
                    ),
                    Some(v.span()),
                    &format!(
                        "use at least \"{}\": {}",
                        duration::format(floor.min),
                        floor.why
                    ),
                );
                default
            }
            _ => d,
        }
    }

    /// A count with a floor (see [`Validator::duration_min`]) and a ceiling.
    fn count_in(
        &mut self,
        value: &Option<Spanned<Whole<u32>>>,
        what: &str,
        default: u32,
        range: std::ops::RangeInclusive<u32>,
        why: &str,
    ) -> u32 {
        match value {
            None => default,
            Some(v) if range.contains(&v.number()) => v.number(),
            Some(v) => {
                let bound = if v.number() < *range.start() {
                    format!("at least {}", range.start())
                } else {
                    format!("at most {}", range.end())
                };
                self.error(format!("`{what}` must be {bound}"), Some(v.span()), why);
                default
            }
        }
    }

    fn name(&mut self, value: &Spanned<String>, what: &str) -> String {
        if !valid_name(value.get_ref()) {
            self.error(
                format!("{what} `{}` is not a valid name", value.get_ref()),
                Some(value.span()),
                NAME_HINT,
            );
        }
        value.get_ref().clone()
    }

    fn schedule(
        &mut self,
        value: &Option<Spanned<String>>,
        what: &str,
        default: &str,
    ) -> Option<Schedule> {
        let (text, span) = match value {
            Some(v) if v.get_ref().trim().is_empty() || v.get_ref() == "off" => return None,
            Some(v) => (v.get_ref().as_str(), Some(v.span())),
            None => (default, None),
        };
        match Schedule::parse(text) {
            Ok(s) => Some(s),
            Err(e) => {
                self.error(
                    format!("schedule `{what}`: {e}"),
                    span,
                    "standard cron has 5 fields: minute hour day-of-month month day-of-week, e.g. \"*/5 * * * *\", or a nickname: @hourly, @daily, @weekly, @monthly, @yearly; use \"off\" to disable",
                );
                None
            }
        }
    }

    fn spec(mut self, raw: RawSpec, file: &Path) -> Spec {
        let fleet = self.fleet(&raw.fleet, file);
        let thresholds = self.thresholds(&raw.thresholds);
        let schedules = if self.schedules {
            Schedules {
                watchdog: self.schedule(&raw.schedules.watchdog, "watchdog", "*/5 * * * *"),
                brief: self.schedule(&raw.schedules.brief, "brief", "0 6 * * *"),
            }
        } else {
            Schedules {
                watchdog: None,
                brief: None,
            }
        };
        let clinic = self.clinic(&raw.clinic);
        let notify = self.notify(&raw.notify);
        let watchdog = self.watchdog(&raw.watchdog);
        let brief = self.brief(&raw.brief);
        if let Some(name) = &raw.defaults.name {
            self.error(
                "`name` is not allowed in [defaults]".into(),
                Some(name.span()),
                "each [[agent]] needs its own name",
            );
        }
        let default_restart =
            self.restart(raw.defaults.restart.as_ref(), &RestartSettings::default());

        let mut agents: Vec<AgentSpec> = Vec::new();
        let mut seen_names: HashMap<String, std::ops::Range<usize>> = HashMap::new();
        let mut seen_windows: HashMap<(String, String), String> = HashMap::new();
        for raw_agent in &raw.agents {
            let span = raw_agent.span();
            let Some(agent) = self.agent(
                raw_agent.get_ref(),
                span.clone(),
                &raw.defaults,
                &fleet,
                &default_restart,
            ) else {
                continue;
            };
            let name_span = raw_agent.get_ref().name.as_ref().map(|n| n.span());
            if let Some(first) = seen_names.get(&agent.name) {
                let (line, _) = crate::diag::line_col(self.source, first.start);
                self.diags.push(
                    Diagnostic::new(
                        format!("duplicate agent name `{}`", agent.name),
                        name_span.clone(),
                    )
                    .with_hint(format!(
                        "first defined on line {line}; agent names must be unique"
                    )),
                );
                continue;
            }
            seen_names.insert(
                agent.name.clone(),
                name_span.clone().unwrap_or(span.clone()),
            );
            let key = (agent.session.clone(), agent.window.clone());
            if let Some(other) = seen_windows.get(&key) {
                self.diags.push(
                    Diagnostic::new(
                        format!(
                            "agent `{}` uses tmux window `{}:{}`, already used by agent `{other}`",
                            agent.name, key.0, key.1
                        ),
                        name_span,
                    )
                    .with_hint("give each agent its own `tmux = { session, window }`"),
                );
                continue;
            }
            seen_windows.insert(key, agent.name.clone());
            agents.push(agent);
        }

        let warnings = if self.warnings.is_empty() {
            Vec::new()
        } else {
            FileDiagnostics {
                file: file.to_path_buf(),
                source: self.source.to_string(),
                diagnostics: std::mem::take(&mut self.warnings),
            }
            .located()
        };
        Spec {
            warnings,
            file: file.to_path_buf(),
            dir: self.dir.to_path_buf(),
            fleet,
            thresholds,
            schedules,
            clinic,
            notify,
            watchdog,
            brief,
            agents,
        }
    }

    fn brief(&mut self, raw: &RawBrief) -> BriefSettings {
        let d = BriefSettings::default();
        let command = match &raw.command {
            Some(c) if c.get_ref().is_empty() || c.get_ref()[0].trim().is_empty() => {
                self.error(
                    "[brief]: `command` is empty".into(),
                    Some(c.span()),
                    "the program and its arguments, e.g. [\"claude\", \"-p\"]; leave it out for the built-in generator",
                );
                None
            }
            Some(c) => Some(c.get_ref().clone()),
            None => None,
        };
        BriefSettings {
            command,
            timeout: self.duration_min(&raw.timeout, "timeout", d.timeout, floors::TIMEOUT),
        }
    }

    fn notify(&mut self, raw: &RawNotify) -> NotifySettings {
        let d = NotifySettings::default();
        let github = raw.github.as_ref().and_then(|g| {
            let repo = g.get_ref().repo.as_ref();
            let valid = repo.is_some_and(|r| {
                let parts: Vec<&str> = r.get_ref().split('/').collect();
                parts.len() == 2
                    && parts.iter().all(|p| {
                        !p.is_empty()
                            && p.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    })
            });
            if !valid {
                self.error(
                    "[notify.github]: `repo` must be `owner/name`".into(),
                    Some(repo.map(|r| r.span()).unwrap_or(g.span())),
                    "e.g. github = { repo = \"acme/fleet\" }; issues are created with the gh CLI",
                );
                return None;
            }
            Some(GithubNotify {
                repo: repo?.get_ref().clone(),
                labels: g.get_ref().labels.clone().unwrap_or_default(),
            })
        });
        let webhook = raw.webhook.as_ref().and_then(|w| self.webhook(w));
        let command = match &raw.command {
            Some(c) if c.get_ref().is_empty() || c.get_ref()[0].trim().is_empty() => {
                self.error(
                    "[notify]: `command` is empty".into(),
                    Some(c.span()),
                    "the program and its arguments, e.g. [\"notify-send\", \"phoenix\"]; it gets the message on stdin",
                );
                None
            }
            Some(c) => Some(c.get_ref().clone()),
            None => None,
        };
        NotifySettings {
            github,
            webhook,
            command,
            issue_cooldown: self.duration_min(
                &raw.issue_cooldown,
                "issue_cooldown",
                d.issue_cooldown,
                floors::ISSUE_COOLDOWN,
            ),
        }
    }

    fn webhook(&mut self, raw: &Spanned<RawWebhook>) -> Option<WebhookNotify> {
        let w = raw.get_ref();
        let url_env = match &w.url_env {
            Some(v) if is_env_name(v.get_ref()) => v.get_ref().clone(),
            other => {
                self.error(
                    "[notify.webhook]: `url_env` must name an environment variable".into(),
                    Some(other.as_ref().map(|v| v.span()).unwrap_or(raw.span())),
                    "the URL is a secret: put it in the environment, e.g. url_env = \"PHOENIX_WEBHOOK_URL\"",
                );
                return None;
            }
        };
        let format = match w.format.as_ref().map(|f| (f.get_ref().as_str(), f.span())) {
            None | Some(("json", _)) => WebhookFormat::Json,
            Some(("slack", _)) => WebhookFormat::Slack,
            Some(("telegram", _)) => WebhookFormat::Telegram,
            Some((other, span)) => {
                self.error(
                    format!("[notify.webhook]: unknown format `{other}`"),
                    Some(span),
                    &suggest(other, &["json", "slack", "telegram"]),
                );
                return None;
            }
        };
        if format == WebhookFormat::Telegram && w.chat_id.is_none() {
            self.error(
                "[notify.webhook]: format `telegram` needs `chat_id`".into(),
                Some(raw.span()),
                "the chat the bot writes to, e.g. chat_id = \"-1001234567\"",
            );
            return None;
        }
        Some(WebhookNotify {
            url_env,
            format,
            chat_id: w.chat_id.as_ref().map(|c| c.get_ref().clone()),
            timeout: self.duration_min(
                &w.timeout,
                "timeout",
                Duration::from_secs(10),
                floors::TIMEOUT,
            ),
            // Each retry waits longer and blocks the watchdog pass: a huge count would hang it.
            retries: self.count_in(
                &w.retries,
                "retries",
                1,
                0..=MAX_WEBHOOK_RETRIES,
                "extra attempts after a failed POST (default 1)",
            ),
        })
    }

    fn watchdog(&mut self, raw: &RawWatchdog) -> WatchdogSettings {
        let d = WatchdogSettings::default();
        let mut screen_patterns = BTreeMap::new();
        if let Some(p) = &raw.screen_patterns {
            for (cli, phrases) in p.get_ref() {
                const KEYS: [&str; 5] = ["claude", "codex", "gemini", "custom", "all"];
                if !KEYS.contains(&cli.as_str()) {
                    self.error(
                        format!("[watchdog] screen_patterns: unknown CLI `{cli}`"),
                        Some(p.span()),
                        &suggest(cli, &KEYS),
                    );
                    continue;
                }
                if phrases.iter().any(|s| s.trim().is_empty()) {
                    self.error(
                        format!(
                            "[watchdog] screen_patterns.{cli}: an empty phrase matches every screen"
                        ),
                        Some(p.span()),
                        "remove the empty string",
                    );
                    continue;
                }
                screen_patterns.insert(cli.clone(), phrases.clone());
            }
        }
        WatchdogSettings {
            max_revivals: raw
                .max_revivals
                .as_ref()
                .map(|v| v.number())
                .unwrap_or(d.max_revivals),
            screen_patterns,
        }
    }

    fn clinic(&mut self, raw: &RawClinic) -> ClinicSettings {
        let d = ClinicSettings::default();
        let diagnose_command = match &raw.diagnose_command {
            Some(c) if c.get_ref().is_empty() || c.get_ref()[0].trim().is_empty() => {
                self.error(
                    "`diagnose_command` is empty".into(),
                    Some(c.span()),
                    "the program and its arguments, e.g. [\"claude\", \"-p\"]; leave it out to diagnose by patterns",
                );
                None
            }
            Some(c) => Some(c.get_ref().clone()),
            None => None,
        };
        ClinicSettings {
            max_recoveries: raw
                .max_recoveries
                .as_ref()
                .map(|v| v.number())
                .unwrap_or(d.max_recoveries),
            diagnose_command,
            diagnose_timeout: self.duration_min(
                &raw.diagnose_timeout,
                "diagnose_timeout",
                d.diagnose_timeout,
                floors::TIMEOUT,
            ),
        }
    }

    fn fleet(&mut self, raw: &RawFleet, file: &Path) -> Fleet {
        let name = match &raw.name {
            Some(n) => self.name(n, "fleet name"),
            None => "phoenix".to_string(),
        };
        let id = fleet_id(&name, file);
        let state_dir = match &raw.state_dir {
            Some(d) if d.get_ref().trim().is_empty() => {
                self.error(
                    "`state_dir` is empty".into(),
                    Some(d.span()),
                    "leave it out to use `.phoenix` next to phoenix.toml",
                );
                self.dir.join(".phoenix")
            }
            Some(d) => self.path(d.get_ref()),
            None => self.dir.join(".phoenix"),
        };
        let tmux_socket = match &raw.tmux_socket {
            Some(s) => {
                let ok = !s.get_ref().is_empty()
                    && s.get_ref().len() <= 64
                    && s.get_ref()
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
                    && !s.get_ref().starts_with('.');
                if !ok {
                    self.error(
                        format!("tmux socket name `{}` is not valid", s.get_ref()),
                        Some(s.span()),
                        "a socket name is a plain file name: letters, digits, `_`, `-`, `.`",
                    );
                }
                s.get_ref().clone()
            }
            None => format!("phoenix-{id}"),
        };
        let legacy_socket = raw.tmux_socket.is_none().then(|| format!("phoenix-{name}"));
        // Unlike the protections below, a too short interval only costs CPU: phoenix raises
        // it to the floor and says so instead of refusing the file.
        let mut reconcile_interval = self.duration(
            &raw.reconcile_interval,
            "reconcile_interval",
            Duration::from_secs(30),
        );
        let floor = floors::RECONCILE_INTERVAL;
        if let Some(v) = &raw.reconcile_interval
            && reconcile_interval < floor.min
        {
            self.warn(
                format!(
                    "`reconcile_interval` = \"{}\" is below the minimum: phoenix uses {}",
                    v.get_ref(),
                    duration::format(floor.min)
                ),
                Some(v.span()),
                &format!(
                    "write at least \"{}\": {}",
                    duration::format(floor.min),
                    floor.why
                ),
            );
            reconcile_interval = floor.min;
        }
        Fleet {
            name,
            id,
            state_dir,
            socket: tmux_socket,
            legacy_socket,
            reconcile_interval,
        }
    }

    fn thresholds(&mut self, raw: &RawThresholds) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            silence: self.duration_min(&raw.silence, "silence", d.silence, floors::SILENCE),
            error_cascade: self.count_in(
                &raw.error_cascade,
                "error_cascade",
                d.error_cascade,
                1..=u32::MAX,
                "failed tool calls in a row beyond this many are a cascade (default 5); 0 would revive an agent for a single failed call",
            ),
            runaway: self.duration_min(&raw.runaway, "runaway", d.runaway, floors::RUNAWAY),
            stale_after: self.duration_min(
                &raw.stale_after,
                "stale_after",
                d.stale_after,
                floors::STALE_AFTER,
            ),
            resolved_retention: self.duration_min(
                &raw.resolved_retention,
                "resolved_retention",
                d.resolved_retention,
                floors::RESOLVED_RETENTION,
            ),
            repeat: match &raw.repeat {
                Some(v) if v.number() < 2 => {
                    self.error(
                        "`repeat` must be at least 2".into(),
                        Some(v.span()),
                        "how many identical tool calls in a row make a loop (default 5)",
                    );
                    d.repeat
                }
                Some(v) => v.number(),
                None => d.repeat,
            },
            max_tokens: match &raw.max_tokens {
                Some(v) if v.number() == 0 => {
                    self.error(
                        "`max_tokens` must be at least 1".into(),
                        Some(v.span()),
                        "tokens per session before the watchdog stops the agent; leave it out for no limit",
                    );
                    d.max_tokens
                }
                other => other.as_ref().map(|v| v.number()),
            },
            events_retention: self.duration_min(
                &raw.events_retention,
                "events_retention",
                d.events_retention,
                floors::EVENTS_RETENTION,
            ),
        }
    }

    fn restart(&mut self, raw: Option<&RawRestart>, base: &RestartSettings) -> RestartSettings {
        let Some(raw) = raw else {
            return base.clone();
        };
        let max_crashes = match &raw.max_crashes {
            Some(v) if v.number() == 0 => {
                self.error(
                    "`max_crashes` must be at least 1".into(),
                    Some(v.span()),
                    "the number of crashes within `crash_window` before safe mode",
                );
                base.max_crashes
            }
            Some(v) => v.number(),
            None => base.max_crashes,
        };
        let restart = RestartSettings {
            cooldown: self.duration_min(&raw.cooldown, "cooldown", base.cooldown, floors::COOLDOWN),
            backoff_max: self.duration_min(
                &raw.backoff_max,
                "backoff_max",
                base.backoff_max,
                floors::BACKOFF_MAX,
            ),
            max_crashes,
            crash_window: self.duration_min(
                &raw.crash_window,
                "crash_window",
                base.crash_window,
                floors::CRASH_WINDOW,
            ),
            life_deadline: self.duration_min(
                &raw.life_deadline,
                "life_deadline",
                base.life_deadline,
                floors::LIFE_DEADLINE,
            ),
            continue_prompt: raw
                .continue_prompt
                .as_ref()
                .map(|p| p.get_ref().trim().to_string())
                .unwrap_or_else(|| base.continue_prompt.clone()),
        };
        // Said where one of the two is written, so an agent inheriting both is not warned
        // about again.
        if restart.cooldown > restart.backoff_max
            && let Some(written) = raw.cooldown.as_ref().or(raw.backoff_max.as_ref())
        {
            let (cooldown, backoff_max) = (
                duration::format(restart.cooldown),
                duration::format(restart.backoff_max),
            );
            self.warn(
                format!(
                    "`cooldown` ({cooldown}) is longer than `backoff_max` ({backoff_max}): every restart waits {backoff_max}"
                ),
                Some(written.span()),
                "the wait starts at `cooldown` and doubles per crash up to `backoff_max`: raise `backoff_max` or lower `cooldown`",
            );
        }
        restart
    }

    /// A path from the spec: `~` is the home directory, relative means next to phoenix.toml.
    fn path(&self, text: &str) -> PathBuf {
        expand_path(text, self.dir)
    }

    fn agent(
        &mut self,
        raw: &RawAgent,
        span: std::ops::Range<usize>,
        defaults: &RawAgent,
        fleet: &Fleet,
        default_restart: &RestartSettings,
    ) -> Option<AgentSpec> {
        let errors_before = self.diags.len();
        let Some(raw_name) = &raw.name else {
            self.error(
                "[[agent]] has no `name`".into(),
                Some(span.start..span.start + 1),
                "add `name = \"…\"` (letters, digits, `_`, `-`)",
            );
            return None;
        };
        let name = self.name(raw_name, "agent name");

        let cli_value = raw.cli.as_ref().or(defaults.cli.as_ref());
        let cli = match cli_value {
            None => Cli::Custom,
            Some(v) => match Cli::parse(v.get_ref()) {
                Some(c) => c,
                None => {
                    self.error(
                        format!("agent `{name}`: unknown cli `{}`", v.get_ref()),
                        Some(v.span()),
                        &suggest(v.get_ref(), &Cli::NAMES),
                    );
                    Cli::Custom
                }
            },
        };

        let command_value = raw.command.as_ref().or(defaults.command.as_ref());
        let (command, argv) = match command_value {
            Some(c) => match shlex::split(c.get_ref()) {
                Some(argv) if !argv.is_empty() => (c.get_ref().clone(), argv),
                Some(_) => {
                    self.error(
                        format!("agent `{name}`: `command` is empty"),
                        Some(c.span()),
                        "the program to run, e.g. \"claude --model opus\"",
                    );
                    (String::new(), Vec::new())
                }
                None => {
                    self.error(format!("agent `{name}`: `command` has unbalanced quotes"), Some(c.span()), "the command is split like a shell would, but never run by one; close every quote");
                    (String::new(), Vec::new())
                }
            },
            None => match cli.default_command() {
                Some(c) => (c.to_string(), vec![c.to_string()]),
                None => {
                    self.error(
                        format!("agent `{name}` has no `command`"),
                        Some(raw_name.span()),
                        "a `custom` agent needs `command = \"…\"`",
                    );
                    (String::new(), Vec::new())
                }
            },
        };

        let resume_value = raw
            .resume_command
            .as_ref()
            .or(defaults.resume_command.as_ref());
        let (resume_command, resume_argv) = match resume_value {
            None => (None, None),
            Some(c) => match shlex::split(c.get_ref()) {
                Some(argv) if argv.iter().any(|a| a.contains(SESSION_ID)) => {
                    (Some(c.get_ref().clone()), Some(argv))
                }
                // Without the placeholder every "resume" would start a new session: the
                // agent would lose its conversation on each restart while phoenix said
                // "resumed".
                Some(argv) if !argv.is_empty() => {
                    self.error(
                        format!("agent `{name}`: `resume_command` has no `{SESSION_ID}`"),
                        Some(c.span()),
                        &format!(
                            "phoenix puts the recorded session id where `{SESSION_ID}` stands, e.g. \"{} --resume {SESSION_ID}\"",
                            argv[0]
                        ),
                    );
                    (None, None)
                }
                Some(_) => {
                    self.error(
                        format!("agent `{name}`: `resume_command` is empty"),
                        Some(c.span()),
                        "leave it out, or give the resume form, e.g. \"my-cli --resume {session_id}\"",
                    );
                    (None, None)
                }
                None => {
                    self.error(
                        format!("agent `{name}`: `resume_command` has unbalanced quotes"),
                        Some(c.span()),
                        "the command is split like a shell would, but never run by one; close every quote",
                    );
                    (None, None)
                }
            },
        };

        let workdir = match raw.workdir.as_ref().or(defaults.workdir.as_ref()) {
            Some(w) => {
                let path = self.path(w.get_ref());
                if self.options.check_filesystem {
                    if !path.exists() {
                        self.error(
                            format!("agent `{name}`: workdir `{}` does not exist", path.display()),
                            Some(w.span()),
                            "create the directory or fix the path (relative paths are relative to phoenix.toml)",
                        );
                    } else if !path.is_dir() {
                        self.error(
                            format!(
                                "agent `{name}`: workdir `{}` is not a directory",
                                path.display()
                            ),
                            Some(w.span()),
                            "point `workdir` at a directory",
                        );
                    }
                }
                path
            }
            None => self.dir.to_path_buf(),
        };

        let mut env = BTreeMap::new();
        for table in [defaults.env.as_ref(), raw.env.as_ref()]
            .into_iter()
            .flatten()
        {
            for (k, v) in table {
                let key = k.get_ref();
                let valid = !key.is_empty()
                    && !key.starts_with(|c: char| c.is_ascii_digit())
                    && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !valid {
                    self.error(
                        format!("agent `{name}`: `{key}` is not a valid environment variable name"),
                        Some(k.span()),
                        "use letters, digits and `_`, not starting with a digit",
                    );
                }
                if v.get_ref().contains('\0') {
                    self.error(
                        format!("agent `{name}`: env `{key}` contains a NUL byte"),
                        Some(v.span()),
                        "remove it",
                    );
                }
                env.insert(key.clone(), v.get_ref().clone());
            }
        }

        let tmux_default = defaults.tmux.as_ref();
        let session = match raw
            .tmux
            .as_ref()
            .and_then(|t| t.session.as_ref())
            .or(tmux_default.and_then(|t| t.session.as_ref()))
        {
            Some(s) => self.name(s, "tmux session"),
            None => fleet.name.clone(),
        };
        let window = match raw.tmux.as_ref().and_then(|t| t.window.as_ref()) {
            Some(w) => self.name(w, "tmux window"),
            None => name.clone(),
        };
        let enabled = raw.enabled.or(defaults.enabled).unwrap_or(true);
        let restart = self.restart(raw.restart.as_ref(), default_restart);
        let tap = raw.tap.or(defaults.tap).unwrap_or(true);
        let notify = match raw.notify.as_ref().or(defaults.notify.as_ref()) {
            Some(list) => {
                const CHANNELS: [&str; 3] = ["github", "webhook", "command"];
                let unknown: Vec<&String> = list
                    .get_ref()
                    .iter()
                    .filter(|c| !CHANNELS.contains(&c.as_str()))
                    .collect();
                if let Some(bad) = unknown.first() {
                    self.error(
                        format!("agent `{name}`: unknown notify channel `{bad}`"),
                        Some(list.span()),
                        &format!(
                            "{} (channels are configured in [notify])",
                            suggest(bad, &CHANNELS)
                        ),
                    );
                }
                Some(list.get_ref().clone())
            }
            None => None,
        };
        let guard_structured_files = raw
            .guard_structured_files
            .or(defaults.guard_structured_files)
            .unwrap_or(false);
        let policy = match raw.policy.as_ref().or(defaults.policy.as_ref()) {
            Some(p) if p.get_ref().trim().is_empty() => {
                self.error(
                    format!("agent `{name}`: `policy` is empty"),
                    Some(p.span()),
                    "a Lua file, e.g. \"policies/careful.lua\"; leave it out for policies/recovery.lua",
                );
                None
            }
            Some(p) => {
                let path = self.path(p.get_ref());
                if self.options.check_filesystem && !path.is_file() {
                    self.error(
                        format!(
                            "agent `{name}`: policy `{}` does not exist",
                            path.display()
                        ),
                        Some(p.span()),
                        "create the file or fix the path (relative paths are relative to phoenix.toml)",
                    );
                }
                Some(path)
            }
            None => None,
        };

        if self.diags.len() > errors_before {
            return None;
        }
        Some(AgentSpec {
            name,
            cli,
            command,
            argv,
            resume_command,
            resume_argv,
            workdir,
            env,
            session,
            window,
            enabled,
            restart,
            guard_structured_files,
            tap,
            notify,
            policy,
        })
    }
}

/// Expand `~` and resolve relative paths against `base`.
pub fn expand_path(text: &str, base: &Path) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    if text == "~" {
        if let Some(h) = home() {
            return h;
        }
    } else if let Some(rest) = text.strip_prefix("~/")
        && let Some(h) = home()
    {
        return h.join(rest);
    }
    let p = PathBuf::from(text);
    tidy(&if p.is_absolute() { p } else { base.join(p) })
}

/// `/srv/./a/b/../c` → `/srv/a/c`, without asking the filesystem to resolve links: `.` goes,
/// and `x/..` goes unless `x` is a symlink (the kernel would then go up from the link's
/// target, so the `..` stays and the path means what it meant).
pub fn tidy(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::RootDir) => {}
                Some(Component::Normal(_))
                    if !out
                        .symlink_metadata()
                        .is_ok_and(|m| m.file_type().is_symlink()) =>
                {
                    out.pop();
                }
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

mod human {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::duration::format(*d))
    }
}

#[cfg(test)]
mod tests;
