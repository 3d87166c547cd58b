//! Following every host's events at once (`phoenix events --follow` of a fleet with hosts):
//! one thread per host runs the host's own `phoenix events --follow --json` over ssh and
//! passes on each event as it comes, labelled with its host. A host that cannot be reached
//! is reported once, then asked again every [`RETRY`] without holding up the others; when it
//! answers again that is reported too, and its events since it went away are fetched
//! (`--since`), none twice.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use serde_json::Value;

use super::fleet::{CONNECT_TIMEOUT, Link, links};
use super::protocol::Call;
use crate::spec::Spec;

/// How long to wait before asking a host that did not answer again.
pub const RETRY: Duration = Duration::from_secs(5);

/// What the followers report.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// An event of a host, with `"host"`.
    Event(Value),
    /// The host cannot be followed now (said once until it is back).
    Down {
        host: String,
        error: String,
        hint: Option<String>,
    },
    /// The host answers again after it was down.
    Back { host: String },
}

/// Follow every host of `spec` with `filters` (the options of `events` a host is given, as
/// `--agent=…`) from now on; the followers run until the receiver is dropped.
///
/// "Now" is this moment, not when a host's own follower begins: reaching a host takes a
/// while (a connection, its phoenix starting), and what it records meanwhile is asked for
/// with `--since`. The caller's read of the past may hold some of those events too: it
/// leaves out the ones it showed ([`Followed::Event`] of an event already shown).
pub fn start(spec: &Spec, filters: &[String]) -> Receiver<Followed> {
    let (tx, rx) = channel();
    let since = jiff::Timestamp::now();
    for link in links(spec) {
        let (tx, filters) = (tx.clone(), filters.to_vec());
        std::thread::spawn(move || follow(&link, &filters, since, &tx));
    }
    rx
}

/// One host, for as long as anyone listens: its events from `since` on.
fn follow(link: &Link, filters: &[String], since: jiff::Timestamp, tx: &Sender<Followed>) {
    let host = link.name().to_string();
    // Since when events are asked for again (the follow's start, or when the last stream
    // stopped), and whether the host was reported down.
    let mut gap_since = since;
    let mut reported = false;
    let mut last: Option<jiff::Timestamp> = None;
    let mut seen_at_last: HashSet<String> = HashSet::new();
    let down = |error: String, hint: Option<String>| Followed::Down {
        host: host.clone(),
        error,
        hint,
    };
    loop {
        if let Err(e) = link.ask(Call::Hello, CONNECT_TIMEOUT + Duration::from_secs(10)) {
            if !reported && tx.send(down(e.to_string(), e.hint())).is_err() {
                return;
            }
            reported = true;
            std::thread::sleep(RETRY);
            continue;
        }
        if std::mem::take(&mut reported) && tx.send(Followed::Back { host: host.clone() }).is_err()
        {
            return;
        }
        // From where it was left: what happened since the follow began, or since a gap.
        let from = {
            let since = last.map_or(gap_since, |l| l.min(gap_since));
            let age = jiff::Timestamp::now().as_second() - since.as_second();
            format!("--since={}s", age.max(0) + 1)
        };
        let ended = stream(link, filters, &from, |event| {
            let ts = event["ts"].as_str().and_then(|t| t.parse().ok());
            let key = event.to_string();
            match (ts, last) {
                (Some(ts), Some(before)) if ts < before => return true,
                (Some(ts), Some(before)) if ts == before && seen_at_last.contains(&key) => {
                    return true;
                }
                (Some(ts), Some(before)) if ts == before => {}
                (Some(ts), _) => {
                    last = Some(ts);
                    seen_at_last.clear();
                }
                (None, _) => {}
            }
            seen_at_last.insert(key);
            tx.send(Followed::Event(event)).is_ok()
        });
        gap_since = jiff::Timestamp::now();
        match ended {
            // Nobody listens any more.
            Ok(false) => return,
            Ok(true) => {}
            Err(error) => {
                if tx.send(down(error, None)).is_err() {
                    return;
                }
                reported = true;
            }
        }
        std::thread::sleep(RETRY);
    }
}

/// Run the host's `events --follow --json` and hand each event (labelled) to `each` until
/// the stream ends (`Ok(true)`), `each` says stop (`Ok(false)`), or it cannot be run.
fn stream(
    link: &Link,
    filters: &[String],
    from: &str,
    mut each: impl FnMut(Value) -> bool,
) -> Result<bool, String> {
    super::ssh::ensure_private_dir(&link.transport.control_dir).map_err(|e| {
        format!(
            "host `{}`: cannot make the ssh control directory: {e}",
            link.name()
        )
    })?;
    let config = super::actions::remote_config(link);
    let mut words = vec![
        link.host.phoenix.as_str(),
        "--config",
        config.as_str(),
        "events",
        "--follow",
        "--json",
        from,
    ];
    words.extend(filters.iter().map(String::as_str));
    let argv = link.transport.argv(&words, false);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("host `{}`: cannot run `ssh`: {e}", link.name()))?;
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.by_ref().take(64 * 1024).read_to_string(&mut text);
            text
        })
    });
    let mut listening = true;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            event.remove("format_version");
            event.insert("host".into(), Value::from(link.name()));
            if !each(Value::Object(event)) {
                listening = false;
                break;
            }
        }
    }
    let _ = child.kill();
    let status = child.wait();
    let said = stderr
        .and_then(|h| h.join().ok())
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(str::to_string);
    if !listening {
        return Ok(false);
    }
    match said {
        Some(said) if !status.is_ok_and(|s| s.success()) => Err(format!(
            "host `{}`: following its events ended: {}",
            link.name(),
            crate::text::shorten(&said, 300)
        )),
        _ => Ok(true),
    }
}
