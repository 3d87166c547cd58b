//! phoenix's integration tests, one crate so the suite links once: each module drives the real
//! binary against a real private tmux server (`support::Fleet`). Run one area with
//! `cargo test --test it fleet::`.

mod continuity;
mod dashboard;
mod fleet;
mod hooks;
mod hosts;
mod hosts_move;
mod hosts_move_apply;
mod hosts_plan;
mod hosts_reads;
mod hosts_trust;
mod hosts_views;
mod inert;
mod messages;
mod metrics;
mod needs_input;
mod policy;
mod real_claude_waits;
mod real_cli;
mod real_codex;
mod real_gemini;
mod real_messages;
mod scale;
mod serve;
mod supervise;
mod support;
mod telemetry;
mod top;
mod usage;
mod validate;
mod watchdog;
mod workspaces;
