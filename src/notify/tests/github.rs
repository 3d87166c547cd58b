//! The GitHub channel against a recording fake `gh`: one issue per agent, the cooldown, two
//! processes at once, and `gh`'s failures.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::{message, only, strings};
use crate::notify::github::{self, Issue};
use crate::notify::*;
use crate::spec::GithubNotify;

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

pub(super) struct Call {
    args: Vec<String>,
    stdin: String,
}

pub(super) struct FakeGh {
    pub(super) dir: tempfile::TempDir,
    pub(super) fleet: FleetDir,
    pub(super) settings: NotifySettings,
}

impl FakeGh {
    pub(super) fn new() -> Self {
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

    /// What the notifier reports for an investigation of `agent` (GitHub is its one channel).
    fn investigate(&self, agent: &str, title: &str) -> Sent {
        only(
            self.notifier()
                .send(&message(Kind::Investigation, agent, title)),
        )
    }

    fn notifier(&self) -> Notifier<'_> {
        self.notifier_with(&self.settings)
    }

    /// A notifier with other `settings` that calls this fake `gh`.
    pub(super) fn notifier_with<'a>(&'a self, settings: &'a NotifySettings) -> Notifier<'a> {
        Notifier::new(settings, &self.fleet).with_gh(self.dir.path().join("gh"))
    }

    /// What `gh issue list` answers from now on.
    fn set_open(&self, issues: Value) {
        fs::write(self.dir.path().join("issues.json"), issues.to_string()).unwrap();
    }

    pub(super) fn calls(&self) -> Vec<Call> {
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

#[test]
fn investigations_open_one_issue_per_agent_and_respect_the_cooldown() {
    let gh = FakeGh::new();

    // 1. A first investigation opens an issue.
    a_first_investigation_opens_an_issue(&gh);

    // 2. The issue is open: a second investigation of the same agent points to it.
    gh.set_open(json!([
        {"number": 1, "title": "[Watchdog] agent `alpha`: stuck on a prompt",
         "url": "https://github.com/acme/fleet/issues/1"},
        {"number": 2, "title": "[Watchdog] agent `alpha-2`: looping",
         "url": "https://github.com/acme/fleet/issues/2"},
    ]));
    let again = gh.investigate("alpha", "looping");
    assert_issue(&again, 1);
    assert_eq!(again.detail, "open issue already tracks this agent");
    assert_eq!(gh.creates().len(), 1);

    // 3. Another agent within the cooldown (a new Notifier: the time survives restarts).
    let beta = gh.investigate("beta", "crashed");
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
    let beta = gh.investigate("beta", "crashed");
    assert_issue(&beta, 2);
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

/// `sent` reports issue `number` of the fake repository.
fn assert_issue(sent: &Sent, number: u32) {
    assert!(sent.ok, "{sent:?}");
    let url = format!("https://github.com/acme/fleet/issues/{number}");
    assert_eq!(sent.url.as_deref(), Some(url.as_str()));
}

/// The first step of the scenario above: `gh issue list` finds nothing, `gh issue create`
/// opens issue 1 with the message as its body, and the time is kept for the cooldown.
fn a_first_investigation_opens_an_issue(gh: &FakeGh) {
    let first = gh.investigate("alpha", "stuck on a prompt");
    assert_eq!(first.channel, "github");
    assert_issue(&first, 1);
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
                s.spawn(move || gh.investigate(agent, "stuck"))
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
    let sent = gh.investigate("alpha", "stuck");
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
    let sent = gh.investigate("alpha", "stuck");
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
