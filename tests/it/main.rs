//! phoenix's integration tests, one crate so the suite links once: each module drives the real
//! binary against a real private tmux server (`support::Fleet`). Run one area with
//! `cargo test --test it fleet::`.

mod bounds;
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
mod one_owner;
mod planted;
mod policy;
mod prompt;
mod real_claude_waits;
mod real_cli;
mod real_codex;
mod real_gemini;
mod real_messages;
mod real_resume;
mod scale;
mod screen_verdicts;
mod serve;
mod supervise;
mod support;
mod telemetry;
mod terminal;
mod top;
mod usage;
mod validate;
mod watchdog;
mod workspaces;
