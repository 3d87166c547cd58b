//! The API for agents of other hosts: a per-agent read or action of an agent that
//! phoenix.toml puts on a `[[host]]` is run by that host's phoenix (its own `--json` command,
//! sent over ssh through the host protocol, as the CLI's fleet-wide commands do), and its
//! document comes back with `"host"`. The fleet-wide reads (`/api/events`, `/api/handoffs`)
//! merge every host's rows with this machine's. A host that cannot be reached answers 502
//! (504 when it did not answer in time) within its own timeout; it never holds up a request
//! about another agent.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;

use super::error::ApiError;
use crate::hosts::reads::{self, Answer};
use crate::hosts::{HostError, TransportError};
use crate::spec::Spec;

/// How long a read of one agent of a host may take.
pub const READ_TIMEOUT: Duration = reads::READ_TIMEOUT;
/// How long an action (restart, inject) may take there.
pub const ACTION_TIMEOUT: Duration = crate::hosts::actions::ACTION_TIMEOUT;

/// The host of `agent`, when phoenix.toml puts it on one.
pub fn host_of(spec: &Spec, agent: &str) -> Option<String> {
    reads::host_of(spec, agent).map(str::to_string)
}

/// `args` (a command printing one `--json` document) run by `host`'s phoenix: the document,
/// without its `format_version`, with `"host"`.
pub fn run(spec: &Spec, host: &str, args: &[&str], timeout: Duration) -> Result<Value, ApiError> {
    let link = reads::link_to(spec, host).ok_or_else(|| {
        ApiError::not_found(
            format!("host `{host}` is not declared"),
            "phoenix.toml changed while serving",
        )
    })?;
    let mut doc = link
        .run(args, timeout)
        .and_then(|ran| reads::document_of(host, &ran))
        .map_err(|e| error(&e))?;
    if let Value::Object(fields) = &mut doc {
        fields.remove("format_version");
        fields.insert("host".into(), Value::from(host));
    }
    Ok(doc)
}

/// `text` pasted into `agent`'s pane by its host `host` (its report, with `"host"`).
pub fn inject(spec: &Spec, host: &str, agent: &str, text: &str) -> Result<Value, ApiError> {
    let link = reads::link_to(spec, host).ok_or_else(|| {
        ApiError::not_found(
            format!("host `{host}` is not declared"),
            "phoenix.toml changed while serving",
        )
    })?;
    let mut doc = crate::hosts::actions::inject_text(&link, agent, text).map_err(|e| error(&e))?;
    if let Value::Object(fields) = &mut doc {
        fields.insert("host".into(), Value::from(host));
    }
    Ok(doc)
}

/// A host's failure as the API says it: unreachable 502, too slow 504, its phoenix's own
/// refusal 409 (what it said).
pub fn error(e: &HostError) -> ApiError {
    let status = match e {
        HostError::Transport(TransportError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
        HostError::Remote { .. } => StatusCode::CONFLICT,
        _ => StatusCode::BAD_GATEWAY,
    };
    let hint = e.hint().unwrap_or_else(|| {
        format!(
            "nothing else was affected; `phoenix hosts check` shows whether host `{}` answers",
            e.host()
        )
    });
    ApiError::new(status, e.to_string(), hint)
}

/// `args` on every host at once (for a merged read), each within `timeout`.
pub fn ask_all(spec: &Spec, args: &[String], timeout: Duration) -> Vec<Answer> {
    reads::ask_json(&crate::hosts::fleet::links(spec), args, timeout)
}

/// `local` rows and every host's, merged as [`reads::merge`] does, into `doc` under `key`,
/// with `hosts` listing the hosts that did not answer.
pub fn merged(mut doc: Value, key: &str, answers: Vec<Answer>, events: bool) -> Value {
    let local = match doc.get_mut(key).map(Value::take) {
        Some(Value::Array(rows)) => rows,
        _ => Vec::new(),
    };
    let merged = match events {
        true => reads::merge_events(local, answers, None),
        false => reads::merge(local, answers, key),
    };
    doc[key] = Value::Array(merged.rows);
    doc["hosts"] = Value::Array(merged.unreachable);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_host_is_a_bad_gateway_and_a_slow_one_a_timeout() {
        let down = HostError::Transport(TransportError::Unreachable {
            host: "gpu-2".into(),
            detail: "Connection refused".into(),
        });
        let e = error(&down);
        assert_eq!(e.status, StatusCode::BAD_GATEWAY);
        assert!(e.error.contains("gpu-2") && e.error.contains("refused"));
        let slow = HostError::Transport(TransportError::Timeout {
            host: "gpu-2".into(),
            after: Duration::from_secs(30),
        });
        assert_eq!(error(&slow).status, StatusCode::GATEWAY_TIMEOUT);
    }
}
