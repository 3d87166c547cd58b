//! The events of an agent's `ops.jsonl`, one closed set: every name phoenix writes is an
//! [`Op`] variant, and every reader matches variants, never strings. A line with a name this
//! build does not write (an older or a newer phoenix did) reads as [`Op::Other`], whole.
//!
//! The fields stay a JSON object: they are details for people and for the few readers that
//! look into one (`agent_exit`'s code, `session_start`'s id), and a typed struct per event
//! would make every old line with a field of another shape unreadable.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// An op's fields: everything on its line but `ts`, `agent` and `event`.
pub type Fields = Map<String, Value>;

macro_rules! ops {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal $(| $alias:literal)* ,)*) => {
        /// One event of ops.jsonl: its name (the variant, `event` on disk) and its fields.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(tag = "event")]
        pub enum Op {
            $( $(#[doc = $doc])* #[serde(rename = $name)] $variant(Fields), )*
            /// A name this build does not write, kept as it was read (`event` included).
            #[serde(untagged)]
            Other(Fields),
        }

        impl Op {
            /// The name on disk (`agent_exit`); for `Other` the name it was read with.
            pub fn name(&self) -> &str {
                match self {
                    $( Op::$variant(_) => $name, )*
                    Op::Other(f) => f.get("event").and_then(Value::as_str).unwrap_or(""),
                }
            }

            pub fn fields(&self) -> &Fields {
                match self {
                    $( Op::$variant(f) )|* | Op::Other(f) => f,
                }
            }

            /// The op an object read from ops.jsonl holds. Only a string names a variant
            /// (serde's own tagged enums would also take a number, as the variant's index).
            pub fn from_fields(mut fields: Fields) -> Op {
                let make: Option<Make> = match fields.get("event").and_then(Value::as_str) {
                    $( Some($name $(| $alias)*) => Some(Op::$variant), )*
                    _ => None,
                };
                match make {
                    Some(make) => {
                        fields.shift_remove("event");
                        make(fields)
                    }
                    None => Op::Other(fields),
                }
            }
        }

        #[cfg(test)]
        const NAMES: &[&str] = &[$($name),*];
    };
}

ops! {
    // The wrapper (supervise/wrap/) around each run of the CLI.
    AgentStart = "agent_start",
    /// The one record of why a run ended (reason, code, signal, action, explain).
    AgentExit = "agent_exit",
    AgentAlive = "agent_alive",
    SpawnFailed = "spawn_failed",
    /// The CLI was started inside its sandbox (profile, summary, network).
    SandboxEntered = "sandbox_entered",
    /// The sandbox's proxy refused a connection (a host not allowed, a bad request).
    SandboxNetwork = "sandbox_network",
    /// The wrapper did not start the agent again: the operator moved it to another machine.
    StartFenced = "start_fenced",
    SubreaperUnavailable = "subreaper_unavailable",
    /// The wrapper could not make its doorbell (`state::doorbell`): it looks every 250 ms.
    DoorbellUnavailable = "doorbell_unavailable",
    ResumeSkipped = "resume_skipped",
    ResumeMismatch = "resume_mismatch",
    FreshMarkerHonoured = "fresh_marker_honoured",
    FailedTurnChecked = "failed_turn_checked",
    HooksTrusted = "hooks_trusted",
    HooksTrustFailed = "hooks_trust_failed",
    /// Written as `critical` with an `event` field that overwrote the name: on disk it has
    /// always read `crash_loop`.
    CrashLoop = "crash_loop",
    SafeMode = "safe_mode",
    OperatorRestart = "operator_restart",
    OperatorStop = "operator_stop",
    WatchdogRestart = "watchdog_restart",
    PreviousAgentStopped = "previous_agent_stopped",
    StraysStopped = "strays_stopped",
    ToolInterrupted = "tool_interrupted",
    StartupContextInjected = "startup_context_injected",
    StartupContextFailed = "startup_context_failed",
    ContinuePromptSent = "continue_prompt_sent",
    ContinuePromptSkipped = "continue_prompt_skipped",
    ContinuePromptFailed = "continue_prompt_failed",
    HandoffFailed = "handoff_failed",
    TapStarted = "tap_started",
    TapFailed = "tap_failed",
    /// Hand-overs of a pane's pipe the wrapper refused (`refused`, `total`, `reasons`).
    TapRefused = "tap_refused",
    // The hooks (hooks/), run by the CLI itself: a sign of its life.
    /// Older builds wrote `hook_session_start`.
    SessionStart = "session_start" | "hook_session_start",
    Prompt = "prompt",
    PreCompact = "pre_compact",
    /// Older builds wrote `hook_stop`.
    TurnComplete = "turn_complete" | "hook_stop",
    TurnFailed = "turn_failed",
    /// A subagent's own request failed (Claude Code's StopFailure with `agent_id`): not the
    /// main turn's end (`agent_id`, `agent_type`, `error`, `details`).
    SubagentFailed = "subagent_failed",
    /// A hook of one of Claude Code's background sessions (`claude --bg`) that runs in the
    /// agent's workdir fired (`job`, `hook`, `session_id`, and `error`, `details` of a failed
    /// turn): the job's, never the agent's turn, session or sign of life.
    BackgroundJob = "background_job",
    /// A hook of a teammate of Claude Code's agent teams (its own Claude Code in a pane the
    /// lead split off) fired (`hook`, `agent_id`, `name`, `team`, `lead_session`, `pid`,
    /// `session_id`, and `source`, `reason`, `error`, `details` as its payload said): the
    /// teammate's session start, end or failed turn, never the agent's.
    Teammate = "teammate",
    SessionEnd = "session_end",
    /// The agent waits for a person (`reason`, `message`, `source`).
    NeedsInput = "needs_input",
    /// A wait for a person is over: the agent got input or went on (`reason`, `by`).
    InputGiven = "input_given",
    ClinicContextInjected = "clinic_context_injected",
    GuardRestored = "guard_restored",
    // Continuity (continuity/, cli/continuity.rs).
    HandoffSaved = "handoff_saved",
    TemplateError = "template_error",
    BriefGenerated = "brief_generated",
    BriefFailed = "brief_failed",
    ContextInjected = "context_injected",
    ContinuityCleared = "continuity_cleared",
    TapIgnored = "tap_ignored",
    /// A `->continuity:` marker that is not the agent's own (text it only shows: no or a wrong
    /// marker key, the pane of a CLI with hooks) or asks the absurd (`command`, `reason`,
    /// `read_from`): refused, never acted on.
    MarkerRefused = "marker_refused",
    TapNoteFailed = "tap_note_failed",
    TapSave = "tap_save",
    // Messages between agents (state/inbox.rs, continuity/messages.rs).
    MessageReceived = "message_received",
    MessagesDelivered = "messages_delivered",
    MessagesDeliveryFailed = "messages_delivery_failed",
    /// Messages a session was handed at its start, which it ended before confirming.
    MessagesReopened = "messages_reopened",
    TapSend = "tap_send",
    TapSendFailed = "tap_send_failed",
    TapSaveFailed = "tap_save_failed",
    TapUncertain = "tap_uncertain",
    TapUncertainFailed = "tap_uncertain_failed",
    TapLoad = "tap_load",
    TapDone = "tap_done",
    TapDoneFailed = "tap_done_failed",
    TapLoadFailed = "tap_load_failed",
    TapSearch = "tap_search",
    TapSearchFailed = "tap_search_failed",
    /// A call of phoenix's MCP server by this agent (`tool`, `target`, `ok`, `error`, `ms`).
    McpCall = "mcp_call",
    // The Clinic (clinic/); each also goes to critical_events.jsonl under the same name.
    ClinicTriage = "clinic_triage",
    ClinicDiagnosis = "clinic_diagnosis",
    ClinicPrescription = "clinic_prescription",
    ClinicRehabilitation = "clinic_rehabilitation",
    ClinicAbort = "clinic_abort",
    ClinicUndiagnosed = "clinic_undiagnosed",
    // The watchdog, apply and the state dir itself.
    Watchdog = "watchdog",
    Apply = "apply",
    ApplyFailed = "apply_failed",
    ResolveCompleted = "resolve_completed",
    ResolveCompletionFailed = "resolve_completion_failed",
    /// A corrupt state file rolled back (`JsonFile`'s `what` names the file).
    StateRollback = "state_rollback",
    ResolveJournalRollback = "resolve_journal_rollback",
    HookFilesRollback = "hook_files_rollback",
    PromptContextRollback = "prompt_context_rollback",
    CrashesRollback = "crashes_rollback",
    StopRequestRollback = "stop_request_rollback",
    InjectedRollback = "injected_rollback",
    LedgerRollback = "ledger_rollback",
    StartedSpecRollback = "started_spec_rollback",
    ClinicRollback = "clinic_rollback",
    WatchdogRollback = "watchdog_rollback",
    /// The usage ledger's state (`usage_state.json`) rolled back.
    UsageRollback = "usage_rollback",
    /// usage.jsonl cut back to what its state covers: lines of an update that did not finish.
    UsageLedgerRepaired = "usage_ledger_repaired",
    /// Usage an agent reported itself (`->continuity:usage`) that could not be recorded.
    TapUsageFailed = "tap_usage_failed",
}

/// The constructor of an op from its fields (`Op::AgentStart`): what writers pass.
pub type Make = fn(Fields) -> Op;

impl Op {
    /// Written by a hook, that is by the CLI running its hooks: a sign of its life.
    pub fn is_from_hook(&self) -> bool {
        matches!(
            self,
            Op::SessionStart(_)
                | Op::Prompt(_)
                | Op::PreCompact(_)
                | Op::TurnComplete(_)
                | Op::TurnFailed(_)
                | Op::SubagentFailed(_)
                | Op::SessionEnd(_)
                | Op::ClinicContextInjected(_)
                | Op::GuardRestored(_)
        )
    }

    /// The op named `name` (`state_rollback`): for a name built from a closed set elsewhere
    /// (a state file's kind). A name no variant has stays `Other`, still written whole.
    pub fn named(name: &str, fields: Value) -> Op {
        let mut line = Fields::new();
        line.insert("event".into(), Value::String(name.into()));
        if let Value::Object(fields) = fields {
            line.extend(fields);
        }
        Op::from_fields(line)
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Fields::deserialize(d).map(Op::from_fields)
    }
}

/// One line of ops.jsonl: `{"ts", "agent", "event", …fields}`. Any JSON object reads as
/// one: a `ts` or `agent` that is not a string stays among the fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    /// RFC 3339; kept as text so a line with an odd stamp is still read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(flatten)]
    pub op: Op,
}

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut fields = Fields::deserialize(d)?;
        let mut take = |key: &str| match fields.get(key) {
            Some(Value::String(_)) => match fields.shift_remove(key) {
                Some(Value::String(s)) => Some(s),
                _ => None,
            },
            _ => None,
        };
        let (ts, agent) = (take("ts"), take("agent"));
        Ok(Line {
            ts,
            agent,
            op: Op::from_fields(fields),
        })
    }
}

