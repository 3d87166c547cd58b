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
            prune: Default::default(),
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
            prune: Default::default(),
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
            stdin: None,
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
            stdin: None,
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
            prune: Default::default(),
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

// ---- hosts check, hosts install, and a host's daemon on its own ----

/// The operator's phoenix.toml for `net` with each host's `phoenix` at `phoenix` instead of
/// this build's binary.
fn toml_with_phoenix(net: &HostedFleet, phoenix: &std::path::Path, body: &str) {
    let header = net.header().replace(
        &format!("phoenix = \"{PHOENIX}\""),
        &format!("phoenix = \"{}\"", phoenix.display()),
    );
    net.fleet.raw_toml(&format!("{header}{body}"));
}

fn host_report<'a>(doc: &'a serde_json::Value, host: &str) -> &'a serde_json::Value {
    doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == host)
        .unwrap_or_else(|| panic!("no report for `{host}`: {doc}"))
}

#[test]
fn hosts_check_without_hosts_says_so() {
    let fleet = crate::support::Fleet::new();
    fleet.toml("");
    fleet
        .run(&["hosts", "check"])
        .status(0)
        .stdout_has("no [[host]]");
    let doc = fleet.run(&["hosts", "check", "--json"]).json();
    assert_eq!(doc["hosts"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["ok"], true);
}

#[test]
fn hosts_check_reports_every_host_and_a_dead_one_costs_at_most_its_connect_timeout() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    net.toml(&format!(
        "{}{}",
        HostedFleet::demo_agent("one", Some("gpu-1")),
        HostedFleet::demo_agent("two", Some("gpu-2"))
    ));
    // No daemon will run on either (no systemd user manager under the test's sshd): the one
    // failing row of each.
    let run = net.run(&["hosts", "check"]);
    run.status(1)
        .stdout_has("gpu-1 (ssh gpu-1): phoenix ")
        .stdout_has("gpu-2 (ssh gpu-2): phoenix ")
        .stdout_has("agent `two` command")
        .stdout_has("FAIL daemon")
        .stdout_has("2 hosts: 0 unreachable, 2 check(s) failed.");

    // gpu-2's sshd stops (and with it the connection the first check left open, as on a
    // machine that went down): refused at once, and gpu-1 is still checked.
    let port = net.host("gpu-2").sshd.port;
    net.host_mut("gpu-2").sshd.stop();
    crate::support::hosts::close_shared_connections(&net.fleet.state_dir(), &net.ssh_config);
    let started = Instant::now();
    let run = net.run(&["hosts", "check", "--json"]);
    let refused_after = started.elapsed();
    run.status(1);
    let doc = run.json();
    assert_eq!(doc["ok"], false);
    let one = host_report(&doc, "gpu-1");
    assert_eq!(one["reachable"], true, "{doc}");
    assert_eq!(one["phoenix_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(one["os"], std::env::consts::OS);
    assert_eq!(one["arch"], std::env::consts::ARCH);
    let rows = one["checks"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|c| c["check"] == "agent `one` workdir" && c["ok"] == true),
        "{doc}"
    );
    assert!(rows.iter().all(|c| c["check"] != "agent `two` workdir"));
    let two = host_report(&doc, "gpu-2");
    assert_eq!(two["reachable"], false, "{doc}");
    let error = two["error"].as_str().unwrap();
    assert!(error.contains("host `gpu-2` is unreachable"), "{error}");
    assert!(error.contains("refused"), "{error}");
    assert!(two["hint"].as_str().unwrap().contains("ssh"), "{doc}");
    assert_eq!(two["checks"], serde_json::json!([]));

    // Now it hangs instead: something accepts connections on its port and never speaks.
    // It costs ssh's connect timeout, no more, and gpu-1 is answered all the same.
    let _silent = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let started = Instant::now();
    let run = net.run(&["hosts", "check"]);
    let hung_after = started.elapsed();
    run.status(1)
        .stdout_has("gpu-2 (ssh gpu-2): unreachable")
        .stdout_has("FAIL reachable")
        .stdout_has("gpu-1 (ssh gpu-1): phoenix ")
        .stdout_has("2 hosts: 1 unreachable, 1 check(s) failed.");
    let timeout = phoenix::hosts::fleet::CONNECT_TIMEOUT;
    eprintln!("hosts check: refused host {refused_after:?}, silent host {hung_after:?}");
    assert!(refused_after < timeout, "{refused_after:?}");
    assert!(
        hung_after < timeout + Duration::from_secs(3),
        "{hung_after:?}"
    );
}

#[test]
fn hosts_check_reports_a_missing_workdir_as_that_hosts_failing_row() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    let missing = net.fleet.path().join("not here");
    net.toml(&format!(
        "{}workdir = \"{}\"\n",
        HostedFleet::demo_agent("far", Some("gpu-1")),
        missing.display()
    ));
    let run = net.run(&["hosts", "check"]);
    run.status(1)
        .stdout_has("FAIL agent `far` workdir")
        .stdout_has("create it or fix `workdir`")
        .stdout_has("1 host: 0 unreachable, 2 check(s) failed.");
    let doc = net.run(&["hosts", "check", "--json"]).json();
    let row = host_report(&doc, "gpu-1")["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "agent `far` workdir")
        .cloned()
        .unwrap();
    assert_eq!(row["ok"], false, "{doc}");
    assert_eq!(row["detail"], missing.display().to_string());
}

#[test]
fn hosts_install_copies_phoenix_next_to_the_hosts_path_and_says_how_to_run_its_daemon() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    let bin = net.fleet.path().join("remote bin");
    let phoenix = bin.join("phoenix");
    toml_with_phoenix(
        &net,
        &phoenix,
        &HostedFleet::demo_agent("far", Some("gpu-1")),
    );
    net.run(&["hosts", "check"])
        .status(1)
        .stdout_has("was not found there")
        .stdout_has("phoenix hosts install gpu-1");

    net.run(&["hosts", "install", "gpu-1", "--print"])
        .status(0)
        .stdout_has("no phoenix answers there yet")
        .stdout_has(&format!("→ {}", phoenix.display()))
        .stdout_has("KillMode=process");
    assert!(!bin.exists(), "--print copied something");

    let started = Instant::now();
    let run = net.run(&["hosts", "install", "gpu-1"]);
    eprintln!("hosts install took {:?}", started.elapsed());
    // The test's sshd has no PAM session, so no systemd user manager answers there (nor
    // does the container have one): the unit and the command are printed, nothing written.
    let config = net.host("gpu-1").config();
    run.status(0)
        .stdout_has(&format!("to {}", phoenix.display()))
        .stdout_has("daemon: not installed as a service")
        .stdout_has(&format!(" --config {} run\n", config.display()))
        .stdout_has("ExecStart=");
    for name in ["phoenix", "phoenix-hook", "phoenix-wrap"] {
        let here = std::fs::metadata(PathBuf::from(PHOENIX).with_file_name(name)).unwrap();
        let there = std::fs::metadata(bin.join(name)).unwrap();
        assert_eq!(there.len(), here.len(), "{name}");
        let mode = std::os::unix::fs::PermissionsExt::mode(&there.permissions());
        assert_eq!(mode & 0o777, 0o755, "{name}");
    }
    assert_eq!(
        std::fs::read_dir(&bin).unwrap().count(),
        3,
        "temporary files left"
    );

    let doc = net.run(&["hosts", "check", "--json"]).json();
    let report = host_report(&doc, "gpu-1");
    assert_eq!(
        report["phoenix_version"],
        env!("CARGO_PKG_VERSION"),
        "{doc}"
    );
    assert_eq!(report["error"], serde_json::Value::Null, "{doc}");
}

