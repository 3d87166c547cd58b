//! A real OpenSSH server on loopback for the multi-host tests: its own host key, an authorized
//! key made for the test, a random port, and an ssh config file naming it that the fleet's
//! `ssh_config` points at (ssh reads `~` from the password database, not `$HOME`, so a test
//! cannot bring its own ~/.ssh). Stopped and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SSHD: &str = "/usr/sbin/sshd";

/// sshd and ssh-keygen are there (`.ci/run` installs openssh-server); say so once otherwise.
pub fn available() -> bool {
    let ok = Path::new(SSHD).exists()
        && Command::new("ssh-keygen")
            .arg("-?")
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok();
    if !ok {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            eprintln!("SKIPPED: the multi-host tests need {SSHD} (apt install openssh-server)")
        });
    }
    ok
}

pub struct Sshd {
    dir: tempfile::TempDir,
    child: Option<Child>,
    pub port: u16,
    /// The alias this server has in [`Sshd::config`].
    pub alias: String,
}

impl Sshd {
    /// Start a server known as `alias` in the config file, and wait until it accepts.
    pub fn start(alias: &str) -> Sshd {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("user_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        // sshd refuses to run without its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = free_port();
        let user = whoami();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                 StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nPidFile {d}/sshd.pid\nAllowUsers {user}\nLogLevel ERROR\n",
                d = d.display()
            ),
        )
        .unwrap();
        let host_key = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        let mut key = host_key.split_whitespace();
        std::fs::write(
            d.join("known_hosts"),
            format!(
                "[127.0.0.1]:{port} {} {}\n",
                key.next().unwrap(),
                key.next().unwrap()
            ),
        )
        .unwrap();
        let mut sshd = Sshd {
            child: None,
            port,
            alias: alias.to_string(),
            dir,
        };
        sshd.spawn();
        sshd
    }

    fn spawn(&mut self) {
        let d = self.dir.path();
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("sshd.log")).unwrap())
            .spawn()
            .expect("sshd starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// This server's `Host` block for an ssh config file.
    pub fn config_block(&self) -> String {
        let d = self.dir.path();
        format!(
            "Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {d}/user_key\n  IdentitiesOnly yes\n  UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n\n",
            alias = self.alias,
            port = self.port,
            user = whoami(),
            d = d.display()
        )
    }

    /// Stop the server (connections already shared through a control master stay up until
    /// they close: the test closes them too).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same port, after [`Sshd::stop`].
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An ssh config file with the blocks of `servers`, written to `path`.
pub fn write_config(path: &Path, servers: &[&Sshd]) -> PathBuf {
    let text: String = servers.iter().map(|s| s.config_block()).collect();
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn whoami() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "root".into())
}
