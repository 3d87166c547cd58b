//! Test harness: a temp dir with a phoenix.toml, a private tmux socket killed on drop, and a
//! builder that runs the real phoenix binary with a scrubbed environment.
#![allow(dead_code)]

pub mod model_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const PHOENIX: &str = env!("CARGO_BIN_EXE_phoenix");

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fleet under test. Dropping it kills its tmux server, even when the test panicked.
pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub socket: String,
}

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}

impl Fleet {
    pub fn new() -> Fleet {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let socket = format!("phx-test-{}-{n}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("phoenix-test-")
            .tempdir()
            .expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Fleet { dir, socket }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config(&self) -> PathBuf {
        self.path().join("phoenix.toml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.path().join(".phoenix")
    }

    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        self.state_dir().join("agents").join(agent)
    }

    /// Write phoenix.toml: a `[fleet]` header on this fleet's socket, then `body`.
    pub fn toml(&self, body: &str) -> &Self {
        let text = format!(
            "[fleet]\nname = \"test\"\ntmux_socket = \"{}\"\n\n{body}",
            self.socket
        );
        std::fs::write(self.config(), text).unwrap();
        self
    }

    /// Write phoenix.toml exactly as given (for config error tests).
    pub fn raw_toml(&self, text: &str) -> &Self {
        std::fs::write(self.config(), text).unwrap();
        self
    }

    /// A demo agent declaration.
    pub fn demo_agent(name: &str, extra: &str) -> String {
        format!(
            "[[agent]]\nname = \"{name}\"\ncommand = \"phoenix demo-agent --interval 200ms {extra}\"\n"
        )
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(PHOENIX);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path().join("home"))
            .env("TERM", "xterm")
            .current_dir(self.path())
            .arg("--config")
            .arg(self.config())
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let output = self.command(args).output().expect("run phoenix");
        Run {
            args: args.iter().map(|s| s.to_string()).collect(),
            output,
        }
    }

    /// Run a tmux command against this fleet's private server.
    pub fn tmux(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn server_running(&self) -> bool {
        self.tmux(&["list-sessions"]).is_some()
    }

    /// `phoenix status --json`, as a list of objects.
    pub fn status(&self) -> Vec<serde_json::Value> {
        let run = self.run(&["status", "--json"]);
        run.status(0);
        serde_json::from_str(&run.stdout()).expect("status json")
    }

    pub fn agent_status(&self, agent: &str) -> serde_json::Value {
        self.status()
            .into_iter()
            .find(|s| s["agent"] == agent)
            .unwrap_or_else(|| panic!("no status for `{agent}`"))
    }

    /// Wait until every named agent is running; returns their pids.
    pub fn wait_running(&self, agents: &[&str]) -> Vec<u32> {
        let mut pids = Vec::new();
        wait_until(Duration::from_secs(15), "agents running", || {
            let status = self.status();
            pids = agents
                .iter()
                .filter_map(|a| {
                    status
                        .iter()
                        .find(|s| s["agent"] == *a && s["state"] == "running")
                        .and_then(|s| s["pid"].as_u64())
                        .map(|p| p as u32)
                })
                .collect();
            pids.len() == agents.len()
        });
        pids
    }

    pub fn ops(&self, agent: &str) -> Vec<serde_json::Value> {
        read_jsonl(&self.agent_dir(agent).join("ops.jsonl"))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .env_remove("TMUX")
            .stderr(Stdio::null())
            .status();
    }
}

pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad json line `{l}`: {e}")))
        .collect()
}

pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

pub struct Run {
    pub args: Vec<String>,
    pub output: Output,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    #[track_caller]
    pub fn status(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "phoenix {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.args,
            self.stdout(),
            self.stderr()
        );
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Self {
        assert!(
            self.stdout().contains(needle),
            "stdout of {:?} lacks {needle:?}:\n{}\n--- stderr\n{}",
            self.args,
            self.stdout(),
            self.stderr()
        );
        self
    }

    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Self {
        assert!(
            self.stderr().contains(needle),
            "stderr of {:?} lacks {needle:?}:\n{}",
            self.args,
            self.stderr()
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout()).expect("json output")
    }
}

/// Kill a process with SIGKILL.
pub fn kill9(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}
