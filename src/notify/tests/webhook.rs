//! The webhook channel against a real HTTP server on 127.0.0.1: each format's JSON, retries,
//! timeouts, and a URL that never shows in what is reported.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{message, only};
use crate::notify::*;
use crate::spec::{WebhookFormat, WebhookNotify};

#[derive(Debug)]
struct Request {
    path: String,
    headers: Vec<String>,
    body: String,
}

#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    /// `302 Found` to this port on 127.0.0.1.
    Redirect(u16),
    /// Read the request, then never answer.
    Never,
}

/// An HTTP server on 127.0.0.1 that serves at most `max` connections, then stops. Dropping it
/// stops it early and closes the connections it holds.
struct Server {
    port: u16,
    requests: mpsc::Receiver<Request>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(answer: Answer, max: usize) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, requests) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut held = Vec::new();
            let mut served = 0;
            while served < max && Instant::now() < deadline {
                if let Err(mpsc::TryRecvError::Disconnected) = stopped.try_recv() {
                    return;
                }
                let mut stream = match listener.accept() {
                    Ok((stream, _)) => stream,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(_) => return,
                };
                served += 1;
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                if let Some(request) = read_request(&stream) {
                    let _ = tx.send(request);
                }
                match answer {
                    Answer::Status(code) => {
                        let body = match code {
                            200..300 => "ok",
                            400..500 => "Bad Request: chat not found",
                            _ => "upstream exploded\nsecond line",
                        };
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {code} Whatever\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Answer::Redirect(port) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/steal\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                    }
                    Answer::Never => held.push(stream),
                }
            }
            if !held.is_empty() {
                let _ = stopped.recv_timeout(Duration::from_secs(30));
            }
        });
        Server {
            port,
            requests,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// A URL with a secret-looking path, like Slack's and Telegram's.
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook/T0KEN-S3CRET", self.port)
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.try_iter().collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end().to_string();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
        headers.push(header.to_ascii_lowercase());
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        path,
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

fn webhook_settings(format: WebhookFormat, timeout: Duration, retries: u32) -> NotifySettings {
    NotifySettings {
        webhook: Some(WebhookNotify {
            url_env: "PHOENIX_TEST_HOOK".into(),
            format,
            chat_id: (format == WebhookFormat::Telegram).then(|| "-100123".to_string()),
            timeout,
            retries,
        }),
        ..NotifySettings::default()
    }
}

fn assert_no_secret(sent: &Sent, url: &str) {
    for text in [&sent.detail, &format!("{:?}", sent.url)] {
        assert!(!text.contains(url), "URL leaked: {text}");
        assert!(!text.contains("T0KEN-S3CRET"), "URL path leaked: {text}");
    }
}

#[test]
fn each_format_posts_its_json() {
    let server = Server::start(Answer::Status(200), 3);
    let url = server.url();
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let msg = message(Kind::Failure, "alpha", "unrecoverable");
    let mut bodies = Vec::new();
    for format in [
        WebhookFormat::Json,
        WebhookFormat::Slack,
        WebhookFormat::Telegram,
    ] {
        let settings = webhook_settings(format, Duration::from_secs(5), 0);
        let sent = only(
            Notifier::new(&settings, &fleet)
                .with_var("PHOENIX_TEST_HOOK", &url)
                .send(&msg),
        );
        assert!(sent.ok, "{sent:?}");
        assert_eq!(sent.channel, "webhook");
        assert_eq!(sent.detail, "HTTP 200 from $PHOENIX_TEST_HOOK");
        assert_eq!(sent.url, None);
        assert_no_secret(&sent, &url);
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].path, "/hook/T0KEN-S3CRET");
        assert!(
            requests[0]
                .headers
                .contains(&"content-type: application/json".to_string()),
            "{:?}",
            requests[0].headers
        );
        bodies.push(serde_json::from_str::<Value>(&requests[0].body).unwrap());
    }
    let text = "the agent has been waiting on a permission prompt for 20m";
    assert_eq!(
        bodies[0],
        json!({"kind": "failure", "agent": "alpha", "fleet": "demo", "title": "unrecoverable",
               "text": text, "url": null})
    );
    assert_eq!(
        bodies[1],
        json!({"text": format!("*unrecoverable*\n\n{text}")})
    );
    assert_eq!(
        bodies[2],
        json!({"chat_id": "-100123", "text": format!("unrecoverable\n\n{text}")})
    );
}

