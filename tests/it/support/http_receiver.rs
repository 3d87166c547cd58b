//! A loopback HTTP/1.1 receiver for the notification channels (ntfy, webhooks): it accepts
//! any request, answers `200 OK`, and keeps the method, path, headers and body of each for
//! the test to look at. Stops on drop. [`Loopback`], the server under it, also serves the
//! OTLP receiver.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub struct HttpReceiver {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    _server: Loopback,
}

impl HttpReceiver {
    pub fn start() -> HttpReceiver {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let store = requests.clone();
        let server = Loopback::start(move |raw| {
            store.lock().unwrap().push(Request {
                method: raw.method().to_string(),
                path: raw.path().to_string(),
                headers: raw.headers,
                body: String::from_utf8_lossy(&raw.body).into_owned(),
            });
            Answer {
                status: "200 OK",
                content_type: "application/json",
                body: b"{}",
            }
        });
        HttpReceiver {
            url: server.url.clone(),
            requests,
            _server: server,
        }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The requests to `path`.
    pub fn to(&self, path: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }
}

/// One request as read off the connection.
pub struct Raw {
    /// The request line, trimmed (`POST /v1/logs HTTP/1.1`).
    pub line: String,
    /// Header names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn method(&self) -> &str {
        self.line.split_whitespace().next().unwrap_or("")
    }

    pub fn path(&self) -> &str {
        self.line.split_whitespace().nth(1).unwrap_or("")
    }
}

/// What a [`Loopback`] server answers a request with.
pub struct Answer {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// A loopback HTTP/1.1 server with keep-alive (exporters pool their connections): every
/// request goes to the handler, on a thread per connection. Stops on drop.
pub struct Loopback {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Loopback {
    pub fn start(handler: impl Fn(Raw) -> Answer + Send + Sync + 'static) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let st = stop.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let handler = handler.clone();
                std::thread::spawn(move || serve(conn, &*handler));
            }
        });
        Loopback {
            url,
            stop,
            accept: Some(accept),
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Requests on one connection until the client closes it (or stays silent for 30 s).
fn serve(conn: TcpStream, handler: &dyn Fn(Raw) -> Answer) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut writer = conn.try_clone().expect("clone the connection");
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                if name == "content-length" {
                    length = value.trim().parse().unwrap_or(0);
                }
                headers.push((name, value.trim().to_string()));
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = handler(Raw {
            line: line.trim().to_string(),
            headers,
            body,
        });
        let head = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
            answer.status,
            answer.content_type,
            answer.body.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(answer.body).is_err() {
            return;
        }
    }
}
