//! Test harness: a temp dir with a phoenix.toml, a private tmux socket killed on drop, and a
//! builder that runs the real phoenix binary with a scrubbed environment.
#![allow(dead_code)]

pub mod browser;
pub mod chat_server;
pub mod gemini_server;
pub mod hosts;
pub mod http_receiver;
pub mod model_server;
pub mod openai_server;
pub mod otlp_receiver;
pub mod prometheus;
pub mod real;
pub mod scenarios;
pub mod scripted;
pub mod serve;
pub mod sshd;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const PHOENIX: &str = env!("CARGO_BIN_EXE_phoenix");

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Opt-in for the suites that drive the real agent CLIs (installed with npm from the
/// registry, so they need npm and network access). `.ci/run` sets it.
pub const REAL_CLIS: &str = "PHOENIX_TEST_REAL_CLIS";
/// Opt-in for the browser suite (a headless Chromium and chromedriver, installed with apt-get
/// when missing). `.ci/run` sets it.
pub const BROWSER: &str = "PHOENIX_TEST_BROWSER";
/// Opt-in for the 1,000-agent suite (a real server with 2,000 processes for a minute or two).
/// `.ci/run` sets it.
pub const SCALE: &str = "PHOENIX_TEST_SCALE";

/// Whether an opt-in suite runs: `var` is `1`. If not, says once per test binary why its tests
/// pass without running, on the real stderr (the test harness captures `eprintln!` of
/// passing tests, and a skip nobody sees is a silent pass).
pub fn opted_in(var: &str, suite: &str, needs: &str) -> bool {
    if std::env::var_os(var).is_some_and(|v| v == "1") {
        return true;
    }
    // Once per suite: the suites share one test binary.
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == suite) {
        said.push(suite.to_string());
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {suite}: it needs {needs}; set {var}=1 to run it (.ci/run does)"
        );
    }
    false
}

/// A fleet under test. Dropping it kills its tmux server, even when the test panicked.
pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub socket: String,
    /// This fleet's share of the machine (dropped after the fleet's own cleanup).
    _share: Share,
}

/// Fleets share the machine, except a fleet that needs it alone (the 1,000-agent suite:
/// two thousand processes starting at once would slow every other test's agents past its
/// timeouts): such a fleet waits until no other fleet exists, and new fleets wait while it
/// does. A waiting fleet alone does not hold others up, so a test that makes two fleets
/// cannot deadlock on it.
struct Share {
    alone: bool,
}

struct Fleets {
    sharing: usize,
    alone: bool,
}

static FLEETS: std::sync::Mutex<Fleets> = std::sync::Mutex::new(Fleets {
    sharing: 0,
    alone: false,
});
static FLEETS_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

