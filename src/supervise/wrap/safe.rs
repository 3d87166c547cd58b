//! Safe mode: nothing runs in the pane until a person types `restart`, `fresh` or `quit`
//! (or, for a CLI that ended at its folder-trust question, until the folder is trusted).

use super::*;

use crate::hooks::trust::TrustWatch;

impl Wrapper {
    /// A plain read loop: explains the situation and accepts `restart`, `fresh`, `quit`. It
    /// never runs a shell or any other program.
    pub(super) fn safe_mode(&self, why: &str) -> crate::error::Result<SafeOutcome> {
        self.safe_mode_until(why, None)
    }

    /// [`Wrapper::safe_mode`], also left, to start the agent again, once `trust` sees its
    /// CLI trust the workdir (a person answered the question elsewhere).
    pub(super) fn safe_mode_until(
        &self,
        why: &str,
        mut trust: Option<TrustWatch>,
    ) -> crate::error::Result<SafeOutcome> {
        self.set_phase("safe");
        // A restart that ends here (the watchdog's stop for a person) is over: the phase says so.
        state::claim::end(&self.dir);
        // Pasted text is no person's answer: with bracketed paste on, every paste phoenix (or
        // anyone) makes into this pane arrives marked, and is dropped. Asked for before
        // anything is said, so the terminal marks pastes by the time the prompt appears; off
        // again before the next CLI starts, which asks for the modes it wants itself.
        let tty = self.terminal.is_some();
        paste_brackets(tty, true);
        let _ = self.dir.record_op(Op::SafeMode, json!({"why": why}));
        crate::state::daemon::poke(&self.fleet, &self.agent.name);
        self.tell_agent_set_failed();
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
        if let Some(t) = &trust {
            say(&format!(
                "or trust the folder (run the CLI in `{}` once and answer yes, or set it in {}): \
                 it then starts by itself",
                self.agent.workdir.display(),
                t.file().display()
            ));
        }
        let mut input = LineReader::default();
        let outcome = self.safe_prompt(&mut input, trust.as_mut());
        paste_brackets(tty, false);
        // Started again: the next safe mode is a failure of its own, told again.
        if matches!(outcome, Ok(SafeOutcome::Start)) {
            crate::intake::hooks::reset(&self.dir, crate::intake::hooks::Hook::Failed);
        }
        outcome
    }

    /// An `[[agent_set]]` agent's `on_failed` (once per safe mode), off the pane's thread:
    /// the hook may take its time (`gh`), the prompt must not wait for it.
    fn tell_agent_set_failed(&self) {
        use crate::intake::hooks::{self, Hook};
        if hooks::argv(&self.spec, &self.agent, Hook::Failed).is_none() {
            return;
        }
        let (spec, agent) = (self.spec.clone(), self.agent.clone());
        std::thread::spawn(move || hooks::run_once(&spec, &agent, Hook::Failed));
    }

