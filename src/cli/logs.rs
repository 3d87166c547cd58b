//! `phoenix logs [AGENT…] [-n N] [--since WHEN] [--previous] [-f] [--json]`: each agent's
//! steps from ops.jsonl and its pane's output, in time order.
//!
//! The pane's output is the one its wrapper keeps as it comes (`state::pane_log`): every line
//! has the time it was read, so steps and output interleave as they happened, and it outlives
//! the pane, the wrapper and `phoenix down`. An agent whose output is not kept (`tap = false`)
//! shows its pane's screen as read now instead. With no agent named, every agent of this
//! machine, each line after its name, as `docker compose logs` shows services.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::{out, output};
use crate::context::FleetContext;
use crate::state::pane_log::{self, Entry};
use crate::state::{self, AgentDir, op};

/// How often `--follow` looks again.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);
/// Lines per agent without `-n` or `--since`.
const DEFAULT_LINES: usize = 40;

// `phoenix logs`' arguments (their help is the variant's, in `Command`).
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Only these agents (default: every agent of this machine, each line after its name).
    pub agents: Vec<String>,
    /// The last N lines of each agent, steps and output together (default 40; every line
    /// since WHEN with --since).
    #[arg(short = 'n', long = "lines")]
    pub lines: Option<usize>,
    /// Only lines since WHEN: a duration ago (`10m`, `2h`, `1d`) or a time (RFC 3339,
    /// `2026-12-03T11:00:00Z`).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<jiff::Timestamp>,
    /// The run before the last restart: its output and steps, up to the start after it.
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Keep printing new steps and output (Ctrl-C ends).
    #[arg(short, long)]
    pub follow: bool,
    /// One JSON document `{format_version, agents, lines: […]}` (with --follow: one JSON
    /// object per line, each with `format_version`). See docs/json.md.
    #[arg(long)]
    pub json: bool,
}

/// `--since`: a duration ago or a timestamp.
fn parse_since(text: &str) -> Result<jiff::Timestamp, String> {
    if let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return Ok(ts);
    }
    let ago = crate::spec::duration::parse(text).map_err(|e| {
        format!("{e}; give a duration (`10m`, `2h`) or an RFC 3339 time (`2026-12-03T11:00:00Z`)")
    })?;
    let ago = jiff::SignedDuration::try_from(ago).map_err(|e| e.to_string())?;
    jiff::Timestamp::now()
        .checked_sub(ago)
        .map_err(|e| format!("`{text}` reaches too far back: {e}"))
}

/// One line of the output, of one agent.
#[derive(Debug, Clone)]
struct Shown {
    ts: Option<jiff::Timestamp>,
    agent: String,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A step of ops.jsonl.
    Step(op::Line),
    /// A line of the pane's kept output.
    Output(String),
    /// A line of the pane's screen as read now (output not kept), or a note about it.
    Screen(String),
}

impl Shown {
    fn text(&self) -> String {
        let time = self.ts.map(local_time).unwrap_or_else(|| "--:--:--".into());
        match &self.kind {
            Kind::Step(line) => step_line(&time, line),
            Kind::Output(text) | Kind::Screen(text) => format!("{time} {text}"),
        }
    }

    fn to_json(&self) -> Value {
        let ts = self.ts.map(state::rfc3339);
        match &self.kind {
            Kind::Step(line) => {
                let mut fields = line.to_value();
                let event = fields["event"].clone();
                if let Some(f) = fields.as_object_mut() {
                    f.shift_remove("ts");
                    f.shift_remove("agent");
                    f.shift_remove("event");
                }
                let text = step_line("", line).trim_start().to_string();
                json!({"ts": ts, "agent": self.agent, "source": "phoenix", "event": event,
                       "text": text, "fields": fields})
            }
            Kind::Output(text) => {
                json!({"ts": ts, "agent": self.agent, "source": "output", "text": text})
            }
            Kind::Screen(text) => {
                json!({"ts": ts, "agent": self.agent, "source": "screen", "text": text})
            }
        }
    }
}

