//! `phoenix completions`, `phoenix man` and `phoenix schema`: files generated from phoenix's
//! own definitions (the clap command line, the spec's raw types), printed to stdout.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;

use super::{Cli, out};

/// A completion script for `shell`, from the same clap definitions that parse the command line.
/// bash's also completes the agents and hosts of the fleet file the command line names (`-c`,
/// else the default), asking `phoenix __complete agents|hosts` as the person presses Tab.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "phoenix", &mut script);
    let mut script = String::from_utf8(script)?;
    match shell {
        clap_complete::Shell::Bash => script.push_str(&bash_names(&Cli::command())),
        clap_complete::Shell::Fish => script.push_str(&fish_names(&Cli::command())),
        clap_complete::Shell::Zsh => script = zsh_names(&script, &Cli::command()),
        _ => {}
    }
    out(&script);
    Ok(0)
}

/// What a name argument names, by its id in the clap definitions (`agent`, `agents`, `host`)
/// or its value's name (`--to HOST`).
fn name_kind(arg: &clap::Arg) -> Option<NameKind> {
    let value = arg
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.as_str().to_string());
    match (arg.get_id().as_str(), value.as_deref()) {
        ("agent" | "agents", _) | (_, Some("AGENT")) => Some(NameKind::Agents),
        ("host" | "hosts", _) | (_, Some("HOST")) => Some(NameKind::Hosts),
        _ => None,
    }
}

/// The commands (as `loop/list`) and which names their positional arguments take, and the
/// options (`--agent`) whose values are names: read from the clap tree, so a new command
/// that takes an agent completes it without a line here.
#[derive(Default)]
struct NameArgs {
    commands: Vec<String>,
    positional: Vec<(String, NameKind)>,
    options: std::collections::BTreeMap<String, NameKind>,
}

fn name_args(command: &clap::Command, path: &str, found: &mut NameArgs) {
    for arg in command.get_arguments() {
        let Some(kind) = name_kind(arg) else {
            continue;
        };
        if arg.is_positional() {
            if !path.is_empty() && !found.positional.iter().any(|(p, _)| p == path) {
                found.positional.push((path.to_string(), kind));
            }
        } else if let Some(long) = arg.get_long() {
            found.options.insert(format!("--{long}"), kind);
        }
    }
    for sub in command.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let path = if path.is_empty() {
            sub.get_name().to_string()
        } else {
            format!("{path}/{}", sub.get_name())
        };
        found.commands.push(path.clone());
        name_args(sub, &path, found);
    }
}

/// The bash functions that put the fleet's names in front of clap's completion: the
/// command's path is walked as clap's own function walks it, after `--` nothing is a name.
fn bash_names(command: &clap::Command) -> String {
    let mut found = NameArgs::default();
    name_args(command, "", &mut found);
    let patterns = |kind: NameKind| -> String {
        let paths: Vec<&str> = found
            .positional
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(p, _)| p.as_str())
            .collect();
        paths.join("|")
    };
    let options = |kind: NameKind| -> String {
        let names: Vec<&str> = found
            .options
            .iter()
            .filter(|(_, k)| **k == kind)
            .map(|(o, _)| o.as_str())
            .collect();
        names.join("|")
    };
    let mut case_options = String::new();
    let mut case_paths = String::new();
    for kind in [NameKind::Agents, NameKind::Hosts] {
        let word = kind.word();
        if !options(kind).is_empty() {
            case_options.push_str(&format!("        {}) kind={word} ;;\n", options(kind)));
        }
        if !patterns(kind).is_empty() {
            case_paths.push_str(&format!("            {}) kind={word} ;;\n", patterns(kind)));
        }
    }
    format!(
        r#"
# The fleet's own names (agents, hosts), from the phoenix.toml the command line names.
_phoenix_fleet_names() {{
    local i config=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -c|--config) config=(--config "${{COMP_WORDS[i+1]}}") ;;
            --config=*) config=("${{COMP_WORDS[i]}}") ;;
        esac
    done
    "${{COMP_WORDS[0]}}" "${{config[@]}}" __complete "$1" 2>/dev/null
}}

