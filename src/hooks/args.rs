//! The `phoenix hook …` command line: read in exactly the shape phoenix writes into hook
//! files without the full command-line parser (hooks run on every tool call), and the reply a
//! hook gives when even that fails.

use crate::spec::Cli;

use super::output::{self, Reply};

/// A `phoenix hook …` command line in exactly the shape phoenix writes into hook files,
/// understood without building the whole command-line parser: hooks run on every tool call.
#[derive(Debug, PartialEq, Eq)]
pub struct HookArgs {
    pub config: Option<std::path::PathBuf>,
    pub event: String,
    pub agent: String,
    pub cli: Option<String>,
    pub payload: Option<String>,
}

impl HookArgs {
    /// `None` for anything else (help, unknown flags, a missing `--agent`): the full parser
    /// then handles it, errors included.
    pub fn parse(args: &[String]) -> Option<HookArgs> {
        let mut config = None;
        let mut rest = args.iter();
        loop {
            match rest.next()?.as_str() {
                "-c" | "--config" => config = Some(rest.next()?.into()),
                a if a.starts_with("--config=") => config = Some(a["--config=".len()..].into()),
                "hook" => break,
                _ => return None,
            }
        }
        let (mut event, mut agent, mut cli, mut payload) = (None, None, None, None);
        while let Some(arg) = rest.next() {
            match arg.as_str() {
                "--agent" => agent = Some(rest.next()?.clone()),
                "--cli" => cli = Some(rest.next()?.clone()),
                "-c" | "--config" => config = Some(rest.next()?.into()),
                a if a.starts_with("--agent=") => agent = Some(a["--agent=".len()..].to_string()),
                a if a.starts_with("--cli=") => cli = Some(a["--cli=".len()..].to_string()),
                a if a.starts_with("--config=") => config = Some(a["--config=".len()..].into()),
                a if a.starts_with('-') => return None,
                a if event.is_none() => event = Some(a.to_string()),
                a if payload.is_none() => payload = Some(a.to_string()),
                _ => return None,
            }
        }
        Some(HookArgs {
            config,
            event: event?,
            agent: agent?,
            cli,
            payload,
        })
    }
}

/// Is this command line (without the program name) a `phoenix hook …` call?
pub fn is_hook_invocation(args: &[String]) -> bool {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-c" | "--config" => {
                rest.next();
            }
            a if a.starts_with("--config=") || a.starts_with('-') => {}
            a => return a == "hook",
        }
    }
    false
}

/// What a hook prints when even its command line could not be understood: the CLI's empty
/// reply, if `--cli` names one (Gemini's is `{}`: it parses stderr when stdout is empty).
pub fn fallback_output(args: &[String]) -> String {
    let named = args
        .windows(2)
        .find_map(|w| (w[0] == "--cli").then_some(w[1].as_str()));
    let cli = named
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--cli=")))
        .and_then(Cli::parse);
    output::render(cli, &Reply::Nothing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_invocations_are_recognised() {
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert!(is_hook_invocation(&args("--config /x hook heartbeat")));
        assert!(is_hook_invocation(&args("hook")));
        assert!(!is_hook_invocation(&args("-c hook plan")));
        assert!(!is_hook_invocation(&args("hooks show")));
        assert_eq!(fallback_output(&args("hook x --cli gemini")), "{}\n");
        assert_eq!(fallback_output(&args("hook x --cli codex")), "");
        assert_eq!(fallback_output(&args("hook x --cli=gemini")), "{}\n");
        assert_eq!(fallback_output(&args("hook x --cli nope")), "");
        assert_eq!(fallback_output(&args("hook x")), "");
    }

    fn parse(line: &str) -> Option<HookArgs> {
        HookArgs::parse(&line.split(' ').map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn the_shapes_phoenix_writes_are_understood() {
        let h = parse("--config /x/phoenix.toml hook heartbeat --agent a --cli claude").unwrap();
        assert_eq!(
            h.config.as_deref(),
            Some(std::path::Path::new("/x/phoenix.toml"))
        );
        assert_eq!((h.event.as_str(), h.agent.as_str()), ("heartbeat", "a"));
        assert_eq!(h.cli.as_deref(), Some("claude"));
        let h = parse("hook session-start --agent=b {\"x\":1}").unwrap();
        assert_eq!(h.payload.as_deref(), Some("{\"x\":1}"));
        assert!(h.config.is_none());
    }

    #[test]
    fn anything_else_goes_to_the_full_parser() {
        for line in [
            "hook heartbeat",
            "hook --help",
            "hook heartbeat --agent",
            "hook heartbeat --agent a --verbose",
            "status",
            "-v hook heartbeat --agent a",
            "hook a b c --agent x",
        ] {
            assert_eq!(parse(line), None, "{line}");
        }
    }
}
