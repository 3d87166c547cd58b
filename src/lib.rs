//! phoenix: keeps a fleet of AI coding agents alive and on task in tmux.
//!
//! Data flows one way: `Spec + World → Plan → Apply → Events`.

pub mod agent_cli;
pub mod apply;
pub mod cli;
pub mod clinic;
pub mod context;
pub mod continuity;
pub mod controller;
pub mod demo;
pub mod diag;
pub mod error;
pub use error::Error;
pub mod hooks;
pub mod hosts;
pub mod intake;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod parallel;
pub mod plan;
pub mod policy;
pub mod process;
pub mod recovery;
pub mod render;
pub mod restart;
pub mod sandbox;
pub mod serve;
pub mod spec;
pub mod state;
pub mod status;
pub mod store;
pub mod supervise;
pub mod telemetry;
pub mod text;
pub mod top;
pub mod usage;
pub mod watchdog;
pub mod workspace;
pub mod world;
