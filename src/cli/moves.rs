//! `phoenix move AGENT --to HOST|local` (and `--from-unreachable`, `--cleanup`) and
//! `phoenix hosts mirror`: the operator's side of moving agents between machines.

use std::path::Path;

use anyhow::bail;
use serde_json::json;

use super::output::{self, out};
use crate::hosts::moves::{self, CleanupReport, MoveOptions, MoveReport, Place};
use crate::spec;

#[derive(Debug, clap::Args)]
pub struct MoveArgs {
    /// The agent to move.
    #[arg(required_unless_present = "cleanup")]
    pub agent: Option<String>,
    /// Where to: a `[[host]]` name, or `local` (this machine).
    #[arg(long, value_name = "HOST", required_unless_present = "cleanup")]
    pub to: Option<String>,
    /// Its host is gone: start it on the target from the operator's mirror of its context
    /// (`phoenix hosts mirror`) and fence the old host off for when it comes back.
    #[arg(long, conflicts_with = "cleanup")]
    pub from_unreachable: bool,
    /// With --from-unreachable: when this machine kept no copy of the agent's context, start
    /// it on the target without one (its context is lost).
    #[arg(long, requires = "from_unreachable")]
    pub fresh: bool,
    /// Find the stale copies of moved agents on every machine (a host that was unreachable
    /// during a move, back), report them and stop them.
    #[arg(long, conflicts_with_all = ["agent", "to"])]
    pub cleanup: bool,
    /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
    #[arg(long)]
    pub json: bool,
}

fn load(config: &Path) -> anyhow::Result<spec::Spec> {
    // A host's workdir exists on the host only: the target checks it.
    Ok(spec::load_with(
        config,
        spec::LoadOptions {
            check_filesystem: false,
        },
    )?)
}

pub fn run(config: &Path, args: MoveArgs) -> anyhow::Result<i32> {
    let spec = load(config)?;
    if args.cleanup {
        let report = moves::cleanup(&spec)?;
        return Ok(print_cleanup(&report, args.json));
    }
    let (Some(agent), Some(to)) = (args.agent, args.to) else {
        bail!("name the agent and where it goes: `phoenix move AGENT --to HOST|local`");
    };
    let to = Place::parse(&spec, &to)?;
    let options = MoveOptions {
        from_unreachable: args.from_unreachable,
        fresh: args.fresh,
        from_text: None,
    };
    let json = args.json;
    let report = moves::carry_out(&spec, &agent, &to, &options, &|step| {
        if !json {
            eprintln!("  {step}…");
        }
    })?;
    if report.moved {
        // The copy `--from-unreachable` needs, of the agent where it runs now.
        super::fleet_hosts::keep_mirror(&load(config)?);
    }
    if json {
        output::json(json!({"command": "move", "ok": true, "move": report}));
    } else {
        out(&move_text(&report));
    }
    Ok(0)
}

fn move_text(r: &MoveReport) -> String {
    let agent = &r.agent;
    if !r.moved {
        let spec = if r.spec_written {
            "; phoenix.toml now says so"
        } else {
            ""
        };
        return format!("agent `{agent}` is placed on {} already{spec}\n", r.to);
    }
    let mut text = format!(
        "✓ agent `{agent}` moved {} → {} (generation {})\n",
        r.from, r.to, r.generation
    );
    if let Some(h) = &r.handoff {
        text.push_str(&format!("  handoff {h} saved on {}\n", r.from));
    }
    if let Some(c) = &r.carried {
        let latest = c
            .latest_handoff
            .as_ref()
            .map(|h| format!(", the latest of {}", h.created_at))
            .unwrap_or_default();
        let source = match &c.mirrored_at {
            Some(at) => format!(" from the mirror of {} (as of {at})", r.from),
            None => String::new(),
        };
        text.push_str(&format!(
            "  carried {} files, {} handoffs{latest}{source}; it started fresh on {} with that context\n",
            c.files, c.handoffs, r.to
        ));
        for left in &c.left_out {
            text.push_str(&format!("  not carried: {left}\n"));
        }
    }
    if r.spec_written {
        text.push_str(&format!(
            "  phoenix.toml now declares it on {}\n",
            match &r.to {
                Place::Local => "this machine".to_string(),
                Place::Host(h) => format!("host `{h}`"),
            }
        ));
    }
    for owed in &r.owed_fences {
        text.push_str(&format!(
            "  {owed} is not told yet (unreachable): `phoenix move --cleanup` stops its copy once it answers\n"
        ));
    }
    for w in &r.warnings {
        text.push_str(&format!("warning: {w}\n"));
    }
    text
}

/// Exit 1 when a stale copy could not be stopped or a machine could not be told.
fn print_cleanup(r: &CleanupReport, json: bool) -> i32 {
    let failed = r
        .settled
        .iter()
        .any(|s| s.error.is_some() || s.fenced.as_ref().is_some_and(|f| !f.failed.is_empty()));
    if json {
        output::json(json!({"command": "move --cleanup", "ok": !failed, "cleanup": r}));
        return i32::from(failed);
    }
    let mut text = String::new();
    if r.stale.is_empty() {
        text.push_str("no stale copies\n");
    }
    for s in &r.stale {
        let state = match s.running {
            Some(true) => "runs there",
            Some(false) => "not running there",
            None => "not observed",
        };
        text.push_str(&format!(
            "stale: agent `{}` on {} ({state}); placed on {} (generation {})\n",
            s.agent, s.on, s.placed, s.generation
        ));
    }
    for s in &r.settled {
        match (&s.fenced, &s.error) {
            (_, Some(e)) => text.push_str(&format!("✗ {}: {e}\n", s.on)),
            (Some(f), None) => {
                for agent in &f.stopped {
                    text.push_str(&format!(
                        "✓ {}: stopped the stale copy of `{agent}`\n",
                        s.on
                    ));
                }
                for why in &f.failed {
                    text.push_str(&format!("✗ {}: {why}\n", s.on));
                }
                text.push_str(&format!(
                    "✓ {}: told where {} run{} now; it refuses the stale copies\n",
                    s.on,
                    s.agents.join(", "),
                    if s.agents.len() == 1 { "s" } else { "" }
                ));
            }
            (None, None) => {}
        }
    }
    for (host, why) in &r.unreachable {
        text.push_str(&format!(
            "? {host}: not observed ({why}); what it is owed stays owed\n"
        ));
    }
    out(&text);
    i32::from(failed)
}

/// `phoenix hosts mirror`.
pub fn mirror(config: &Path, json: bool) -> anyhow::Result<i32> {
    let spec = load(config)?;
    let refreshed = crate::hosts::mirror::refresh(&spec)?;
    let failed = refreshed.iter().any(|r| r.error.is_some());
    if json {
        output::json(json!({"command": "hosts mirror", "ok": !failed, "hosts": refreshed}));
    } else {
        let mut text = String::new();
        for r in &refreshed {
            match &r.error {
                Some(e) => {
                    text.push_str(&format!("✗ {}: {e} (its mirror stays as it was)\n", r.host))
                }
                None => text.push_str(&format!(
                    "✓ {}: {} agent(s) mirrored, {} new handoff(s){}\n",
                    r.host,
                    r.agents.len(),
                    r.new_handoffs,
                    if r.deferred.is_empty() {
                        String::new()
                    } else {
                        format!("; next time: {}", r.deferred.join(", "))
                    }
                )),
            }
        }
        if refreshed.is_empty() {
            text.push_str("no [[host]] in phoenix.toml: nothing to mirror\n");
        }
        out(&text);
    }
    Ok(i32::from(failed))
}
