//! The import rules between the top-level modules, checked over the source: printing and
//! argument parsing live in `cli/` and nothing below it reaches up into it; `anyhow` is the
//! CLI edge's alone (the library returns `crate::Error`); only `cli/` prints (the library
//! writes to what the edge hands it); the state layer imports nothing above it; nothing below
//! the controller imports it; the generic rooms take no helpers from the Clinic.

use std::path::Path;

/// `(module, modules it must not import)`; `*` is every module but `cli` itself.
const RULES: &[(&str, &[&str])] = &[
    ("*", &["cli"]),
    (
        "state",
        &[
            "spec",
            "clinic",
            "watchdog",
            "supervise",
            "serve",
            "notify",
            "continuity",
            "controller",
            "restart",
        ],
    ),
    // The controller (`phoenix run`) is woken through `state::daemon::poke`, never imported
    // from below; the restart verb sits on the apply floor.
    ("recovery", &["controller"]),
    ("watchdog", &["controller"]),
    ("supervise", &["controller"]),
    (
        "restart",
        &["controller", "supervise", "watchdog", "serve", "top"],
    ),
    ("apply", &["controller", "restart"]),
    ("plan", &["controller", "restart"]),
    ("world", &["controller", "restart"]),
    // The exporter is fed by the controller (its journal, its passes); it knows nothing above
    // the spec and the state it reads.
    (
        "telemetry",
        &[
            "controller",
            "recovery",
            "watchdog",
            "supervise",
            "serve",
            "top",
            "apply",
            "plan",
        ],
    ),
    ("process", &["clinic"]),
    ("notify", &["clinic"]),
    ("serve", &["clinic"]),
    // `/metrics` reads the fleet; the servers that answer it (serve, the daemon's listener)
    // sit above it.
    ("metrics", &["controller", "serve", "top", "clinic"]),
];

/// Files below `cli/` that write to the terminal themselves, and why that is their own channel.
const OWN_SCREEN: &[(&str, &str)] = &[
    (
        "supervise/wrap/mod.rs",
        "the wrapper runs in its pane: its stdout is the pane a person reads and answers",
    ),
    (
        "supervise/wrap/safe.rs",
        "safe mode's prompt is the wrapper's own pane, read and answered by a person",
    ),
];

/// The top-level modules a source file names through `crate::` (comments left out).
fn imports(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                // `use crate::{cli, state::Op}`: each item's first segment.
                Some(list) => list
                    .split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|item| item.trim().split("::").next().unwrap_or(""))
                    .collect(),
                None => vec![rest],
            };
            for name in names {
                let end = name
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                found.push(name[..end].to_string());
            }
        }
    }
    found
}

/// Whether code (not a comment) names the `anyhow` crate.
fn uses_anyhow(text: &str) -> bool {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .any(|code| code.contains("anyhow::") || code.contains("anyhow!"))
}

/// Whether code outside the unit tests writes to stdout or stderr itself (asking whether one is
/// a terminal is not writing).
fn prints(text: &str) -> bool {
    text.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .map(|line| line.split("//").next().unwrap_or(""))
        .any(|code| {
            ["print!(", "println!(", "eprint!(", "eprintln!("]
                .iter()
                .any(|m| code.contains(m))
                || ["stdout()", "stderr()"]
                    .iter()
                    .any(|s| code.contains(s) && !code.contains(".is_terminal()"))
        })
}