_phoenix_with_names() {{
    _phoenix "$@"
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" kind="" path="" word i
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    case "$prev" in
{case_options}    esac
    if [[ -z "$kind" && "$cur" != -* ]]; then
        for ((i = 1; i < COMP_CWORD; i++)); do
            word="${{COMP_WORDS[i]}}"
            [[ "$word" == -- ]] && path="" && break
            case "|{commands}|" in
                *"|${{path:+$path/}}$word|"*) path="${{path:+$path/}}$word" ;;
            esac
        done
        case "$path" in
{case_paths}        esac
    fi
    if [[ -n "$kind" ]]; then
        local IFS=$'\n'
        COMPREPLY=($(compgen -W "$(_phoenix_fleet_names "$kind")" -- "$cur"))
    fi
}}

if [[ "${{BASH_VERSINFO[0]}}" -eq 4 && "${{BASH_VERSINFO[1]}}" -ge 4 || "${{BASH_VERSINFO[0]}}" -gt 4 ]]; then
    complete -F _phoenix_with_names -o nosort -o bashdefault -o default phoenix
else
    complete -F _phoenix_with_names -o bashdefault -o default phoenix
fi
"#,
        commands = found.commands.join("|"),
    )
}

/// The fish completions of the fleet's names, after clap's own: for each command path that
/// takes a name (`status`, `loop add`) and each option whose value is one (`--to`).
fn fish_names(command: &clap::Command) -> String {
    let mut found = NameArgs::default();
    name_args(command, "", &mut found);
    let mut text = String::from(
        r#"
# The fleet's own names (agents, hosts), from the phoenix.toml the command line names.
function __phoenix_fleet_names
    set -l words (commandline -opc)
    set -l config
    for i in (seq 2 (count $words))
        switch $words[$i]
            case -c --config
                set config --config $words[(math $i + 1)]
            case '--config=*'
                set config $words[$i]
        end
    end
    $words[1] $config __complete $argv[1] 2>/dev/null
end

"#,
    );
    for (path, kind) in &found.positional {
        let mut parts = path.split('/');
        let Some(top) = parts.next() else { continue };
        let mut condition = format!("__fish_phoenix_using_subcommand {top}");
        for sub in parts {
            condition.push_str(&format!("; and __fish_seen_subcommand_from {sub}"));
        }
        text.push_str(&format!(
            "complete -c phoenix -n \"{condition}\" -f -a \"(__phoenix_fleet_names {})\"\n",
            kind.word()
        ));
    }
    for (option, kind) in &found.options {
        text.push_str(&format!(
            "complete -c phoenix -l {} -x -a \"(__phoenix_fleet_names {})\"\n",
            option.trim_start_matches('-'),
            kind.word()
        ));
    }
    text
}

