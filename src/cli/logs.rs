//! `phoenix logs AGENT [-n N] [-f]`: the agent's steps from ops.jsonl and its pane's recent
//! output, in time order.
//!
//! A pane line carries no time of its own: the screen is read when `logs` runs, so it comes
//! after every step recorded before that; with `--follow`, new steps and new screen lines are
//! printed as they are seen, in the order they are seen.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::out;
use crate::context::FleetContext;
use crate::state::{self, op};

/// How often `--follow` looks again.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

pub fn logs(config: &Path, name: &str, lines: usize, follow: bool) -> anyhow::Result<i32> {
    let spec = crate::spec::load(config)?;
    if let Some(host) = crate::hosts::reads::host_of(&spec, name) {
        // An agent of a host: its host's own `logs`, and with --follow over ssh -t.
        let n = lines.to_string();
        let mut args = vec!["logs", "--lines", n.as_str()];
        if follow {
            args.push("--follow");
            args.extend(["--", name]);
            return super::fleetwide::exec_on_host(&spec, host, &args);
        }
        args.extend(["--", name]);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        return super::fleetwide::on_host(&spec, host, &args);
    }
    let ctx = FleetContext::new(config, spec);
    let agent = super::lifecycle::declared(&ctx.spec, &[name.to_string()])?.remove(0);
    let dir = ctx.dir.agent(&agent);
    let ops_path = dir.file(state::OPS_LOG);
    let mut steps = op::tail(&ops_path);
    steps.sort_by_key(|l| l.time());
    let skip = steps.len().saturating_sub(lines);
    let mut text = String::new();
    for line in &steps[skip..] {
        text.push_str(&step_line(line));
    }
    let pane = pane_of(&ctx, &agent)?;
    let mut screen = Vec::new();
    match &pane {
        Some(pane) => {
            screen = capture(&ctx, pane, lines);
            text.push_str(&format!(
                "── pane {pane}, now ({}) ──\n",
                local_time(jiff::Timestamp::now())
            ));
            for l in &screen {
                text.push_str(l);
                text.push('\n');
            }
        }
        None => text.push_str(&format!(
            "── agent `{agent}` has no pane (not running) ──\n"
        )),
    }
    out(&text);
    if !follow {
        return Ok(0);
    }
    let mut offset = std::fs::metadata(&ops_path).map(|m| m.len()).unwrap_or(0);
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let mut text = String::new();
        let len = std::fs::metadata(&ops_path).map(|m| m.len()).unwrap_or(0);
        if len < offset {
            offset = 0; // Rotated or truncated: read it from the start.
        }
        if len > offset {
            for line in op::since(&ops_path, offset) {
                text.push_str(&step_line(&line));
            }
            offset = len;
        }
        if let Some(pane) = pane_of(&ctx, &agent)? {
            let now = capture(&ctx, &pane, lines.max(50));
            for l in new_lines(&screen, &now) {
                text.push_str(l);
                text.push('\n');
            }
            screen = now;
        }
        out(&text);
    }
}

fn pane_of(ctx: &FleetContext, agent: &str) -> anyhow::Result<Option<String>> {
    let world = crate::status::observe(&ctx.spec, ctx.runtime())?;
    Ok(world.pane_of(agent).map(|p| p.id.clone()))
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

/// Steps and the screen on one clock: the local time of day.
fn local_time(t: jiff::Timestamp) -> String {
    t.to_zoned(jiff::tz::TimeZone::system())
        .strftime("%H:%M:%S")
        .to_string()
}

fn step_line(line: &op::Line) -> String {
    let time = line
        .time()
        .map(local_time)
        .unwrap_or_else(|| "--:--:--".into());
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
    format!("{time} [phoenix] {event} {}\n", rest.join(" "))
        .trim_end()
        .to_string()
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::new_lines;

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
}
