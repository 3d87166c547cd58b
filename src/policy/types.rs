//! The entry points' inputs and outputs as plain Rust types. Inputs go to Lua through serde;
//! outputs come back as JSON and are checked field by field so a bad return names its field.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::diag::did_you_mean;
use crate::spec::{AgentSpec, Spec};

/// Durations cross into Lua as seconds (a number), the unit people write policies in.
pub mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        super::duration_value(&v).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_f64(d.as_secs_f64()),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            match Option::<serde_json::Value>::deserialize(d)? {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => super::super::duration_value(&v)
                    .map(Some)
                    .map_err(serde::de::Error::custom),
            }
        }
    }
}

/// A duration given as seconds (number) or as text like `"30s"`.
fn duration_value(v: &Value) -> Result<Duration, String> {
    match v {
        Value::Number(n) => {
            let secs = n.as_f64().unwrap_or(-1.0);
            if secs.is_finite() && (0.0..=1e9).contains(&secs) {
                Ok(Duration::from_secs_f64(secs))
            } else {
                Err(format!(
                    "`{n}` is not a number of seconds between 0 and 1e9"
                ))
            }
        }
        Value::String(s) => crate::spec::duration::parse(s),
        other => Err(format!(
            "expected seconds (a number) or a duration like \"30s\", got {}",
            type_name(other)
        )),
    }
}

/// Restart settings as a policy sees them (durations in seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RestartInfo {
    /// Which exits are followed by a start: "on-failure", "always" or "never".
    pub when: crate::spec::RestartWhen,
    #[serde(with = "seconds")]
    pub cooldown: Duration,
    #[serde(with = "seconds")]
    pub backoff_max: Duration,
    pub max_crashes: u32,
    #[serde(with = "seconds")]
    pub crash_window: Duration,
}

impl Default for RestartInfo {
    fn default() -> Self {
        RestartInfo::from(&crate::spec::RestartSettings::default())
    }
}

impl From<&crate::spec::RestartSettings> for RestartInfo {
    fn from(r: &crate::spec::RestartSettings) -> Self {
        RestartInfo {
            when: r.when,
            cooldown: r.cooldown,
            backoff_max: r.backoff_max,
            max_crashes: r.max_crashes,
            crash_window: r.crash_window,
        }
    }
}

/// The watchdog thresholds as a policy sees them (durations in seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThresholdInfo {
    #[serde(with = "seconds")]
    pub silence: Duration,
    pub error_cascade: u32,
    #[serde(with = "seconds")]
    pub runaway: Duration,
}

impl Default for ThresholdInfo {
    fn default() -> Self {
        ThresholdInfo::from(&crate::spec::Thresholds::default())
    }
}

impl From<&crate::spec::Thresholds> for ThresholdInfo {
    fn from(t: &crate::spec::Thresholds) -> Self {
        ThresholdInfo {
            silence: t.silence,
            error_cascade: t.error_cascade,
            runaway: t.runaway,
        }
    }
}

/// The agent, as every entry point sees it: who it is and the limits it runs under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentInfo {
    pub name: String,
    pub cli: String,
    /// The policy file chosen with `[[agent]] policy`, relative to phoenix.toml as written.
    pub policy: Option<String>,
    pub restart: RestartInfo,
    pub thresholds: ThresholdInfo,
    pub max_recoveries: u32,
    /// Where to fix the agent's model when it cannot be used: the flag in its `command`, or
    /// the CLI's settings it came from (`agent_cli::model_fix`).
    pub model_fix: String,
}

impl Default for AgentInfo {
    fn default() -> Self {
        AgentInfo {
            name: "agent".into(),
            cli: "custom".into(),
            policy: None,
            restart: RestartInfo::default(),
            thresholds: ThresholdInfo::default(),
            max_recoveries: 2,
            model_fix: crate::agent_cli::model_fix(crate::spec::Cli::Custom, &[]),
        }
    }
}

impl AgentInfo {
    pub fn from_spec(spec: &Spec, agent: &AgentSpec) -> AgentInfo {
        AgentInfo {
            name: agent.name.clone(),
            cli: agent.cli.to_string(),
            policy: agent
                .policy
                .as_ref()
                .map(|p| p.strip_prefix(&spec.dir).unwrap_or(p).display().to_string()),
            restart: RestartInfo::from(&agent.restart),
            thresholds: ThresholdInfo::from(&spec.thresholds),
            max_recoveries: spec.clinic.max_recoveries,
            model_fix: crate::agent_cli::model_fix(agent.cli, &agent.argv),
        }
    }
}

