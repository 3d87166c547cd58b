//! A real headless Chromium driven through chromedriver (WebDriver: HTTP + JSON). Debian's
//! `chromium` and `chromium-driver` are installed when missing (apt-get, with sudo when not
//! root). Dropping the browser ends its session and kills chromedriver's whole process group,
//! so no Chromium is left behind even when a test fails.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// chromium and chromedriver, installed if they are missing. `Err` says why they cannot be.
pub fn find_or_install() -> Result<(PathBuf, PathBuf), String> {
    let found = || Some((which("chromium")?, which("chromedriver")?));
    if let Some(found) = found() {
        return Ok(found);
    }
    eprintln!("chromium or chromedriver missing: installing Debian's chromium and chromium-driver");
    let root = nix::unistd::geteuid().is_root();
    let sudo = which("sudo");
    if !root && sudo.is_none() {
        return Err("not root and no sudo: cannot run apt-get".into());
    }
    let apt = |args: &[&str]| {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.args(["-n", "apt-get"]);
            c
        };
        cmd.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("apt-get: {e}"))
            .and_then(|s| {
                s.success()
                    .then_some(())
                    .ok_or(format!("apt-get {args:?} failed"))
            })
    };
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", "chromium", "chromium-driver"])?;
    found().ok_or_else(|| "installed, but chromium or chromedriver is still not on PATH".into())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

fn http() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build(),
    )
}

fn call(method: &str, url: &str, body: Option<&Value>) -> Value {
    let agent = http();
    let result = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        ("DELETE", _) => agent.delete(url).call(),
        (_, body) => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body.cloned().unwrap_or(json!({})).to_string()),
    };
    let mut res = result.unwrap_or_else(|e| panic!("webdriver {method} {url}: {e}"));
    let text = res.body_mut().read_to_string().unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if v["value"]["error"].is_string() {
        panic!(
            "webdriver {method} {url}: {} — {}",
            v["value"]["error"], v["value"]["message"]
        );
    }
    v["value"].clone()
}

impl Browser {
    /// Start chromedriver and a headless Chromium session with a window of `width`×`height`.
    pub fn start(chromium: &Path, chromedriver: &Path, width: u32, height: u32) -> Browser {
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http()
                .get(format!("{}/status", browser.base))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not get ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ]
            }
        }}});
        let created = call("POST", &format!("{}/session", browser.base), Some(&caps));
        browser.session = created["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        browser
    }

    fn url(&self, path: &str) -> String {
        format!("{}/session/{}{path}", self.base, self.session)
    }

    pub fn goto(&self, url: &str) {
        call("POST", &self.url("/url"), Some(&json!({"url": url})));
    }

    /// Run a script in the page (`return …` gives a value back).
    pub fn js(&self, script: &str, args: Value) -> Value {
        call(
            "POST",
            &self.url("/execute/sync"),
            Some(&json!({"script": script, "args": args})),
        )
    }

    /// Wait until `script` returns something truthy; returns it.
    #[track_caller]
    pub fn wait_js(&self, what: &str, timeout: Duration, script: &str) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.js(script, json!([]));
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first element matching a CSS selector.
    pub fn find(&self, css: &str) -> String {
        let v = call(
            "POST",
            &self.url("/element"),
            Some(&json!({"using": "css selector", "value": css})),
        );
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element `{css}`: {v}"))
            .to_string()
    }

    pub fn click(&self, css: &str) {
        let id = self.find(css);
        call("POST", &self.url(&format!("/element/{id}/click")), None);
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        call(
            "POST",
            &self.url(&format!("/element/{id}/value")),
            Some(&json!({"text": text})),
        );
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        let b64 = call("GET", &self.url("/screenshot"), None);
        base64_decode(b64.as_str().expect("base64 screenshot"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http().delete(self.url("")).call();
        }
        // chromedriver leads its process group; Chromium and its helpers are in it.
        let pgid = self.driver.id().to_string();
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        std::thread::sleep(Duration::from_millis(200));
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for v in text.bytes().filter_map(value) {
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