/// clap's zsh completion with the fleet's names where an argument is one: its `_default`
/// action (anything) becomes a function asking `phoenix __complete`. The functions go in
/// before the script's last lines, which run `_phoenix` when the file is autoloaded.
fn zsh_names(script: &str, command: &clap::Command) -> String {
    let mut found = NameArgs::default();
    name_args(command, "", &mut found);
    let function = |kind: NameKind| match kind {
        NameKind::Agents => "_phoenix_fleet_agents",
        NameKind::Hosts => "_phoenix_fleet_hosts",
    };
    // `'::agent -- help:_default' \` (a positional, by its id) or `'*--host=[help]:NAME:_default' \`.
    let action = |line: &str| -> Option<&'static str> {
        let spec = line.trim_end().strip_suffix(":_default' \\")?;
        let spec = spec.strip_prefix('\'')?.trim_start_matches('*');
        if let Some(positional) = spec.strip_prefix(':') {
            let id = positional.trim_start_matches(':').split(" -- ").next()?;
            return match id {
                "agent" | "agents" => Some(function(NameKind::Agents)),
                "host" | "hosts" => Some(function(NameKind::Hosts)),
                _ => None,
            };
        }
        let option = spec.split(['=', '+', '[']).next()?;
        found.options.get(option).map(|kind| function(*kind))
    };
    let mut text = String::with_capacity(script.len() + 1024);
    for line in script.lines() {
        match action(line) {
            Some(function) => {
                let cut = line.rfind(":_default'").unwrap_or(line.len());
                text.push_str(&line[..cut]);
                text.push(':');
                text.push_str(function);
                text.push_str(&line[cut + ":_default".len()..]);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    const FUNCTIONS: &str = r#"
# The fleet's own names (agents, hosts), from the phoenix.toml the command line names (read
# from the whole line: _arguments narrows `words` to each subcommand's own).
_phoenix_fleet_names() {
    local -a line config names
    local i
    line=(${(Q)${(z)BUFFER}})
    for ((i = 2; i <= ${#line}; i++)); do
        case ${line[i]} in
            -c|--config) config=(--config "${line[i+1]}") ;;
            --config=*) config=("${line[i]}") ;;
        esac
    done
    names=(${(f)"$(${line[1]} $config __complete $1 2>/dev/null)"})
    compadd -a names
}
_phoenix_fleet_agents() { _phoenix_fleet_names agents }
_phoenix_fleet_hosts() { _phoenix_fleet_names hosts }

"#;
    match text.rfind("if [ \"$funcstack[1]\" = \"_phoenix\" ]") {
        Some(at) => text.insert_str(at, FUNCTIONS.trim_start()),
        None => text.push_str(FUNCTIONS),
    }
    text
}

/// The names `phoenix __complete` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NameKind {
    Agents,
    Hosts,
}

impl NameKind {
    fn word(self) -> &'static str {
        match self {
            NameKind::Agents => "agents",
            NameKind::Hosts => "hosts",
        }
    }
}

/// `phoenix __complete agents|hosts`: the names declared in the fleet file, one a line, for
/// the completion script. Nothing (and 0) when the file cannot be read: a Tab press prints no
/// error into the person's command line.
pub fn names(config: &Path, kind: NameKind) -> i32 {
    let Ok(spec) = super::load_without_fs_checks(config) else {
        return 0;
    };
    let names: Vec<&str> = match kind {
        NameKind::Agents => spec
            .agents
            .iter()
            .map(|a| a.name.as_str())
            .chain(spec.remote_agents.iter().map(|a| a.name.as_str()))
            .collect(),
        NameKind::Hosts => spec.hosts.iter().map(|h| h.name.as_str()).collect(),
    };
    let mut text = String::new();
    for name in names {
        text.push_str(name);
        text.push('\n');
    }
    out(&text);
    0
}

/// The man page (roff): `phoenix man | man -l -`; with `dir`, a page for each command
/// written there instead (`phoenix.1`, `phoenix-apply.1`, `phoenix-hosts-check.1`, …).
pub fn man(dir: Option<&Path>) -> anyhow::Result<i32> {
    let Some(dir) = dir else {
        out(&String::from_utf8(page(false))?);
        return Ok(0);
    };
    let written = man_pages(dir)
        .with_context(|| format!("cannot write the man pages to `{}`", dir.display()))?;
    out(&format!(
        "wrote {} man pages to {} (phoenix.1, phoenix-init.1, …)\n",
        written.len(),
        dir.display()
    ));
    Ok(0)
}

/// The command line as the man pages show it: no `help` command at any level (the page is
/// the help), built so that each command has its full name (`phoenix-hosts-check`).
fn man_command() -> clap::Command {
    fn without_help(command: clap::Command) -> clap::Command {
        command
            .disable_help_subcommand(true)
            .mut_subcommands(without_help)
    }
    let mut command = without_help(Cli::command());
    command.build();
    command
}

/// phoenix's own page: clap_mangen's sections, with the commands grouped as `--help` groups
/// them. With `pages`, each names its own page (`phoenix-apply(1)`); without, the single page
/// names no page that is not there and says how to get them.
fn page(pages: bool) -> Vec<u8> {
    let command = man_command();
    let man = clap_mangen::Man::new(command.clone());
    let mut roff = roff::Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for (group, names) in super::help::GROUPS {
        roff.control("SS", [*group]);
        for name in *names {
            let Some(sub) = command.find_subcommand(name) else {
                continue;
            };
            roff.control("TP", []);
            roff.text([roff::bold(if pages {
                format!("{}(1)", sub.get_display_name().unwrap_or(name))
            } else {
                format!("phoenix {name}")
            })]);
            if let Some(about) = sub.get_about() {
                roff.text([roff::roman(about.to_string())]);
            }
        }
    }
    roff.control("PP", []);
    roff.text([roff::roman(if pages {
        "Each command's page tells its options and its own commands."
    } else {
        "Each command's options: phoenix COMMAND --help. A page for each command: \
         phoenix man --dir DIR (e.g. ~/.local/share/man/man1)."
    })]);
    let commands = roff.render();

    let mut text = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = man.render_title(&mut text);
    for section in [
        clap_mangen::Man::render_name_section,
        clap_mangen::Man::render_synopsis_section,
        clap_mangen::Man::render_description_section,
        clap_mangen::Man::render_options_section,
    ] {
        let _ = section(&man, &mut text);
    }
    text.extend_from_slice(commands.as_bytes());
    let _ = man.render_extra_section(&mut text);
    let _ = man.render_version_section(&mut text);
    strip_repeated_preambles(text)
}

/// Each of clap_mangen's section renderers starts with roff's apostrophe preamble: the page
/// keeps the first.
fn strip_repeated_preambles(text: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(text).unwrap_or_default();
    let preamble = roff::Roff::new().render();
    let body = text.replace(&preamble, "");
    format!("{preamble}{body}").into_bytes()
}

/// phoenix.1 and a page for each visible command, at every level, in `dir` (created if
/// missing); the files written.
fn man_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn write(
        command: &clap::Command,
        dir: &Path,
        written: &mut Vec<PathBuf>,
    ) -> std::io::Result<()> {
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            written.push(clap_mangen::Man::new(sub.clone()).generate_to(dir)?);
            write(sub, dir, written)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    let root = dir.join("phoenix.1");
    std::fs::write(&root, page(true))?;
    let mut written = vec![root];
    write(&man_command(), dir, &mut written)?;
    Ok(written)
}

/// The JSON Schema of phoenix.toml, for editors.
pub fn schema() -> anyhow::Result<i32> {
    out(&format!(
        "{}\n",
        serde_json::to_string_pretty(&crate::spec::schema::json_schema())?
    ));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages `text` names, as `phoenix-apply` for `phoenix\-apply(1)`.
    fn references(text: &str) -> Vec<String> {
        let mut text = text.replace("\\-", "-");
        for font in ["\\fB", "\\fI", "\\fR", "\\fP"] {
            text = text.replace(font, "");
        }
        text.match_indices("(1)")
            .map(|(end, _)| {
                let start = text[..end]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .map_or(0, |i| i + 1);
                text[start..end].to_string()
            })
            .collect()
    }

    #[test]
    fn every_page_a_page_names_is_written_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let written = man_pages(dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for page in [
            "phoenix.1",
            "phoenix-apply.1",
            "phoenix-hosts-check.1",
            "phoenix-version.1",
        ] {
            assert!(names.iter().any(|n| n == page), "{page} not in {names:?}");
        }
        for internal in [
            "phoenix-wrap.1",
            "phoenix-hook.1",
            "phoenix-tap.1",
            "phoenix-help.1",
        ] {
            assert!(!dir.path().join(internal).exists(), "{internal}");
        }
        let mut named = 0;
        for path in &written {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.starts_with(".ie \\n(.g"), "{}", path.display());
            for reference in references(&text) {
                named += 1;
                assert!(
                    dir.path().join(format!("{reference}.1")).exists(),
                    "{} names {reference}(1), which is not there",
                    path.display()
                );
            }
        }
        let root = std::fs::read_to_string(dir.path().join("phoenix.1")).unwrap();
        assert!(references(&root).contains(&"phoenix-apply".to_string()));
        assert!(named > written.len() / 2, "{named}");
    }

    #[test]
    fn the_single_page_names_no_other_page() {
        let text = String::from_utf8(page(false)).unwrap();
        assert_eq!(references(&text), Vec::<String>::new());
        assert_eq!(text.matches(".ie \\n(.g").count(), 1, "{text}");
        for part in [
            ".TH phoenix 1",
            ".SH COMMANDS",
            ".SS Fleet",
            "\\fBphoenix apply\\fR",
            "man \\-\\-dir",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(!text.contains("phoenix wrap"), "{text}");
    }
}
