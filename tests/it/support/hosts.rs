//! A fleet that spans machines, for the multi-host tests: the operator's [`Fleet`] (this
//! machine) plus hosts that are real sshd servers on loopback, each with a directory and a
//! tmux server of its own. The hosts' phoenix is this build's binary. Everything the hosts
//! started (tmux servers, agents, daemons, shared ssh connections) is stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::sshd::{self, Sshd};
use super::{Fleet, PHOENIX, Run, kill_tmux_server};

pub struct Host {
    pub name: String,
    /// The host's `dir`: its slice (phoenix.toml) and its state (`.phoenix`) live here.
    pub dir: PathBuf,
    /// The host's tmux server (`[[host]] tmux_socket`).
    pub socket: String,
    pub sshd: Sshd,
}

impl Host {
    pub fn config(&self) -> PathBuf {
        self.dir.join("phoenix.toml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join(".phoenix")
    }

    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        self.state_dir().join("agents").join(agent)
    }

    /// phoenix run on the host's own fleet, directly (not over ssh): what the host sees.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all = vec!["--config".to_string(), self.config().display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        let output = Command::new(PHOENIX)
            .args(&all)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .expect("run phoenix");
        Run { args: all, output }
    }

    /// `status --json` on the host, its agents' rows.
    pub fn status(&self) -> Vec<serde_json::Value> {
        let doc = self.run(&["status", "--json"]).json();
        doc["agents"].as_array().cloned().unwrap_or_default()
    }
}

pub struct HostedFleet {
    /// This machine: the operator's phoenix.toml, state and tmux server.
    pub fleet: Fleet,
    pub hosts: Vec<Host>,
    pub ssh_config: PathBuf,
}

impl HostedFleet {
    /// An operator's fleet with one sshd per name; `None` (the test then returns, skipped)
    /// where sshd is not installed.
    pub fn start(names: &[&str]) -> Option<HostedFleet> {
        if !sshd::available() {
            return None;
        }
        let fleet = Fleet::new();
        let hosts: Vec<Host> = names
            .iter()
            .map(|name| Host {
                name: name.to_string(),
                dir: fleet.path().join("hosts").join(name),
                socket: format!("{}-{name}", fleet.socket),
                sshd: Sshd::start(name),
            })
            .collect();
        let servers: Vec<&Sshd> = hosts.iter().map(|h| &h.sshd).collect();
        let ssh_config = sshd::write_config(&fleet.path().join("ssh_config"), &servers);
        Some(HostedFleet {
            fleet,
            hosts,
            ssh_config,
        })
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts.iter().find(|h| h.name == name).expect("a host")
    }

    pub fn host_mut(&mut self, name: &str) -> &mut Host {
        self.hosts
            .iter_mut()
            .find(|h| h.name == name)
            .expect("a host")
    }

    /// The `[fleet]` header (this machine's socket, the hosts' ssh config) and one `[[host]]`
    /// per host.
    pub fn header(&self) -> String {
        let mut text = format!(
            "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\nssh_config = \"{}\"\n\n",
            self.fleet.socket,
            self.ssh_config.display()
        );
        for host in &self.hosts {
            text.push_str(&host_block(host));
        }
        text
    }

    /// Write the operator's phoenix.toml: [`HostedFleet::header`], then `body` (the agents).
    pub fn toml(&self, body: &str) -> &Self {
        self.fleet.raw_toml(&format!("{}{body}", self.header()));
        self
    }

    /// A demo agent (`phoenix demo-agent`) named `name` on `host` (`None`: this machine).
    pub fn demo_agent(name: &str, host: Option<&str>) -> String {
        let mut text = Fleet::demo_agent(name, "");
        if let Some(host) = host {
            text.push_str(&format!("host = \"{host}\"\n"));
        }
        text
    }

    /// phoenix on the operator's machine.
    pub fn run(&self, args: &[&str]) -> Run {
        self.fleet.run(args)
    }
}

/// One `[[host]]` table for `host`.
pub fn host_block(host: &Host) -> String {
    format!(
        "[[host]]\nname = \"{}\"\nssh = \"{}\"\ndir = \"{}\"\nphoenix = \"{PHOENIX}\"\ntmux_socket = \"{}\"\n\n",
        host.name,
        host.sshd.alias,
        host.dir.display(),
        host.socket
    )
}

impl Drop for HostedFleet {
    fn drop(&mut self) {
        for host in &self.hosts {
            // A host's daemon, if a test started one: its lock file names it.
            stop_daemon(&host.state_dir());
            kill_tmux_server(&host.socket);
        }
        close_shared_connections(&self.fleet.state_dir(), &self.ssh_config);
    }
}

fn stop_daemon(state_dir: &Path) {
    let Ok(text) = std::fs::read_to_string(state_dir.join("daemon.lock")) else {
        return;
    };
    if let Ok(pid) = text.trim().parse::<i32>() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// `ssh -O exit` for every master connection the operator's phoenix left (ControlPersist
/// keeps them for a while after the last call).
pub fn close_shared_connections(state_dir: &Path, ssh_config: &Path) {
    let control = phoenix::hosts::fleet::control_dir(state_dir);
    let Ok(entries) = std::fs::read_dir(&control) else {
        return;
    };
    for entry in entries.flatten() {
        let _ = Command::new("ssh")
            .arg("-F")
            .arg(ssh_config)
            .arg("-o")
            .arg(format!("ControlPath={}", entry.path().display()))
            .args(["-O", "exit", "x"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