#[test]
fn hosts_install_refuses_a_host_of_another_architecture() {
    let Some(net) = HostedFleet::start(&["arm-1"]) else {
        return;
    };
    let other = if std::env::consts::ARCH == "aarch64" {
        "x86_64"
    } else {
        "aarch64"
    };
    // A stand-in for a phoenix built for another architecture: it answers Hello as one.
    let bin = net.fleet.path().join("arm bin");
    std::fs::create_dir_all(&bin).unwrap();
    let stand_in = bin.join("phoenix");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho '{{\"format_version\":1,\"phoenix_version\":\"0.0.9\",\"os\":\"{}\",\"arch\":\"{other}\",\"ok\":true}}'\n",
        std::env::consts::OS
    );
    std::fs::write(&stand_in, &script).unwrap();
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    toml_with_phoenix(&net, &stand_in, "");
    let os = std::env::consts::OS;
    net.run(&["hosts", "install", "arm-1"])
        .status(1)
        .stderr_has(&format!(
            "host `arm-1` is {os}-{other} and this phoenix is built for {os}-{}",
            std::env::consts::ARCH
        ))
        .stderr_has("nothing was copied")
        .stderr_has(&format!("install a phoenix built for {os}-{other}"));
    assert_eq!(std::fs::read_to_string(&stand_in).unwrap(), script);
    assert_eq!(std::fs::read_dir(&bin).unwrap().count(), 1);
}