/// How a run of the agent CLI ended, as `on_exit` sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub runtime_ms: u64,
    /// The run was started with the CLI's resume form (and came back as that session).
    pub resumed: bool,
    /// The run showed life (a hook, or pane output) before it ended; a run that never did
    /// was a failed start.
    pub showed_life: bool,
    /// Crashes within the crash window, this one included (0 for a clean exit).
    pub crashes_in_window: u32,
    /// Of those, the ones since the last run that did work (a finished turn, a tool call),
    /// this one included: what the backoff counts, so a session that worked starts it over
    /// (1 when this run did work). 0: not known, the backoff counts `crashes_in_window`.
    pub crashes_since_work: u32,
    /// A `.fresh` marker asks for a clean slate.
    pub fresh_requested: bool,
    pub session_id: Option<String>,
    /// The CLI itself refused to resume the session (it said it has no such conversation,
    /// before the session's first turn, or its transcript is gone): the one proof that the
    /// id cannot be resumed. A resume that showed no life because it was killed is none.
    pub resume_refused: bool,
}

impl Default for ExitInfo {
    fn default() -> Self {
        ExitInfo {
            code: None,
            signal: None,
            runtime_ms: 0,
            resumed: false,
            showed_life: true,
            crashes_in_window: 0,
            crashes_since_work: 0,
            fresh_requested: false,
            session_id: None,
            resume_refused: false,
        }
    }
}

impl ExitInfo {
    /// Exit code 0 with no signal: the agent (or a person) ended the session on purpose.
    pub fn is_clean(&self) -> bool {
        self.code == Some(0) && self.signal.is_none()
    }

    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(0), None) => "clean exit".into(),
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(s)) => format!("signal {s}"),
            (None, None) => "unknown exit".into(),
        }
    }
}

/// How an agent starts again: the one word for it in every room (the `on_exit` policy's
/// answer, the Clinic's rehabilitation, the recovery pipeline's decision, how a run was
/// started). Its names are the Lua-facing strings (`"resume"`, `"fresh"`, `"safe_mode"`), read
/// and written through serde at the policy boundary; it lives here, the lowest room that
/// speaks it, and `recovery` re-exports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// Start again with `--resume <id>`: the conversation is kept.
    Resume,
    /// Start a new session (the id is cleared).
    Fresh,
    /// Do not restart; wait for a person.
    SafeMode,
}

impl Start {
    /// The Lua-facing name (the same string serde writes).
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Resume => "resume",
            Start::Fresh => "fresh",
            Start::SafeMode => "safe_mode",
        }
    }
}

/// What the wrapper does after the agent CLI exited.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExitDecision {
    pub action: Start,
    /// Wait this long before starting again.
    #[serde(with = "seconds")]
    pub delay: Duration,
    /// For people: shown in ops.jsonl and events.
    pub reason: Option<String>,
}

/// One finding of a health check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Finding {
    /// process, silence, error_cascade, runaway, repetition, spend, screen, turn_failed, budget
    pub check: String,
    /// Machine-readable, e.g. `silent_for_15_minutes`.
    pub reason: String,
    /// For people.
    pub summary: String,
}

/// What the watchdog found wrong with a running agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Health {
    pub findings: Vec<Finding>,
    pub task: Option<String>,
    /// Revivals already spent on this task.
    pub revivals_for_task: u32,
    pub max_revivals: u32,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            findings: Vec::new(),
            task: None,
            revivals_for_task: 0,
            max_revivals: 1,
        }
    }
}

