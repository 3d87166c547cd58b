//! What a CLI's own session record says its model calls cost in tokens: Claude Code's
//! `usage` on assistant messages, Codex's running `token_count` events, Gemini CLI's `tokens`
//! on its responses. Each CLI's file reads its own shape (`AgentCli::usage_record`); the shapes
//! cannot be mistaken for each other, so a record is read whichever CLI wrote it (a custom CLI
//! that writes one of them is counted too). The incremental ledger built on this is
//! `crate::usage`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ALL;

/// Tokens by how they are priced. `input` is what was neither read from nor written to a
/// prompt cache; `output` includes reasoning ("thinking") tokens, which are billed as output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

impl Tokens {
    pub fn total(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_write)
            .saturating_add(self.cache_read)
    }

    pub fn is_zero(&self) -> bool {
        self.total() == 0
    }

    pub fn add(&mut self, other: &Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
    }

    /// What `self` has beyond `before`, kind by kind (never negative).
    pub fn beyond(&self, before: &Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_sub(before.input),
            output: self.output.saturating_sub(before.output),
            cache_write: self.cache_write.saturating_sub(before.cache_write),
            cache_read: self.cache_read.saturating_sub(before.cache_read),
        }
    }

    /// The larger of the two, kind by kind.
    pub fn max(&self, other: &Tokens) -> Tokens {
        Tokens {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cache_write: self.cache_write.max(other.cache_write),
            cache_read: self.cache_read.max(other.cache_read),
        }
    }

    /// Does any kind go down from `before` to `self` (a running total that started over)?
    pub fn fell_from(&self, before: &Tokens) -> bool {
        self.input < before.input
            || self.output < before.output
            || self.cache_write < before.cache_write
            || self.cache_read < before.cache_read
    }
}

/// Tokens of one kind a single model call may report at most. The largest context windows
/// hold about 2 million tokens; ten million of one kind in one call is a forgery or a bug, and
/// at a list price it would be tens of dollars a line.
pub const MAX_PER_CALL: u64 = 10_000_000;

/// Why `tokens` are no single call's, if they are not (`MAX_PER_CALL`).
pub fn absurd(tokens: &Tokens) -> Option<String> {
    let most = [
        tokens.input,
        tokens.output,
        tokens.cache_write,
        tokens.cache_read,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    (most > MAX_PER_CALL).then(|| {
        format!(
            "{most} tokens of a kind in one call, more than the {MAX_PER_CALL} any model call uses"
        )
    })
}

/// One line of a session record, as far as tokens go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// One model response. `id` names it where the CLI writes the same response more than
    /// once (Claude Code: one record per content block, each with the message's usage;
    /// Gemini CLI: the message again on each update): it is counted once.
    Response {
        id: Option<String>,
        model: Option<String>,
        /// When it was written (RFC 3339), as the record says.
        at: Option<String>,
        tokens: Tokens,
    },
    /// The session's running total so far (Codex): what is new is the difference.
    Total { at: Option<String>, tokens: Tokens },
    /// The model the responses that follow come from (Codex names it once per turn).
    Model(String),
}

/// Substrings without which a line holds no usage in any CLI's shape: most of a transcript
/// (tool results, file contents) is skipped without being parsed.
const MARKERS: &[&str] = &[
    "\"usage\"",
    "\"token_count\"",
    "\"tokens\"",
    "\"turn_context\"",
];

/// Could this line hold usage? A cheap look before parsing it.
pub fn may_hold_usage(line: &str) -> bool {
    MARKERS.iter().any(|m| line.contains(m))
}

/// The usage a parsed record holds, in whichever CLI's shape it is.
pub fn record_in(record: &Value) -> Option<Record> {
    ALL.into_iter()
        .find_map(|cli| cli.adapter().usage_record(record))
}

