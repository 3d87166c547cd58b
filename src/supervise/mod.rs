//! Supervision inside a pane: `phoenix wrap` keeps one agent alive (hybrid resume, crash
//! limits, safe mode), stops what it leaves running, and hands its exits to recovery. The
//! controller (`phoenix run`) lives in `crate::controller`.

pub mod service;
pub mod strays;
pub mod term;
pub mod wrap;

pub use wrap::wrap;
