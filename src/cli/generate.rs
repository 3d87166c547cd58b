//! `phoenix completions`, `phoenix man` and `phoenix schema`: files generated from phoenix's
//! own definitions (the clap command line, the spec's raw types), printed to stdout.

use clap::CommandFactory;

use super::{Cli, out};

/// A completion script for `shell`, from the same clap definitions that parse the command line.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "phoenix", &mut script);
    out(&String::from_utf8(script)?);
    Ok(0)
}

/// The man page (roff): `phoenix man | man -l -`.
pub fn man() -> anyhow::Result<i32> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    out(&String::from_utf8(page)?);
    Ok(0)
}

/// The JSON Schema of phoenix.toml, for editors.
pub fn schema() -> anyhow::Result<i32> {
    out(&format!(
        "{}\n",
        serde_json::to_string_pretty(&crate::spec::schema::json_schema())?
    ));
    Ok(0)
}
