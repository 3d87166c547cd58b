//! Running a helper program (`gh`, a notify command, `diagnose_command`, a brief generator):
//! argv without a shell, input on stdin, output captured, and the whole process group killed
//! when it takes too long.

use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Largest stdout or stderr kept; a chatty program is cut off, not buffered forever.
const MAX_OUTPUT: u64 = 1 << 20;

/// A program that ran to its end (successfully or not).
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// `exit 3` or `killed by signal 9`.
    pub fn describe_status(&self) -> String {
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => self.status.to_string(),
        }
    }

    /// The first non-empty line of stderr, shortened; empty if there is none.
    pub fn stderr_line(&self) -> String {
        first_line(&self.stderr)
    }
}

#[derive(Debug)]
pub enum RunError {
    /// The program could not be started (`NotFound` when it is not on PATH).
    Spawn(io::Error),
    /// It ran longer than the timeout and was killed.
    Timeout,
}

/// The small binaries installed beside `phoenix`, by the suffix of their names
/// (`phoenix-hook`, `phoenix-wrap`; beside a `phoenix-dev`, `phoenix-dev-hook`): the hook
/// command, and the program an agent's pane runs (`wrap`, `tap`). Neither has the other
/// commands.
pub const COMPANIONS: [&str; 2] = ["-hook", "-wrap"];

/// The `phoenix` binary, from whichever of phoenix's binaries this process is: what is run,
/// shown or bound into a sandbox as "phoenix" must be the one with every command, and the
/// same one whether apply, a wrapper or a hook asks.
pub fn main_binary() -> io::Result<std::path::PathBuf> {
    std::env::current_exe().map(|exe| main_binary_beside(&exe))
}

/// The `phoenix` that `exe` is a companion of ([`COMPANIONS`]), else `exe` itself.
pub fn main_binary_beside(exe: &std::path::Path) -> std::path::PathBuf {
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    COMPANIONS
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix).filter(|main| !main.is_empty()))
        .map_or_else(|| exe.to_path_buf(), |main| exe.with_file_name(main))
}

/// The name of `main`'s companion with `suffix` (one of [`COMPANIONS`]).
pub fn companion_name(main: &str, suffix: &str) -> String {
    format!("{main}{suffix}")
}

/// The companion with `suffix` (one of [`COMPANIONS`]) installed beside the `phoenix` binary
/// `exe`, or `exe` itself when there is none to run there (a build of `phoenix` alone):
/// `phoenix` has every command the companions have.
pub fn companion(exe: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let Some(main) = exe.file_name().and_then(|n| n.to_str()) else {
        return exe.to_path_buf();
    };
    let sibling = exe.with_file_name(companion_name(main, suffix));
    let runnable = std::fs::metadata(&sibling)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if runnable { sibling } else { exe.to_path_buf() }
}

/// The first non-empty line of `text`, shortened to 200 characters.
pub fn first_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    crate::text::shorten(line.unwrap_or(""), 200)
}

/// Run `command` with `input` on stdin, killing its process group after `timeout`. Never waits
/// longer than `timeout` (plus a few milliseconds), even if the program left something behind
/// that holds its output open.
pub fn run(command: Command, input: &[u8], timeout: Duration) -> Result<Finished, RunError> {
    run_limited(command, input, timeout, MAX_OUTPUT)
}

/// [`run`], keeping up to `max_output` bytes of stdout and of stderr (a host's reply that
/// carries an agent's context is larger than a helper's output).
pub fn run_limited(
    command: Command,
    input: &[u8],
    timeout: Duration,
    max_output: u64,
) -> Result<Finished, RunError> {
    run_limited_telling(command, input, timeout, max_output).map_err(|(e, _)| e)
}

/// [`run_limited`], and on a timeout what the program had written on stderr by then (the
/// ssh transport reads the remote session's id there, to end that session too).
pub fn run_limited_telling(
    mut command: Command,
    input: &[u8],
    timeout: Duration,
    max_output: u64,
) -> Result<Finished, (RunError, String)> {
    command.stdin(Stdio::piped());
    run_with(command, Some(input.to_vec()), timeout, max_output)
}

/// [`run`] with `input` (a file opened for reading) as its stdin: a large file (a binary
/// copied to a host) goes to the program without being read into memory here.
pub fn run_file(
    mut command: Command,
    input: std::fs::File,
    timeout: Duration,
) -> Result<Finished, RunError> {
    command.stdin(Stdio::from(input));
    run_with(command, None, timeout, MAX_OUTPUT).map_err(|(e, _)| e)
}

