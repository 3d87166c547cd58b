//! What an agent's append-only logs add up to, read a scrape at a time: each log is read on
//! from where the previous scrape stopped, a bounded amount per scrape, so a counter covers the
//! whole log (and so never goes down, whoever serves it and however often it restarts) while a
//! scrape pays only for the lines written since the last one.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::state::bounded::{self, Links};
use crate::state::op::{Line, Op};
use crate::watchdog::observe::TokenCount;

/// At most this much of one log is read in one go: a line longer than this (none of phoenix's
/// are) is skipped rather than read whole.
const CHUNK: u64 = 4 << 20;

/// Counts kept from the lines of one log.
pub trait Tally: Default {
    fn line(&mut self, line: &str);
}

/// One log and how far it has been counted.
#[derive(Debug, Default)]
pub struct Tailed<T> {
    /// The file counted (device, inode): another file at the path is counted afresh.
    file: Option<(u64, u64)>,
    offset: u64,
    /// The next read starts mid-line (a start at a transcript's tail, a skipped long line).
    mid_line: bool,
    /// Where a file first seen is counted from, at most this far back from its end (`None`:
    /// from its start, as every counter must).
    from_end: Option<u64>,
    pub tally: T,
}

impl<T: Tally> Tailed<T> {
    /// A log counted from its first line.
    pub fn whole() -> Self {
        Tailed {
            file: None,
            offset: 0,
            mid_line: false,
            from_end: None,
            tally: T::default(),
        }
    }

    /// A file counted from at most `bytes` before its end as it is when first read (a
    /// transcript, which the watchdog reads no further back either).
    pub fn last(bytes: u64) -> Self {
        Tailed {
            from_end: Some(bytes),
            ..Tailed::whole()
        }
    }

    /// Count what was appended to `path` since the last call, reading at most `budget` bytes
    /// (what is read is taken off it; the rest waits for the next scrape). A missing or
    /// unreadable file leaves the counts as they are.
    pub fn advance(&mut self, path: &Path, links: Links, budget: &mut u64) {
        // The usual case, a log that did not grow, costs one stat.
        let stat = match links {
            Links::Follow => std::fs::metadata(path),
            Links::Refuse => std::fs::symlink_metadata(path),
        };
        if let Ok(m) = stat
            && self.file == Some((m.dev(), m.ino()))
            && m.len() == self.offset
        {
            return;
        }
        let Ok((mut file, meta)) = bounded::open_regular(path, links) else {
            return;
        };
        let id = (meta.dev(), meta.ino());
        if self.file != Some(id) || meta.len() < self.offset {
            let start = self.from_end.map_or(0, |b| meta.len().saturating_sub(b));
            *self = Tailed {
                file: Some(id),
                offset: start,
                mid_line: start > 0,
                from_end: self.from_end,
                tally: T::default(),
            };
        }
        while *budget > 0 && self.offset < meta.len() {
            let want = (meta.len() - self.offset).min(CHUNK).min(*budget);
            let mut bytes = Vec::with_capacity(want as usize);
            if file.seek(SeekFrom::Start(self.offset)).is_err()
                || (&mut file).take(want).read_to_end(&mut bytes).is_err()
                || bytes.is_empty()
            {
                return;
            }
            *budget = budget.saturating_sub(bytes.len() as u64);
            let end = match bytes.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                // A line longer than a chunk is no line of ours: passed over.
                None if bytes.len() as u64 == CHUNK => {
                    self.offset += CHUNK;
                    self.mid_line = true;
                    continue;
                }
                // A line still being written: counted when its newline is there.
                None => return,
            };
            let text = String::from_utf8_lossy(&bytes[..end]);
            let mut lines = text.lines();
            if std::mem::take(&mut self.mid_line) {
                lines.next();
            }
            for line in lines.filter(|l| !l.trim().is_empty()) {
                self.tally.line(line);
            }
            self.offset += end as u64;
        }
    }
}