/// Item 4 of issue 18: after the operator's apply, the host's own daemon keeps its agents
/// alive with no operator process left (not even a shared ssh connection).
#[test]
fn a_hosts_own_daemon_restarts_its_killed_agent_with_the_operator_gone() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&HostedFleet::demo_agent("far", Some("gpu-1")));
    let spec = phoenix::spec::load(&net.fleet.config()).unwrap();
    let links = phoenix::hosts::fleet::links(&spec);
    let applied = links[0]
        .ask(
            Call::Apply {
                dir: links[0].host.dir.clone(),
                slice: phoenix::hosts::fleet::slice(&spec, "gpu-1").unwrap(),
                files: phoenix::hosts::fleet::slice_files(&spec).unwrap(),
                agents: vec![],
                prune: Default::default(),
            },
            phoenix::hosts::fleet::APPLY_TIMEOUT,
        )
        .unwrap();
    assert_eq!(applied.result["code"], 0, "{}", applied.result);
    drop(links);
    crate::support::hosts::close_shared_connections(&net.fleet.state_dir(), &net.ssh_config);

    // The host's daemon, started as its systemd unit would start it.
    let host = net.host("gpu-1");
    let log = net.fleet.path().join("gpu-1-daemon.log");
    let mut daemon = std::process::Command::new(PHOENIX)
        .arg("--config")
        .arg(host.config())
        .arg("run")
        .env_remove("TMUX")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    crate::support::wait_until(Duration::from_secs(15), "the host's daemon", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("supervising the fleet"))
    });
    let running = |host: &crate::support::hosts::Host| {
        host.status()
            .into_iter()
            .find(|s| s["agent"] == "far" && s["state"] == "running")
    };
    let mut row = None;
    crate::support::wait_until(Duration::from_secs(15), "`far` running", || {
        row = running(host);
        row.is_some()
    });
    let row = row.unwrap();
    let pid = row["pid"].as_u64().unwrap() as u32;
    let pane = row["pane"].as_str().unwrap().to_string();
    let control = phoenix::hosts::fleet::control_dir(&net.fleet.state_dir());
    crate::support::wait_until(Duration::from_secs(5), "no operator connection", || {
        std::fs::read_dir(&control).map_or(0, |d| d.count()) == 0
    });

    // The whole pane dies (its wrapper and the agent): only the daemon can bring it back.
    let wrapper: u32 = String::from_utf8(
        std::process::Command::new("tmux")
            .args(["-L", &host.socket, "display-message", "-p", "-t", &pane])
            .arg("#{pane_pid}")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    crate::support::kill9(wrapper);
    crate::support::kill9(pid);
    crate::support::wait_until(Duration::from_secs(20), "`far` back", || {
        running(host).is_some_and(|s| s["pid"].as_u64() != Some(u64::from(pid)))
    });
    let windows = std::process::Command::new("tmux")
        .args(["-L", &host.socket, "list-windows", "-a"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&windows.stdout).lines().count(),
        1,
        "one window for the one agent"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("applied agent=far action=restart"),
        "the host's daemon did not restart it:\n{said}"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[test]
fn a_host_call_that_times_out_leaves_nothing_running_on_the_host() {
    let Some((server, net)) = one_host("slow") else {
        return;
    };
    // A host whose "phoenix" never answers, with a child of its own.
    let slow = net.tmp.path().join("slow-phoenix");
    std::fs::write(&slow, "#!/bin/sh\nsleep 31337 &\nsleep 31338\n").unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ssh = net.ssh(&server);
    // The connection is up first: the timeout is the command's, not the connect's.
    hosts::ask(&ssh, PHOENIX, Call::Hello, Duration::from_secs(20)).unwrap();
    let started = Instant::now();
    let err = hosts::ask(
        &ssh,
        &slow.display().to_string(),
        Call::Hello,
        Duration::from_secs(2),
    )
    .unwrap_err();
    assert!(
        matches!(err, HostError::Transport(TransportError::Timeout { .. })),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let left = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "sleep 3133[78]"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = left();
    // Whatever a failing run left, the test does not leave it behind.
    for pid in &running {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(running.is_empty(), "still running on the host: {running:?}");
}