impl Share {
    fn take(alone: bool) -> Share {
        let mut fleets = FLEETS.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let free = if alone {
                !fleets.alone && fleets.sharing == 0
            } else {
                !fleets.alone
            };
            if free {
                break;
            }
            fleets = FLEETS_CHANGED
                .wait(fleets)
                .unwrap_or_else(|e| e.into_inner());
        }
        if alone {
            fleets.alone = true;
        } else {
            fleets.sharing += 1;
        }
        Share { alone }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut fleets = FLEETS.lock().unwrap_or_else(|e| e.into_inner());
        if self.alone {
            fleets.alone = false;
        } else {
            fleets.sharing -= 1;
        }
        FLEETS_CHANGED.notify_all();
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet::with_share(Share::take(false))
    }

    /// A fleet with the machine to itself: it waits until every other test's fleet is gone,
    /// and other tests wait for it (see `Share`).
    pub fn alone() -> Fleet {
        Fleet::with_share(Share::take(true))
    }

    fn with_share(share: Share) -> Fleet {
        install_real_clis_early();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let socket = format!("phx-test-{}-{n}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("phoenix-test-")
            .tempdir()
            .expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Fleet {
            dir,
            socket,
            _share: share,
        }
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

    /// Write phoenix.toml exactly as given, without a `tmux_socket`: phoenix derives one from
    /// the fleet name and this file's path, and the harness follows it (so drop still kills
    /// that server).
    pub fn derived_socket_toml(&mut self, text: &str) -> &Self {
        assert!(!text.contains("tmux_socket"), "{text}");
        std::fs::write(self.config(), text).unwrap();
        self.socket = self.spec().fleet.socket;
        self
    }

    /// phoenix.toml as phoenix reads it.
    pub fn spec(&self) -> phoenix::spec::Spec {
        phoenix::spec::load(&self.config()).expect("phoenix.toml loads")
    }

    /// Every pane on this fleet's server that carries an agent tag: (agent, fleet tag, pane id,
    /// pane pid), in pane order.
    pub fn tagged_panes(&self) -> Vec<(String, String, String, u32)> {
        self.tmux(&[
            "list-panes",
            "-a",
            "-F",
            "#{@phoenix_agent}|#{@phoenix_fleet}|#{pane_id}|#{pane_pid}",
        ])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 4 && !f[0].is_empty()).then(|| {
                (
                    f[0].to_string(),
                    f[1].to_string(),
                    f[2].to_string(),
                    f[3].parse().unwrap_or(0),
                )
            })
        })
        .collect()
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

    /// `run`, failing the test if phoenix has not exited within `timeout` (it is killed):
    /// for commands that must not hang. Output goes through files, so a child phoenix left
    /// behind cannot hold the test on an open pipe.
    #[track_caller]
    pub fn run_within(&self, args: &[&str], timeout: Duration) -> Run {
        self.run_within_input(args, b"", timeout)
    }

    /// `run_within` with `input` on stdin (a hook's payload, say).
    #[track_caller]
    pub fn run_within_input(&self, args: &[&str], input: &[u8], timeout: Duration) -> Run {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let out_path = self.path().join(format!(".run-{n}.out"));
        let err_path = self.path().join(format!(".run-{n}.err"));
        let in_path = self.path().join(format!(".run-{n}.in"));
        std::fs::write(&in_path, input).unwrap();
        let mut child = self
            .command(args)
            .stdin(std::fs::File::open(&in_path).unwrap())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .expect("run phoenix");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("phoenix {args:?} did not return within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = Output {
            status,
            stdout: std::fs::read(&out_path).unwrap(),
            stderr: std::fs::read(&err_path).unwrap(),
        };
        let _ = std::fs::remove_file(out_path);
        let _ = std::fs::remove_file(err_path);
        let _ = std::fs::remove_file(in_path);
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

    /// `phoenix status --json`'s agents, as a list of objects (the document is
    /// `{format_version, …, agents: […]}`).
    pub fn status(&self) -> Vec<serde_json::Value> {
        let run = self.run(&["status", "--json"]);
        let doc: serde_json::Value = serde_json::from_str(&run.stdout()).expect("status json");
        assert_eq!(doc["format_version"], 1, "{doc}");
        let rows: Vec<serde_json::Value> =
            serde_json::from_value(doc["agents"].clone()).expect("status json agents");
        // 3 exactly when a declared, enabled agent is down or stopped, or on a host that did
        // not answer (unknown).
        let down = rows.iter().any(|r| {
            r["declared"] == true
                && r["enabled"] == true
                && matches!(r["health"].as_str(), Some("down" | "stopped" | "unknown"))
        });
        run.status(if down { 3 } else { 0 });
        rows
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

    /// Watchdog passes a moment apart until one confirms a verdict (a finding that is not
    /// unambiguous needs two passes in a row), at most six; the last pass's report of the
    /// first agent. Under load a CLI may still draw something between the first passes, which
    /// is life and restarts the count: two passes exactly then proved nothing but timing.
    pub fn watchdog_until_confirmed(&self) -> serde_json::Value {
        let mut agent = serde_json::Value::Null;
        for pass in 0..6 {
            if pass > 0 {
                std::thread::sleep(Duration::from_millis(1200));
            }
            let report = self.run(&["watchdog", "--once", "--json"]).json();
            agent = report["agents"][0].clone();
            if pass > 0 && !matches!(agent["verdict"].as_str(), Some("healthy" | "suspect")) {
                break;
            }
        }
        agent
    }

    /// `agent`'s `session_unhealthy` critical events, as `phoenix events --json` prints them.
    pub fn unhealthy_events(&self, agent: &str) -> String {
        self.run(&[
            "events",
            "--agent",
            agent,
            "--event",
            "session_unhealthy",
            "--json",
        ])
        .status(0)
        .stdout()
    }

    /// Seconds since the agent's last hook (state.json's `last_active`); 0 when unknown.
    pub fn quiet_for(&self, agent: &str) -> f64 {
        std::fs::read(self.agent_dir(agent).join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|s| s["last_active"].as_str()?.parse::<jiff::Timestamp>().ok())
            .map_or(0.0, |t| {
                (jiff::Timestamp::now() - t)
                    .total(jiff::Unit::Second)
                    .unwrap_or(0.0)
            })
    }

    pub fn ops(&self, agent: &str) -> Vec<serde_json::Value> {
        read_jsonl(&self.agent_dir(agent).join("ops.jsonl"))
    }

    /// The marker key of a custom CLI's current session (its wrapper issues one at each start,
    /// `$PHOENIX_MARKER_KEY`): what the agent's `->continuity:VERB#KEY` lines carry.
    pub fn marker_key(&self, agent: &str) -> String {
        let path = self.agent_dir(agent).join("marker_key");
        wait_until(Duration::from_secs(10), "the session's marker key", || {
            path.exists()
        });
        std::fs::read_to_string(&path).unwrap().trim().to_string()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        kill_tmux_server(&self.socket);
        // A hook's detached writer (the handoff a pre-compact hook saves, then indexes) may
        // still work in the fleet's directory: removing it now would leave what it writes next.
        let until = Instant::now() + Duration::from_secs(5);
        while working_in(self.path()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Does a process work in `dir` (its working directory inside it)?
fn working_in(dir: &Path) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .any(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
}

/// Kill the tmux server on `socket` and everything that runs in its panes (wrappers, the
/// CLIs, their tools), found while the server is still there: the hangup ends most of it,
/// and what outlives it is killed.
pub fn kill_tmux_server(socket: &str) {
    let pids = Command::new("tmux")
        .args(["-L", socket, "list-panes", "-a", "-F", "#{pane_pid}"])
        .env_remove("TMUX")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            descendants(out.lines().filter_map(|l| l.trim().parse().ok()))
        })
        .unwrap_or_default();
    let _ = Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .arg("kill-server")
        .env_remove("TMUX")
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in pids.into_iter().filter(|p| alive(*p)) {
        kill9(pid);
    }
    // The server is gone; its socket file may not be.
    let _ = phoenix::world::connect(socket).kill_server();
}

/// `roots` and every process below them (by parent pid, from /proc).
fn descendants(roots: impl Iterator<Item = u32>) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found: Vec<u32> = roots.collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for (pid, ppid) in &parents {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found
}

/// Running (a zombie has ended; it only waits for its parent to notice).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
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

/// The variable that picks other versions of the real CLIs than the suites' pins:
/// `PHOENIX_TEST_CLI_VERSIONS=claude=latest,codex=0.171.0` (a CLI left out keeps its pin;
/// `latest` is what the npm registry serves today).
pub const CLI_VERSIONS: &str = "PHOENIX_TEST_CLI_VERSIONS";

/// The version of `cli` (`claude`, `codex`, `gemini`, …) the real-CLI suites run: the one
/// [`CLI_VERSIONS`] names for it, else `pinned`. `latest` is asked of the registry once.
pub fn cli_version(cli: &str, package: &str, pinned: &str) -> String {
    let wanted = std::env::var(CLI_VERSIONS).unwrap_or_default();
    let chosen = wanted
        .split(',')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| name.trim() == cli)
        .map(|(_, version)| version.trim().to_string())
        .filter(|v| !v.is_empty());
    match chosen.as_deref() {
        None => pinned.to_string(),
        Some("latest") => {
            static LATEST: std::sync::Mutex<Vec<(String, String)>> =
                std::sync::Mutex::new(Vec::new());
            let mut known = LATEST.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, v)) = known.iter().find(|(p, _)| p == package) {
                return v.clone();
            }
            let out = Command::new("npm")
                .args(["view", package, "version"])
                .output()
                .unwrap_or_else(|e| panic!("npm must be installed to run the real-CLI suite: {e}"));
            let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert!(
                out.status.success() && !version.is_empty(),
                "npm view {package} version failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            known.push((package.to_string(), version.clone()));
            version
        }
        Some(version) => {
            assert!(
                version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c)),
                "{CLI_VERSIONS}: {cli}={version} is not a version"
            );
            version.to_string()
        }
    }
}

