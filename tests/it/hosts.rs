//! Multi-host: the operator's phoenix reaching hosts through real OpenSSH servers on loopback
//! (`support::sshd`), each host's side answered by the real `phoenix host`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use phoenix::hosts::protocol::Call;
use phoenix::hosts::ssh::Ssh;
use phoenix::hosts::{self, HostError, TransportError};

use crate::support::hosts::HostedFleet;
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

/// Kills a host's tmux server when the test ends, however it ends.
struct TmuxServer(String);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[test]
fn a_host_plans_applies_and_reports_its_slice_over_real_ssh() {
    let Some((server, net)) = one_host("h1") else {
        return;
    };
    let ssh = net.ssh(&server);
    let socket = TmuxServer(format!("phx-host-{}", std::process::id()));
    let dir = net.tmp.path().join("h1 dir");
    let slice = format!(
        "[fleet]\nname = \"t\"\ntmux_socket = \"{}\"\n\n[[agent]]\nname = \"a\"\ncommand = \"{PHOENIX} demo-agent --interval 200ms\"\n",
        socket.0
    );
    let dir_text = dir.display().to_string();
    let plan = hosts::ask(
        &ssh,
        PHOENIX,
        Call::Plan {
            dir: dir_text.clone(),
            slice: slice.clone(),
            prune: false,
        },
        Duration::from_secs(30),
    )
    .unwrap();
    let changes = &plan.result["plan"]["changes"];
    assert_eq!(changes[0]["agent"], "a", "{}", plan.result);
    assert!(!dir.exists(), "a plan wrote the host's directory");

    let applied = hosts::ask(
        &ssh,
        PHOENIX,
        Call::Apply {
            dir: dir_text.clone(),
            slice,
            files: [("policies/recovery.lua".to_string(), "-- x\n".to_string())].into(),
            agents: vec![],
            prune: false,
        },
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(applied.result["code"], 0, "{}", applied.result);
    assert_eq!(
        std::fs::read_to_string(dir.join("policies/recovery.lua")).unwrap(),
        "-- x\n"
    );
    let status = hosts::ask(
        &ssh,
        PHOENIX,
        Call::Run {
            dir: dir_text.clone(),
            args: vec!["status".into(), "--json".into()],
        },
        Duration::from_secs(30),
    )
    .unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(status.result["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(doc["agents"][0]["agent"], "a", "{doc}");
    assert_eq!(doc["agents"][0]["declared"], true, "{doc}");

    // Only phoenix's own reads and actions run there, and pushed files stay in the slice.
    let refused = hosts::ask(
        &ssh,
        PHOENIX,
        Call::Run {
            dir: dir_text.clone(),
            args: vec!["run".into()],
        },
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert!(
        refused.to_string().contains("not a command a host runs"),
        "{refused}"
    );
    let escaped = hosts::ask(
        &ssh,
        PHOENIX,
        Call::Apply {
            dir: dir_text,
            slice: "[fleet]\nname = \"t\"\n".into(),
            files: [("policies/../../evil".to_string(), "x".to_string())].into(),
            agents: vec![],
            prune: false,
        },
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert!(
        escaped.to_string().contains("not a file a slice carries"),
        "{escaped}"
    );
    assert!(!net.tmp.path().join("evil").exists());
}

#[test]
fn validate_checks_hosts_here_and_leaves_a_hosts_workdir_to_the_host() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&format!(
        "{}workdir = \"/only/on/gpu-1\"\n",
        HostedFleet::demo_agent("far", Some("gpu-1"))
    ));
    net.run(&["validate"]).status(0);
    net.toml(&HostedFleet::demo_agent("far", Some("gpu-2")));
    net.run(&["validate"])
        .status(1)
        .stderr_has("agent `far`: host `gpu-2` is not declared")
        .stderr_has("did you mean `gpu-1`?");
    assert_eq!(net.hosts[0].socket, format!("{}-gpu-1", net.fleet.socket));
}
