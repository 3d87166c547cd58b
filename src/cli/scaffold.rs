//! `phoenix init`: scaffold phoenix.toml, policies/ and templates/ without clobbering.

use std::path::Path;

use anyhow::Context;

use super::out;

const EXAMPLE: &str = include_str!("../../phoenix.toml.example");

/// The example's socket line shows a placeholder; `init` fills in the fleet's own default.
const SOCKET_PLACEHOLDER: &str = "phoenix-research-<hash>";

/// The example, with the tmux socket this file will get by default spelled out: a unique
/// server per project, not one shared name.
fn example_for(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let id = crate::spec::fleet_id("research", &dir.join("phoenix.toml"));
    EXAMPLE.replace(SOCKET_PLACEHOLDER, &format!("phoenix-{id}"))
}

const POLICIES_README: &str = include_str!("../../policies/README.md");

const TEMPLATES_README: &str = "\
# templates/

Every text phoenix writes for people or agents (brief, handoff, startup context,
investigation report) is a minijinja template. Defaults ship inside the binary; a file here
with the same name overrides the default.
";

pub fn init(dir: &Path, force: bool) -> anyhow::Result<i32> {
    // The default policies stay in the binary (a copy here would pin them forever); the
    // fixtures are examples to run them with.
    let fixtures: Vec<(String, &str)> = crate::policy::fixture::EMBEDDED
        .iter()
        .map(|(name, text)| (format!("policies/fixtures/{name}"), *text))
        .collect();
    let example = example_for(dir);
    let mut files: Vec<(&str, &str)> = vec![
        ("phoenix.toml", &example),
        ("policies/README.md", POLICIES_README),
        ("templates/README.md", TEMPLATES_README),
    ];
    files.extend(fixtures.iter().map(|(n, t)| (n.as_str(), *t)));
    let existing: Vec<&str> = files
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| dir.join(name).exists())
        .collect();
    if !existing.is_empty() && !force {
        anyhow::bail!(
            "{} already exist{} in {}; nothing was written (use --force to overwrite)",
            existing.join(", "),
            if existing.len() == 1 { "s" } else { "" },
            dir.display()
        );
    }
    for &(name, content) in &files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, content)
            .with_context(|| format!("cannot write {}", path.display()))?;
        out(&format!("created {name}\n"));
    }
    out("\nNext: edit phoenix.toml, then `phoenix validate` and `phoenix plan`.\n");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaffold_names_its_own_derived_socket() {
        assert!(EXAMPLE.contains(SOCKET_PLACEHOLDER));
        assert!(EXAMPLE.contains("name = \"research\""));
        let one = example_for(Path::new("/srv/one"));
        let two = example_for(Path::new("/srv/two"));
        assert!(!one.contains(SOCKET_PLACEHOLDER));
        assert_ne!(one, two);
        let spec = crate::spec::parse(
            &one,
            Path::new("/srv/one/phoenix.toml"),
            crate::spec::LoadOptions {
                check_filesystem: false,
            },
        )
        .unwrap();
        assert!(one.contains(&format!("\"{}\"", spec.fleet.socket)));
    }
}
