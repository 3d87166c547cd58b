//! The command channel with real shell commands: the message on stdin and in the
//! environment, failures, and a hanging command killed with what it started.

use std::fs;
use std::time::{Duration, Instant};

use super::{message, only, sh_with_path, strings};
use crate::notify::*;

fn command_settings(argv: Vec<String>) -> NotifySettings {
    NotifySettings {
        command: Some(argv),
        ..NotifySettings::default()
    }
}

#[test]
fn the_command_gets_the_message_on_stdin_and_in_its_environment() {
    let tmp = tempfile::tempdir().unwrap();
    // A space in the path: the argv reaches the program as it is, no shell splits it.
    let out = tmp.path().join("out dir");
    fs::create_dir(&out).unwrap();
    let settings = command_settings(sh_with_path("cat > \"$1/stdin\"; env > \"$1/env\"", &out));
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
    let settings = command_settings(strings(&[
        "sh",
        "-c",
        "cat >/dev/null; echo 'no display' >&2; echo 'second line' >&2; exit 3",
    ]));
    let sent = only(Notifier::new(&settings, &fleet).send(&message(Kind::Failure, "a", "x")));
    assert!(!sent.ok);
    assert_eq!(sent.detail, "`sh` failed (exit 3): no display");

    let settings = command_settings(strings(&["phoenix-test-no-such-program", "x"]));
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
    let settings = command_settings(sh_with_path("sleep 30 & echo $! > \"$1\"; wait", &pid_file));
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