#[test]
fn no_module_imports_what_it_must_not() {
    let mut broken = Vec::new();
    for (rel, text) in crate::text::crate_sources() {
        let rel = Path::new(&rel);
        let module = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or("")
            .trim_end_matches(".rs");
        if ["cli", "main", "lib", "bin"].contains(&module) {
            continue;
        }
        if prints(&text) && !OWN_SCREEN.iter().any(|(f, _)| Path::new(f) == rel) {
            broken.push(format!(
                "src/{}: prints (only cli/ prints: take a writer from the edge)",
                rel.display()
            ));
        }
        if uses_anyhow(&text) {
            broken.push(format!(
                "src/{}: anyhow (return crate::Error; anyhow is for cli/ only)",
                rel.display()
            ));
        }
        for import in imports(&text) {
            let forbidden = RULES
                .iter()
                .filter(|(who, _)| *who == "*" || *who == module)
                .any(|(_, banned)| banned.contains(&import.as_str()));
            if forbidden {
                broken.push(format!("src/{}: crate::{import}", rel.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layering:\n{}",
        broken.join("\n")
    );
}

#[test]
fn anyhow_is_found_in_code_not_in_comments() {
    assert!(uses_anyhow("use anyhow::Context;"));
    assert!(uses_anyhow("fn f() -> anyhow::Result<()> {"));
    assert!(!uses_anyhow("/// as anyhow prints it: `{:#}`"));
}

#[test]
fn printing_is_found_in_code_not_in_tests_or_terminal_checks() {
    assert!(prints("    println!(\"x\");"));
    assert!(prints("eprintln!(\"phoenix hook: {e}\");"));
    assert!(prints("let mut out = std::io::stdout().lock();"));
    assert!(!prints("if !std::io::stdout().is_terminal() {"));
    assert!(!prints("// println!(\"in a comment\")"));
    assert!(!prints(
        "#[cfg(test)]\nmod tests {\n    eprintln!(\"skipped\");\n}"
    ));
}

#[test]
fn imports_are_found_in_paths_and_lists() {
    let text = "use crate::cli::out;\nuse crate::{clinic, state::Op};\n// crate::cli in a comment\nlet x = crate::text::shorten(a, 3);";
    assert_eq!(imports(text), ["cli", "clinic", "state", "text"]);
}

/// The top-level modules and the ones each imports outside its unit tests (`cli`, `main`,
/// `lib` and `bin` left out: they are the edge).
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for (rel, text) in crate::text::crate_sources() {
        let module = rel
            .split('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if ["cli", "main", "lib", "bin"].contains(&module.as_str()) {
            continue;
        }
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(imports(code).into_iter().filter(|m| *m != module));
    }
    let modules: std::collections::BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// A path that leads from `from` back to `from`, if there is one.
fn cycle_through(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    from: &str,
) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in graph.get(last).into_iter().flatten() {
            if next == from {
                return Some([path.clone(), vec![from.to_string()]].concat());
            }
            if seen.insert(next.clone()) {
                stack.push([path.clone(), vec![next.clone()]].concat());
            }
        }
    }
    None
}

/// Imports flow one way: a module that imports, directly or not, one that imports it back
/// ties both into one room (the renovation removed the last such cycle).
#[test]
fn the_top_level_modules_import_each_other_in_no_cycle() {
    let graph = module_graph();
    assert!(graph.len() > 20, "{graph:?}");
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .map(|path| path.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn a_cycle_is_found() {
    let graph = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .fold(
            std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new(),
            |mut g, (from, to)| {
                g.entry(from.into()).or_default().insert(to.into());
                g
            },
        );
    assert_eq!(cycle_through(&graph, "a").unwrap(), ["a", "b", "c", "a"]);
    assert!(cycle_through(&graph, "d").is_none());
}

/// The files of `cli/` that take stdout or stderr themselves, and why that is not the
/// operator's terminal reading text from outside phoenix.
const OWN_STREAMS: &[(&str, &str)] = &[
    ("cli/output.rs", "the one writer"),
    ("cli/hook.rs", "the hook protocol: JSON for the agent CLI"),
    ("cli/mod.rs", "`demo-agent`, the program of a pane"),
    ("cli/events.rs", "asks whether stdout's reader is gone"),
    ("cli/fleet.rs", "flushes the apply prompt"),
    ("cli/layers.rs", "these checks, which name the streams"),
];

#[test]
fn the_cli_prints_through_the_one_writer_that_makes_outside_text_inert() {
    let sources = crate::text::crate_sources();
    let mut broken = Vec::new();
    for (rel, text) in &sources {
        let takes_a_stream = text
            .lines()
            .take_while(|line| line.trim() != "#[cfg(test)]")
            .map(|line| line.split("//").next().unwrap_or(""))
            .any(|code| {
                ["stdout()", "stderr()"]
                    .iter()
                    .any(|s| code.contains(s) && !code.contains(".is_terminal()"))
            });
        if rel.starts_with("cli/") && takes_a_stream && !OWN_STREAMS.iter().any(|(f, _)| f == rel) {
            broken.push(format!(
                "src/{rel}: writes to a stream itself (use output::out/err)"
            ));
        }
    }
    let (_, cli) = sources.iter().find(|(rel, _)| rel == "cli/mod.rs").unwrap();
    let first_module = cli.find("\nmod ").unwrap();
    for name in ["print", "println", "eprint", "eprintln"] {
        let defined = cli.find(&format!("macro_rules! {name} {{"));
        if defined.is_none_or(|at| at >= first_module) {
            broken.push(format!(
                "src/cli/mod.rs: `{name}!` is not output's before the first `mod`"
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
