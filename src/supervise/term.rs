//! Job control for the wrapper: the agent CLI runs in its own process group as the terminal's
//! foreground group (so Ctrl-C, window size and raw mode reach it as if started by a shell),
//! the wrapper takes the terminal back afterwards, and SIGTERM/SIGHUP/SIGINT sent to the
//! wrapper are forwarded to the agent's group.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::termios::{self, SetArg, Termios};
use nix::unistd::{self, Pid};

/// Process group of the running agent (0: none). Read by the signal handler.
static CHILD_PGID: AtomicI32 = AtomicI32::new(0);
/// The last SIGTERM/SIGHUP the wrapper itself received (0: none): it must stop.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// A child of the wrapper ended (SIGCHLD) since the last look: as the agent's subreaper, the
/// wrapper inherits its orphans, and each one that ends is its to collect.
static CHILD_ENDED: AtomicBool = AtomicBool::new(false);

/// The wrapper's doorbell (`state::doorbell`), rung by the handlers so a signal wakes its
/// sleep (-1: none yet).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Ring the doorbell from a signal handler: `write(2)` is async-signal-safe, and `errno` is
/// put back for the code the signal interrupted.
fn wake_from_handler() {
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: errno is this thread's; write gets a valid one-byte buffer.
        unsafe {
            let saved = *libc::__errno_location();
            libc::write(fd, [1u8].as_ptr().cast(), 1);
            *libc::__errno_location() = saved;
        }
    }
}

/// Signals wake the wrapper through `fd` from now on (its doorbell's writing end, open for
/// the rest of its life).
pub fn wake_signals_through(fd: i32) {
    WAKE_FD.store(fd, Ordering::SeqCst);
}

extern "C" fn on_child(_: libc::c_int) {
    CHILD_ENDED.store(true, Ordering::SeqCst);
    wake_from_handler();
}

extern "C" fn on_signal(sig: libc::c_int) {
    let pgid = CHILD_PGID.load(Ordering::SeqCst);
    if pgid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
    // SIGINT is only passed on: the agent decides what Ctrl-C means.
    if sig != libc::SIGINT {
        STOP_SIGNAL.store(sig, Ordering::SeqCst);
        wake_from_handler();
    }
}

/// Install the forwarding handlers and ignore the job-control stops that would otherwise
/// suspend the wrapper when it takes the terminal back from a background group.
pub fn install_handlers() {
    let forward = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        // SAFETY: the handler only touches atomics and calls kill.
        let _ = unsafe { sigaction(sig, &forward) };
    }
    // Only a flag: who is collected is decided outside the handler (never the agent, which
    // its own thread waits for).
    let child = SigAction::new(
        SigHandler::Handler(on_child),
        SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
        SigSet::empty(),
    );
    // SAFETY: the handler only stores to an atomic.
    let _ = unsafe { sigaction(Signal::SIGCHLD, &child) };
    for sig in [Signal::SIGTTOU, Signal::SIGTTIN, Signal::SIGTSTP] {
        // SAFETY: ignoring a signal has no preconditions.
        let _ = unsafe { sigaction(sig, &ignore) };
    }
}

/// The signal that asked the wrapper itself to stop, if any.
pub fn stop_signal() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Whether a child ended since the last call (and forget it).
pub fn child_ended() -> bool {
    CHILD_ENDED.swap(false, Ordering::SeqCst)
}

pub fn set_child(pgid: Option<u32>) {
    let v = pgid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    CHILD_PGID.store(v, Ordering::SeqCst);
}

/// Signal the agent's whole process group.
pub fn signal_group(pgid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pgid) {
        let _ = nix::sys::signal::killpg(Pid::from_raw(p), sig);
    }
}

fn stdin_fd() -> BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the life of the process.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// The pane's terminal, when stdin is one.
pub struct Terminal {
    saved: Option<Termios>,
}

impl Terminal {
    pub fn open() -> Option<Terminal> {
        let fd = stdin_fd();
        if !unistd::isatty(fd).unwrap_or(false) {
            return None;
        }
        Some(Terminal {
            saved: termios::tcgetattr(fd).ok(),
        })
    }

    /// Make `pgid` the foreground process group.
    pub fn give_to(&self, pgid: u32) {
        if let Ok(p) = i32::try_from(pgid) {
            let _ = unistd::tcsetpgrp(stdin_fd(), Pid::from_raw(p));
        }
    }

    /// Become the foreground group again and restore the modes the agent may have changed
    /// (a crashed CLI can leave the terminal raw, which safe mode cannot read from). What the
    /// ended CLI left unread goes: text phoenix pasted into a CLI that never reads its input
    /// (a custom CLI's startup context) would otherwise wait there, to be read as typed by
    /// safe mode's prompt or the next CLI.
    pub fn take_back(&self) {
        let fd = stdin_fd();
        let _ = unistd::tcsetpgrp(fd, unistd::getpgrp());
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(fd.as_fd(), SetArg::TCSANOW, saved);
        }
        discard_input();
    }
}

/// Throw away whatever waits unread in the terminal's input (when stdin is a terminal): only
/// what a person types after this counts. The wrapper ignores SIGTTOU, so this works from a
/// background group too.
pub fn discard_input() {
    let fd = stdin_fd();
    if unistd::isatty(fd).unwrap_or(false) {
        let _ = termios::tcflush(fd, termios::FlushArg::TCIFLUSH);
    }
}

/// Prepare `cmd` to run in its own process group that takes the terminal (if any) itself:
/// both sides call tcsetpgrp, as shells do, so there is no window in which the agent reads
/// from a terminal it does not own.
pub fn foreground(cmd: &mut Command, tty: bool) {
    cmd.process_group(0);
    // SAFETY: only async-signal-safe calls (getpid, tcsetpgrp, signal) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if tty {
                libc::tcsetpgrp(0, libc::getpid());
            }
            // Ignored signals stay ignored across exec; the agent gets the defaults back.
            for sig in [libc::SIGTTOU, libc::SIGTTIN, libc::SIGTSTP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}
