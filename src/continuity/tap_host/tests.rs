use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// A socket name of its own for each host a test starts.
fn name() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "phoenix-tap-test/{}/{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A host on its own socket whose "pane" is a pipe: what it writes there comes out of
/// `pane_output`, as tmux passes a pane's output to its pipe. The pipe it takes arrives on
/// the channel.
struct TestHost {
    name: String,
    pane_output: io::PipeReader,
    taken: mpsc::Receiver<Box<dyn Read + Send>>,
    dir: AgentDir,
    _tmp: tempfile::TempDir,
}

fn host() -> TestHost {
    let tmp = tempfile::tempdir().unwrap();
    let dir = crate::state::FleetDir::new(tmp.path()).agent("a");
    dir.ensure().unwrap();
    let (pane_output, pane) = io::pipe().unwrap();
    let (tx, taken) = mpsc::channel();
    let name = name();
    start_on(
        &name,
        Box::new(pane),
        &dir,
        Box::new(move |input| {
            let _ = tx.send(input);
        }),
    )
    .unwrap();
    TestHost {
        name,
        pane_output,
        taken,
        dir,
        _tmp: tmp,
    }
}

impl TestHost {
    /// Hand `fd` over as a tap does.
    fn hand_over(&self, fd: RawFd) -> bool {
        hand_over_to(&self.name, std::process::id(), fd).unwrap()
    }