/// The binary `bin` of the npm package `package` at the version the suites run for `cli`
/// (`pinned`, or what [`CLI_VERSIONS`] says), installed into `target/real-clis/<cli>-<version>`
/// on first use, so that versions live side by side. Fails loudly when npm cannot install it:
/// a real-CLI suite that passes without having run would prove nothing.
pub fn npm_cli(cli: &str, package: &str, pinned: &str, bin: &str) -> PathBuf {
    npm_cli_at(cli, package, &cli_version(cli, package, pinned), bin)
}

/// [`npm_cli`] of exactly `version`, whatever [`CLI_VERSIONS`] says: for a test about what
/// differs between two versions.
pub fn npm_cli_at(cli: &str, package: &str, version: &str, bin: &str) -> PathBuf {
    let prefix = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/real-clis")
        .join(format!("{cli}-{version}"));
    // One install per directory at a time: parallel tests each ran `npm install` when the
    // binary was missing, and one exec'd it while another's install was still writing it
    // (ETXTBSY). Other directories do not wait: a test of an installed CLI is not held up
    // by another CLI's install (npm's cache takes concurrent installs).
    let install = {
        static INSTALLS: std::sync::Mutex<Vec<(PathBuf, std::sync::Arc<std::sync::Mutex<()>>)>> =
            std::sync::Mutex::new(Vec::new());
        let mut installs = INSTALLS.lock().unwrap_or_else(|e| e.into_inner());
        match installs.iter().find(|(p, _)| *p == prefix) {
            Some((_, lock)) => lock.clone(),
            None => {
                let lock = std::sync::Arc::new(std::sync::Mutex::new(()));
                installs.push((prefix.clone(), lock.clone()));
                lock
            }
        }
    };
    let _one_at_a_time = install.lock().unwrap_or_else(|e| e.into_inner());
    let path = prefix.join("node_modules/.bin").join(bin);
    // `--save-exact` records the exact version: another version installed there is replaced.
    let pinned = std::fs::read_to_string(prefix.join("package.json"))
        .is_ok_and(|m| m.contains(&format!("\"{version}\"")));
    if !path.exists() || !pinned {
        std::fs::create_dir_all(&prefix).unwrap();
        let status = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--save-exact",
                "--prefix",
            ])
            .arg(&prefix)
            .arg(format!("{package}@{version}"))
            .status()
            .unwrap_or_else(|e| panic!("npm must be installed to run the real-CLI suite: {e}"));
        assert!(status.success(), "npm install {package}@{version} failed");
    }
    assert!(
        path.exists(),
        "`{bin}` missing after npm install {package}@{version}"
    );
    path
}

