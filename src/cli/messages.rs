//! `phoenix send` and `phoenix inbox`: messages between agents (and from the operator), kept
//! in the recipient's inbox until its next turn boundary.

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use serde_json::json;

use super::{out, output};
use crate::state::FleetDir;
use crate::state::inbox::{self, Message};

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The recipient: an agent of this fleet (on this machine or on one of its hosts).
    pub agent: String,
    /// The message; `-` reads it from stdin. At most 16 KiB; control characters are dropped.
    pub text: String,
    /// Who sends it (default: `$PHOENIX_AGENT`, set for every agent phoenix runs, else
    /// `operator`). Run by an agent (under its wrapper), the sender is that agent: another
    /// name is refused.
    #[arg(long)]
    pub from: Option<String>,
    /// Interrupt the recipient's turn and deliver at once, instead of at its next turn
    /// boundary.
    #[arg(long)]
    pub urgent: bool,
    /// Print one JSON document on stdout, `format_version` first (errors too; see docs/json.md).
    #[arg(long)]
    pub json: bool,
}

/// Who sends. Under an agent's wrapper, that agent, whatever `--from` or the environment
/// says: a message never speaks for someone its sender is not (a `--from` naming another is
/// refused). Elsewhere (the operator's terminal, their scripts): `--from`, else
/// `$PHOENIX_AGENT`, else the operator.
pub(super) fn sender(spec: &crate::spec::Spec, args: &SendArgs) -> anyhow::Result<String> {
    if let Some(agent) = crate::world::wrapping_agent(spec) {
        if let Some(from) = args.from.as_deref().filter(|f| *f != agent) {
            anyhow::bail!(crate::Error::Failed {
                message: format!(
                    "`--from {from}`: this runs under agent `{agent}`'s wrapper, and an agent sends as itself"
                ),
                hint: Some(format!(
                    "leave out --from (the message is from `{agent}`), or send from the operator's own terminal"
                )),
            });
        }
        return Ok(agent);
    }
    Ok(args
        .from
        .clone()
        .or_else(|| {
            std::env::var("PHOENIX_AGENT")
                .ok()
                .filter(|a| !a.is_empty())
        })
        .unwrap_or_else(|| "operator".to_string()))
}

/// The message: `text`, or with `-` what stdin gives (bounded).
pub(super) fn read_text(text: &str) -> anyhow::Result<String> {
    if text != "-" {
        return Ok(text.to_string());
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(inbox::MAX_TEXT_BYTES as u64 * 4 + 1)
        .read_to_end(&mut bytes)
        .context("cannot read the message from stdin")?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `phoenix send AGENT TEXT`.
pub fn send(config: &Path, args: SendArgs) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    let from = sender(&spec, &args)?;
    let text = read_text(&args.text)?;
    let message = crate::continuity::messages::send(&spec, &args.agent, &from, &text, args.urgent)?;
    let running = recipient_running(&spec, &args.agent);
    if args.json {
        output::json(json!({"agent": args.agent, "message": message, "agent_running": running}));
        return Ok(0);
    }
    let when = match (args.urgent, running) {
        (_, false) => "it gets it when it starts (in its startup context)",
        (true, true) => "it is interrupted and gets it now",
        (false, true) => "it gets it at the end of its current turn",
    };
    out(&format!(
        "message {} for agent `{}` from `{from}`: {when}\n",
        message.id, args.agent
    ));
    Ok(0)
}

/// `phoenix inbox AGENT`: pending messages, then delivered ones, oldest first.
pub fn inbox(config: &Path, agent: &str, json: bool) -> anyhow::Result<i32> {
    let spec = super::load_without_fs_checks(config)?;
    if spec.agent(agent).is_none() {
        return Err(super::lifecycle::unknown_agent(&spec, agent));
    }
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(agent);
    let messages =
        inbox::read(&dir).with_context(|| format!("cannot read agent `{agent}`'s inbox"))?;
    let (pending, delivered): (Vec<&Message>, Vec<&Message>) =
        messages.iter().partition(|m| m.is_pending());
    if json {
        output::json(json!({"agent": agent, "pending": pending, "delivered": delivered}));
        return Ok(0);
    }
    let mut text = format!(
        "agent `{agent}`: {} pending, {} delivered\n",
        pending.len(),
        delivered.len()
    );
    for m in &pending {
        text.push_str(&line(m, "pending"));
    }
    for m in &delivered {
        let waiting = if m.handed_to.is_some() {
            ", until that session's first prompt"
        } else {
            ""
        };
        let how = format!(
            "delivered {} ({}{waiting})",
            m.delivered_at.as_deref().unwrap_or("?"),
            m.confirmed_by.as_deref().unwrap_or("?")
        );
        text.push_str(&line(m, &how));
    }
    out(&text);
    Ok(0)
}

/// One message for people: who, when, its state, and its first line.
fn line(m: &Message, state: &str) -> String {
    let first = m.text.lines().next().unwrap_or("");
    let more = if m.text.lines().nth(1).is_some() {
        " …"
    } else {
        ""
    };
    format!(
        "  {} from {} at {}{}, {state}\n    {}{more}\n",
        m.id,
        m.from,
        m.sent_at,
        if m.urgent { " (urgent)" } else { "" },
        crate::text::shorten(first, 120)
    )
}

/// Is the agent's CLI running in its pane now? (What `send` tells the sender to expect.)
fn recipient_running(spec: &crate::spec::Spec, agent: &str) -> bool {
    let runtime = crate::world::runtime_for(spec);
    crate::status::observe_lean(spec, &*runtime).is_ok_and(|world| {
        world
            .pane_of(agent)
            .is_some_and(|p| !p.dead && p.agent_process().is_some())
    })
}