/// A value read from a log as a label value: short words only, so that a log cannot add
/// unbounded or odd series to a scrape.
pub fn label_value(text: Option<&str>) -> String {
    match text {
        Some(t)
            if !t.is_empty()
                && t.len() <= 40
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
        {
            t.to_string()
        }
        Some(_) => "other".to_string(),
        None => "unknown".to_string(),
    }
}

/// What an agent's ops.jsonl adds up to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OpsTally {
    /// Starts after the first, by why the run before ended.
    pub restarts: BTreeMap<String, u64>,
    /// Watchdog findings, by check.
    pub findings: BTreeMap<String, u64>,
    /// Clinic recoveries, by (diagnosis, outcome: `rehabilitated` or `aborted`).
    pub recoveries: BTreeMap<(String, String), u64>,
    /// Handoffs saved, by trigger.
    pub handoffs: BTreeMap<String, u64>,
    /// Text given to the running agent, by (kind, outcome: `delivered` or `failed`).
    pub injections: BTreeMap<(&'static str, &'static str), u64>,
    /// A run has started before: the next start is a restart.
    started: bool,
    /// Why the current run ended or is being ended, and whether a person or the watchdog
    /// asked for it (which a later exit of the run does not overrule).
    pending: Option<(String, bool)>,
    /// The Clinic's diagnosis of the recovery in progress.
    diagnosis: Option<String>,
}

/// The ops an `OpsTally` counts; the others are passed over before their JSON is parsed.
const COUNTED: &[&str] = &[
    "agent_start",
    "agent_exit",
    "operator_restart",
    "watchdog_restart",
    "watchdog",
    "clinic_diagnosis",
    "clinic_rehabilitation",
    "clinic_abort",
    "handoff_saved",
    "context_injected",
    "startup_context_injected",
    "startup_context_failed",
    "continue_prompt_sent",
    "continue_prompt_failed",
    "clinic_context_injected",
];

/// The `event` of a line as phoenix writes it (`{"ts":…,"agent":…,"event":"…",…}`), found
/// without parsing it; `None` when it is not there in that form.
fn event_name(line: &str) -> Option<&str> {
    let rest = &line[line.find("\"event\":\"")? + "\"event\":\"".len()..];
    rest.split('"').next()
}

impl Tally for OpsTally {
    fn line(&mut self, line: &str) {
        // Most lines are hooks' (prompts, turns): not worth parsing. A line written in another
        // form is parsed to find out.
        if event_name(line).is_some_and(|name| !COUNTED.contains(&name)) {
            return;
        }
        if let Ok(line) = serde_json::from_str::<Line>(line) {
            self.op(&line);
        }
    }
}

impl OpsTally {
    fn op(&mut self, line: &Line) {
        let add = |map: &mut BTreeMap<String, u64>, key: String| *map.entry(key).or_default() += 1;
        match &line.op {
            Op::AgentStart(_) => {
                if self.started {
                    let why = self.pending.take().map_or("unknown".to_string(), |p| p.0);
                    add(&mut self.restarts, why);
                }
                self.started = true;
                self.pending = None;
            }
            Op::AgentExit(_) if !self.pending.as_ref().is_some_and(|p| p.1) => {
                self.pending = Some((label_value(line.str("reason")), false));
            }
            Op::OperatorRestart(_) => self.pending = Some(("operator_restart".into(), true)),
            Op::WatchdogRestart(_) => self.pending = Some(("watchdog_restart".into(), true)),
            Op::Watchdog(_) => {
                for finding in line.get("findings").as_array().into_iter().flatten() {
                    add(&mut self.findings, label_value(finding["check"].as_str()));
                }
            }
            Op::ClinicDiagnosis(_) => {
                let cause = line.get("diagnosis")["root_cause"].as_str();
                self.diagnosis = Some(label_value(cause));
            }
            Op::ClinicRehabilitation(_) | Op::ClinicAbort(_) => {
                let outcome = match line.op {
                    Op::ClinicAbort(_) => "aborted",
                    _ => "rehabilitated",
                };
                let diagnosis = self.diagnosis.take().unwrap_or_else(|| "unknown".into());
                *self
                    .recoveries
                    .entry((diagnosis, outcome.to_string()))
                    .or_default() += 1;
            }
            Op::HandoffSaved(_) => add(&mut self.handoffs, label_value(line.str("trigger"))),
            op => {
                if let Some(key) = injection(op) {
                    *self.injections.entry(key).or_default() += 1;
                }
            }
        }
    }
}

