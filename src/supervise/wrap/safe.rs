//! Safe mode: nothing runs in the pane until a person types `restart`, `fresh` or `quit`.

use super::*;

impl Wrapper {
    /// A plain read loop: explains the situation and accepts `restart`, `fresh`, `quit`. It
    /// never runs a shell or any other program.
    pub(super) fn safe_mode(&self, why: &str) -> crate::error::Result<SafeOutcome> {
        self.set_phase("safe");
        let _ = self.dir.record_op(Op::SafeMode, json!({"why": why}));
        crate::state::daemon::poke(&self.fleet, &self.agent.name);
        let name = &self.agent.name;
        super::blank_line();
        say(&format!("agent `{name}` is in safe mode: {why}"));
        say("nothing runs in this pane until you type one of these words and press Enter:");
        say("  restart   start the agent again, resuming its session");
        say("  fresh     start the agent with a fresh session");
        say("  quit      leave it stopped and close this pane");
        say(&format!(
            "or from anywhere: phoenix restart {name} [--fresh]"
        ));
        let mut input = LineReader::default();
        loop {
            prompt();
            let word = loop {
                if let Some(sig) = term::stop_signal() {
                    return Ok(SafeOutcome::Stopped(128 + sig));
                }
                match input.next(Duration::from_millis(200)) {
                    Some(line) => break line,
                    None => continue,
                }
            };
            match word.trim() {
                "" => {}
                w @ ("restart" | "fresh") => {
                    let _ = crate::restart::reset_counts(&self.dir);
                    let _ = self.dir.clear_marker(state::CLEAN_EXIT);
                    let fresh = w == "fresh";
                    if fresh && let Err(e) = recovery::execute::intend_fresh(&self.dir) {
                        say(&format!("cannot ask for a fresh start: {e}"));
                    }
                    let _ = self.dir.record_op(
                        Op::OperatorRestart,
                        json!({"from": "safe_mode", "fresh": fresh}),
                    );
                    return Ok(SafeOutcome::Start);
                }
                "quit" => {
                    let _ = self.dir.set_marker(state::CLEAN_EXIT);
                    let _ = self
                        .dir
                        .record_op(Op::OperatorStop, json!({"from": "safe_mode"}));
                    say(&format!(
                        "`{name}` stays stopped; `phoenix restart {name}` brings it back"
                    ));
                    return Ok(SafeOutcome::Quit);
                }
                other => say(&format!(
                    "unknown word `{}`: type restart, fresh or quit",
                    other.chars().take(40).collect::<String>()
                )),
            }
        }
    }
}

pub(super) fn prompt() {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{SAY} safe mode> ");
    let _ = out.flush();
}

/// Lines from stdin without a reader thread: a thread blocked in `read` would keep stealing
/// the agent's input after a restart. Polls fd 0 with a timeout instead.
#[derive(Default)]
pub(super) struct LineReader {
    buf: Vec<u8>,
    closed: bool,
}

impl LineReader {
    pub(super) fn next(&mut self, timeout: Duration) -> Option<String> {
        if let Some(line) = self.take_line() {
            return Some(line);
        }
        if self.closed {
            std::thread::sleep(timeout);
            return None;
        }
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut fds, 1, ms) };
        if ready > 0 {
            let mut chunk = [0u8; 1024];
            match std::io::stdin().lock().read(&mut chunk) {
                Ok(0) | Err(_) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        self.take_line()
    }

    pub(super) fn take_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(String::from_utf8_lossy(&line).trim().to_string())
    }
}
