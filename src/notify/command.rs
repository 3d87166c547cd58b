//! The command channel: `[notify] command` run from its argv (no shell) with the message on
//! stdin and its fields in `PHOENIX_*` variables, killed when it takes too long.

use std::io;
use std::process::Command;
use std::time::Duration;

use super::{Message, Sent};
use crate::process::{self, RunError};

const CHANNEL: &str = "command";

/// What the command reads on stdin: `title`, a blank line, `body`.
pub(crate) fn input(msg: &Message, issue_url: Option<&str>) -> String {
    let link = issue_url
        .map(|u| format!("\n\nIssue: {u}"))
        .unwrap_or_default();
    format!("{}\n\n{}{link}\n", msg.title, msg.body.trim_end())
}

pub(crate) fn send(
    argv: &[String],
    msg: &Message,
    issue_url: Option<&str>,
    timeout: Duration,
) -> Sent {
    let Some(program) = argv.first() else {
        return Sent::new(CHANNEL, false, "[notify] command is empty");
    };
    let mut command = Command::new(program);
    command
        .args(&argv[1..])
        .env("PHOENIX_NOTIFY_KIND", msg.kind.as_str())
        .env("PHOENIX_AGENT", &msg.agent)
        .env("PHOENIX_FLEET", &msg.fleet)
        .env("PHOENIX_TITLE", &msg.title);
    match issue_url {
        Some(url) => command.env("PHOENIX_ISSUE_URL", url),
        None => command.env_remove("PHOENIX_ISSUE_URL"),
    };
    match process::run(command, input(msg, issue_url).as_bytes(), timeout) {
        Ok(done) if done.status.success() => {
            Sent::new(CHANNEL, true, format!("`{program}` exited 0"))
        }
        Ok(done) => {
            let why = done.stderr_line();
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            };
            Sent::new(
                CHANNEL,
                false,
                format!("`{program}` failed ({}){why}", done.describe_status()),
            )
        }
        Err(RunError::Spawn(e)) if e.kind() == io::ErrorKind::NotFound => Sent::new(
            CHANNEL,
            false,
            format!("`{program}` not found: check `command` in [notify]"),
        ),
        Err(RunError::Spawn(e)) => {
            Sent::new(CHANNEL, false, format!("cannot start `{program}`: {e}"))
        }
        Err(RunError::Timeout) => Sent::new(
            CHANNEL,
            false,
            format!(
                "`{program}` took longer than {} and was killed",
                crate::spec::duration::format(timeout)
            ),
        ),
    }
}
