//! One hook call run from its parsed arguments: shared by `phoenix hook` (its fast path and
//! clap's) and the `phoenix-hook` binary, so the three resolve the config and call the hook
//! the same way.

use std::path::PathBuf;

use crate::hooks::HookArgs;

// `phoenix hook`'s arguments as clap reads them (the help is the `Hook` variant's).
#[derive(Debug, clap::Args)]
pub struct HookCall {
    /// session-start, prompt, heartbeat, tool-error, pre-tool, pre-compact, stop,
    /// turn-failed, turn-complete, session-end
    pub event: String,
    #[arg(long)]
    pub agent: String,
    /// The calling CLI (claude, codex, gemini, pi, custom): decides the output format even when
    /// phoenix.toml cannot be read. Default: the agent's `cli`.
    #[arg(long)]
    pub cli: Option<String>,
    /// Payload as an argument instead of stdin (Codex `notify` passes it this way).
    pub payload: Option<String>,
}

impl HookCall {
    /// The call with the config clap resolved for it.
    pub fn with_config(self, config: PathBuf) -> HookArgs {
        HookArgs {
            config: Some(config),
            event: self.event,
            agent: self.agent,
            cli: self.cli,
            payload: self.payload,
        }
    }
}

/// The fleet spec a hook call reads: its `--config`, else `$PHOENIX_CONFIG`, else
/// `phoenix.toml` (what clap resolves for the other commands).
pub fn config(hook: &HookArgs) -> PathBuf {
    hook.config
        .clone()
        .or_else(|| std::env::var_os("PHOENIX_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(crate::spec::DEFAULT_CONFIG))
}

/// Run the hook, its answer on stdout and its complaints on stderr; the exit code it means.
pub fn run(hook: HookArgs) -> i32 {
    let config = config(&hook);
    crate::hooks::run(
        &config,
        &hook.event,
        &hook.agent,
        hook.cli.as_deref(),
        hook.payload,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )
}