    fn connect(&self) -> UnixStream {
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(self.name.as_bytes()).unwrap())
            .unwrap()
    }

    /// The refusals recorded so far (`tap_refused`'s counts, summed), waiting up to `wait`
    /// for `expected`.
    fn refused(&self, expected: u64, wait: Duration) -> (u64, Vec<serde_json::Value>) {
        let deadline = Instant::now() + wait;
        loop {
            let ops: Vec<serde_json::Value> =
                crate::state::op::tail(&self.dir.file(crate::state::OPS_LOG))
                    .into_iter()
                    .filter(|o| matches!(o.op, Op::TapRefused(_)))
                    .map(|o| o.to_value())
                    .collect();
            let sum = ops.iter().filter_map(|o| o["refused"].as_u64()).sum();
            if sum >= expected || Instant::now() > deadline {
                return (sum, ops);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A pipe a forger made, with the words it wants read as the agent's, its writing end closed.
fn forged_pipe(words: &[u8]) -> io::PipeReader {
    let (reader, mut writer) = io::pipe().unwrap();
    writer.write_all(words).unwrap();
    reader
}

/// The pane's own pipe proves itself (the proof the wrapper writes to the pane comes back
/// through it) and is read from its first byte on; a pipe another process made carries
/// only what that process writes, and is refused, before the real one and after it.
#[test]
fn only_the_pipe_that_carries_the_pane_is_taken() {
    let host = host();
    let (pane_pipe, mut pane_writer) = io::pipe().unwrap();
    forward(
        host.pane_output.try_clone().unwrap(),
        pane_pipe.try_clone().unwrap(),
    );
    let forged = forged_pipe(b"->continuity:save <<< forged >>>\n");
    assert!(
        !host.hand_over(forged.as_raw_fd()),
        "a pipe without the proof"
    );
    assert!(host.taken.try_recv().is_err());

    // The real one. The pane printed before the hand-over: nothing of that is lost.
    pane_writer.write_all(b"early output\n").unwrap();
    assert!(host.hand_over(pane_pipe.as_raw_fd()), "the pane's pipe");
    let mut input = host.taken.recv_timeout(Duration::from_secs(5)).unwrap();
    let forged = forged_pipe(b"->continuity:save <<< forged later >>>\n");
    assert!(
        !host.hand_over(forged.as_raw_fd()),
        "one hand-over per pane start"
    );
    pane_writer.write_all(b"later output\n").unwrap();
    drop(pane_writer);
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    while !text.ends_with(b"later output\n") {
        let n = input.read(&mut chunk).unwrap();
        assert!(n > 0, "{:?}", String::from_utf8_lossy(&text));
        text.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&text);
    assert!(text.starts_with("early output\n"), "{text:?}");
    assert!(!text.contains("phoenix-tap-proof"), "{text:?}");
    assert!(!text.contains("forged"), "{text:?}");
    let (refused, ops) = host.refused(2, Duration::from_secs(3));
    assert_eq!(refused, 2, "{ops:?}");
}

/// Copies what the host writes to its "pane" into `to`'s pipe (as tmux copies a pane's
/// output into its pipe), for as long as the host writes.
fn forward(mut from: io::PipeReader, to: io::PipeReader) {
    // The writing end of `to`'s pipe, opened again through /proc (a pipe's other end).
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{}", to.as_raw_fd()))
        .unwrap();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = from.read(&mut chunk) {
            let _ = to.write_all(&chunk[..n]);
        }
    });
}

/// A client that connects and sends nothing holds no one up: the real hand-over behind it
/// is taken at once, and the silent one is dropped after its wait.
#[test]
fn a_silent_client_never_blocks_the_hand_over() {
    let host = host();
    let silent: Vec<UnixStream> = (0..MAX_ATTEMPTS + 4).map(|_| host.connect()).collect();
    let (pane_pipe, _pane_writer) = io::pipe().unwrap();
    forward(
        host.pane_output.try_clone().unwrap(),
        pane_pipe.try_clone().unwrap(),
    );
    let started = Instant::now();
    assert!(host.hand_over(pane_pipe.as_raw_fd()));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(host.taken.recv_timeout(Duration::from_secs(1)).is_ok());
    // Every silent one is closed by the host in time: its read ends.
    for mut conn in silent {
        conn.set_read_timeout(Some(SILENT_WAIT + Duration::from_secs(3)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert!(
            matches!(conn.read(&mut byte), Ok(0)),
            "closed without a word"
        );
    }
}

/// A flood of hand-overs after the pane's own: every one is refused, counted and recorded,
/// and none is waited on.
#[test]
fn every_later_hand_over_is_refused_and_counted() {
    let host = host();
    let (pane_pipe, _pane_writer) = io::pipe().unwrap();
    forward(
        host.pane_output.try_clone().unwrap(),
        pane_pipe.try_clone().unwrap(),
    );
    assert!(host.hand_over(pane_pipe.as_raw_fd()));
    let started = Instant::now();
    for _ in 0..100 {
        let (reader, _writer) = io::pipe().unwrap();
        assert!(!host.hand_over(reader.as_raw_fd()));
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (refused, ops) = host.refused(100, Duration::from_secs(3));
    assert_eq!(refused, 100, "{ops:?}");
    // Recorded in batches, not once per attempt.
    assert!(ops.len() < 20, "{}", ops.len());
    let last = ops.last().unwrap();
    assert_eq!(last["total"], 100, "{last}");
    assert!(
        last["reasons"]["already handed over"].as_u64().unwrap() > 0,
        "{last}"
    );
}

/// Something that is not a pipe (a file: a read of it could be anything) is refused.
#[test]
fn a_descriptor_that_is_not_a_pipe_is_refused() {
    let host = host();
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), "->continuity:save <<< from a file >>>\n").unwrap();
    let file = File::open(tmp.path()).unwrap();
    assert!(!host.hand_over(file.as_raw_fd()));
    let (refused, ops) = host.refused(1, Duration::from_secs(3));
    assert_eq!(refused, 1);
    assert_eq!(ops[0]["reasons"]["no pipe"], 1, "{ops:?}");
}

/// A tap gives the pipe to its wrapper once it listens (it may still be starting), and
/// to no other process listening under the wrapper's name: a name squatted by a process
/// that is not the wrapper is refused, and the tap reads the pane itself.
#[test]
fn the_pipe_goes_to_the_wrapper_pid_only() {
    let own = std::process::id();
    let name = name();
    let (reader, mut writer) = io::pipe().unwrap();
    // The tap starts before the wrapper listens.
    let tap_name = name.clone();
    let tap = std::thread::spawn(move || hand_over_to(&tap_name, own, reader.as_raw_fd()));
    std::thread::sleep(Duration::from_millis(30));
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    let got = loop {
        match receive(&conn) {
            Received::Pipe(pipe) => break pipe,
            Received::Nothing => std::thread::sleep(Duration::from_millis(5)),
            _ => panic!("no pipe"),
        }
    };
    conn.write_all(b"k").unwrap();
    assert!(tap.join().unwrap().unwrap(), "the wrapper took it");
    writer.write_all(b"->continuity:load\n").unwrap();
    drop(writer);
    let mut text = String::new();
    io::Read::read_to_string(&mut { got }, &mut text).unwrap();
    assert_eq!(text, "->continuity:load\n");

    // This process squats the name of pid 1 (never a wrapper of this test's user).
    let squatted = UnixListener::bind_addr(
        &SocketAddr::from_abstract_name(socket_name(1).as_bytes()).unwrap(),
    );
    if let Ok(squatted) = squatted {
        squatted.set_nonblocking(true).unwrap();
        let (reader, _writer) = io::pipe().unwrap();
        assert!(!hand_over_to(&socket_name(1), 1, reader.as_raw_fd()).unwrap());
        if let Ok((conn, _)) = squatted.accept() {
            assert!(
                matches!(receive(&conn), Received::Nothing | Received::Closed),
                "nothing was sent to the squatter"
            );
        }
    }
    // A wrapper that is gone: the tap stops waiting at once.
    let (reader, _writer) = io::pipe().unwrap();
    let started = Instant::now();
    assert!(!hand_over_to(&socket_name(u32::MAX - 1), u32::MAX - 1, reader.as_raw_fd()).unwrap());
    assert!(started.elapsed() < Duration::from_secs(1));
}