pub fn logs(config: &Path, args: LogsArgs) -> anyhow::Result<i32> {
    let spec = crate::spec::load(config)?;
    let agents = if args.agents.is_empty() {
        let local: Vec<String> = spec.agents.iter().map(|a| a.name.clone()).collect();
        if !spec.remote_agents.is_empty() && !args.json {
            eprintln!(
                "note: only this machine's agents; `phoenix logs AGENT` reads one of another host"
            );
        }
        local
    } else {
        super::lifecycle::declared(&spec, &args.agents)?
    };
    let ctx = FleetContext::new(config, spec);
    let limit = args.lines.unwrap_or(if args.since.is_some() {
        usize::MAX
    } else {
        DEFAULT_LINES
    });
    let prefixed = agents.len() > 1 || args.agents.is_empty();
    let width = agents.iter().map(|a| a.chars().count()).max().unwrap_or(0);
    let world = crate::status::observe(&ctx.spec, ctx.runtime())?;
    let mut shown = Vec::new();
    let mut sources = Vec::new();
    for agent in &agents {
        let dir = ctx.dir.agent(agent);
        let keeps = ctx.spec.agent(agent).is_some_and(|a| a.tap);
        let pane = world.pane_of(agent).map(|p| p.id.clone());
        let mut lines = agent_lines(&ctx, &dir, keeps, pane.as_deref(), &args)?;
        if let Some(since) = args.since {
            lines.retain(|l| l.ts.is_none_or(|t| t >= since));
        }
        lines.drain(..lines.len().saturating_sub(limit));
        shown.extend(lines);
        sources.push(Source::new(&dir, keeps, pane));
    }
    // Stable: an agent's own lines keep their order where times are equal.
    shown.sort_by_key(|l| l.ts);
    print_lines(&shown, &args, prefixed, width, &agents);
    if !args.follow || args.previous {
        return Ok(0);
    }
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let mut new = Vec::new();
        for (agent, source) in agents.iter().zip(&mut sources) {
            new.extend(source.more(&ctx, agent));
        }
        new.sort_by_key(|l| l.ts);
        if args.json {
            out(&new.iter().map(stream_line).collect::<String>());
        } else {
            out(&render(&new, prefixed, width));
        }
    }
}

fn print_lines(shown: &[Shown], args: &LogsArgs, prefixed: bool, width: usize, agents: &[String]) {
    if args.json && !args.follow {
        let lines: Vec<Value> = shown.iter().map(Shown::to_json).collect();
        output::json(json!({"agents": agents, "previous": args.previous, "lines": lines}));
    } else if args.json {
        out(&shown.iter().map(stream_line).collect::<String>());
    } else {
        out(&render(shown, prefixed, width));
    }
}

/// A line of `--follow --json`: one compact object, `format_version` first.
fn stream_line(line: &Shown) -> String {
    let mut doc = serde_json::Map::new();
    doc.insert("format_version".into(), output::FORMAT_VERSION.into());
    if let Value::Object(fields) = line.to_json() {
        doc.extend(fields);
    }
    output::json_line(&Value::Object(doc))
}

fn render(shown: &[Shown], prefixed: bool, width: usize) -> String {
    let mut text = String::new();
    for line in shown {
        if prefixed {
            text.push_str(&format!("{:<width$} | ", line.agent));
        }
        text.push_str(line.text().trim_end());
        text.push('\n');
    }
    text
}