    /// Draw the prompt and read the words typed after it, until one of them decides.
    fn safe_prompt(
        &self,
        input: &mut LineReader,
        mut trust: Option<&mut TrustWatch>,
    ) -> crate::error::Result<SafeOutcome> {
        let name = &self.agent.name;
        loop {
            // Only keys pressed after the prompt appears count: what waits unread (startup
            // text pasted into a CLI that never read it, a message, keys typed before) goes.
            term::discard_input();
            input.discard();
            prompt();
            let word = loop {
                if let Some(sig) = term::stop_signal() {
                    return Ok(SafeOutcome::Stopped(128 + sig));
                }
                super::collect_orphans();
                if let Some(t) = trust.as_deref_mut()
                    && t.trusted_since()
                {
                    self.trusted_meanwhile(t);
                    return Ok(SafeOutcome::Start);
                }
                match input.next(Duration::from_millis(200)) {
                    Some(line) => break line,
                    None => continue,
                }
            };
            if input.take_dropped_paste() {
                say("pasted text is not read here: type the word");
            }
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

impl Wrapper {
    /// The folder the CLI asked about is trusted now: the wait for a person is over.
    fn trusted_meanwhile(&self, t: &TrustWatch) {
        let retention = state::Retention::from(&self.spec.thresholds);
        let ended = self.dir.update_state(retention, |s| {
            Ok(s.needs_input.take_if(|n| n.reason == "trust_dialog"))
        });
        let since = ended.ok().flatten().map(|n| n.since);
        let _ = self.dir.record_op(
            Op::InputGiven,
            json!({"reason": "trust_dialog", "since": since, "by": "folder_trusted",
                   "file": t.file()}),
        );
        say(&format!(
            "`{}`'s CLI trusts `{}` now (in {}): starting it",
            self.agent.name,
            self.agent.workdir.display(),
            t.file().display()
        ));
    }
}

/// Ask the pane's terminal to mark pastes (`ESC[?2004h`), or stop asking; only when stdin is a
/// terminal (else there is nothing to ask).
fn paste_brackets(tty: bool, on: bool) {
    if !tty {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\x1b[?2004{}", if on { 'h' } else { 'l' });
    let _ = out.flush();
}

pub(super) fn prompt() {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{SAY} safe mode> ");
    let _ = out.flush();
}

/// What a terminal puts around pasted text once bracketed paste is asked for.
const PASTE_START: &[u8] = b"\x1b[200~";
const PASTE_END: &[u8] = b"\x1b[201~";

/// Lines from stdin without a reader thread: a thread blocked in `read` would keep stealing
/// the agent's input after a restart. Polls fd 0 with a timeout instead. What arrives inside
/// paste brackets is dropped: only typed lines come out.
#[derive(Default)]
pub(super) struct LineReader {
    /// Typed bytes, not yet a whole line.
    buf: Vec<u8>,
    /// Bytes read but not yet sorted into typed or pasted (a bracket may be split).
    raw: Vec<u8>,
    /// Inside a paste.
    pasting: bool,
    /// A paste was dropped since [`LineReader::take_dropped_paste`] last asked.
    dropped_paste: bool,
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
                Ok(n) => self.admit(&chunk[..n]),
            }
        }
        self.take_line()
    }

    /// Sort what was read into typed bytes (kept) and pasted ones (dropped).
    pub(super) fn admit(&mut self, bytes: &[u8]) {
        self.raw.extend_from_slice(bytes);
        loop {
            let bracket = if self.pasting { PASTE_END } else { PASTE_START };
            if let Some(at) = find(&self.raw, bracket) {
                let before: Vec<u8> = self.raw.drain(..at + bracket.len()).collect();
                if self.pasting {
                    self.dropped_paste = true;
                } else {
                    self.buf.extend_from_slice(&before[..at]);
                }
                self.pasting = !self.pasting;
                continue;
            }
            // A bracket may have begun at the end: keep what could be its start.
            let keep = (1..bracket.len())
                .rev()
                .find(|&n| self.raw.len() >= n && self.raw.ends_with(&bracket[..n]))
                .unwrap_or(0);
            let done: Vec<u8> = self.raw.drain(..self.raw.len() - keep).collect();
            if self.pasting {
                self.dropped_paste |= !done.is_empty();
            } else {
                // A stray end bracket outside a paste says nothing either.
                self.buf.extend_from_slice(&done);
                while let Some(at) = find(&self.buf, PASTE_END) {
                    self.buf.drain(at..at + PASTE_END.len());
                }
            }
            return;
        }
    }

    /// Forget everything read so far (the terminal's own input was flushed with it).
    pub(super) fn discard(&mut self) {
        self.buf.clear();
        self.raw.clear();
        self.pasting = false;
    }

    /// Whether a paste was dropped since the last time this was asked.
    pub(super) fn take_dropped_paste(&mut self) -> bool {
        std::mem::take(&mut self.dropped_paste)
    }

    pub(super) fn take_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(String::from_utf8_lossy(&line).trim().to_string())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(reader: &mut LineReader) -> Vec<String> {
        std::iter::from_fn(|| reader.take_line()).collect()
    }

    #[test]
    fn pasted_lines_are_dropped_and_typed_ones_kept() {
        let mut r = LineReader::default();
        r.admit(b"\x1b[200~startup text\nrestart\nquit\x1b[201~\nfresh\n");
        assert_eq!(lines(&mut r), ["", "fresh"]);
        assert!(r.take_dropped_paste());
        assert!(!r.take_dropped_paste());
    }

    #[test]
    fn a_bracket_split_across_reads_still_marks_the_paste() {
        let mut r = LineReader::default();
        for part in [
            &b"typed\n\x1b[2"[..],
            b"00~rest",
            b"art\n\x1b[20",
            b"1~quit\n",
        ] {
            r.admit(part);
        }
        assert_eq!(lines(&mut r), ["typed", "quit"]);
    }

    #[test]
    fn a_paste_whose_end_was_flushed_does_not_swallow_what_is_typed_next() {
        let mut r = LineReader::default();
        r.admit(b"\x1b[200~restart\n");
        assert_eq!(lines(&mut r), Vec::<String>::new());
        r.discard();
        r.admit(b"restart\n");
        assert_eq!(lines(&mut r), ["restart"]);
    }
}
