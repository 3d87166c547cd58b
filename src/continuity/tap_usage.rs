//! `->continuity:usage`: what a custom CLI says a model call cost, recorded for its usage
//! ledger. The CLIs phoenix knows are read from their own session records; a custom one
//! prints one line per model call:
//!
//! ```text
//! ->continuity:usage#KEY model=my-model input=1200 output=300 cache_write=0 cache_read=800
//! ```
//!
//! (`KEY` the session's marker key, `super::marker_key`.) Keys in any order, each count a whole number, any left out counting 0; `model` names the
//! price (`[prices]`), without it the tokens are `unknown` and unpriced. The line is appended
//! to the agent's `usage_reported.jsonl` at once (not queued like the tap's actions, nor held
//! to their rate: a busy agent makes many calls), at most `PER_MINUTE` a minute; a call of more
//! than `MAX_PER_CALL` tokens of a kind is refused. The ledger keeps it apart as reported: it is
//! shown, and never stops the agent for its budget alone.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::state::AgentDir;
use crate::usage::Tokens;

/// Reports recorded per minute at most: a runaway loop printing them must not fill the disk.
const PER_MINUTE: usize = 600;

/// What `->continuity:usage` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub model: Option<String>,
    pub tokens: Tokens,
}

impl Reported {
    /// `model=NAME input=N output=N cache_write=N cache_read=N`; `None` when a count is not a
    /// whole number, a key is unknown, or nothing was used.
    pub fn parse(arg: &str) -> Option<Reported> {
        let mut r = Reported {
            model: None,
            tokens: Tokens::default(),
        };
        for pair in arg.split_whitespace() {
            let (key, value) = pair.split_once('=')?;
            let count = || value.parse::<u64>().ok();
            match key {
                "model" if !value.is_empty() => r.model = Some(value.to_string()),
                "input" => r.tokens.input = count()?,
                "output" => r.tokens.output = count()?,
                "cache_write" => r.tokens.cache_write = count()?,
                "cache_read" => r.tokens.cache_read = count()?,
                _ => return None,
            }
        }
        (!r.tokens.is_zero()).then_some(r)
    }
}

impl Reported {
    /// Why this is no model call's usage, if it is not: more tokens of a kind than any model
    /// reads or writes in one call.
    pub fn absurd(&self) -> Option<String> {
        absurd(&self.tokens)
    }
}

pub use crate::agent_cli::usage::{MAX_PER_CALL, absurd};

/// The cap on reports per minute.
#[derive(Debug, Default)]
pub struct UsageGate {
    recent: VecDeque<Instant>,
}

impl UsageGate {
    /// Append `reported` to the agent's `usage_reported.jsonl`; `Err` says why it was not.
    pub fn record(&mut self, dir: &AgentDir, reported: &Reported) -> Result<(), String> {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= PER_MINUTE {
            return Err(format!("more than {PER_MINUTE} usage reports in a minute"));
        }
        self.recent.push_back(now);
        let t = &reported.tokens;
        let line = json!({
            "ts": crate::state::now_rfc3339(), "model": reported.model,
            "input": t.input, "output": t.output,
            "cache_write": t.cache_write, "cache_read": t.cache_read,
        });
        crate::state::append_jsonl(&dir.file(crate::usage::ledger::REPORTED), &line)
            .map_err(|e| format!("cannot record it: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::continuity::tap::{Command, Tap};

    #[test]
    fn a_usage_line_is_a_command_with_its_counts() {
        let mut tap = Tap::new();
        let out = tap.feed(
            b"->continuity:usage model=my-model input=1200 output=300 cache_read=800\n\
              ->continuity:usage input=5\n\
              ->continuity:usage model=x input=lots\n\
              ->continuity:usage model=x\n\
              ->continuity:usage model=x inputs=5\n",
        );
        let tokens = |input, output, cache_read| Tokens {
            input,
            output,
            cache_write: 0,
            cache_read,
        };
        assert_eq!(
            out,
            [
                Command::Usage(Reported {
                    model: Some("my-model".into()),
                    tokens: tokens(1200, 300, 800),
                }),
                Command::Usage(Reported {
                    model: None,
                    tokens: tokens(5, 0, 0),
                }),
            ],
            "a bad count, nothing used, an unknown key: not a report"
        );
    }

    #[test]
    fn reports_go_to_the_ledger_file_until_the_cap() {
        let (_tmp, dir) = crate::state::testing::temp_agent();
        let r = Reported::parse("model=m input=10 output=2").unwrap();
        let mut gate = UsageGate::default();
        gate.record(&dir, &r).unwrap();
        let path = dir.file(crate::usage::ledger::REPORTED);
        let text = std::fs::read_to_string(&path).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(
            (line["model"].as_str(), line["input"].as_u64()),
            (Some("m"), Some(10))
        );
        for _ in 1..PER_MINUTE {
            gate.record(&dir, &r).unwrap();
        }
        assert!(gate.record(&dir, &r).unwrap_err().contains("in a minute"));
    }
}