/// What the real suites install with [`npm_cli`]: (cli, npm package, pinned version, bin),
/// the same as their own pins. Installed ahead of the tests (below); a CLI or pin missing here
/// is only installed when its first test needs it.
const REAL_CLI_PINS: [(&str, &str, &str, &str); 6] = [
    ("claude", "@anthropic-ai/claude-code", "2.1.332", "claude"),
    ("codex", "@openai/codex", "0.171.0", "codex"),
    ("copilot", "@github/copilot", "1.0.102", "copilot"),
    ("gemini", "@google/gemini-cli", "0.61.0", "gemini"),
    ("opencode", "opencode-ai", "1.18.33", "opencode"),
    ("pi", "@mariozechner/pi-coding-agent", "0.73.1", "pi"),
];

/// The Claude Code versions `cli_versions` and `real_claude_trust` run side by side
/// ([`npm_cli_at`]), whatever [`CLI_VERSIONS`] says.
const CLAUDE_CODE_BOTH: [&str; 2] = ["2.1.197", "2.1.332"];

/// Every CLI the real suites run, installed one after another on a thread of its own from the
/// first fleet of a real-CLI run on: from a fresh `target/real-clis` the installs take a
/// minute or more (seven packages, two Claude Code versions for the tests of what differs
/// between them), and so they overlap the suites that need no CLI instead of holding up the
/// tests that do. A test that needs a CLI not yet there installs it itself ([`npm_cli_at`]
/// has a lock per directory: never twice at once) and fails loudly if npm cannot. A run of
/// chosen tests (a name filter) installs only what they need, when they need it.
fn install_real_clis_early() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if std::env::var_os(REAL_CLIS).is_none_or(|v| v != "1") || filtered_run() {
        return;
    }
    STARTED.call_once(|| {
        std::thread::spawn(|| {
            // In the order the suites first need them (tests start in name order).
            for version in CLAUDE_CODE_BOTH {
                // A failed install is the failure of the test that needs it (it tries again).
                let _ = std::panic::catch_unwind(|| {
                    npm_cli_at("claude", "@anthropic-ai/claude-code", version, "claude")
                });
            }
            for (cli, package, pinned, bin) in REAL_CLI_PINS {
                let _ = std::panic::catch_unwind(|| npm_cli(cli, package, pinned, bin));
            }
        });
    });
}

