//! The network of `network = "allow"` with real sockets: the allow-list proxy (outside) in
//! front of loopback HTTP servers, the relay and `phoenix sandbox-inner` (inside), and the
//! whole path inside real bubblewrap.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use phoenix::sandbox::proxy::{self, Allow, Limits, Proxy, ProxyEvent, Via};

use crate::support::{PHOENIX, wait_until};

// ---- a loopback HTTP server ----

/// A tiny HTTP/1.1 server on 127.0.0.1: `/hello` answers `hello` (keep-alive, as servers
/// do), `/echo` answers the request's body, `/stream` answers an SSE stream in chunks, its
/// second piece only once the test releases it. It counts connections and keeps each
/// request head it read. Like any HTTP/1.1 server it closes after an answer to
/// `Connection: close`.
struct Upstream {
    port: u16,
    connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
    release: Mutex<mpsc::Sender<()>>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (release, released) = mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(released));
        let (count, seen) = (Arc::clone(&connections), Arc::clone(&heads));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let (seen, released) = (Arc::clone(&seen), Arc::clone(&released));
                std::thread::spawn(move || answer(stream, &seen, &released));
            }
        });
        Upstream {
            port,
            connections,
            heads,
            release: Mutex::new(release),
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    fn release_stream(&self) {
        self.release.lock().unwrap().send(()).unwrap();
    }
}

fn answer(stream: TcpStream, seen: &Mutex<Vec<String>>, released: &Mutex<mpsc::Receiver<()>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        seen.lock().unwrap().push(head.clone());
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let wrote = match path.as_str() {
            "/hello" => out.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello",
            ),
            "/echo" => out
                .write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n").as_bytes(),
                )
                .and_then(|()| out.write_all(&body)),
            "/stream" => {
                let first = "data: one\n\n";
                let second = "data: two\n\n";
                let r = out
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                    )
                    .and_then(|()| out.write_all(format!("{:x}\r\n{first}\r\n", first.len()).as_bytes()))
                    .and_then(|()| out.flush());
                // The second piece only once the client has shown it got the first.
                let _ = released
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(30));
                r.and_then(|()| {
                    out.write_all(format!("{:x}\r\n{second}\r\n0\r\n\r\n", second.len()).as_bytes())
                })
            }
            _ => out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
        };
        // As HTTP/1.1 has it: the proxy asks for one request per connection.
        if wrote.is_err()
            || head
                .to_ascii_lowercase()
                .contains("\r\nconnection: close\r\n")
        {
            return;
        }
    }
}

// ---- the proxy under test ----

struct Setup {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    events: Arc<Mutex<Vec<ProxyEvent>>>,
    proxy: Option<Proxy>,
}

impl Setup {
    fn new(allow: &[String], limits: Limits) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let heard = Arc::clone(&events);
        let allow = Allow::parse(allow).unwrap();
        let proxy = proxy::serve_with(listener, allow, limits, move |e| {
            heard.lock().unwrap().push(e)
        })
        .unwrap();
        Setup {
            _dir: dir,
            socket,
            events,
            proxy: Some(proxy),
        }
    }

    fn allowing(allow: &[String]) -> Setup {
        Setup::new(allow, Limits::default())
    }

    fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Send `request` on a new connection and read the answer to its end. An answer the
    /// proxy gives at once (a 503) may come before the request is written, and the
    /// connection may be reset after it: what came is the answer.
    fn exchange(&self, request: &str) -> String {
        let mut s = self.connect();
        let _ = s.write_all(request.as_bytes());
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut chunk) {
            answer.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&answer).into_owned()
    }

    fn events(&self) -> Vec<ProxyEvent> {
        self.events.lock().unwrap().clone()
    }
}

