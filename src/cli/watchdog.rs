//! `phoenix watchdog [--once] [--json]`: run passes (once, or on the `[schedules]` cron) and
//! print each pass's report.

use super::output;
use std::path::Path;
use std::time::Duration;

use super::out;

/// `phoenix watchdog [--once] [--json]`.
pub fn run(config: &Path, once: bool, json: bool) -> anyhow::Result<i32> {
    loop {
        let report = crate::watchdog::pass(config)?;
        print_report(&report, json);
        if once {
            return Ok(if report.unhealthy() > 0 { 1 } else { 0 });
        }
        let spec = crate::spec::load(config)?;
        let Some(schedule) = spec.schedules.watchdog.clone() else {
            anyhow::bail!(
                "[schedules] watchdog is off in {}: run `phoenix watchdog --once` from your own scheduler, or set a cron expression",
                config.display()
            );
        };
        let now = jiff::Zoned::now();
        let next = schedule
            .cron
            .find_next_occurrence(&now, false)
            .map_err(|e| anyhow::anyhow!("schedule `{}`: {e}", schedule.expr))?;
        let wait = next.timestamp().as_millisecond() - now.timestamp().as_millisecond();
        std::thread::sleep(Duration::from_millis(wait.max(0) as u64));
    }
}

fn print_report(report: &crate::watchdog::Report, json: bool) {
    if json {
        output::json(report);
        return;
    }
    if let Some(why) = &report.skipped {
        out(&format!("watchdog pass skipped: {why}\n"));
        return;
    }
    let mut text = String::new();
    for a in &report.agents {
        let detail = match a.verdict {
            "skipped" => a.skipped.clone().unwrap_or_default(),
            "healthy" => String::new(),
            _ => a
                .findings
                .iter()
                .map(|f| f.summary.clone())
                .collect::<Vec<_>>()
                .join("; "),
        };
        text.push_str(&format!("{:<10} {:<12} {detail}", a.verdict, a.agent));
        if let Some(action) = a.action {
            text.push_str(&format!(
                " → {}",
                serde_json::to_value(action)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ));
        }
        if let Some(url) = &a.issue_url {
            text.push_str(&format!(" ({url})"));
        }
        text.push('\n');
        for p in &a.problems {
            text.push_str(&format!("           warning: {p}\n"));
        }
    }
    text.push_str(&format!(
        "{} checked, {} unhealthy\n",
        crate::text::counted(report.agents.len(), "agent"),
        report.unhealthy()
    ));
    out(&text);
}
