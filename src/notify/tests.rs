//! Notifier tests against real processes (a recording fake `gh`, shell commands) and a real
//! HTTP server on 127.0.0.1.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::github::{self, Issue};
use super::*;
use crate::spec::{GithubNotify, WebhookFormat, WebhookNotify};

fn message(kind: Kind, agent: &str, title: &str) -> Message {
    Message {
        kind,
        agent: agent.to_string(),
        fleet: "demo".to_string(),
        title: title.to_string(),
        body: "the agent has been waiting on a permission prompt for 20m".to_string(),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// GitHub

/// Records every call (`calls/NNN.args`, one argument a line, and `calls/NNN.stdin`), answers
/// `issue list` with `issues.json` and `issue create` with a new issue URL.
const FAKE_GH: &str = r#"#!/bin/bash
dir=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/calls"
id=$(printf '%03d' "$(find "$dir/calls" -name '*.args' | wc -l)")
printf '%s\n' "$@" > "$dir/calls/$id.args"
cat > "$dir/calls/$id.stdin"
case "$1 $2" in
  "issue list") cat "$dir/issues.json" ;;
  "issue create")
    if [ -e "$dir/fail-create" ]; then
      echo "HTTP 401: Bad credentials (https://api.github.com/graphql)" >&2
      echo "Try authenticating with:  gh auth login" >&2
      exit 1
    fi
    [ -e "$dir/slow-create" ] && sleep 0.5
    n=$(grep -lx create "$dir"/calls/*.args | wc -l)
    echo "Creating issue in acme/fleet"
    echo
    echo "https://github.com/acme/fleet/issues/$n" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"#;

struct Call {
    args: Vec<String>,
    stdin: String,
}

struct FakeGh {
    dir: tempfile::TempDir,
    fleet: FleetDir,
    settings: NotifySettings,
}

impl FakeGh {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let gh = dir.path().join("gh");
        fs::write(&gh, FAKE_GH).unwrap();
        fs::set_permissions(&gh, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(dir.path().join("issues.json"), "[]").unwrap();
        let fleet = FleetDir::new(dir.path().join("project/.phoenix"));
        let settings = NotifySettings {
            github: Some(GithubNotify {
                repo: "acme/fleet".into(),
                labels: strings(&["watchdog", "agent health"]),
            }),
            ..NotifySettings::default()
        };
        FakeGh {
            dir,
            fleet,
            settings,
        }
    }

    fn notifier(&self) -> Notifier<'_> {
        Notifier::new(&self.settings, &self.fleet).with_gh(self.dir.path().join("gh"))
    }

    /// What `gh issue list` answers from now on.
    fn set_open(&self, issues: Value) {
        fs::write(self.dir.path().join("issues.json"), issues.to_string()).unwrap();
    }

    fn calls(&self) -> Vec<Call> {
        let mut names: Vec<PathBuf> = fs::read_dir(self.dir.path().join("calls"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "args"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| Call {
                args: fs::read_to_string(p)
                    .unwrap()
                    .lines()
                    .map(str::to_string)
                    .collect(),
                stdin: fs::read_to_string(p.with_extension("stdin")).unwrap_or_default(),
            })
            .collect()
    }

    fn creates(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.args[..2] == ["issue", "create"])
            .collect()
    }

    /// Pretend the last issue was created `ago` before now.
    fn age_last_issue(&self, ago: Duration) {
        let path = github::state_path(&self.fleet);
        let mut state: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        let then = jiff::Timestamp::now() - jiff::SignedDuration::try_from(ago).unwrap();
        state["last_issue"]["created_at"] = json!(then.to_string());
        fs::write(&path, state.to_string()).unwrap();
    }
}

fn only(sent: Vec<Sent>) -> Sent {
    assert_eq!(sent.len(), 1, "{sent:?}");
    sent.into_iter().next().unwrap()
}

#[test]
fn investigations_open_one_issue_per_agent_and_respect_the_cooldown() {
    let gh = FakeGh::new();

    // 1. A first investigation opens an issue.
    let first = only(gh.notifier().send(&message(
        Kind::Investigation,
        "alpha",
        "stuck on a prompt",
    )));
    assert!(first.ok, "{first:?}");
    assert_eq!(first.channel, "github");
    assert_eq!(
        first.url.as_deref(),
        Some("https://github.com/acme/fleet/issues/1")
    );
    let calls = gh.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].args,
        [
            "issue",
            "list",
            "--repo",
            "acme/fleet",
            "--state",
            "open",
            "--search",
            "[Watchdog] in:title",
            "--json",
            "number,title,url",
            "--limit",
            "100",
        ]
    );
    assert_eq!(
        calls[1].args,
        [
            "issue",
            "create",
            "--repo",
            "acme/fleet",
            "--title",
            "[Watchdog] agent `alpha`: stuck on a prompt",
            "--body-file",
            "-",
            "--label",
            "watchdog",
            "--label",
            "agent health",
        ]
    );
    assert!(
        calls[1]
            .stdin
            .starts_with("the agent has been waiting on a permission prompt for 20m\n"),
        "{}",
        calls[1].stdin
    );
    assert!(calls[1].stdin.contains("agent `alpha` of fleet `demo`"));
    let state = github::read_state(&github::state_path(&gh.fleet));
    let last = state.last_issue.unwrap();
    assert_eq!(last.agent, "alpha");
    assert_eq!(
        last.url.as_deref(),
        Some("https://github.com/acme/fleet/issues/1")
    );

    // 2. The issue is open: a second investigation of the same agent points to it.
    gh.set_open(json!([
        {"number": 1, "title": "[Watchdog] agent `alpha`: stuck on a prompt",
         "url": "https://github.com/acme/fleet/issues/1"},
        {"number": 2, "title": "[Watchdog] agent `alpha-2`: looping",
         "url": "https://github.com/acme/fleet/issues/2"},
    ]));
    let again = only(
        gh.notifier()
            .send(&message(Kind::Investigation, "alpha", "looping")),
    );
    assert!(again.ok, "{again:?}");
    assert_eq!(
        again.url.as_deref(),
        Some("https://github.com/acme/fleet/issues/1")
    );
    assert_eq!(again.detail, "open issue already tracks this agent");
    assert_eq!(gh.creates().len(), 1);

    // 3. Another agent within the cooldown (a new Notifier: the time survives restarts).
    let beta = only(
        gh.notifier()
            .send(&message(Kind::Investigation, "beta", "crashed")),
    );
    assert!(!beta.ok, "{beta:?}");
    assert!(
        beta.detail.starts_with("cooldown: last issue created at "),
        "{}",
        beta.detail
    );
    assert!(
        beta.detail.ends_with("(issue_cooldown = 1h)"),
        "{}",
        beta.detail
    );
    assert_eq!(gh.creates().len(), 1);

    // 4. Once the cooldown is over, it gets its issue.
    gh.age_last_issue(Duration::from_secs(3601));
    let beta = only(
        gh.notifier()
            .send(&message(Kind::Investigation, "beta", "crashed")),
    );
    assert!(beta.ok, "{beta:?}");
    assert_eq!(
        beta.url.as_deref(),
        Some("https://github.com/acme/fleet/issues/2")
    );
    let creates = gh.creates();
    assert_eq!(creates.len(), 2);
    assert!(
        creates[1]
            .args
            .contains(&"[Watchdog] agent `beta`: crashed".to_string())
    );

    // 5. Failure messages never touch GitHub.
    let before = gh.calls().len();
    assert!(
        gh.notifier()
            .send(&message(Kind::Failure, "gamma", "unrecoverable"))
            .is_empty()
    );
    assert_eq!(gh.calls().len(), before);
}

#[test]
fn two_processes_at_once_create_one_issue() {
    let gh = FakeGh::new();
    fs::write(gh.dir.path().join("slow-create"), "").unwrap();
    let results: Vec<Sent> = std::thread::scope(|s| {
        let handles: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|agent| {
                let gh = &gh;
                s.spawn(move || {
                    only(
                        gh.notifier()
                            .send(&message(Kind::Investigation, agent, "stuck")),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(gh.creates().len(), 1);
    assert_eq!(results.iter().filter(|s| s.ok).count(), 1, "{results:?}");
    assert!(
        results.iter().any(|s| s.detail.starts_with("cooldown: ")),
        "{results:?}"
    );
}

#[test]
fn gh_failures_are_reported_not_raised() {
    let gh = FakeGh::new();
    let missing = Notifier::new(&gh.settings, &gh.fleet).with_gh("phoenix-test-no-such-gh");
    let sent = only(missing.send(&message(Kind::Investigation, "alpha", "stuck")));
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "phoenix-test-no-such-gh not found on PATH: install the GitHub CLI or remove [notify.github]"
    );

    fs::write(gh.dir.path().join("fail-create"), "").unwrap();
    let sent = only(
        gh.notifier()
            .send(&message(Kind::Investigation, "alpha", "stuck")),
    );
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "`gh issue create` failed (exit 1): HTTP 401: Bad credentials (https://api.github.com/graphql)"
    );
    // A failed creation starts no cooldown.
    assert!(
        github::read_state(&github::state_path(&gh.fleet))
            .last_issue
            .is_none()
    );

    gh.set_open(json!({"not": "a list"}));
    let sent = only(
        gh.notifier()
            .send(&message(Kind::Investigation, "alpha", "stuck")),
    );
    assert!(
        sent.detail
            .starts_with("`gh issue list` answered with unexpected JSON"),
        "{}",
        sent.detail
    );
}

#[test]
fn an_open_issue_is_matched_by_its_exact_agent_name() {
    let issues: Vec<Issue> = serde_json::from_value(json!([
        {"number": 1, "title": "[Watchdog] agent `ab`: stuck", "url": "u1"},
        {"number": 2, "title": "Ask: agent `a` is great", "url": "u2"},
        {"number": 3, "title": "[Watchdog] agent `a`: looping", "url": "u3"},
    ]))
    .unwrap();
    assert_eq!(github::tracking_issue(&issues, "a").unwrap().url, "u3");
    assert_eq!(github::tracking_issue(&issues, "ab").unwrap().url, "u1");
    assert!(github::tracking_issue(&issues, "b").is_none());
    assert_eq!(
        github::created_url(
            "Creating issue in acme/fleet\n\nhttps://github.com/acme/fleet/issues/9\n"
        ),
        Some("https://github.com/acme/fleet/issues/9".into())
    );
    assert_eq!(github::created_url("nothing"), None);
}

#[test]
fn the_cooldown_ignores_a_time_far_in_the_future() {
    let now = jiff::Timestamp::now();
    let hour = Duration::from_secs(3600);
    let ago = |secs: i64| now - jiff::SignedDuration::from_secs(secs);
    assert!(github::in_cooldown(ago(60), now, hour));
    assert!(!github::in_cooldown(ago(3601), now, hour));
    assert!(github::in_cooldown(ago(-60), now, hour));
    assert!(!github::in_cooldown(ago(-7200), now, hour));
}

// ---------------------------------------------------------------------------------------------
// Webhook

#[derive(Debug)]
struct Request {
    path: String,
    headers: Vec<String>,
    body: String,
}

#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
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
fn a_server_error_is_retried_then_reported() {
    let server = Server::start(Answer::Status(500), 10);
    let url = server.url();
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let settings = webhook_settings(WebhookFormat::Json, Duration::from_secs(5), 2);
    let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", &url);
    let sent = only(notifier.send(&message(Kind::Failure, "alpha", "down")));
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "POST to $PHOENIX_TEST_HOOK failed: HTTP 500: upstream exploded (3 attempts)"
    );
    assert_no_secret(&sent, &url);
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn a_client_error_is_not_retried() {
    let server = Server::start(Answer::Status(404), 10);
    let url = server.url();
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let settings = webhook_settings(WebhookFormat::Json, Duration::from_secs(5), 2);
    let notifier = Notifier::new(&settings, &fleet).with_var("PHOENIX_TEST_HOOK", &url);
    let sent = only(notifier.send(&message(Kind::Failure, "alpha", "down")));
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "POST to $PHOENIX_TEST_HOOK failed: HTTP 404: Bad Request: chat not found (1 attempt)"
    );
    assert_eq!(server.requests().len(), 1);
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

// ---------------------------------------------------------------------------------------------
// Command

fn command_settings(argv: &[&str]) -> NotifySettings {
    NotifySettings {
        command: Some(strings(argv)),
        ..NotifySettings::default()
    }
}

#[test]
fn the_command_gets_the_message_on_stdin_and_in_its_environment() {
    let tmp = tempfile::tempdir().unwrap();
    // A space in the path: the argv reaches the program as it is, no shell splits it.
    let out = tmp.path().join("out dir");
    fs::create_dir(&out).unwrap();
    let out_arg = out.to_str().unwrap();
    let settings = command_settings(&[
        "sh",
        "-c",
        "cat > \"$1/stdin\"; env > \"$1/env\"",
        "sh",
        out_arg,
    ]);
    let fleet = FleetDir::new(tmp.path().join(".phoenix"));
    let sent = only(Notifier::new(&settings, &fleet).send(&message(
        Kind::Failure,
        "alpha",
        "unrecoverable",
    )));
    assert!(sent.ok, "{sent:?}");
    assert_eq!(sent.detail, "`sh` exited 0");
    assert_eq!(
        fs::read_to_string(out.join("stdin")).unwrap(),
        "unrecoverable\n\nthe agent has been waiting on a permission prompt for 20m\n"
    );
    let env = fs::read_to_string(out.join("env")).unwrap();
    for var in [
        "PHOENIX_NOTIFY_KIND=failure",
        "PHOENIX_AGENT=alpha",
        "PHOENIX_FLEET=demo",
        "PHOENIX_TITLE=unrecoverable",
    ] {
        assert!(env.lines().any(|l| l == var), "{var} missing from:\n{env}");
    }
    assert!(!env.contains("PHOENIX_ISSUE_URL="));
}

#[test]
fn a_failing_command_is_reported_with_its_exit_code_and_first_error_line() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let settings = command_settings(&[
        "sh",
        "-c",
        "cat >/dev/null; echo 'no display' >&2; echo 'second line' >&2; exit 3",
    ]);
    let sent = only(Notifier::new(&settings, &fleet).send(&message(Kind::Failure, "a", "x")));
    assert!(!sent.ok);
    assert_eq!(sent.detail, "`sh` failed (exit 3): no display");

    let settings = command_settings(&["phoenix-test-no-such-program", "x"]);
    let sent = only(Notifier::new(&settings, &fleet).send(&message(Kind::Failure, "a", "x")));
    assert!(!sent.ok);
    assert_eq!(
        sent.detail,
        "`phoenix-test-no-such-program` not found: check `command` in [notify]"
    );
}

#[test]
fn a_hanging_command_is_killed_with_what_it_started() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(tmp.path());
    let pid_file = tmp.path().join("pid");
    let settings = command_settings(&[
        "sh",
        "-c",
        "sleep 30 & echo $! > \"$1\"; wait",
        "sh",
        pid_file.to_str().unwrap(),
    ]);
    let notifier =
        Notifier::new(&settings, &fleet).with_command_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let sent = only(notifier.send(&message(Kind::Failure, "a", "x")));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(!sent.ok);
    assert_eq!(sent.detail, "`sh` took longer than 300ms and was killed");
    // The background `sleep` was in the command's process group: it is gone (or a zombie
    // waiting for init to reap it) shortly after.
    let pid = fs::read_to_string(&pid_file).unwrap().trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let gone = match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z')),
        };
        if gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sleep {pid} survived the timeout"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// All channels together

#[test]
fn one_failing_channel_does_not_stop_the_others_and_the_issue_url_is_passed_on() {
    let gh = FakeGh::new();
    let out = gh.dir.path().join("command-env");
    let settings = NotifySettings {
        webhook: Some(WebhookNotify {
            url_env: "PHOENIX_TEST_SURELY_UNSET_7F3A".into(),
            format: WebhookFormat::Json,
            chat_id: None,
            timeout: Duration::from_secs(1),
            retries: 0,
        }),
        command: Some(strings(&[
            "sh",
            "-c",
            "env > \"$1\"",
            "sh",
            out.to_str().unwrap(),
        ])),
        ..gh.settings.clone()
    };
    let notifier = Notifier::new(&settings, &gh.fleet).with_gh(gh.dir.path().join("gh"));
    let sent = notifier.send(&message(Kind::Investigation, "alpha", "stuck"));
    let summary: Vec<(&str, bool)> = sent.iter().map(|s| (s.channel.as_str(), s.ok)).collect();
    assert_eq!(
        summary,
        [("github", true), ("webhook", false), ("command", true)]
    );
    let env = fs::read_to_string(&out).unwrap();
    assert!(
        env.lines()
            .any(|l| l == "PHOENIX_ISSUE_URL=https://github.com/acme/fleet/issues/1"),
        "{env}"
    );

    let hook = settings.webhook.as_ref().unwrap();
    let msg = message(Kind::Investigation, "alpha", "stuck");
    let body = webhook::payload(hook, &msg, Some("https://github.com/acme/fleet/issues/1"));
    assert_eq!(body["url"], "https://github.com/acme/fleet/issues/1");
}

#[test]
fn report_lines_show_status_channel_and_what_happened() {
    let ok = Sent {
        channel: "github".into(),
        ok: true,
        url: Some("https://github.com/acme/fleet/issues/7".into()),
        detail: "issue created".into(),
    };
    assert_eq!(
        render_line(&ok),
        "ok   github   https://github.com/acme/fleet/issues/7  issue created"
    );
    let failed = Sent::new("webhook", false, "PHOENIX_WEBHOOK_URL is not set");
    assert_eq!(
        render_line(&failed),
        "FAIL webhook  PHOENIX_WEBHOOK_URL is not set"
    );
    assert_eq!(
        serde_json::to_value(&failed).unwrap(),
        json!({"channel": "webhook", "ok": false, "url": null, "detail": "PHOENIX_WEBHOOK_URL is not set"})
    );
}

#[test]
fn an_agent_s_channels_limit_where_its_messages_go() {
    let gh = FakeGh::new();
    let out = gh.dir.path().join("command-ran");
    let settings = NotifySettings {
        command: Some(strings(&[
            "sh",
            "-c",
            "cat > \"$1\"",
            "sh",
            out.to_str().unwrap(),
        ])),
        ..gh.settings.clone()
    };
    let only_command = vec!["command".to_string()];
    let sent = Notifier::new(&settings, &gh.fleet)
        .with_gh(gh.dir.path().join("gh"))
        .only(Some(&only_command))
        .send(&message(Kind::Investigation, "alpha", "stuck"));
    let channels: Vec<&str> = sent.iter().map(|s| s.channel.as_str()).collect();
    assert_eq!(channels, ["command"]);
    assert!(out.exists());
    assert!(
        gh.calls().is_empty(),
        "github was not one of the agent's channels"
    );
}
