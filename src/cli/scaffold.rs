//! `phoenix init`: scaffold phoenix.toml, policies/ and templates/ without clobbering.

use std::path::Path;

use anyhow::Context;

use super::out;

const EXAMPLE: &str = include_str!("../../phoenix.toml.example");

const POLICIES_README: &str = "\
# policies/

Recovery decisions as Lua. phoenix ships default policies inside its binary; a file here
with the same name overrides the default. See `phoenix policy --help`.
";

const TEMPLATES_README: &str = "\
# templates/

Every text phoenix writes for people or agents (brief, handoff, startup context,
investigation report) is a minijinja template. Defaults ship inside the binary; a file here
with the same name overrides the default.
";

pub fn init(dir: &Path, force: bool) -> anyhow::Result<i32> {
    let files = [
        ("phoenix.toml", EXAMPLE),
        ("policies/README.md", POLICIES_README),
        ("templates/README.md", TEMPLATES_README),
    ];
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
    for (name, content) in files {
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
