//! Supervision: `phoenix wrap` keeps one agent alive inside its pane (hybrid resume, crash
//! limits, safe mode); `phoenix run` is the controller daemon that reconciles the fleet;
//! `phoenix restart` and `phoenix service install` are the operator's levers.

pub mod daemon;
pub mod decide;
pub mod record;
pub mod restart;
pub mod service;
pub mod term;
pub mod wrap;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crate::state::FleetDir;

pub use decide::{EndReason, ExitAction, ExitDecision, ExitFacts, StartMode, decide_on_exit};
pub use wrap::wrap;

/// The daemon's wake-up channel: a FIFO in the state dir (no socket path length limit, and
/// nothing to connect to when no daemon runs).
pub const DAEMON_FIFO: &str = "daemon.fifo";
pub const DAEMON_LOCK: &str = "daemon.lock";

pub fn fifo_path(fleet: &FleetDir) -> PathBuf {
    fleet.root.join(DAEMON_FIFO)
}

/// Tell a running daemon that something happened to `agent`, so it reconciles now rather than
/// at its next interval. Never blocks and never fails: without a daemon there is no reader and
/// the open fails with ENXIO, which is fine.
pub fn poke(fleet: &FleetDir, agent: &str) {
    let Ok(mut fifo) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo_path(fleet))
    else {
        return;
    };
    // One short write is atomic on a pipe (< PIPE_BUF), so lines from many wrappers never mix.
    let mut line = agent.as_bytes().to_vec();
    line.truncate(200);
    line.push(b'\n');
    let _ = fifo.write_all(&line);
}