/// An op that records text given to the running agent: (kind, outcome).
fn injection(op: &Op) -> Option<(&'static str, &'static str)> {
    Some(match op {
        Op::ContextInjected(_) => ("operator", "delivered"),
        Op::StartupContextInjected(_) => ("startup_context", "delivered"),
        Op::StartupContextFailed(_) => ("startup_context", "failed"),
        Op::ContinuePromptSent(_) => ("continue_prompt", "delivered"),
        Op::ContinuePromptFailed(_) => ("continue_prompt", "failed"),
        Op::ClinicContextInjected(_) => ("clinic_context", "delivered"),
        _ => return None,
    })
}

/// An agent's hook_errors.jsonl: the problems its hooks ran into, by hook event.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HookErrors(pub BTreeMap<String, u64>);

impl Tally for HookErrors {
    fn line(&mut self, line: &str) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
            && v.is_object()
        {
            *self.0.entry(label_value(v["event"].as_str())).or_default() += 1;
        }
    }
}

/// The tokens a session's transcript reports, counted as the watchdog counts them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tokens(pub TokenCount);

impl Tally for Tokens {
    fn line(&mut self, line: &str) {
        self.0.line(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn op(event: &str, fields: &str) -> String {
        let sep = if fields.is_empty() { "" } else { "," };
        format!(
            "{{\"ts\":\"2026-01-01T00:00:00Z\",\"agent\":\"a\",\"event\":\"{event}\"{sep}{fields}}}\n"
        )
    }

    fn append(path: &Path, text: &str) {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }

    #[test]
    fn a_restart_is_counted_by_why_the_run_before_it_ended() {
        let mut t = OpsTally::default();
        let lines = [
            op("agent_start", ""),
            op("prompt", ""),
            op("agent_exit", r#""reason":"crash","action":"resume""#),
            op("agent_start", ""),
            // A person asked: the run's own end (its wrapper was told to stop) says the same
            // or less, and does not overrule it.
            op("operator_restart", r#""fresh":false"#),
            op("agent_exit", r#""reason":"runtime_stop""#),
            op("agent_start", ""),
            op("watchdog_restart", ""),
            op("agent_start", ""),
            op("agent_start", ""),
            op("agent_exit", r#""reason":"Not A Word!""#),
            op("agent_start", ""),
        ];
        for l in &lines {
            t.line(l);
        }
        let restarts: Vec<(&str, u64)> = t.restarts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            restarts,
            [
                ("crash", 1),
                ("operator_restart", 1),
                ("other", 1),
                ("unknown", 1),
                ("watchdog_restart", 1)
            ]
        );
    }

    #[test]
    fn findings_recoveries_handoffs_and_injections_are_counted() {
        let mut t = OpsTally::default();
        for l in [
            op(
                "watchdog",
                r#""findings":[{"check":"silence"},{"check":"error_cascade"}]"#,
            ),
            op("watchdog", r#""findings":[{"check":"silence"}]"#),
            op(
                "clinic_diagnosis",
                r#""diagnosis":{"root_cause":"transient_error"}"#,
            ),
            op("clinic_prescription", ""),
            op("clinic_rehabilitation", ""),
            op(
                "clinic_diagnosis",
                r#""diagnosis":{"root_cause":"invalid_credentials"}"#,
            ),
            op("clinic_abort", ""),
            op("handoff_saved", r#""trigger":"crash""#),
            op("handoff_saved", r#""trigger":"manual""#),
            op("context_injected", ""),
            op("startup_context_failed", ""),
            op("continue_prompt_sent", ""),
            op("continue_prompt_skipped", ""),
        ] {
            t.line(&l);
        }
        assert_eq!(t.findings["silence"], 2);
        assert_eq!(t.findings["error_cascade"], 1);
        assert_eq!(
            t.recoveries[&("transient_error".into(), "rehabilitated".into())],
            1
        );
        assert_eq!(
            t.recoveries[&("invalid_credentials".into(), "aborted".into())],
            1
        );
        assert_eq!((t.handoffs["crash"], t.handoffs["manual"]), (1, 1));
        assert_eq!(t.injections[&("operator", "delivered")], 1);
        assert_eq!(t.injections[&("startup_context", "failed")], 1);
        assert_eq!(t.injections[&("continue_prompt", "delivered")], 1);
        assert_eq!(t.injections.len(), 3);
    }

    #[test]
    fn a_line_in_another_form_is_still_read() {
        let mut t = OpsTally::default();
        t.line(r#"{"event": "agent_start"}"#);
        t.line(r#"{"agent":"a","event":"agent_start","ts":"x"}"#);
        assert_eq!(t.restarts["unknown"], 1);
    }

    #[test]
    fn a_log_is_counted_once_across_reads_and_afresh_when_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ops.jsonl");
        let mut tailed = Tailed::<OpsTally>::whole();
        let mut budget = u64::MAX;
        tailed.advance(&path, Links::Refuse, &mut budget);
        assert_eq!(tailed.tally, OpsTally::default(), "no file yet");
        append(&path, &op("agent_start", ""));
        append(&path, &op("agent_start", ""));
        // Half a line: its writer is still at it.
        append(&path, r#"{"ts":"t","agent":"a","event":"agent_st"#);
        tailed.advance(&path, Links::Refuse, &mut budget);
        assert_eq!(tailed.tally.restarts["unknown"], 1);
        append(&path, "art\"}\n");
        tailed.advance(&path, Links::Refuse, &mut budget);
        tailed.advance(&path, Links::Refuse, &mut budget);
        assert_eq!(tailed.tally.restarts["unknown"], 2, "each line once");
        // Replaced by a shorter file: counted from its start.
        std::fs::remove_file(&path).unwrap();
        append(&path, &op("agent_start", ""));
        tailed.advance(&path, Links::Refuse, &mut budget);
        assert!(tailed.tally.restarts.is_empty());
    }

    #[test]
    fn a_scrape_reads_no_more_than_its_budget_and_the_next_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ops.jsonl");
        let line = op("agent_start", "");
        append(&path, &line.repeat(101));
        let mut tailed = Tailed::<OpsTally>::whole();
        let mut budget = line.len() as u64 * 50 + 10;
        tailed.advance(&path, Links::Refuse, &mut budget);
        assert_eq!(budget, 0);
        assert_eq!(tailed.tally.restarts["unknown"], 49, "50 starts read");
        let mut budget = u64::MAX;
        tailed.advance(&path, Links::Refuse, &mut budget);
        assert_eq!(tailed.tally.restarts["unknown"], 100);
    }

    #[test]
    fn a_transcript_is_counted_from_near_its_end() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.jsonl");
        let usage = "{\"type\":\"assistant\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":5}}}\n";
        append(&path, &usage.repeat(10));
        let mut tailed = Tailed::<Tokens>::last(usage.len() as u64 * 3 + 7);
        let mut budget = u64::MAX;
        tailed.advance(&path, Links::Follow, &mut budget);
        assert_eq!(
            tailed.tally.0.total(),
            Some(45),
            "the 3 whole lines of the tail"
        );
        append(&path, usage);
        tailed.advance(&path, Links::Follow, &mut budget);
        assert_eq!(tailed.tally.0.total(), Some(60));
    }

    #[test]
    fn hook_errors_are_counted_by_event_and_odd_labels_are_bounded() {
        let mut h = HookErrors::default();
        h.line(r#"{"ts":"t","agent":"a","event":"post_tool_use","error":"x"}"#);
        h.line(r#"{"event":"post_tool_use"}"#);
        h.line(r#"{"event":"a\"b"}"#);
        h.line("not json");
        assert_eq!(h.0["post_tool_use"], 2);
        assert_eq!(h.0["other"], 1);
        assert_eq!(label_value(Some(&"x".repeat(41))), "other");
        assert_eq!(label_value(None), "unknown");
    }
}