impl Health {
    pub fn has(&self, check: &str) -> bool {
        self.findings.iter().any(|f| f.check == check)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnhealthyAction {
    /// Restart the agent with a revival context.
    Revive,
    /// Report only; a person decides.
    Notify,
    /// Record the event, nothing else.
    Ignore,
    /// Stop the agent, notify, leave it in safe mode.
    SafeMode,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnhealthyDecision {
    pub action: UnhealthyAction,
    pub reason: Option<String>,
}

/// One tool call as the Clinic saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolCall {
    pub tool: String,
    pub ok: bool,
    pub ts: Option<String>,
    /// The input, shortened.
    pub input: Option<String>,
    /// The error text of a failed call, shortened.
    pub error: Option<String>,
}

/// Snapshot of the agent at the moment of failure (the seed's TraumaContext).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Trauma {
    pub agent: AgentInfo,
    /// The task the agent was given, if known.
    pub original_prompt: Option<String>,
    /// `api_error`, `tool_error`, `crash`, `signal`, `unknown`.
    pub error_type: String,
    pub error_message: String,
    /// The CLI's output or transcript errors leading up to the failure.
    pub stack_trace: String,
    pub tool_calls: Vec<ToolCall>,
    pub history_summary: Option<String>,
    /// Tools the agent has used successfully: the ones that really exist.
    pub available_tools: Vec<String>,
    pub exit: Option<ExitInfo>,
    /// Recoveries already spent on this task.
    pub recoveries: u32,
}

impl Trauma {
    /// The error itself, for pattern matching: its type and message. Not the stack trace:
    /// that is often the pane's tail, whose banners and menus ("billing", "login") would be
    /// taken for the error (a `kill -9` of Claude Code once read as an exhausted quota).
    pub fn error_text(&self) -> String {
        format!("{}\n{}", self.error_type, self.error_message)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootCause {
    ContextLengthExceeded,
    HallucinatedTool,
    InvalidToolArguments,
    AmbiguousInstruction,
    LogicError,
    TransientError,
    /// Expired or invalid credentials (401/403).
    InvalidCredentials,
    /// The model does not exist or is not available to this account.
    ModelUnavailable,
    /// Quota, credits or a usage limit used up.
    QuotaExhausted,
    Unknown,
}

impl RootCause {
    pub const ALL: [RootCause; 10] = [
        RootCause::ContextLengthExceeded,
        RootCause::HallucinatedTool,
        RootCause::InvalidToolArguments,
        RootCause::AmbiguousInstruction,
        RootCause::LogicError,
        RootCause::TransientError,
        RootCause::InvalidCredentials,
        RootCause::ModelUnavailable,
        RootCause::QuotaExhausted,
        RootCause::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RootCause::ContextLengthExceeded => "context_length_exceeded",
            RootCause::HallucinatedTool => "hallucinated_tool",
            RootCause::InvalidToolArguments => "invalid_tool_arguments",
            RootCause::AmbiguousInstruction => "ambiguous_instruction",
            RootCause::LogicError => "logic_error",
            RootCause::TransientError => "transient_error",
            RootCause::InvalidCredentials => "invalid_credentials",
            RootCause::ModelUnavailable => "model_unavailable",
            RootCause::QuotaExhausted => "quota_exhausted",
            RootCause::Unknown => "unknown",
        }
    }

    /// A restart cannot fix these: stop the crash loop at once and tell a person.
    pub fn needs_a_person(self) -> bool {
        matches!(
            self,
            RootCause::InvalidCredentials | RootCause::ModelUnavailable | RootCause::QuotaExhausted
        )
    }
}

impl fmt::Display for RootCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Clinic's analysis of a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub root_cause: RootCause,
    #[serde(default)]
    pub explanation: String,
    /// 0.0 to 1.0.
    #[serde(default)]
    pub confidence: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrescriptionAction {
    /// Start again as it was (resume), after a backoff.
    Retry,
    /// Resume with a reminder injected (e.g. the tools that really exist).
    ModifyPrompt,
    /// "Clear, don't compact": save what the agent knows, start fresh, inject it.
    SummarizeHistory,
    /// Stop: safe mode and a notification.
    Abort,
}

impl PrescriptionAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PrescriptionAction::Retry => "retry",
            PrescriptionAction::ModifyPrompt => "modify_prompt",
            PrescriptionAction::SummarizeHistory => "summarize_history",
            PrescriptionAction::Abort => "abort",
        }
    }
}

/// What the Clinic prescribes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prescription {
    pub action: PrescriptionAction,
    /// Replaces the task text given to the next session.
    pub modified_prompt: Option<String>,
    /// Added to what the next session is told.
    pub reminder: Option<String>,
    #[serde(with = "seconds::option")]
    pub delay: Option<Duration>,
    pub reason: Option<String>,
}

