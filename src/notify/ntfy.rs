//! The ntfy channel: a push to an ntfy topic (ntfy.sh or a server of your own), published as
//! JSON (`POST <server>/` with `{"topic", "title", "message", "priority", "tags", "click"}`):
//! titles and messages in any language travel in the body, not in headers. The topic URL may
//! be a secret (a topic's name is its password on ntfy.sh): it is reported only as the
//! variable it came from, or as `[notify.ntfy] url`.

use serde_json::{Value, json};

use super::webhook::Post;
use super::{Kind, Message, Sent};
use crate::spec::NtfyNotify;
use crate::state::FleetDir;

const CHANNEL: &str = "ntfy";
/// ntfy keeps messages up to 4096 bytes; longer ones become attachments.
const MESSAGE_MAX: usize = 3500;
/// Where a running `phoenix serve` says it listens (`{"url", "pid"}`), for the click link.
pub const SERVE_INFO: &str = "serve.json";

/// The server's publishing URL and the topic, from a topic URL
/// (`https://ntfy.sh/alerts` → `https://ntfy.sh/`, `alerts`).
pub(crate) fn split_topic(url: &str) -> Option<(String, String)> {
    let url = url.trim().trim_end_matches('/');
    let (base, topic) = url.rsplit_once('/')?;
    let scheme_only = !base.contains("://") || base.ends_with("//");
    let valid = !topic.is_empty()
        && !scheme_only
        && topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    valid.then(|| (format!("{base}/"), topic.to_string()))
}

/// The JSON ntfy publishes. `click` is where tapping it leads (the dashboard).
pub(crate) fn payload(
    settings: &NtfyNotify,
    topic: &str,
    msg: &Message,
    issue_url: Option<&str>,
    click: Option<&str>,
) -> Value {
    let tags = match msg.kind {
        Kind::NeedsInput => ["raising_hand", "phoenix"],
        Kind::Failure => ["rotating_light", "phoenix"],
        Kind::Investigation => ["mag", "phoenix"],
    };
    let link = issue_url
        .map(|u| format!("\n\nIssue: {u}"))
        .unwrap_or_default();
    let mut body = json!({
        "topic": topic,
        "title": format!("{}: {}", msg.agent, msg.title),
        "message": crate::text::shorten(&format!("{}{link}", msg.body.trim_end()), MESSAGE_MAX),
        "priority": settings.priority,
        "tags": tags,
    });
    if let Some(click) = click.or(issue_url) {
        body["click"] = json!(click);
    }
    body
}

/// Publish the message. `url` is the topic URL: the value of `url_env` (`from_env`), else
/// the config's `url`.
pub(crate) fn send(
    settings: &NtfyNotify,
    url: Option<&str>,
    from_env: bool,
    token: Option<&str>,
    fleet: &FleetDir,
    msg: &Message,
    issue_url: Option<&str>,
) -> Sent {
    // The URL is named by where it came from, never by its text (a topic is its secret).
    let label = match (&settings.url_env, from_env) {
        (Some(var), _) if from_env || settings.url.is_none() => var.as_str(),
        _ => "ntfy_url",
    };
    let url = match url.map(str::trim) {
        None => return Sent::new(CHANNEL, false, format!("{label} is not set")),
        Some("") => return Sent::new(CHANNEL, false, format!("{label} is empty")),
        Some(url) => url,
    };
    let Some((server, topic)) = split_topic(url) else {
        return Sent::new(
            CHANNEL,
            false,
            format!(
                "{label} is not a topic URL (https://server/topic, the topic of letters, digits, - and _)"
            ),
        );
    };
    let click = settings.click.clone().or_else(|| dashboard_url(fleet));
    let body = payload(settings, &topic, msg, issue_url, click.as_deref()).to_string();
    let headers = token
        .filter(|t| !t.trim().is_empty())
        .map(|t| vec![("Authorization", format!("Bearer {}", t.trim()))])
        .unwrap_or_default();
    Post {
        channel: CHANNEL,
        secret_var: label,
        headers,
        timeout: settings.timeout,
        retries: 1,
    }
    .send(&server, &body)
}

/// The dashboard of the fleet's running `phoenix serve`, when it said where it listens (and
/// still runs) and that is an address one can open (not 0.0.0.0).
pub fn dashboard_url(fleet: &FleetDir) -> Option<String> {
    use crate::state::bounded::{self, Links};
    let text = bounded::read_string(&fleet.root.join(SERVE_INFO), 4096, Links::Refuse).ok()?;
    let info: Value = serde_json::from_str(&text).ok()?;
    let pid = info.get("pid").and_then(Value::as_u64)?;
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok();
    let url = info.get("url").and_then(Value::as_str)?;
    let openable = !url.contains("://0.0.0.0") && !url.contains("://[::]");
    (alive && openable).then(|| url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_url_is_split_into_server_and_topic() {
        assert_eq!(
            split_topic("https://ntfy.sh/fleet-alerts"),
            Some(("https://ntfy.sh/".into(), "fleet-alerts".into()))
        );
        assert_eq!(
            split_topic("http://127.0.0.1:8080/ntfy/ops_1/"),
            Some(("http://127.0.0.1:8080/ntfy/".into(), "ops_1".into()))
        );
        assert_eq!(split_topic("https://ntfy.sh/"), None);
        assert_eq!(split_topic("https://ntfy.sh/a?b=1"), None);
        assert_eq!(split_topic("ntfy"), None);
        assert_eq!(split_topic("http://localhost"), None);
    }
}