/// An agent's lines, oldest first: its steps and its kept output (or its screen now); with
/// `--previous`, those of the run before the last start.
fn agent_lines(
    ctx: &FleetContext,
    dir: &AgentDir,
    keeps: bool,
    pane: Option<&str>,
    args: &LogsArgs,
) -> anyhow::Result<Vec<Shown>> {
    let agent = &dir.name;
    let mut steps = op::tail(&dir.file(state::OPS_LOG));
    steps.sort_by_key(|l| l.time());
    let kept = pane_log::read(dir);
    let shown = |ts: Option<jiff::Timestamp>, kind: Kind| Shown {
        ts,
        agent: agent.clone(),
        kind,
    };
    let step_lines =
        |steps: Vec<op::Line>| steps.into_iter().map(|l| shown(l.time(), Kind::Step(l)));
    if args.previous {
        let Some(run) = pane_log::previous_run(&kept) else {
            if args.agents.len() == 1 {
                anyhow::bail!(
                    "agent `{agent}` has no previous run in its kept output ({}): it has not been restarted since its output is kept{}",
                    dir.file(pane_log::PANE_LOG).display(),
                    if keeps {
                        ""
                    } else {
                        " (its `tap` is off, so none is)"
                    }
                );
            }
            return Ok(Vec::new());
        };
        let from = match run.first() {
            Some(Entry::RunStart { ts, .. }) => Some(*ts),
            _ => None,
        };
        let to = kept
            .iter()
            .skip(run.len())
            .find_map(|e| match e {
                Entry::RunStart { ts, .. } if from.is_none_or(|f| *ts > f) => Some(*ts),
                _ => None,
            })
            .or_else(|| run.last().map(Entry::ts));
        steps.retain(|l| {
            l.time()
                .is_some_and(|t| from.is_none_or(|f| t >= f) && to.is_none_or(|to| t < to))
        });
        let mut lines: Vec<Shown> = step_lines(steps).collect();
        lines.extend(run.iter().filter_map(|e| match e {
            Entry::Output { ts, text } => Some(shown(Some(*ts), Kind::Output(text.clone()))),
            Entry::RunStart { .. } => None,
        }));
        lines.sort_by_key(|l| l.ts);
        return Ok(lines);
    }
    let mut lines: Vec<Shown> = step_lines(steps).collect();
    let output: Vec<Shown> = kept
        .iter()
        .filter_map(|e| match e {
            Entry::Output { ts, text } => Some(shown(Some(*ts), Kind::Output(text.clone()))),
            Entry::RunStart { .. } => None,
        })
        .collect();
    if output.is_empty() {
        let now = jiff::Timestamp::now();
        match pane {
            Some(pane) => {
                let limit = args.lines.unwrap_or(DEFAULT_LINES);
                lines.push(shown(
                    Some(now),
                    Kind::Screen(format!("── pane {pane}, now ──")),
                ));
                let screen = capture(ctx, pane, limit);
                let skip = screen.len().saturating_sub(limit);
                lines.extend(
                    screen
                        .into_iter()
                        .skip(skip)
                        .map(|l| shown(Some(now), Kind::Screen(l))),
                );
            }
            None => lines.push(shown(
                Some(now),
                Kind::Screen(format!("── agent `{agent}` has no pane (not running) ──")),
            )),
        }
    } else {
        lines.sort_by_key(|l| l.ts);
        lines.extend(output);
    }
    lines.sort_by_key(|l| l.ts);
    Ok(lines)
}

/// Where `--follow` reads an agent's new lines from.
struct Source {
    dir: AgentDir,
    ops_offset: u64,
    output: Output,
}

enum Output {
    /// The kept log: how far it was read, and which file that was (a rotation makes another).
    Kept { offset: u64, inode: Option<u64> },
    /// The pane's screen, compared with the last read of it.
    Screen {
        pane: Option<String>,
        last: Vec<String>,
    },
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| (m.ino(), m.len()))
}

impl Source {
    fn new(dir: &AgentDir, keeps: bool, pane: Option<String>) -> Source {
        let ops_offset = std::fs::metadata(dir.file(state::OPS_LOG))
            .map(|m| m.len())
            .unwrap_or(0);
        let output = if keeps {
            let id = file_id(&dir.file(pane_log::PANE_LOG));
            Output::Kept {
                offset: id.map_or(0, |(_, len)| len),
                inode: id.map(|(ino, _)| ino),
            }
        } else {
            Output::Screen {
                pane,
                last: Vec::new(),
            }
        };
        Source {
            dir: dir.clone(),
            ops_offset,
            output,
        }
    }