#[test]
fn a_server_error_is_retried_then_reported_and_a_client_error_is_not_retried() {
    for (status, detail, attempts) in [
        (
            500,
            "POST to $PHOENIX_TEST_HOOK failed: HTTP 500: upstream exploded (3 attempts)",
            3,
        ),
        (
            404,
            "POST to $PHOENIX_TEST_HOOK failed: HTTP 404: Bad Request: chat not found (1 attempt)",
            1,
        ),
    ] {
        let server = Server::start(Answer::Status(status), 10);
        let url = server.url();
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        let settings = webhook_settings(WebhookFormat::Json, Duration::from_secs(5), 2);
        let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", &url);
        let sent = only(notifier.send(&message(Kind::Failure, "alpha", "down")));
        assert!(!sent.ok);
        assert_eq!(sent.detail, detail);
        assert_no_secret(&sent, &url);
        assert_eq!(server.requests().len(), attempts, "HTTP {status}");
    }
}

#[test]
fn a_redirect_is_a_failed_delivery_and_the_other_origin_is_never_reached() {
    let elsewhere = Server::start(Answer::Status(200), 10);
    let server = Server::start(Answer::Redirect(elsewhere.port), 10);
    let url = server.url();
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let settings = webhook_settings(WebhookFormat::Json, Duration::from_secs(5), 2);
    let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", &url);
    let sent = only(notifier.send(&message(Kind::Failure, "alpha", "down")));
    assert!(!sent.ok, "{sent:?}");
    assert_eq!(
        sent.detail,
        "POST to $PHOENIX_TEST_HOOK failed: HTTP 302: a redirect, not followed (phoenix posts only to the URL configured) (1 attempt)"
    );
    assert_no_secret(&sent, &url);
    // Asked once (a redirect does not fix itself), and the origin it pointed to never.
    assert_eq!(server.requests().len(), 1);
    std::thread::sleep(Duration::from_millis(100));
    assert!(elsewhere.requests().is_empty(), "the redirect was followed");
}

#[test]
fn a_server_that_never_answers_fails_within_the_timeout() {
    let server = Server::start(Answer::Never, 2);
    let url = server.url();
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let timeout = Duration::from_millis(300);
    let settings = webhook_settings(WebhookFormat::Slack, timeout, 1);
    let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", &url);
    let started = Instant::now();
    let sent = only(notifier.send(&message(Kind::Failure, "alpha", "down")));
    let elapsed = started.elapsed();
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "POST to $PHOENIX_TEST_HOOK failed: no answer within 300ms (timeout) (2 attempts)"
    );
    assert_no_secret(&sent, &url);
    // Two attempts of 300ms and a 500ms pause between them.
    let budget = timeout * 2 + Duration::from_millis(500);
    assert!(elapsed >= timeout * 2, "{elapsed:?}");
    assert!(
        elapsed < budget * 2,
        "{elapsed:?} is not well under 2 × {budget:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_missing_or_broken_url_is_reported_without_the_url() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let mut settings = webhook_settings(WebhookFormat::Json, Duration::from_secs(2), 0);
    settings.webhook.as_mut().unwrap().url_env = "PHOENIX_TEST_SURELY_UNSET_7F3A".into();
    let sent = only(Notifier::new(&settings, &fleet).send(&message(Kind::Failure, "a", "x")));
    assert!(!sent.ok);
    assert_eq!(sent.detail, "PHOENIX_TEST_SURELY_UNSET_7F3A is not set");

    let settings = webhook_settings(WebhookFormat::Json, Duration::from_secs(2), 0);
    let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", " ");
    let sent = only(notifier.send(&message(Kind::Failure, "a", "x")));
    assert_eq!(sent.detail, "PHOENIX_TEST_HOOK is empty");

    for url in [
        "not a url/hook/T0KEN-S3CRET",
        "ftp://example.invalid/hook/T0KEN-S3CRET",
    ] {
        let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", url);
        let sent = only(notifier.send(&message(Kind::Failure, "a", "x")));
        assert!(!sent.ok);
        assert_no_secret(&sent, url);
    }

    // Nothing listens on a port that was just released: connection refused.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/hook/T0KEN-S3CRET");
    let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", &url);
    let sent = only(notifier.send(&message(Kind::Failure, "a", "x")));
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "POST to $PHOENIX_TEST_HOOK failed: Connection refused (os error 111) (1 attempt)"
    );
    assert_no_secret(&sent, &url);
}

#[test]
fn redaction_removes_the_url_and_its_path() {
    let url = "https://hooks.example.com/services/T0KEN-S3CRET";
    assert_eq!(
        webhook::redact(&format!("bad uri: {url}"), url, "HOOK"),
        "bad uri: $HOOK"
    );
    assert_eq!(
        webhook::redact(
            "io: hooks.example.com/services/T0KEN-S3CRET refused",
            url,
            "HOOK"
        ),
        "io: $HOOK refused"
    );
    assert_eq!(
        webhook::redact("path services/T0KEN-S3CRET", url, "HOOK"),
        "path …"
    );
}