/// A whole number at `key` of `object`, 0 when absent or not one.
pub(super) fn count(object: &Value, key: &str) -> u64 {
    object.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A string at `pointer`, when there is one.
pub(super) fn text(record: &Value, pointer: &str) -> Option<String> {
    record
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Option<Record> {
        let record = record_in(&serde_json::from_str(line).unwrap());
        assert!(record.is_none() || may_hold_usage(line), "{line}");
        record
    }

    /// An assistant record of Claude Code 2.1 (one per content block; the shape ccusage and
    /// the reference document read), shortened.
    #[test]
    fn claude_code_assistant_usage() {
        let line = r#"{"parentUuid":"1c7f","isSidechain":false,"userType":"external","cwd":"/home/u/repo","sessionId":"431cad5d-8eed-4182-9ed9-2c9fddd569e5","version":"2.1.197","gitBranch":"main","message":{"id":"msg_01XYZ","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{"type":"text","text":"Done."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":1234,"cache_read_input_tokens":15000,"cache_creation":{"ephemeral_5m_input_tokens":1234,"ephemeral_1h_input_tokens":0},"output_tokens":17,"service_tier":"standard"}},"requestId":"req_011","type":"assistant","uuid":"9a1e","timestamp":"2026-11-25T12:00:03.511Z"}"#;
        assert_eq!(
            read(line),
            Some(Record::Response {
                id: Some("msg_01XYZ".into()),
                model: Some("claude-opus-4-6".into()),
                at: Some("2026-11-25T12:00:03.511Z".into()),
                tokens: Tokens {
                    input: 4,
                    output: 17,
                    cache_write: 1234,
                    cache_read: 15000
                },
            })
        );
        // Written by the real Claude Code 2.1.197 against the scripted model server of the
        // real-CLI suite (the final output count, the extra usage fields of that build).
        let real = r#"{"parentUuid":"16bda033-9004-4070-904e-d58487196272","isSidechain":false,"message":{"id":"msg_0008","type":"message","role":"assistant","model":"claude-scripted","content":[{"type":"text","text":"Giving up on the listing."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"stop_details":null},"requestId":"req_1","type":"assistant","uuid":"52486e28-8e5f-4170-88e4-bc6b020e027a","timestamp":"2026-11-27T23:20:17.985Z","userType":"external","entrypoint":"cli","cwd":"/tmp/phoenix-test-hIfQ6h/work","sessionId":"cec43045-9119-415f-897f-3046956b428e","version":"2.1.197","gitBranch":"HEAD"}"#;
        let Some(Record::Response {
            id, model, tokens, ..
        }) = read(real)
        else {
            panic!("a response")
        };
        assert_eq!(
            (id.as_deref(), model.as_deref()),
            (Some("msg_0008"), Some("claude-scripted"))
        );
        assert_eq!((tokens.input, tokens.output, tokens.total()), (10, 5, 15));
        // A user record, a summary, the API error Claude Code writes as a synthetic assistant
        // message with zero usage: nothing to count.
        for other in [
            r#"{"type":"user","message":{"role":"user","content":"the usage of x"}}"#,
            r#"{"type":"assistant","isApiErrorMessage":true,"message":{"id":"x","model":"<synthetic>","role":"assistant","usage":{"input_tokens":0,"output_tokens":0}}}"#,
        ] {
            assert_eq!(read(other), None, "{other}");
        }
    }

    /// Codex CLI 0.169 rollout lines: the model per turn, the running totals.
    #[test]
    fn codex_token_count_and_turn_context() {
        let context = r#"{"timestamp":"2026-11-23T19:04:10.002Z","type":"turn_context","payload":{"cwd":"/home/u/repo","approval_policy":"never","sandbox_policy":{"type":"danger-full-access"},"model":"gpt-5.3-codex","effort":"medium","summary":"auto"}}"#;
        assert_eq!(read(context), Some(Record::Model("gpt-5.3-codex".into())));
        let count = r#"{"timestamp":"2026-11-23T19:04:15.184Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":12000,"cached_input_tokens":9000,"output_tokens":700,"reasoning_output_tokens":300,"total_tokens":12700},"last_token_usage":{"input_tokens":6000,"cached_input_tokens":5000,"output_tokens":300,"reasoning_output_tokens":100,"total_tokens":6300},"model_context_window":258400},"rate_limits":null}}"#;
        let Some(Record::Total { at, tokens }) = read(count) else {
            panic!("a total")
        };
        assert_eq!(at.as_deref(), Some("2026-11-23T19:04:15.184Z"));
        assert_eq!(
            tokens,
            Tokens {
                input: 3000,
                output: 700,
                cache_write: 0,
                cache_read: 9000
            }
        );
        assert_eq!(tokens.total(), 12700);
        // Before the first response Codex sends a count without `info`.
        let empty = r#"{"timestamp":"2026-11-23T19:04:09Z","type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":null}}"#;
        assert_eq!(read(empty), None);
        // A count that gives only the total (older builds, shortened records) is input.
        let bare = r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"total_tokens":900}}}}"#;
        let Some(Record::Total { tokens, .. }) = read(bare) else {
            panic!("a total")
        };
        assert_eq!((tokens.input, tokens.total()), (900, 900));
    }

    /// Gemini CLI 0.61 chat lines: `recordMessageTokens` writes the response's usageMetadata
    /// as `tokens`, and the message is appended again on each update (same id).
    #[test]
    fn gemini_tokens_of_a_response() {
        let line = r#"{"id":"b2c4","timestamp":"2026-11-23T19:04:54.933Z","type":"gemini","content":"Done.","thoughts":[],"tokens":{"input":12000,"output":50,"cached":8000,"thoughts":120,"tool":30,"total":12200},"model":"gemini-3.1-pro-preview"}"#;
        assert_eq!(
            read(line),
            Some(Record::Response {
                id: Some("b2c4".into()),
                model: Some("gemini-3.1-pro-preview".into()),
                at: Some("2026-11-23T19:04:54.933Z".into()),
                tokens: Tokens {
                    input: 4030,
                    output: 170,
                    cache_write: 0,
                    cache_read: 8000
                },
            })
        );
        let Some(Record::Response { tokens, .. }) = read(line) else {
            unreachable!()
        };
        assert_eq!(tokens.total(), 12200, "the CLI's own total");
        // A message not yet given its tokens, a user message: nothing.
        for other in [
            r#"{"id":"b2c4","type":"gemini","content":"","tokens":null,"model":"m"}"#,
            r#"{"id":"u1","type":"user","content":[{"text":"count the tokens"}]}"#,
        ] {
            assert_eq!(read(other), None, "{other}");
        }
    }

    #[test]
    fn lines_without_a_marker_are_not_parsed() {
        assert!(!may_hold_usage(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"ok"}]}}"#
        ));
    }

    #[test]
    fn tokens_arithmetic() {
        let a = Tokens {
            input: 5,
            output: 1,
            cache_write: 0,
            cache_read: 10,
        };
        let b = Tokens {
            input: 3,
            output: 4,
            cache_write: 2,
            cache_read: 10,
        };
        assert_eq!(
            a.max(&b).beyond(&a),
            Tokens {
                input: 0,
                output: 3,
                cache_write: 2,
                cache_read: 0
            }
        );
        assert!(b.fell_from(&a) && !a.max(&b).fell_from(&a));
    }
}