/// Read from `s` until `needle` has come (or panic after 20 s); what came.
fn read_until(s: &mut impl Read, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no `{needle}` in {:?}",
            String::from_utf8_lossy(&got)
        );
        match s.read(&mut chunk) {
            Ok(0) => panic!(
                "closed before `{needle}`: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => panic!(
                "reading for `{needle}`: {e}; so far {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn list(entries: &[String]) -> Vec<String> {
    entries.to_vec()
}

#[test]
fn connect_tunnels_both_ways_to_an_allowed_host_and_reports_no_header() {
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    let mut s = p.connect();
    write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nProxy-Authorization: Basic c2stc2VjcmV0\r\n\r\n", up.port, up.port).unwrap();
    let established = read_until(&mut s, "\r\n\r\n");
    assert!(established.starts_with("HTTP/1.1 200"), "{established}");
    // Inside the tunnel: two requests on one connection, each answered.
    for _ in 0..2 {
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nx-api-key: sk-secret\r\n\r\n")
            .unwrap();
        let answer = read_until(&mut s, "hello");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    }
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world")
        .unwrap();
    read_until(&mut s, "hello world");
    assert_eq!(up.connections(), 1);
    let events = p.events();
    assert_eq!(
        events,
        [ProxyEvent::Allowed {
            host: "127.0.0.1".into(),
            port: up.port,
            via: Via::Connect
        }]
    );
    let told = format!("{events:?}");
    assert!(!told.contains("secret") && !told.contains("c2st"), "{told}");
}

#[test]
fn an_absolute_form_request_goes_upstream_in_origin_form_and_the_answer_closes() {
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("localhost:{}", up.port)]));
    let answer = p.exchange(&format!(
        "GET http://localhost:{}/hello HTTP/1.1\r\nHost: localhost:{}\r\nProxy-Connection: keep-alive\r\nx-api-key: sk-secret\r\n\r\n",
        up.port, up.port
    ));
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("Connection: close\r\n"), "{answer}");
    assert!(!answer.contains("keep-alive"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");
    let head = &up.heads()[0];
    assert!(head.starts_with("GET /hello HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("Host: localhost:{}\r\n", up.port)),
        "{head}"
    );
    assert!(head.contains("x-api-key: sk-secret\r\n"), "{head}");
    assert!(head.contains("Connection: close\r\n"), "{head}");
    assert!(!head.contains("Proxy-Connection"), "{head}");
    // A body goes up as it came.
    let answer = p.exchange(&format!(
        "POST http://localhost:{}/echo HTTP/1.1\r\nContent-Length: 8\r\n\r\n{{\"a\": 1}}",
        up.port
    ));
    assert!(answer.ends_with("{\"a\": 1}"), "{answer}");
    assert!(!format!("{:?}", p.events()).contains("secret"));
}

#[test]
fn a_streamed_answer_arrives_piece_by_piece() {
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    let mut s = p.connect();
    write!(
        s,
        "GET http://127.0.0.1:{}/stream HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n",
        up.port
    )
    .unwrap();
    // The first event comes while the server still holds the second back.
    let first = read_until(&mut s, "data: one\n\n");
    assert!(first.contains("Transfer-Encoding: chunked"), "{first}");
    assert!(!first.contains("data: two"));
    up.release_stream();
    let rest = read_until(&mut s, "0\r\n\r\n");
    assert!(rest.contains("data: two\n\n"), "{rest}");
    let mut end = Vec::new();
    s.read_to_end(&mut end).unwrap();
    assert!(end.is_empty(), "the connection closes after the answer");
    // Through a tunnel as well.
    let mut s = p.connect();
    write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", up.port).unwrap();
    read_until(&mut s, "\r\n\r\n");
    s.write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    read_until(&mut s, "data: one\n\n");
    up.release_stream();
    read_until(&mut s, "data: two\n\n");
}

#[test]
fn a_host_or_port_not_allowed_gets_403_and_nothing_connects() {
    let allowed = Upstream::start();
    let other = Upstream::start();
    let p = Setup::allowing(&list(&[
        format!("127.0.0.1:{}", allowed.port),
        "*.example.com".into(),
    ]));
    let cases = [
        format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", other.port),
        format!("GET http://127.0.0.1:{}/hello HTTP/1.1\r\n\r\n", other.port),
        // The name of an allowed address is not the address.
        format!(
            "GET http://localhost:{}/hello HTTP/1.1\r\n\r\n",
            allowed.port
        ),
        // Nor is a spelling the resolver would read as it.
        format!("CONNECT 127.1:{} HTTP/1.1\r\n\r\n", allowed.port),
        format!("CONNECT 2130706433:{} HTTP/1.1\r\n\r\n", allowed.port),
    ];
    for request in &cases {
        let answer = p.exchange(request);
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "{request}: {answer}"
        );
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(body.lines().count(), 1, "{body}");
        assert!(
            body.contains("is not allowed") && body.contains("`allow` list"),
            "{body}"
        );
    }
    let answer = p.exchange(&cases[0]);
    assert!(
        answer.contains(&format!("`127.0.0.1:{}`", other.port)),
        "{answer}"
    );
    assert_eq!(
        other.connections(),
        0,
        "a refused host is never connected to"
    );
    assert_eq!(allowed.connections(), 0);
    assert!(
        p.events()
            .iter()
            .all(|e| matches!(e, ProxyEvent::Refused { .. }))
    );
    // A wildcard never leads to this machine, even where its name resolves here.
    let answer = p.exchange("CONNECT localhost.example.com:443 HTTP/1.1\r\n\r\n");
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn what_is_not_a_proxy_request_gets_403() {
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    for request in [
        "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_string(),
        format!("GET https://127.0.0.1:{}/hello HTTP/1.1\r\n\r\n", up.port),
        "SSH-2.0-OpenSSH_9.6\r\n\r\n".to_string(),
    ] {
        let answer = p.exchange(&request);
        assert!(answer.starts_with("HTTP/1.1 403"), "{request}: {answer}");
        assert!(answer.contains("CONNECT host:port"), "{answer}");
    }
    assert_eq!(up.connections(), 0);
}

#[test]
fn the_65th_connection_at_once_gets_503_and_a_slot_comes_back() {
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    let mut open = Vec::new();
    for _ in 0..64 {
        let mut s = p.connect();
        write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", up.port).unwrap();
        let head = read_until(&mut s, "\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        open.push(s);
    }
    let answer = p.exchange(&format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", up.port));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(p.events().contains(&ProxyEvent::Busy { limit: 64 }));
    drop(open.pop());
    wait_until(Duration::from_secs(20), "a freed slot", || {
        p.exchange(&format!(
            "GET http://127.0.0.1:{}/hello HTTP/1.1\r\n\r\n",
            up.port
        ))
        .starts_with("HTTP/1.1 200")
    });
}

#[test]
fn a_head_that_trickles_in_times_out_and_one_too_long_is_refused() {
    let up = Upstream::start();
    let limits = Limits {
        head_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let p = Setup::new(&list(&[format!("127.0.0.1:{}", up.port)]), limits);
    let mut s = p.connect();
    write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n", up.port).unwrap();
    // A byte every 100 ms keeps each read short: only the whole head's deadline ends it.
    let started = Instant::now();
    let mut answer = String::new();
    s.set_nonblocking(true).unwrap();
    while started.elapsed() < Duration::from_secs(15) {
        let _ = s.write_all(b"X");
        let mut buf = [0u8; 1024];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // The documented 16 KiB.
    let long = format!(
        "GET http://127.0.0.1:{}/hello HTTP/1.1\r\nX-Long: {}\r\n\r\n",
        up.port,
        "a".repeat(17 * 1024)
    );
    let answer = p.exchange(&long);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(up.connections(), 0);
}

#[test]
fn a_tunnel_in_use_stays_and_an_idle_one_is_closed() {
    let up = Upstream::start();
    let limits = Limits {
        idle: Duration::from_secs(1),
        ..Limits::default()
    };
    let p = Setup::new(&list(&[format!("127.0.0.1:{}", up.port)]), limits);
    let mut s = p.connect();
    write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", up.port).unwrap();
    read_until(&mut s, "\r\n\r\n");
    // Twice the idle bound in use: never cut.
    let busy = Instant::now();
    let last_byte = loop {
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        read_until(&mut s, "hello");
        let last_byte = Instant::now();
        if busy.elapsed() > Duration::from_secs(2) {
            break last_byte;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "closed, with nothing more"
    );
    let took = last_byte.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

#[test]
fn stopping_the_proxy_ends_its_open_tunnels() {
    let up = Upstream::start();
    let mut p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    let mut s = p.connect();
    write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", up.port).unwrap();
    read_until(&mut s, "\r\n\r\n");
    p.proxy.take().unwrap().stop();
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "the tunnel ends");
    assert!(
        UnixStream::connect(&p.socket).is_err() || {
            let mut s = UnixStream::connect(&p.socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n");
            let mut b = [0u8; 16];
            !matches!(s.read(&mut b), Ok(n) if n > 0)
        }
    );
}

// ---- `phoenix sandbox-inner` and the relay ----

/// The relay processes (named `phoenix-relay`) whose command line names `marker`, alive.
fn relays_naming(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() != phoenix::sandbox::relay::PROCESS_NAME {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) && phoenix::process::alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Said on the real stderr: the harness captures `eprintln!` of a passing test, and a skip
/// nobody sees is a silent pass.
fn skipped(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED a sandbox_proxy test: {why}");
}

fn has_curl() -> bool {
    Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A started program killed when the test ends, passed or not (its relay goes with it).
struct Started(std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        crate::support::kill9(self.0.id());
        let _ = self.0.wait();
    }
}

fn sandbox_inner(socket: &Path, script: &str, marker: &str) -> Command {
    let mut cmd = Command::new(PHOENIX);
    cmd.args(["sandbox-inner", "--relay", "127.0.0.1:0", "--socket"])
        .arg(socket)
        .args(["--", "sh", "-c", script, marker])
        .env("HTTP_PROXY", "http://stale.invalid:1")
        .env("NO_PROXY", "*")
        .env_remove("no_proxy")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: the script signals its group.
        .process_group(0);
    cmd
}

#[test]
fn sandbox_inner_relays_to_the_proxy_and_execs_the_program_with_its_settings() {
    if !has_curl() {
        return skipped("no `curl`");
    }
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    let marker = format!("marker-{}", up.port);
    // Ctrl-C to the program's group and an exec later, the relay still serves.
    let script = format!(
        "echo pid=$$; echo proxy=$http_proxy no_proxy=[$NO_PROXY]; trap '' INT; kill -INT 0; \
         exec sh -c 'curl -sS http://127.0.0.1:{port}/hello; echo; \
         curl -sS -p http://127.0.0.1:{port}/hello; echo; \
         curl -sS -o /dev/null -w \"%{{http_code}}\" http://127.0.0.1:1/; echo'",
        port = up.port
    );
    let child = sandbox_inner(&p.socket, &script, &marker).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // exec'd: the program is the process that was started, not a child of it.
    assert!(stdout.contains(&format!("pid={pid}\n")), "{stdout}");
    assert!(stdout.contains("proxy=http://127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("no_proxy=[]"), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(&lines[2..], ["hello", "hello", "403"], "{stdout}");
    assert_eq!(up.connections(), 2);
    wait_until(
        Duration::from_secs(10),
        "the relay gone with its program",
        || relays_naming(&marker).is_empty(),
    );
}

#[test]
fn the_relay_dies_when_its_program_is_killed_outside_a_pid_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let marker = format!("marker-{}", std::process::id());
    let child = Started(
        sandbox_inner(&socket, "exec sleep 120", &marker)
            .spawn()
            .unwrap(),
    );
    wait_until(Duration::from_secs(20), "the relay", || {
        relays_naming(&marker).len() == 1
    });
    let relay = relays_naming(&marker)[0];
    wait_until(Duration::from_secs(20), "the program exec'd", || {
        std::fs::read_to_string(format!("/proc/{}/comm", child.0.id()))
            .unwrap_or_default()
            .trim()
            == "sleep"
    });
    // Its own session: Ctrl-C in the pane does not reach it.
    let sid = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(3)
            .unwrap()
            .to_string()
    };
    assert_eq!(sid(relay), relay.to_string());
    drop(child);
    wait_until(Duration::from_secs(10), "the relay gone", || {
        !phoenix::process::alive(relay)
    });
}

#[test]
fn the_relay_carries_64_connections_at_once_and_answers_the_65th_503() {
    let up = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", up.port)]));
    let marker = format!("marker-busy-{}", up.port);
    let mut child = Started(
        sandbox_inner(&p.socket, "echo $http_proxy; exec sleep 120", &marker)
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let relay = line.trim().trim_start_matches("http://").to_string();
    let mut open = Vec::new();
    for _ in 0..64 {
        let mut s = TcpStream::connect(&relay).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", up.port).unwrap();
        let head = read_until(&mut s, "\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        open.push(s);
    }
    let mut s = TcpStream::connect(&relay).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let answer = read_until(&mut s, "relay\n");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("relay"), "{answer}");
    drop(child);
    wait_until(Duration::from_secs(10), "the relay gone", || {
        relays_naming(&marker).is_empty()
    });
}

#[test]
fn sandbox_inner_without_a_relay_only_execs() {
    let out = Command::new(PHOENIX)
        .args([
            "sandbox-inner",
            "--",
            "sh",
            "-c",
            "echo [$HTTPS_PROXY]",
            "x",
        ])
        .env_remove("HTTPS_PROXY")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[]\n");
    let out = Command::new(PHOENIX)
        .args(["sandbox-inner", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run `/nonexistent/program`"));
    let out = Command::new(PHOENIX)
        .args(["sandbox-inner", "--relay", "127.0.0.1:0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "--relay needs --socket");
}

// ---- the whole path, in bubblewrap ----

#[test]
fn inside_bubblewrap_only_the_allowed_host_answers_and_no_relay_outlives_the_payload() {
    let bwrap = Command::new("bwrap").arg("--version").output();
    if !bwrap.is_ok_and(|o| o.status.success()) {
        return skipped("bubblewrap (`bwrap`) is not installed");
    }
    if !has_curl() {
        return skipped("no `curl`");
    }
    let allowed = Upstream::start();
    let other = Upstream::start();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{}", allowed.port)]));
    let marker = format!("bwrap-marker-{}", allowed.port);
    let script = format!(
        "curl -sS http://127.0.0.1:{a}/hello; echo; \
         curl -sS -p http://127.0.0.1:{a}/hello; echo; \
         curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{b}/hello; echo; \
         curl -sS -o /dev/null -w '%{{http_connect}}' -p http://127.0.0.1:{b}/hello; echo; \
         curl -s --noproxy '*' --max-time 5 http://127.0.0.1:{a}/hello; echo direct=$?; \
         grep -l phoenix-relay /proc/[0-9]*/comm | wc -l",
        a = allowed.port,
        b = other.port
    );
    let out = Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ])
        // /run is read-only from the host: the socket's mount point lives on a tmpfs.
        .args([
            "--tmpfs",
            "/run",
            "--unshare-net",
            "--unshare-pid",
            "--die-with-parent",
        ])
        .arg("--bind")
        .arg(&p.socket)
        .arg("/run/phoenix-proxy.sock")
        .args(["--", PHOENIX, "sandbox-inner", "--relay", "127.0.0.1:18080"])
        .args([
            "--socket",
            "/run/phoenix-proxy.sock",
            "--",
            "sh",
            "-c",
            &script,
            &marker,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    assert_eq!(
        lines[..4],
        ["hello", "hello", "403", "403"],
        "{stdout}\n{stderr}"
    );
    // Its own network: the host's loopback server is not there.
    assert_eq!(lines[4], "direct=7", "{stdout}\n{stderr}");
    assert_eq!(lines[5], "1", "the relay ran beside the payload: {stdout}");
    assert_eq!(allowed.connections(), 2);
    assert_eq!(other.connections(), 0);
    // bubblewrap reports its payload's exit before its pid namespace is torn down: the
    // relay goes within moments, not necessarily before bwrap returns.
    wait_until(
        Duration::from_secs(10),
        "no relay left after its payload",
        || relays_naming(&marker).is_empty(),
    );
    let refused = p
        .events()
        .iter()
        .filter(|e| matches!(e, ProxyEvent::Refused { port, .. } if *port == other.port))
        .count();
    assert_eq!(refused, 2);
}

/// The real Claude Code inside bubblewrap with only the relay for a network: its requests to
/// a plain-HTTP base URL (the scripted model server) go through the proxy, streamed answer
/// and all.
#[test]
fn real_claude_in_bubblewrap_reaches_its_model_server_through_the_proxy() {
    if !crate::support::opted_in(
        crate::support::REAL_CLIS,
        "sandbox_proxy (real Claude Code)",
        "the real Claude Code CLI and bubblewrap",
    ) {
        return;
    }
    assert!(
        Command::new("bwrap")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "the real-CLI suites need bubblewrap (`bwrap`)"
    );
    let claude = crate::real_cli::claude_bin();
    let server = crate::support::model_server::ModelServer::start(vec![
        crate::support::model_server::Turn::text("pong from the model"),
    ]);
    let base = server.base_url();
    let port: u16 = base
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let p = Setup::allowing(&list(&[format!("127.0.0.1:{port}")]));
    let out = Command::new("timeout")
        .args([
            "180",
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
        ])
        .args([
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/run",
            "--unshare-net",
            "--unshare-pid",
        ])
        .args(["--die-with-parent", "--bind"])
        .arg(&p.socket)
        .arg("/run/phoenix-proxy.sock")
        .args([
            "--setenv",
            "HOME",
            "/tmp",
            "--setenv",
            "ANTHROPIC_BASE_URL",
            &base,
        ])
        .args(["--setenv", "ANTHROPIC_API_KEY", "sk-ant-test-key"])
        .args(["--setenv", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"])
        .args(["--", PHOENIX, "sandbox-inner", "--relay", "127.0.0.1:18080"])
        .args(["--socket", "/run/phoenix-proxy.sock", "--"])
        .arg(&claude)
        .args(["-p", "ping"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("pong from the model"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(!server.message_requests().is_empty());
    let events = p.events();
    assert!(
        events.iter().all(
            |e| matches!(e, ProxyEvent::Allowed { port: p, via: Via::Http, .. } if *p == port)
        ),
        "{events:?}"
    );
    assert!(!format!("{events:?}").contains("sk-ant-test-key"));
}
