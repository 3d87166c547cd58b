//! `phoenix --help`: the commands grouped by what they are for. clap lists subcommands in one
//! block, so the top-level help template gets the groups rendered from the command list
//! itself (each command's own about); a test keeps every visible command in one group.

use clap::CommandFactory;

use super::Cli;

/// The groups of `phoenix --help`, in order, each with its commands in order.
pub(super) const GROUPS: &[(&str, &[&str])] = &[
    (
        "Fleet",
        &["plan", "apply", "run", "down", "serve", "mcp", "hosts"],
    ),
    (
        "Agents",
        &[
            "start", "stop", "restart", "move", "attach", "exec", "sandbox",
        ],
    ),
    ("Inspect", &["status", "top", "logs", "events", "usage"]),
    (
        "Context & messages",
        &[
            "send", "inbox", "wait", "ledger", "handoff", "brief", "loop", "resolve", "state",
            "reindex",
        ],
    ),
    (
        "Health & recovery",
        &["watchdog", "clinic", "policy", "notify"],
    ),
    (
        "Setup",
        &[
            "init",
            "validate",
            "doctor",
            "service",
            "hooks",
            "completions",
            "man",
            "schema",
            "version",
            "help",
        ],
    ),
];

/// Help lines are wrapped to this width (clap's own, without a terminal to measure).
const WIDTH: usize = 100;

/// The command line as clap parses it, with the grouped list in the top-level help.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    // Built, so that clap's own `help` subcommand is there to be listed.
    command.build();
    let groups = grouped(&command);
    let header = command.get_styles().get_header();
    let template = format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}\n\
         {}Options:{}\n{{options}}{{after-help}}",
        header.render(),
        header.render_reset()
    );
    command.help_template(template)
}

/// Every group with its commands: name, then the first sentence of its about.
fn grouped(command: &clap::Command) -> String {
    let styles = command.get_styles();
    let (header, literal) = (styles.get_header(), styles.get_literal());
    let name_width = GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter().map(|n| n.len()))
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for (group, names) in GROUPS {
        text.push_str(&format!(
            "{}{group}:{}\n",
            header.render(),
            header.render_reset()
        ));
        for name in *names {
            let about = command
                .find_subcommand(name)
                .and_then(|c| c.get_about())
                .map(|a| first_sentence(&a.to_string()))
                .unwrap_or_default();
            let indent = 2 + name_width + 2;
            text.push_str(&format!(
                "  {}{name:name_width$}{}  {}\n",
                literal.render(),
                literal.render_reset(),
                wrap(&about, indent, WIDTH)
            ));
        }
        text.push('\n');
    }
    // The template's own line ends the last group.
    text.pop();
    text
}

/// Up to the end of the first sentence, a `.` before a capital (`e.g. \`phoenix` goes on):
/// the rest is in the command's own help.
fn first_sentence(about: &str) -> String {
    let about = about.split_whitespace().collect::<Vec<_>>().join(" ");
    let end = about
        .match_indices(". ")
        .map(|(i, _)| i)
        .find(|&i| about[i + 2..].starts_with(|c: char| c.is_ascii_uppercase()));
    match end {
        Some(end) => about[..end].to_string(),
        None => about.trim_end_matches('.').to_string(),
    }
}

/// `text` in lines of at most `width` columns, the later ones indented by `indent` (the
/// first starts there already).
fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && indent + line.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join(&format!("\n{}", " ".repeat(indent)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visible(command: &clap::Command) -> Vec<String> {
        command
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name().to_string())
            .collect()
    }

    #[test]
    fn every_visible_command_is_in_exactly_one_group() {
        let command = command();
        for name in visible(&command) {
            let groups: Vec<_> = GROUPS
                .iter()
                .filter(|(_, names)| names.contains(&name.as_str()))
                .map(|(group, _)| *group)
                .collect();
            assert_eq!(
                groups.len(),
                1,
                "`{name}` is in {groups:?}: add it to one group of cli/help.rs GROUPS"
            );
        }
        for (group, names) in GROUPS {
            for name in *names {
                let listed = command.find_subcommand(name);
                assert!(
                    listed.is_some_and(|c| !c.is_hide_set()),
                    "{group}: `{name}` is not a visible command"
                );
            }
        }
    }

    #[test]
    fn the_help_shows_the_groups_and_not_the_internal_commands() {
        let help = command().render_help().to_string();
        for heading in [
            "Fleet:",
            "Agents:",
            "Inspect:",
            "Context & messages:",
            "Health & recovery:",
            "Setup:",
            "Options:",
            "Exit codes:",
        ] {
            assert!(
                help.contains(&format!("\n{heading}\n")),
                "{heading}: {help}"
            );
        }
        assert!(!help.contains("\nCommands:"), "{help}");
        assert!(
            help.contains("  apply        Converge the fleet on phoenix.toml\n"),
            "{help}"
        );
        // The first sentence, and all of it.
        assert!(
            help.contains("  restart      Restart agents on purpose: clears `.clean-exit` and their crash quarantine\n"),
            "{help}"
        );
        assert!(
            help.contains("  completions  Print a shell completion script, e.g. `phoenix"),
            "{help}"
        );
        assert!(help.contains("\n\nOptions:\n"), "{help}");
        assert!(!help.contains("\n\n\n"), "{help}");
        for internal in [
            "wrap",
            "hook",
            "tap",
            "host",
            "sandbox-inner",
            "sandbox-canary",
            "demo-agent",
        ] {
            assert!(
                !help.contains(&format!("\n  {internal} ")),
                "{internal}: {help}"
            );
        }
        let groups = &help[..help.find("\nOptions:").unwrap()];
        for line in groups.lines() {
            assert!(line.chars().count() <= WIDTH, "too wide: {line}");
        }
    }

    #[test]
    fn internal_commands_stay_callable() {
        for argv in [
            &["phoenix", "wrap", "--agent", "a"][..],
            &["phoenix", "hook", "--help"],
            &["phoenix", "tap", "--agent", "a"],
            &["phoenix", "host"],
            &["phoenix", "demo-agent", "--help"],
        ] {
            let parsed = command().try_get_matches_from(argv);
            let ok = match &parsed {
                Ok(_) => true,
                Err(e) => e.kind() == clap::error::ErrorKind::DisplayHelp,
            };
            assert!(ok, "{argv:?}: {parsed:?}");
        }
    }
}
