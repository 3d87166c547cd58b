//! Multi-host: the operator's phoenix reaching hosts through real OpenSSH servers on loopback
//! (`support::sshd`), each host's side answered by the real `phoenix host`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use phoenix::hosts::protocol::Call;
use phoenix::hosts::ssh::Ssh;
use phoenix::hosts::{self, HostError, TransportError};

use crate::support::sshd::{self, Sshd};

const PHOENIX: &str = env!("CARGO_BIN_EXE_phoenix");

struct Net {
    tmp: tempfile::TempDir,
    config: PathBuf,
}

impl Net {
    fn new(servers: &[&Sshd]) -> Net {
        let tmp = tempfile::tempdir().unwrap();
        let config = sshd::write_config(&tmp.path().join("ssh_config"), servers);
        Net { tmp, config }
    }

    fn ssh(&self, server: &Sshd) -> Ssh {
        Ssh {
            host: server.alias.clone(),
            destination: server.alias.clone(),
            config: Some(self.config.clone()),
            control_dir: self.tmp.path().join("control"),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

impl Drop for Net {
    /// Close the shared connections (their masters would outlive the test otherwise).
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.tmp.path().join("control")) else {
            return;
        };
        for entry in entries.flatten() {
            let _ = std::process::Command::new("ssh")
                .arg("-o")
                .arg(format!("ControlPath={}", entry.path().display()))
                .args(["-O", "exit", "unused"])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// One sshd known as `alias` and the ssh config naming it; `None` (said once) without sshd.
fn one_host(alias: &str) -> Option<(Sshd, Net)> {
    if !sshd::available() {
        return None;
    }
    let server = Sshd::start(alias);
    let net = Net::new(&[&server]);
    Some((server, net))
}

#[test]
fn a_host_answers_over_real_ssh_and_the_connection_is_shared() {
    let Some((server, net)) = one_host("gpu-1") else {
        return;
    };
    let ssh = net.ssh(&server);
    let reply = hosts::ask(&ssh, PHOENIX, Call::Hello, Duration::from_secs(20)).unwrap();
    assert!(reply.ok);
    assert_eq!(reply.phoenix_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(reply.os, std::env::consts::OS);
    // The master connection stays: its socket is in the private control directory.
    let control = net.tmp.path().join("control");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&control).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(std::fs::read_dir(&control).unwrap().count(), 1);
    let warm = Instant::now();
    hosts::ask(&ssh, PHOENIX, Call::Hello, Duration::from_secs(20)).unwrap();
    assert!(warm.elapsed() < Duration::from_secs(5));
}

#[test]
fn another_protocol_version_on_the_host_names_both_versions_and_the_fix() {
    let Some((server, net)) = one_host("old") else {
        return;
    };
    // A stand-in for an older phoenix: it answers with its envelope in protocol 0.
    let old = net.tmp.path().join("old-phoenix");
    std::fs::write(
        &old,
        "#!/bin/sh\ncat >/dev/null\necho '{\"format_version\":0,\"phoenix_version\":\"0.0.9\",\"os\":\"linux\",\"arch\":\"x86_64\",\"ok\":false,\"error\":{\"kind\":\"version_mismatch\",\"message\":\"x\"}}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let err = hosts::ask(
        &net.ssh(&server),
        old.to_str().unwrap(),
        Call::Hello,
        Duration::from_secs(20),
    )
    .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, HostError::VersionMismatch { .. }), "{err:?}");
    assert!(
        message.contains("phoenix 0.0.9 (host protocol 0)"),
        "{message}"
    );
    assert!(
        message.contains(&format!("this is phoenix {}", env!("CARGO_PKG_VERSION"))),
        "{message}"
    );
    assert!(err.hint().unwrap().contains("phoenix hosts install old"));
}

#[test]
fn a_missing_phoenix_and_a_hostile_path_are_reported_and_nothing_runs() {
    let Some((server, net)) = one_host("bare") else {
        return;
    };
    let ssh = net.ssh(&server);
    let err = hosts::ask(
        &ssh,
        "/nonexistent/phoenix",
        Call::Hello,
        Duration::from_secs(20),
    )
    .unwrap_err();
    assert!(matches!(err, HostError::NoPhoenix { .. }), "{err:?}");
    assert!(err.to_string().contains("not found"), "{err}");
    let pwned = net.tmp.path().join("pwned");
    for hostile in [
        format!("/x/$(touch {})/phoenix", pwned.display()),
        format!("phoenix; touch {}", pwned.display()),
        format!("`touch {}`", pwned.display()),
        format!("phoenix\ntouch {}", pwned.display()),
    ] {
        let err = hosts::ask(&ssh, &hostile, Call::Hello, Duration::from_secs(20)).unwrap_err();
        assert!(
            matches!(err, HostError::NoPhoenix { .. }),
            "{hostile}: {err:?}"
        );
    }
    assert!(!pwned.exists(), "a remote shell ran part of a program path");
}

#[test]
fn an_unreachable_host_costs_at_most_its_connect_timeout() {
    let Some((mut server, net)) = one_host("down") else {
        return;
    };
    server.stop();
    let started = Instant::now();
    let err = hosts::ask(
        &net.ssh(&server),
        PHOENIX,
        Call::Hello,
        Duration::from_secs(20),
    )
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    match &err {
        HostError::Transport(TransportError::Unreachable { detail, .. }) => {
            assert!(
                detail.contains("refused") || detail.contains("closed"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(err.hint().unwrap().contains("ssh"));
}