    /// What was added since the last look.
    fn more(&mut self, ctx: &FleetContext, agent: &str) -> Vec<Shown> {
        let mut new = Vec::new();
        let ops = self.dir.file(state::OPS_LOG);
        let len = std::fs::metadata(&ops).map(|m| m.len()).unwrap_or(0);
        if len < self.ops_offset {
            self.ops_offset = 0; // Rotated or truncated: read it from the start.
        }
        if len > self.ops_offset {
            for line in op::since(&ops, self.ops_offset) {
                new.push(Shown {
                    ts: line.time(),
                    agent: agent.to_string(),
                    kind: Kind::Step(line),
                });
            }
            self.ops_offset = len;
        }
        let mut text = String::new();
        match &mut self.output {
            Output::Kept { offset, inode } => {
                let path = self.dir.file(pane_log::PANE_LOG);
                let now = file_id(&path);
                if now.map(|(ino, _)| ino) != *inode {
                    // Rotated: the rest of the file it was, then the new one from its start.
                    let before = self.dir.file(pane_log::PANE_LOG_PREVIOUS);
                    if inode.is_some() && file_id(&before).map(|(ino, _)| ino) == *inode {
                        text.push_str(&complete_lines(&before, offset));
                    }
                    *offset = 0;
                    *inode = now.map(|(ino, _)| ino);
                }
                if now.is_some_and(|(_, len)| len < *offset) {
                    *offset = 0;
                }
                text.push_str(&complete_lines(&path, offset));
                new.extend(pane_log::parse(&text).into_iter().filter_map(|e| match e {
                    Entry::Output { ts, text } => Some(Shown {
                        ts: Some(ts),
                        agent: agent.to_string(),
                        kind: Kind::Output(text),
                    }),
                    Entry::RunStart { .. } => None,
                }));
            }
            Output::Screen { pane, last } => {
                if pane.is_none() {
                    *pane = crate::status::observe(&ctx.spec, ctx.runtime())
                        .ok()
                        .and_then(|w| w.pane_of(agent).map(|p| p.id.clone()));
                }
                if let Some(id) = pane.as_deref() {
                    let screen = capture(ctx, id, 50);
                    let at = jiff::Timestamp::now();
                    for l in new_lines(last, &screen) {
                        new.push(Shown {
                            ts: Some(at),
                            agent: agent.to_string(),
                            kind: Kind::Screen(l.clone()),
                        });
                    }
                    *last = screen;
                }
            }
        }
        new
    }
}

/// The complete lines of `path` after `offset` (moved past them): a line still being
/// written is read at the next look.
fn complete_lines(path: &Path, offset: &mut u64) -> String {
    let text = state::read_since(path, *offset);
    let end = text.rfind('\n').map_or(0, |i| i + 1);
    *offset += end as u64;
    text[..end].to_string()
}

/// The pane's last `lines` lines, trailing blank ones dropped (a fresh pane is mostly empty).
fn capture(ctx: &FleetContext, pane: &str, lines: usize) -> Vec<String> {
    let text = ctx
        .runtime()
        .capture(pane, lines)
        .with_context(|| format!("cannot read pane {pane}"))
        .unwrap_or_default();
    let mut v: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    while v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// The lines of `now` after the longest end of `before` it starts with: what scrolled in.
fn new_lines<'a>(before: &[String], now: &'a [String]) -> &'a [String] {
    if before.is_empty() {
        return now;
    }
    for start in 0..before.len() {
        let tail = &before[start..];
        if now.len() >= tail.len() && now[..tail.len()] == *tail {
            return &now[tail.len()..];
        }
    }
    now
}

/// Steps and output on one clock: the local time of day.
fn local_time(t: jiff::Timestamp) -> String {
    t.to_zoned(jiff::tz::TimeZone::system())
        .strftime("%H:%M:%S")
        .to_string()
}

fn step_line(time: &str, line: &op::Line) -> String {
    let fields = line.to_value();
    let mut rest: Vec<String> = fields
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !matches!(k.as_str(), "ts" | "agent" | "event"))
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    rest.truncate(8);
    let event = fields["event"].as_str().unwrap_or("?").to_string();
    format!("{time} [phoenix] {event} {}", rest.join(" "))
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::{new_lines, parse_since};

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_what_scrolled_in_is_new() {
        let before = v(&["a", "b", "c"]);
        assert_eq!(new_lines(&before, &v(&["b", "c", "d"])), v(&["d"]));
        assert_eq!(
            new_lines(&before, &v(&["a", "b", "c"])),
            Vec::<String>::new()
        );
        assert_eq!(new_lines(&before, &v(&["x", "y"])), v(&["x", "y"]));
        assert_eq!(new_lines(&[], &v(&["x"])), v(&["x"]));
    }

    #[test]
    fn since_is_a_duration_ago_or_a_time() {
        let t = parse_since("2026-12-03T11:00:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-12-03T11:00:00Z");
        let ago = jiff::Timestamp::now().duration_since(parse_since("10m").unwrap());
        assert!((599..=601).contains(&ago.as_secs()), "{ago:?}");
        assert!(parse_since("yesterday").unwrap_err().contains("RFC 3339"));
    }
}
