//! A real Prometheus for the metrics tests: Debian's `prometheus` (the server) and `promtool`
//! (`.ci/run` installs the package), started on a free loopback port with its own config file
//! and data dir in a temp dir, scraping one target every second; stopped on drop.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `prometheus` and `promtool` are on PATH; says once, on the real stderr, why the tests that
/// need them pass without running otherwise.
pub fn available() -> bool {
    let runs = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let ok = runs("prometheus") && runs("promtool");
    if !ok {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the Prometheus tests need `prometheus` and `promtool` (apt install prometheus)"
            );
        });
    }
    ok
}

/// `promtool check metrics` on `text`: its verdict (what it printed, if it found problems).
pub fn check_metrics(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

pub struct Prometheus {
    dir: tempfile::TempDir,
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl Prometheus {
    /// A server scraping `http://{target}/metrics` every second, ready to answer.
    pub fn start(target: &str) -> Prometheus {
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: phoenix\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    \
             static_configs:\n      - targets: ['{target}']\n"
        );
        // A free port, found by binding it: Prometheus does not say which port 0 gave it. A
        // port taken in between makes it exit, and the next one is tried.
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let config_file = dir.path().join("prometheus.yml");
            std::fs::write(&config_file, &config).unwrap();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config_file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start prometheus");
            let mut server = Prometheus {
                dir,
                child,
                url: format!("http://127.0.0.1:{port}"),
            };
            if server.wait_ready(Duration::from_secs(30)) {
                return server;
            }
            let log = server.log();
            drop(server);
            assert!(
                log.contains("address already in use"),
                "prometheus did not start:\n{log}"
            );
        }
        panic!("prometheus found no free port");
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build(),
        )
    }

    /// `/-/ready` answers 200, unless the server exited first.
    fn wait_ready(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(res) = Self::agent().get(format!("{}/-/ready", self.url)).call()
                && res.status() == 200
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant PromQL query through the HTTP API: its `data.result`.
    pub fn query(&self, promql: &str) -> Value {
        let mut res = Self::agent()
            .get(format!("{}/api/v1/query", self.url))
            .query("query", promql)
            .call()
            .expect("query prometheus");
        let body: Value =
            serde_json::from_str(&res.body_mut().read_to_string().unwrap_or_default())
                .unwrap_or(Value::Null);
        assert_eq!(body["status"], "success", "{promql}: {body}");
        body["data"]["result"].clone()
    }

    /// The targets' scrape health, for a failure message.
    pub fn targets(&self) -> String {
        Self::agent()
            .get(format!("{}/api/v1/targets", self.url))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