/// [`run_file`], telling stderr on a timeout as [`run_limited_telling`] does.
pub fn run_file_telling(
    mut command: Command,
    input: std::fs::File,
    timeout: Duration,
) -> Result<Finished, (RunError, String)> {
    command.stdin(Stdio::from(input));
    run_with(command, None, timeout, MAX_OUTPUT)
}

fn run_with(
    mut command: Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
    max_output: u64,
) -> Result<Finished, (RunError, String)> {
    let started = Instant::now();
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills whatever it started too.
        .process_group(0);
    let mut child = spawn(&mut command).map_err(|e| (e, String::new()))?;
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);

    // Write and read on threads: a program that answers before reading all of its input (or
    // never reads it) must not deadlock with us. A failed write (it closed stdin) is fine.
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    // stderr as it comes: what it said before a timeout, even while something else (an ssh
    // control master it handed its descriptors to) keeps the pipe open.
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    for (is_stdout, pipe) in [
        (
            true,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            false,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let tx = tx.clone();
        let said = (!is_stdout).then(|| said.clone());
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let mut chunk = [0u8; 8192];
                while (bytes.len() as u64) < max_output {
                    let room = (max_output - bytes.len() as u64).min(chunk.len() as u64) as usize;
                    match pipe.read(&mut chunk[..room]) {
                        Ok(0) => break,
                        Ok(n) => {
                            bytes.extend_from_slice(&chunk[..n]);
                            if let Some(said) = &said
                                && let Ok(mut said) = said.lock()
                            {
                                said.extend_from_slice(&chunk[..n]);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                // Drain the rest, or a program that writes more would block and time out.
                let _ = io::copy(&mut pipe, &mut io::sink());
            }
            // Cut at `max_output` bytes: never inside a character.
            let _ = tx.send((is_stdout, crate::text::cut_utf8(&bytes).into_owned()));
        });
    }
    drop(tx);

    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.kill();
                let _ = child.wait();
                let stderr = said
                    .lock()
                    .map(|b| crate::text::cut_utf8(&b).into_owned())
                    .unwrap_or_default();
                return Err((RunError::Timeout, stderr));
            }
        }
    };

    // The program exited; its output is complete unless something it started in the
    // background still holds the pipes. Wait for that only until the deadline.
    let mut finished = Finished {
        status,
        stdout: String::new(),
        stderr: String::new(),
    };
    for _ in 0..2 {
        let left = timeout.saturating_sub(started.elapsed());
        match rx.recv_timeout(left.max(Duration::from_millis(50))) {
            Ok((true, text)) => finished.stdout = text,
            Ok((false, text)) => finished.stderr = text,
            Err(_) => {
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                break;
            }
        }
    }
    Ok(finished)
}

/// Start `command`, retrying briefly on ETXTBSY: a script that was just written may still be
/// open for writing in a child another thread is forking, until that child execs.
fn spawn(command: &mut Command) -> Result<std::process::Child, RunError> {
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            result => return result.map_err(RunError::Spawn),
        }
    }
}

/// Whether `pid` still runs (a zombie has ended).
pub fn alive(pid: u32) -> bool {
    // Zombies count as gone: /proc/<pid>/stat state `Z`.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

#[cfg(test)]
mod companion_tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn each_companion_leads_back_to_its_own_phoenix() {
        for main in ["/opt/bin/phoenix", "/home/u/bin/phoenix-dev"] {
            let main = Path::new(main);
            let name = main.file_name().unwrap().to_str().unwrap();
            for suffix in COMPANIONS {
                let companion = main.with_file_name(companion_name(name, suffix));
                assert_eq!(main_binary_beside(&companion), main, "{suffix}");
            }
            assert_eq!(main_binary_beside(main), main);
        }
        // A name that is only a suffix is a program of its own.
        assert_eq!(
            main_binary_beside(Path::new("/x/-wrap")),
            Path::new("/x/-wrap")
        );
    }

    #[test]
    fn a_missing_or_unrunnable_companion_falls_back_to_phoenix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("phoenix");
        std::fs::write(&main, "").unwrap();
        assert_eq!(companion(&main, "-wrap"), main);
        let wrap = dir.path().join("phoenix-wrap");
        std::fs::write(&wrap, "").unwrap();
        assert_eq!(companion(&main, "-wrap"), main, "not executable");
        std::fs::set_permissions(&wrap, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(companion(&main, "-wrap"), wrap);
    }
}
