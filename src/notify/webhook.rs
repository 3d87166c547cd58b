//! The webhook channel: a JSON POST (plain, Slack or Telegram) to the URL in an environment
//! variable, with a timeout per attempt and a few retries. The URL is a secret: it never
//! appears in a detail, a log line or an error, only the variable's name does.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Message, Sent};
use crate::spec::{WebhookFormat, WebhookNotify};

const CHANNEL: &str = "webhook";
/// Telegram refuses messages over 4096 characters.
const TELEGRAM_MAX: usize = 4000;
/// Pause before retry N is N times this.
const BACKOFF: Duration = Duration::from_millis(500);

/// The JSON body for `format`. `issue_url` is the GitHub issue the same message opened, if any.
pub(crate) fn payload(settings: &WebhookNotify, msg: &Message, issue_url: Option<&str>) -> Value {
    let link = issue_url
        .map(|u| format!("\n\nIssue: {u}"))
        .unwrap_or_default();
    match settings.format {
        WebhookFormat::Json => json!({
            "kind": msg.kind,
            "agent": msg.agent,
            "fleet": msg.fleet,
            "title": msg.title,
            "text": msg.body,
            "url": issue_url,
        }),
        WebhookFormat::Slack => json!({
            "text": format!("*{}*\n\n{}{link}", msg.title, msg.body),
        }),
        WebhookFormat::Telegram => json!({
            "chat_id": settings.chat_id,
            "text": crate::text::shorten(
                &format!("{}\n\n{}{link}", msg.title, msg.body),
                TELEGRAM_MAX,
            ),
        }),
    }
}

/// Why one attempt failed, already free of the URL.
struct Failure {
    reason: String,
    /// Worth another attempt: a timeout, a refused connection, a 5xx, 408 or 429. Any other
    /// 4xx (a wrong URL or chat id) will not fix itself.
    retry: bool,
}

/// POST the message to the URL `url` (the value of `settings.url_env`, if set).
pub(crate) fn send(
    settings: &WebhookNotify,
    url: Option<&str>,
    msg: &Message,
    issue_url: Option<&str>,
) -> Sent {
    let var = &settings.url_env;
    let url = match url.map(str::trim) {
        None => return Sent::new(CHANNEL, false, format!("{var} is not set")),
        Some("") => return Sent::new(CHANNEL, false, format!("{var} is empty")),
        Some(url) => url,
    };
    let body = payload(settings, msg, issue_url).to_string();
    let post = Post {
        channel: CHANNEL,
        secret_var: var,
        headers: Vec::new(),
        timeout: settings.timeout,
        retries: settings.retries,
    };
    post.send(url, &body)
}

/// One JSON POST with retries, for the channels that speak HTTP (webhook, ntfy). The URL is
/// named only as `$secret_var` in what it reports.
pub(crate) struct Post<'a> {
    pub channel: &'a str,
    /// The variable the URL came from (or a label for a URL written in the config).
    pub secret_var: &'a str,
    /// Extra headers (an authorization).
    pub headers: Vec<(&'static str, String)>,
    pub timeout: Duration,
    pub retries: u32,
}

impl Post<'_> {
    pub(crate) fn send(&self, url: &str, body: &str) -> Sent {
        let (channel, var) = (self.channel, self.secret_var);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            // A redirect is the receiver's answer, never followed: it could send the message
            // (and any authorization header) to another origin.
            .max_redirects(0)
            .user_agent(concat!("phoenix/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let attempts = self.retries.saturating_add(1);
        let mut attempt = 1;
        loop {
            match post(&agent, url, body, self.timeout, &self.headers) {
                Ok(status) => {
                    let after = if attempt > 1 {
                        format!(" (attempt {attempt})")
                    } else {
                        String::new()
                    };
                    return Sent::new(channel, true, format!("HTTP {status} from ${var}{after}"));
                }
                Err(f) if f.retry && attempt < attempts => {
                    std::thread::sleep(BACKOFF * attempt);
                    attempt += 1;
                }
                Err(f) => {
                    let tries = if attempt == 1 {
                        "1 attempt".to_string()
                    } else {
                        format!("{attempt} attempts")
                    };
                    let reason = redact(&f.reason, url, var);
                    return Sent::new(
                        channel,
                        false,
                        format!("POST to ${var} failed: {reason} ({tries})"),
                    );
                }
            }
        }
    }
}

/// One attempt: the 2xx status, or why it failed.
fn post(
    agent: &ureq::Agent,
    url: &str,
    body: &str,
    timeout: Duration,
    headers: &[(&'static str, String)],
) -> Result<u16, Failure> {
    let mut request = agent.post(url).header("Content-Type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let result = request.send(body);
    let mut response = match result {
        Ok(r) => r,
        Err(e) => return Err(failure(e, timeout)),
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(status);
    }
    if (300..400).contains(&status) {
        // Where it points is not said: a URL of the receiver's choosing, maybe with a token.
        return Err(Failure {
            reason: format!(
                "HTTP {status}: a redirect, not followed (phoenix posts only to the URL configured)"
            ),
            retry: false,
        });
    }
    // The start of the answer often says why (Telegram: "Bad Request: chat not found").
    let answer = response
        .body_mut()
        .with_config()
        .limit(4096)
        .lossy_utf8(true)
        .read_to_string()
        .unwrap_or_default();
    let answer = crate::process::first_line(&answer);
    let reason = if answer.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {answer}")
    };
    Err(Failure {
        reason,
        retry: status >= 500 || status == 408 || status == 429,
    })
}

fn failure(e: ureq::Error, timeout: Duration) -> Failure {
    let timed_out = matches!(e, ureq::Error::Timeout(_))
        || matches!(&e, ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut);
    let (reason, retry) = match e {
        _ if timed_out => (
            format!(
                "no answer within {} (timeout)",
                crate::spec::duration::format(timeout)
            ),
            true,
        ),
        // These carry the URL in their message.
        ureq::Error::BadUri(_) | ureq::Error::Http(_) => ("the URL is not valid".into(), false),
        ureq::Error::RequireHttpsOnly(_) => ("the URL is not https".into(), false),
        ureq::Error::HostNotFound => ("host not found".into(), true),
        ureq::Error::ConnectionFailed => ("connection failed".into(), true),
        ureq::Error::Io(io) => (io.to_string(), true),
        other => (other.to_string(), true),
    };
    Failure { reason, retry }
}

/// `text` with every trace of `url` replaced by `$VAR`: a last line of defence for error
/// messages that quote it (in full, or without the scheme).
pub(crate) fn redact(text: &str, url: &str, var: &str) -> String {
    let mut out = text.to_string();
    let bare = url.split_once("://").map(|(_, rest)| rest).unwrap_or(url);
    for secret in [url, bare, bare.trim_end_matches('/')] {
        if secret.len() >= 4 {
            out = out.replace(secret, &format!("${var}"));
        }
    }
    // The path and query hold the token (Slack, Telegram); a host alone is not a secret.
    if let Some((_, path)) = bare.split_once('/')
        && path.len() >= 8
    {
        out = out.replace(path, "…");
    }
    out
}
