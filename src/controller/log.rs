//! The controller's log: tracing to stderr (logs to stderr, data to stdout), human or JSON.

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

// `phoenix run`'s options (the command line's help is the `Run` variant's, in the CLI).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct RunOptions {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "human")]
    pub log_format: LogFormat,
    /// More log detail (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less log detail (-q warnings only, -qq errors only).
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    pub quiet: u8,
}

/// Logs to stderr, human or JSON, at the level `-v`/`-q` ask for.
pub fn init_tracing(options: RunOptions) {
    use tracing::Level;
    let level = match i16::from(options.verbose) - i16::from(options.quiet) {
        i16::MIN..=-2 => Level::ERROR,
        -1 => Level::WARN,
        0 => Level::INFO,
        1 => Level::DEBUG,
        _ => Level::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false);
    let _ = match options.log_format {
        LogFormat::Human => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