impl Prescription {
    pub fn abort(reason: impl Into<String>) -> Prescription {
        Prescription {
            action: PrescriptionAction::Abort,
            modified_prompt: None,
            reminder: None,
            delay: None,
            reason: Some(reason.into()),
        }
    }
}

/// Why a returned value was refused: the field and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadReturn {
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for BadReturn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "bad return value: field `{field}`: {}", self.message),
            None => write!(f, "bad return value: {}", self.message),
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

/// A decision read back from a policy: its fields, checked one by one.
pub trait FromPolicy: Sized {
    /// The fields a returned table may have.
    const FIELDS: &'static [&'static str];
    /// A bare string return means `{action = <string>}`.
    const SHORTHAND: Option<&'static str>;
    fn from_fields(fields: &Fields<'_>) -> Result<Self, BadReturn>;

    fn from_policy(value: &Value) -> Result<Self, BadReturn> {
        let owned;
        let map = match (value, Self::SHORTHAND) {
            (Value::Object(map), _) => map,
            (Value::String(s), Some(key)) => {
                let mut m = Map::new();
                m.insert(key.to_string(), Value::String(s.clone()));
                owned = m;
                &owned
            }
            // An empty Lua table converts to an empty list.
            (Value::Array(a), _) if a.is_empty() => {
                owned = Map::new();
                &owned
            }
            (other, _) => {
                return Err(BadReturn {
                    field: None,
                    message: format!("expected a table, got {}", type_name(other)),
                });
            }
        };
        for key in map.keys() {
            if !Self::FIELDS.contains(&key.as_str()) {
                let hint = match did_you_mean(key, Self::FIELDS) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("known fields: {}", Self::FIELDS.join(", ")),
                };
                return Err(BadReturn {
                    field: Some(key.clone()),
                    message: format!("unknown field ({hint})"),
                });
            }
        }
        Self::from_fields(&Fields(map))
    }
}

/// The fields of a returned table.
pub struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn bad(field: &str, message: String) -> BadReturn {
        BadReturn {
            field: Some(field.to_string()),
            message,
        }
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    /// A required string naming one of `T`'s variants.
    pub fn choice<T: for<'de> Deserialize<'de>>(
        &self,
        field: &str,
        what: &str,
        names: &[&str],
    ) -> Result<T, BadReturn> {
        match self.get(field) {
            None => Err(Self::bad(
                field,
                format!("missing (one of: {})", names.join(", ")),
            )),
            Some(Value::String(s)) => {
                serde_json::from_value(Value::String(s.clone())).map_err(|_| {
                    let hint = match did_you_mean(s, names) {
                        Some(n) => format!("did you mean `{n}`?"),
                        None => format!("one of: {}", names.join(", ")),
                    };
                    Self::bad(field, format!("unknown {what} `{s}` ({hint})"))
                })
            }
            Some(other) => Err(Self::bad(
                field,
                format!("expected a string, got {}", type_name(other)),
            )),
        }
    }

    pub fn opt_string(&self, field: &str) -> Result<Option<String>, BadReturn> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Self::bad(
                field,
                format!("expected a string, got {}", type_name(other)),
            )),
        }
    }

    pub fn opt_duration(&self, field: &str) -> Result<Option<Duration>, BadReturn> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => duration_value(v).map(Some).map_err(|e| Self::bad(field, e)),
        }
    }

    pub fn opt_number(&self, field: &str) -> Result<Option<f64>, BadReturn> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(Self::bad(
                field,
                format!("expected a number, got {}", type_name(other)),
            )),
        }
    }
}

const EXIT_ACTIONS: &[&str] = &["resume", "fresh", "safe_mode"];
const UNHEALTHY_ACTIONS: &[&str] = &["revive", "notify", "ignore", "safe_mode"];
const PRESCRIPTIONS: &[&str] = &["retry", "modify_prompt", "summarize_history", "abort"];

fn root_cause_names() -> Vec<&'static str> {
    RootCause::ALL.iter().map(|r| r.as_str()).collect()
}

