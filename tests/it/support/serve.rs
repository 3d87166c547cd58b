//! `phoenix serve` under test: started on a free loopback port (it prints its URL first), asked
//! over HTTP, stopped with SIGTERM on drop (SIGKILL if it does not go).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Fleet;

pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    pub token: Option<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// `phoenix serve --listen 127.0.0.1:0` for `fleet`, with these extra environment variables.
    pub fn start(fleet: &Fleet, env: &[(&str, &str)]) -> Server {
        Self::start_on(fleet, "127.0.0.1:0", env)
    }

    pub fn start_on(fleet: &Fleet, listen: &str, env: &[(&str, &str)]) -> Server {
        Self::start_with(fleet, listen, env, None)
    }

    /// `start_on`, with the server's open-files limit lowered to `fd_limit`.
    pub fn start_with(
        fleet: &Fleet,
        listen: &str,
        env: &[(&str, &str)],
        fd_limit: Option<u64>,
    ) -> Server {
        let mut cmd = fleet.command(&["serve", "--listen", listen]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(n) = fd_limit {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child here.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start phoenix serve");
        let stdout = child.stdout.take().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(15)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "phoenix serve printed no address; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in `{line}`"))
            .trim_end_matches('/')
            .to_string();
        let addr = url.trim_start_matches("http://").to_string();
        let token = env
            .iter()
            .find(|(k, _)| *k == "PHOENIX_TOKEN")
            .map(|(_, v)| v.to_string());
        Server {
            child,
            url,
            addr,
            token,
            stderr,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(60)))
                .build(),
        )
    }

    /// GET `path`: status code and JSON body (Null when the body is not JSON).
    pub fn get(&self, path: &str) -> (u16, Value) {
        let mut req = Self::agent().get(format!("{}{path}", self.url));
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut res = req.call().expect("GET");
        let status = res.status().as_u16();
        let text = res.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// GET `path` as text with its headers.
    pub fn get_text(&self, path: &str) -> (u16, String, Vec<(String, String)>) {
        let mut res = Self::agent()
            .get(format!("{}{path}", self.url))
            .call()
            .expect("GET");
        let headers = res
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let status = res.status().as_u16();
        (
            status,
            res.body_mut().read_to_string().unwrap_or_default(),
            headers,
        )
    }

    /// POST a JSON body, with the server's token when it has one.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_as(path, body, self.token.as_deref())
    }

    /// POST a JSON body with this token (or none).
    pub fn post_as(&self, path: &str, body: &Value, token: Option<&str>) -> (u16, Value) {
        let mut req = Self::agent()
            .post(format!("{}{path}", self.url))
            .header("Content-Type", "application/json");
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut res = req.send(body.to_string()).expect("POST");
        let status = res.status().as_u16();
        let text = res.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A request written by hand (any path, any header), `Connection: close`: status and body.
    pub fn raw(&self, request_head: &str, body: &[u8]) -> (u16, String) {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(request_head.replace('\n', "\r\n").as_bytes())
            .unwrap();
        s.write_all(b"\r\n").unwrap();
        // The server may answer (413) before it read everything: a failed write is fine.
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// Open `/api/stream` and return a reader of its events.
    pub fn stream(&self) -> EventStream {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        let auth = self
            .token
            .as_ref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET /api/stream HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n{auth}\r\n",
            self.addr
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        EventStream {
            stream: s,
            buffer: String::new(),
        }
    }

    /// SIGTERM; the exit code, if it exits within `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if self.terminate(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Server-sent events read off a raw connection (chunk framing is skipped over: only
/// `event:` and `data:` lines are looked at).
pub struct EventStream {
    stream: TcpStream,
    buffer: String,
}

impl EventStream {
    /// The next event named `name` whose data passes `want`, within `timeout`.
    pub fn next_matching(
        &mut self,
        name: &str,
        timeout: Duration,
        want: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let mut chunk = [0u8; 65536];
        while Instant::now() < deadline {
            while let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut event = "";
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
                if event == name
                    && let Ok(v) = serde_json::from_str::<Value>(&data)
                    && want(&v)
                {
                    return Some(v);
                }
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&chunk[..n]).replace("\r\n", "\n")),
                Err(_) => {}
            }
        }
        None
    }
}
