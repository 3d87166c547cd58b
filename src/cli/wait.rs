//! `phoenix wait AGENT`: until an agent's turn ends (or it is idle, its CLI exits or starts
//! again), or the timeout. The same wait as the MCP tool `wait_for` (`mcp::wait`), for a script
//! or a person: it reads the agent's ops log, so it goes on across a kill -9 and the resume.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;

use super::output;
use crate::mcp::wait::{Until, WaitRequest};

/// Exit code of a wait that reached its deadline first (as `timeout(1)` says it).
pub const EXIT_TIMED_OUT: i32 = 124;

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    pub agent: String,
    /// What to wait for: `turn_end` (the next turn end), `idle` (at its prompt, now or after its
    /// turn), `exit` (its CLI ends) or `revival` (its CLI starts again).
    #[arg(long, default_value = "turn_end", value_parser = Until::NAMES)]
    pub until: String,
    /// How long to wait at most (`90s`, `10m`, `2h`; at most 24h).
    #[arg(long, default_value = "10m", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
    #[arg(long)]
    pub json: bool,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let d = super::parse_duration_arg(text)?;
    let most = Duration::from_secs(crate::mcp::tools::MAX_WAIT_SECONDS);
    if d.is_zero() || d > most {
        return Err(format!(
            "`{text}` is out of range: more than 0s, at most 24h"
        ));
    }
    Ok(d)
}

pub fn wait(config: &Path, args: WaitArgs) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    if spec.agent(&args.agent).is_none() {
        return Err(super::lifecycle::unknown_agent(&spec, &args.agent));
    }
    let request = WaitRequest {
        agent: args.agent.clone(),
        until: Until::parse(&args.until).unwrap_or(Until::TurnEnd),
        timeout: args.timeout,
    };
    let never = AtomicBool::new(false);
    let doc = crate::mcp::wait::wait_for(&spec, &request, &never)
        .map_err(|e| anyhow::anyhow!("cannot wait for agent `{}`: {e}", args.agent))?;
    let reached = doc["reached"] == Value::Bool(true);
    if args.json {
        output::json(doc);
    } else {
        // phoenix's own words (an op's name), never the agent's.
        let how = doc["how"].as_str().unwrap_or_default();
        let waited = crate::spec::duration::format(Duration::from_millis(
            doc["waited_ms"].as_u64().unwrap_or_default(),
        ));
        let line = if reached {
            format!(
                "agent `{}`: {} ({how}, after {waited})",
                args.agent, args.until
            )
        } else {
            format!(
                "agent `{}`: no {} within {}",
                args.agent,
                args.until,
                crate::spec::duration::format(args.timeout)
            )
        };
        super::out(&format!("{line}\n"));
    }
    Ok(if reached { 0 } else { EXIT_TIMED_OUT })
}