impl FromPolicy for ExitDecision {
    const FIELDS: &'static [&'static str] = &["action", "delay", "reason"];
    const SHORTHAND: Option<&'static str> = Some("action");
    fn from_fields(f: &Fields<'_>) -> Result<Self, BadReturn> {
        Ok(ExitDecision {
            action: f.choice("action", "action", EXIT_ACTIONS)?,
            delay: f.opt_duration("delay")?.unwrap_or_default(),
            reason: f.opt_string("reason")?,
        })
    }
}

impl FromPolicy for UnhealthyDecision {
    const FIELDS: &'static [&'static str] = &["action", "reason"];
    const SHORTHAND: Option<&'static str> = Some("action");
    fn from_fields(f: &Fields<'_>) -> Result<Self, BadReturn> {
        Ok(UnhealthyDecision {
            action: f.choice("action", "action", UNHEALTHY_ACTIONS)?,
            reason: f.opt_string("reason")?,
        })
    }
}

impl FromPolicy for Diagnosis {
    const FIELDS: &'static [&'static str] = &["root_cause", "explanation", "confidence"];
    const SHORTHAND: Option<&'static str> = Some("root_cause");
    fn from_fields(f: &Fields<'_>) -> Result<Self, BadReturn> {
        let root_cause = f.choice("root_cause", "root cause", &root_cause_names())?;
        let confidence = f.opt_number("confidence")?.unwrap_or(0.5);
        if !(0.0..=1.0).contains(&confidence) {
            return Err(Fields::bad(
                "confidence",
                format!("{confidence} is not between 0 and 1"),
            ));
        }
        Ok(Diagnosis {
            root_cause,
            explanation: f.opt_string("explanation")?.unwrap_or_default(),
            confidence,
        })
    }
}

impl FromPolicy for Prescription {
    const FIELDS: &'static [&'static str] =
        &["action", "modified_prompt", "reminder", "delay", "reason"];
    const SHORTHAND: Option<&'static str> = Some("action");
    fn from_fields(f: &Fields<'_>) -> Result<Self, BadReturn> {
        Ok(Prescription {
            action: f.choice("action", "action", PRESCRIPTIONS)?,
            modified_prompt: f.opt_string("modified_prompt")?,
            reminder: f.opt_string("reminder")?,
            delay: f.opt_duration("delay")?,
            reason: f.opt_string("reason")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exit_decision_reads_seconds_and_durations() {
        let d = ExitDecision::from_policy(&json!({"action": "fresh", "delay": 12})).unwrap();
        assert_eq!(d.action, Start::Fresh);
        assert_eq!(d.delay, Duration::from_secs(12));
        let d = ExitDecision::from_policy(&json!({"action": "resume", "delay": "2m"})).unwrap();
        assert_eq!(d.delay, Duration::from_secs(120));
        let d = ExitDecision::from_policy(&json!("safe_mode")).unwrap();
        assert_eq!(d.action, Start::SafeMode);
    }

    #[test]
    fn unknown_action_names_the_field_and_suggests() {
        let e = ExitDecision::from_policy(&json!({"action": "resme"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("action"));
        assert!(e.to_string().contains("did you mean `resume`?"), "{e}");
    }

    #[test]
    fn wrong_types_and_unknown_fields_are_refused() {
        let e = Prescription::from_policy(&json!({"action": "retry", "delay": true})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("delay"));
        let e = Prescription::from_policy(&json!({"action": "retry", "remnder": "x"})).unwrap_err();
        assert!(e.to_string().contains("did you mean `reminder`?"), "{e}");
        let e = Diagnosis::from_policy(&json!({"root_cause": "logic_error", "confidence": 3}))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("confidence"));
        let e = Diagnosis::from_policy(&json!(42)).unwrap_err();
        assert!(
            e.to_string().contains("expected a table, got a number"),
            "{e}"
        );
    }

    #[test]
    fn inputs_take_partial_json() {
        let exit: ExitInfo = serde_json::from_value(json!({"code": 1})).unwrap();
        assert_eq!(exit.code, Some(1));
        let agent: AgentInfo =
            serde_json::from_value(json!({"name": "a", "restart": {"cooldown": "1m"}})).unwrap();
        assert_eq!(agent.restart.cooldown, Duration::from_secs(60));
        assert_eq!(agent.restart.max_crashes, 5);
    }
}