impl Line {
    pub fn time(&self) -> Option<jiff::Timestamp> {
        self.ts.as_deref()?.parse().ok()
    }

    /// A field of the op (`line.get("session_id")`); `Null` when absent.
    pub fn get(&self, key: &str) -> &Value {
        self.op.fields().get(key).unwrap_or(&Value::Null)
    }

    /// A string field, `None` when absent, not a string or empty.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).as_str().filter(|s| !s.is_empty())
    }

    /// The whole line as JSON, as it is on disk.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The ops among `text`'s lines; lines that are not a JSON object are skipped.
pub fn parse(text: &str) -> Vec<Line> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        .collect()
}

/// The ops at the end of an ops.jsonl (its last [`super::jsonl::TAIL_BYTES`]).
pub fn tail(path: &Path) -> Vec<Line> {
    parse(&super::jsonl::tail(path, super::jsonl::TAIL_BYTES).unwrap_or_default())
}

/// The ops appended to an ops.jsonl after byte `offset`.
pub fn since(path: &Path, offset: u64) -> Vec<Line> {
    parse(&super::read_since(path, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_variant() {
        for name in NAMES {
            let line =
                format!(r#"{{"ts":"2026-01-01T00:00:00Z","agent":"a","event":"{name}","x":1}}"#);
            let read: Line = serde_json::from_str(&line).unwrap();
            assert!(!matches!(read.op, Op::Other(_)), "{name}");
            assert_eq!(read.op.name(), *name);
            assert_eq!(read.get("x"), 1);
            assert_eq!(read.agent.as_deref(), Some("a"));
            assert_eq!(
                serde_json::to_string(&read).unwrap(),
                line,
                "written as read"
            );
        }
    }

    #[test]
    fn an_unknown_name_is_kept_whole() {
        let line =
            r#"{"ts":"2026-01-01T00:00:00Z","agent":"a","event":"from_the_future","n":[1,2]}"#;
        let read = parse(&format!("{line}\nnot json\n[1]\n"));
        assert_eq!(
            read.len(),
            1,
            "bad lines are skipped, the unknown one is not"
        );
        assert_eq!(read[0].op.name(), "from_the_future");
        assert_eq!(read[0].get("n"), &serde_json::json!([1, 2]));
        assert_eq!(serde_json::to_string(&read[0]).unwrap(), line);
    }

    #[test]
    fn a_line_without_an_event_name_is_kept_too() {
        let read = parse(r#"{"ts":"t","event":7}"#);
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].op.name(), "");
        assert_eq!(read[0].get("event"), 7);
    }

    #[test]
    fn names_of_older_builds_read_as_todays() {
        let read = parse(r#"{"event":"hook_stop","ts":"2026-01-01T00:00:00Z"}"#);
        assert!(matches!(read[0].op, Op::TurnComplete(_)));
        assert!(read[0].op.is_from_hook());
    }

    #[test]
    fn a_name_built_elsewhere_finds_its_variant() {
        assert!(matches!(
            Op::named("state_rollback", Value::Null),
            Op::StateRollback(_)
        ));
        let other = Op::named("doc_rollback", Value::Null);
        assert_eq!(other.name(), "doc_rollback");
        assert_eq!(
            serde_json::to_string(&other).unwrap(),
            r#"{"event":"doc_rollback"}"#
        );
    }
}
