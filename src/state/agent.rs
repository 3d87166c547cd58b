//! `state.json`: the agent's externalized state (Phoenix Protocol v2.0 fields plus phoenix's own
//! bookkeeping), open-loop staleness and resolved-item retention.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// What the agent is doing, as far as its hooks have seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Status {
    /// A turn is in progress: a prompt was submitted or a tool ran since the last turn ended.
    Working,
    /// The last turn finished; the agent waits for input.
    #[default]
    Idle,
    /// The session ended.
    Stopped,
    /// The last turn ended in an API error and the CLI waits at its prompt: nobody will type
    /// the next one (the turn-failed hook, or the watchdog reading the CLI's session file).
    Failed,
    /// Written by something else (a brief generator, a person); kept as is.
    Other(String),
}

impl Status {
    pub fn as_str(&self) -> &str {
        match self {
            Status::Working => "working",
            Status::Idle => "idle",
            Status::Stopped => "stopped",
            Status::Failed => "failed",
            Status::Other(s) => s,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "working" => Status::Working,
            "idle" => Status::Idle,
            "stopped" => Status::Stopped,
            "failed" => Status::Failed,
            _ => Status::Other(s),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenLoop {
    pub id: String,
    #[serde(default)]
    pub text: String,
    /// `YYYY-MM-DD` (the protocol's format); a full timestamp is accepted too.
    #[serde(default)]
    pub added: String,
    #[serde(default)]
    pub stale: bool,
    /// Fields added by others (a brief generator, a person) survive phoenix's rewrites.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedItem {
    pub id: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub resolved_date: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The content of `state.json`. Every field is optional on disk so that files written by the
/// seed's scripts, a brief generator or a person load; unknown fields are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    #[serde(default)]
    pub agent: String,
    /// RFC 3339. Updated by the hooks, at most every `HEARTBEAT_WRITE_INTERVAL` by heartbeats
    /// (tool_use.jsonl has every call).
    #[serde(default)]
    pub last_active: Option<String>,
    #[serde(default)]
    pub status: Status,
    #[serde(default)]
    pub current_task: Option<String>,
    /// RFC 3339: when the current turn's prompt was submitted. The watchdog measures silence
    /// and scopes loops from it, never from an earlier turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_started: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub open_loops: Vec<OpenLoop>,
    #[serde(default)]
    pub resolved: Vec<ResolvedItem>,
    #[serde(default, deserialize_with = "lenient_numbers")]
    pub numbers: BTreeMap<String, String>,

    /// `source` of the last SessionStart (`startup`, `resume`, `clear`, `compact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_source: Option<String>,
    /// Working directory the session reported, so the wrapper resumes only its own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_cwd: Option<String>,
    /// The CLI's transcript of the current session (brief generation and triage read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_path: Option<String>,
    /// Consecutive failed tool calls; reset by a successful one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_errors: u32,
    /// The last failed tool call's or turn's error, with the CLI session it happened in and
    /// when: an earlier session's error is no evidence about the current one (a resumed
    /// session keeps its id, so the time tells those apart). See [`AgentState::record_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compactions: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_compaction: Option<String>,
    /// How the last session ended: `{ts, reason, clean}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_session_end: Option<SessionEnd>,
    /// The CLI said it waits for a person (a permission prompt, input): set by the
    /// notification hook, cleared by the next prompt, tool call, turn end or session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_input: Option<NeedsInput>,

    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AgentState {
    /// Whether `self` differs from `before` only in what the next tool call writes again:
    /// when the agent was last active and its run of failed calls. Such a write need not
    /// survive a power cut (the next call, or tool_use.jsonl, has it), so it is not synced;
    /// anything else (status, task, session, loops, a wait) is: a lost `working` would hide an
    /// interrupted task from the next session.
    pub fn differs_only_in_activity(&self, before: &AgentState) -> bool {
        let activity_cleared = |s: &AgentState| AgentState {
            last_active: None,
            consecutive_errors: 0,
            last_error: None,
            last_error_session: None,
            last_error_at: None,
            ..s.clone()
        };
        activity_cleared(self) == activity_cleared(before)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEnd {
    pub ts: String,
    #[serde(default)]
    pub reason: String,
    /// A user-initiated exit (`/exit`, logout): not a crash, not an interruption.
    #[serde(default)]
    pub clean: bool,
}

/// An agent waiting for a person, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeedsInput {
    /// `permission_prompt`, `idle_prompt`, `elicitation_dialog` (Claude Code's notification
    /// types), `approval_prompt` (seen on the screen), `idle_with_open_loops`.
    pub reason: String,
    /// What the CLI or the screen said, one line.
    #[serde(default)]
    pub message: String,
    /// RFC 3339: when the wait began.
    pub since: String,
    /// `hook` (the CLI said so) or `watchdog` (seen by a watchdog pass).
    #[serde(default)]
    pub source: String,
}

impl NeedsInput {
    /// The same wait, told apart from the next one: a notification goes out once per wait.
    pub fn key(&self) -> String {
        format!("{}|{}", self.reason, self.since)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `numbers` is `{string: string}`, but a hand-written `"crons": 4` must not make the whole
/// file "corrupt": scalars are turned into strings.
fn lenient_numbers<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let map = Option::<BTreeMap<String, Value>>::deserialize(d)?.unwrap_or_default();
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            Value::Number(n) => Ok((k, n.to_string())),
            Value::Bool(b) => Ok((k, b.to_string())),
            Value::Null => Ok((k, String::new())),
            other => Err(serde::de::Error::custom(format!(
                "`numbers.{k}` must be a string, not {other}"
            ))),
        })
        .collect()
}

/// Retention rules applied on every write (and on display). Its `Default` and
/// `From<&Thresholds>` live with the thresholds in `spec`: the state layer imports no spec.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub stale_after: Duration,
    pub resolved_retention: Duration,
}

impl AgentState {
    pub fn new(agent: &str) -> AgentState {
        AgentState {
            agent: agent.to_string(),
            ..AgentState::default()
        }
    }

    /// Flag open loops older than `stale_after`, drop resolved items older than the retention.
    /// Dates that do not parse are left alone: phoenix never drops what it cannot date.
    pub fn normalize(&mut self, now: jiff::Timestamp, retention: Retention) {
        for lp in &mut self.open_loops {
            if let Some(added) = parse_day(&lp.added) {
                lp.stale = age(now, added) >= retention.stale_after;
            }
        }
        self.resolved.retain(|r| match parse_day(&r.resolved_date) {
            Some(day) => age(now, day) < retention.resolved_retention,
            None => true,
        });
    }

    pub fn open_loop(&self, id: &str) -> Option<&OpenLoop> {
        self.open_loops.iter().find(|l| l.id == id)
    }

    pub fn open_ids(&self) -> Vec<&str> {
        self.open_loops.iter().map(|l| l.id.as_str()).collect()
    }

    /// Record `error` as the current session's (call after `session_id` is updated).
    pub fn record_error(&mut self, error: String, at: &str) {
        self.last_error = Some(error);
        self.last_error_session = self.session_id.clone();
        self.last_error_at = Some(at.to_string());
    }

    pub fn last_active_at(&self) -> Option<jiff::Timestamp> {
        self.last_active.as_deref().and_then(parse_timestamp)
    }

    pub fn to_pretty_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("state serialises");
        bytes.push(b'\n');
        bytes
    }
}

/// `last_error` if it was recorded in the session the state names now, with its time: `None`
/// for an error of another session, and for one recorded without its session (which cannot
/// be told apart).
pub fn session_error(state: &AgentState) -> Option<(&str, Option<jiff::Timestamp>)> {
    let error = state.last_error.as_deref()?;
    let session = state.last_error_session.as_deref()?;
    (state.session_id.as_deref() == Some(session)).then(|| {
        (
            error,
            state.last_error_at.as_deref().and_then(parse_timestamp),
        )
    })
}

/// Today's date (UTC) in the protocol's `YYYY-MM-DD` form.
pub fn today(now: jiff::Timestamp) -> String {
    now.to_zoned(jiff::tz::TimeZone::UTC).date().to_string()
}

/// RFC 3339 timestamps with or without offset (Python's `isoformat()` writes `+00:00`).
pub fn parse_timestamp(s: &str) -> Option<jiff::Timestamp> {
    s.parse::<jiff::Timestamp>().ok()
}

/// A day from `YYYY-MM-DD` or from the date part of a timestamp, at 00:00 UTC.
fn parse_day(s: &str) -> Option<jiff::Timestamp> {
    if let Some(ts) = parse_timestamp(s) {
        return Some(ts);
    }
    let date: jiff::civil::Date = s.get(..10)?.parse().ok()?;
    date.to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

fn age(now: jiff::Timestamp, then: jiff::Timestamp) -> Duration {
    let secs = now.as_second() - then.as_second();
    Duration::from_secs(secs.max(0) as u64)
}

/// Loop ids are stable handles typed on command lines and read by agents.
pub fn valid_loop_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 80
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_activity_is_written_without_a_sync() {
        let before = AgentState {
            status: Status::Working,
            current_task: Some("fix the parser".into()),
            session_id: Some("s1".into()),
            last_active: Some("2026-12-03T10:00:00Z".into()),
            ..AgentState::new("a")
        };
        // A heartbeat or a failed call: when, and the run of errors.
        let mut heartbeat = before.clone();
        heartbeat.last_active = Some("2026-12-03T10:05:00Z".into());
        heartbeat.consecutive_errors = 2;
        heartbeat.last_error = Some("exit code 1".into());
        assert!(heartbeat.differs_only_in_activity(&before));
        // What a lost write would cost a session: each of these is synced.
        let durable: [fn(&mut AgentState); 5] = [
            |s| s.status = Status::Idle,
            |s| s.current_task = Some("another task".into()),
            |s| s.session_id = Some("s2".into()),
            |s| {
                s.open_loops.push(OpenLoop {
                    id: "l".into(),
                    text: "t".into(),
                    added: "2026-12-03".into(),
                    stale: false,
                    extra: Default::default(),
                })
            },
            |s| s.transcript_path = Some("/t.jsonl".into()),
        ];
        for change in durable {
            let mut after = heartbeat.clone();
            change(&mut after);
            assert!(!after.differs_only_in_activity(&before), "{after:?}");
        }
    }

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn seed_example_loads_and_round_trips_unknown_fields() {
        let text = r#"{
          "agent": "trades", "last_active": "2026-02-17T02:12:53Z",
          "open_loops": [{"id": "schwab-oauth", "text": "Schwab OAuth", "added": "2026-02-01", "stale": true, "owner": "me"}],
          "resolved": [{"id": "snapshot-failure", "reason": "Fixed cron", "resolved_date": "2026-02-16"}],
          "numbers": {"nav": "$266,691", "active_crons": 4},
          "custom": {"x": 1}
        }"#;
        let state: AgentState = serde_json::from_str(text).unwrap();
        assert_eq!(state.status, Status::Idle);
        assert_eq!(state.numbers["active_crons"], "4");
        assert_eq!(state.open_loops[0].extra["owner"], "me");
        let back: Value = serde_json::from_slice(&state.to_pretty_json()).unwrap();
        assert_eq!(back["custom"]["x"], 1);
        assert_eq!(back["open_loops"][0]["owner"], "me");
        assert_eq!(back["status"], "idle");
    }

    #[test]
    fn unknown_status_is_kept() {
        let state: AgentState = serde_json::from_str(r#"{"status": "blocked"}"#).unwrap();
        assert_eq!(state.status, Status::Other("blocked".into()));
        let back: Value = serde_json::from_slice(&state.to_pretty_json()).unwrap();
        assert_eq!(back["status"], "blocked");
    }

    #[test]
    fn failed_is_a_status_of_its_own() {
        let state: AgentState = serde_json::from_str(r#"{"status": "failed"}"#).unwrap();
        assert_eq!(state.status, Status::Failed);
        let back: Value = serde_json::from_slice(&state.to_pretty_json()).unwrap();
        assert_eq!(back["status"], "failed");
    }

    #[test]
    fn wrong_types_do_not_parse() {
        assert!(serde_json::from_str::<AgentState>(r#"{"open_loops": "x"}"#).is_err());
        assert!(serde_json::from_str::<AgentState>(r#"{"numbers": {"a": [1]}}"#).is_err());
    }

    #[test]
    fn loops_go_stale_and_resolved_items_expire() {
        let mut state = AgentState::new("a");
        for (id, added) in [
            ("old", "2026-02-01"),
            ("new", "2026-02-14"),
            ("odd", "soon"),
        ] {
            state.open_loops.push(OpenLoop {
                id: id.into(),
                text: String::new(),
                added: added.into(),
                stale: false,
                extra: Map::new(),
            });
        }
        for (id, day) in [("gone", "2026-02-01"), ("kept", "2026-02-16"), ("?", "")] {
            state.resolved.push(ResolvedItem {
                id: id.into(),
                reason: String::new(),
                resolved_date: day.into(),
                extra: Map::new(),
            });
        }
        state.normalize(ts("2026-02-17T02:12:53Z"), Retention::default());
        let stale: Vec<bool> = state.open_loops.iter().map(|l| l.stale).collect();
        assert_eq!(stale, [true, false, false]);
        let kept: Vec<&str> = state.resolved.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(kept, ["kept", "?"]);
    }

    #[test]
    fn stale_flag_follows_the_threshold_both_ways() {
        let mut state = AgentState::new("a");
        state.open_loops.push(OpenLoop {
            id: "x".into(),
            text: String::new(),
            added: "2026-02-10".into(),
            stale: true,
            extra: Map::new(),
        });
        state.normalize(ts("2026-02-17T00:00:00Z"), Retention::default());
        assert!(!state.open_loops[0].stale, "7 days is not stale at 14d");
        let short = Retention {
            stale_after: Duration::from_secs(86_400),
            ..Retention::default()
        };
        state.normalize(ts("2026-02-17T00:00:00Z"), short);
        assert!(state.open_loops[0].stale);
    }

    #[test]
    fn python_isoformat_timestamps_parse() {
        let state: AgentState =
            serde_json::from_str(r#"{"last_active": "2026-02-17T02:12:53.123456+00:00"}"#).unwrap();
        assert_eq!(
            state.last_active_at().unwrap().as_second(),
            ts("2026-02-17T02:12:53Z").as_second()
        );
    }

    #[test]
    fn loop_ids() {
        assert!(valid_loop_id("schwab-oauth"));
        assert!(!valid_loop_id(""));
        assert!(!valid_loop_id("two words"));
    }
}