/// Whether this test binary was given a test name filter (libtest's positional arguments).
fn filtered_run() -> bool {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // libtest's options that take a value as the next argument.
            "--test-threads" | "--skip" | "--format" | "--logfile" | "--color" | "-Z"
            | "--shuffle-seed" => {
                args.next();
            }
            _ if !arg.starts_with('-') => return true,
            _ => {}
        }
    }
    false
}

/// Wait until the pane shows `needle`; on timeout the panic shows the screen.
pub fn wait_for_screen(fleet: &Fleet, pane: &str, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut screen = String::new();
    while Instant::now() < deadline {
        screen = fleet
            .tmux(&["capture-pane", "-p", "-t", pane])
            .unwrap_or_default();
        if screen.contains(needle) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {timeout:?} waiting for {needle:?} in pane {pane}:\n{screen}");
}

/// Type `text` into a TUI's prompt and press Enter once the pane shows it. A TUI still starting
/// up (or redrawing after loading a resumed session) may drop keys, so until the text shows
/// the line is cleared (Ctrl-U) and typed again. The pause before Enter keeps TUIs from taking
/// the burst for a paste.
pub fn submit(fleet: &Fleet, pane: &str, text: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let shows = || {
        fleet
            .tmux(&["capture-pane", "-p", "-t", pane])
            .is_some_and(|s| s.contains(text))
    };
    loop {
        fleet.tmux(&["send-keys", "-t", pane, "-l", text]).unwrap();
        let typed = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < typed && !shows() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if shows() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pane never showed {text:?}:\n{}",
            fleet
                .tmux(&["capture-pane", "-p", "-t", pane])
                .unwrap_or_default()
        );
        fleet.tmux(&["send-keys", "-t", pane, "C-u"]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    fleet.tmux(&["send-keys", "-t", pane, "Enter"]).unwrap();
}

/// `wait_until`, and on timeout the panic also shows `explain()` (the pane, the ops…).
pub fn wait_until_explained(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
    explain: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "timed out after {timeout:?} waiting for {what}\n{}",
        explain()
    );
}

impl Fleet {
    /// The agent's ops log and its pane, for a failure message.
    pub fn explain(&self, agent: &str, pane: &str) -> String {
        let ops: Vec<String> = self.ops(agent).iter().map(|o| o.to_string()).collect();
        format!(
            "--- ops.jsonl of `{agent}`\n{}\n--- hook_errors.jsonl\n{}\n--- pane {pane}\n{}",
            ops.join("\n"),
            std::fs::read_to_string(self.agent_dir(agent).join("hook_errors.jsonl"))
                .unwrap_or_default(),
            self.tmux(&["capture-pane", "-p", "-t", pane])
                .unwrap_or_default()
        )
    }
}

/// A notify command that appends what it is sent to `notified.log` in the fleet's directory.
pub fn notify_recorder(fleet: &Fleet) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = fleet.path().join("record-notify.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"== $PHOENIX_NOTIFY_KIND $PHOENIX_AGENT\"; cat; echo; }} >> '{}'\n",
            fleet.path().join("notified.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// Two demo agents, `asker` and `other`, whose model is priced (so both have a cost today
/// once they recorded usage), and `asker` quiet at its prompt after a Claude-shaped
/// permission prompt came through the real Notification hook: a fleet where one agent
/// needs a human and both spent something, for the views that show either. `head` goes
/// first in phoenix.toml. With the asker's pane.
pub fn spending_fleet_with_a_waiting_agent(
    head: &str,
    asker: &str,
    other: &str,
) -> (Fleet, String) {
    let fleet = Fleet::new();
    fleet.toml(&format!(
        "{head}[prices]\n\"claude-demo\" = {{ input = 1000.0, output = 1000.0, cache_write = 1000.0, cache_read = 1000.0 }}\n\
         [[agent]]\nname = \"{asker}\"\ncommand = \"phoenix demo-agent --interval 1s\"\n\
         [[agent]]\nname = \"{other}\"\ncommand = \"phoenix demo-agent --interval 1s\"\n"
    ));
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&[asker, other]);
    wait_until(Duration::from_secs(20), "usage recorded", || {
        fleet.status().iter().all(|r| {
            r["usage_today"]["cost_usd"]
                .as_f64()
                .is_some_and(|c| c > 0.0)
        })
    });
    // A quiet agent asks for permission (a tool call would end the wait at once).
    let pane = fleet.agent_status(asker)["pane"]
        .as_str()
        .unwrap()
        .to_string();
    fleet
        .tmux(&["send-keys", "-t", &pane, "-l", "silent"])
        .unwrap();
    fleet.tmux(&["send-keys", "-t", &pane, "Enter"]).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    fleet
        .run_within_input(
            &["hook", "notification", "--agent", asker, "--cli", "claude"],
            br#"{"hook_event_name":"Notification","message":"Claude needs your permission to use Bash","notification_type":"permission_prompt"}"#,
            Duration::from_secs(20),
        )
        .status(0);
    (fleet, pane)
}

/// A fleet of `worker` (a demo agent whose model is priced: it spends something today) and
/// `flaky` (crashes a second after each start, twice within its window: safe mode), once both
/// happened: for the views that say why an agent is down and chart its day.
pub fn worker_and_flaky_fleet() -> Fleet {
    let fleet = Fleet::new();
    fleet.toml(
        "[defaults.restart]\ncooldown = \"100ms\"\nbackoff_max = \"100ms\"\nlife_deadline = \"5s\"\nmax_crashes = 2\ncrash_window = \"10m\"\n\n\
         [prices]\n\"claude-demo\" = { input = 1000.0, output = 1000.0, cache_write = 1000.0, cache_read = 1000.0 }\n\n\
         [[agent]]\nname = \"worker\"\ncommand = \"phoenix demo-agent --interval 1s\"\n\
         [[agent]]\nname = \"flaky\"\ncommand = \"phoenix demo-agent --interval 300ms --crash-after 1s\"\n",
    );
    fleet.run(&["apply", "--yes"]).status(0);
    fleet.wait_running(&["worker"]);
    wait_until(Duration::from_secs(30), "flaky in safe mode", || {
        fleet.agent_status("flaky")["state"] == "safe-mode"
    });
    wait_until(Duration::from_secs(20), "worker's usage recorded", || {
        fleet.agent_status("worker")["usage_today"]["cost_usd"]
            .as_f64()
            .is_some_and(|c| c > 0.0)
    });
    fleet
}

/// The argv of every phoenix process (`phoenix` or its `phoenix-wrap`, `phoenix-hook`) whose
/// command line names `text` (the tmux server keeps the command line of the client that
/// started it: not phoenix's).
pub fn processes_naming(text: &str) -> Vec<Vec<String>> {
    let phoenix = std::fs::canonicalize(PHOENIX).unwrap();
    let ours: Vec<PathBuf> = ["phoenix", "phoenix-wrap", "phoenix-hook"]
        .iter()
        .map(|name| phoenix.with_file_name(name))
        .collect();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if !std::fs::read_link(entry.path().join("exe")).is_ok_and(|exe| ours.contains(&exe)) {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.iter().any(|a| a.contains(text)) {
            out.push(argv);
        }
    }
    out
}
