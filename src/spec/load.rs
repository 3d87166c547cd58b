//! Reading phoenix.toml: from a file (bounded, never through a FIFO), for hooks, from the
//! last good copy; and parsing it into a `Spec` with every problem reported at once.

use std::path::{Path, PathBuf};

use toml::de::DeTable;

use super::paths::absolute;
use super::raw::RawSpec;
use super::{Spec, keys, validate};
use crate::diag::{Diagnostic, FileDiagnostics};

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(FileDiagnostics),
}

impl LoadError {
    pub fn hint(&self) -> Option<String> {
        match self {
            LoadError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Some(
                "run `phoenix init` to create one, or point to it with --config / PHOENIX_CONFIG"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// What loading checks beyond the file itself.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Check that workdirs exist. Hooks skip this: they must work even if a workdir moved.
    pub check_filesystem: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            check_filesystem: true,
        }
    }
}

/// The digest (`state::digest`) of a config file's bytes: which edit of it a daemon runs and
/// an apply applied (`state::applied`). `None` when it cannot be read.
pub fn file_digest(path: &Path) -> Option<String> {
    use crate::state::bounded::{Links, read_whole};
    read_whole(path, super::MAX_CONFIG_BYTES, Links::Follow)
        .ok()
        .map(|bytes| crate::state::digest(&bytes))
}

pub fn load(path: &Path) -> Result<Spec, LoadError> {
    load_with(path, LoadOptions::default())
}

pub fn load_with(path: &Path, options: LoadOptions) -> Result<Spec, LoadError> {
    load_inner(path, options, true)
}

/// The spec as `phoenix hook` needs it, on every tool call: no filesystem checks, and
/// `[schedules]` left unparsed (`Spec::schedules` is empty). Hooks never schedule anything,
/// and a typo in a cron expression must not stop every agent's state tracking.
pub fn load_for_hook(path: &Path) -> Result<Spec, LoadError> {
    load_inner(path, HOOK, false)
}

/// What a hook checks beyond the file: nothing (see [`load_for_hook`]).
const HOOK: LoadOptions = LoadOptions {
    check_filesystem: false,
};

/// `source` read as [`load_for_hook`] reads its file.
pub(super) fn parse_for_hook(source: &str, file: &Path) -> Result<Spec, FileDiagnostics> {
    parse_inner(source, file, HOOK, false, None)
}

/// The copy of the last valid phoenix.toml that wrappers keep in the fleet's state dir.
pub const LAST_GOOD_CONFIG: &str = "phoenix.toml.last-good";

/// Keep a copy of `spec`'s file in its state dir (when it changed): hooks fall back to it
/// while someone's edit leaves phoenix.toml invalid, so agents' state keeps being recorded.
pub fn remember_good(spec: &Spec) -> std::io::Result<()> {
    let copy = spec.fleet.state_dir.join(LAST_GOOD_CONFIG);
    let text = read_config(&spec.file)?.into_bytes();
    let limit = crate::state::file::STATE_FILE_LIMIT;
    if crate::state::file::read_bounded(&copy, limit)
        .ok()
        .as_deref()
        == Some(text.as_slice())
    {
        return Ok(());
    }
    // Only if it still is the file that was validated (it may have changed since).
    match std::str::from_utf8(&text) {
        Ok(source) if parse_for_hook(source, &spec.file).is_ok() => {
            crate::state::atomic_write(&copy, &text)
        }
        _ => Ok(()),
    }
}

/// The last good copy of `path` kept in `fleet_root` (see [`remember_good`]), read as the
/// hook reads its config, with relative paths still relative to `path`.
pub fn load_last_good_for_hook(path: &Path, fleet_root: &Path) -> Option<Spec> {
    // Never through a link planted in the state dir: this text decides what runs.
    let bytes = crate::state::file::read_bounded(
        &fleet_root.join(LAST_GOOD_CONFIG),
        crate::state::file::STATE_FILE_LIMIT,
    )
    .ok()?;
    let source = String::from_utf8(bytes).ok()?;
    parse_for_hook(&source, &absolute(path)).ok()
}

/// A config file is read on every hook call, and an agent may be able to write the directory
/// it lives in: only a regular file (a FIFO put in its place would hang every hook), at most
/// `MAX_CONFIG_BYTES`. A symlinked config is fine: it is the operator's own.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

pub fn read_config(path: &Path) -> std::io::Result<String> {
    use crate::state::bounded::{self, Links, ReadError};
    bounded::read_string(path, MAX_CONFIG_BYTES, Links::Follow).map_err(|e| match e {
        ReadError::Io { source, .. } => source,
        other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
    })
}

fn load_inner(path: &Path, options: LoadOptions, schedules: bool) -> Result<Spec, LoadError> {
    let source = read_config(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = absolute(path);
    parse_inner(&source, &file, options, schedules, None).map_err(LoadError::Invalid)
}

/// Parse and validate a phoenix.toml. `file` is used for messages and for relative paths.
pub fn parse(source: &str, file: &Path, options: LoadOptions) -> Result<Spec, FileDiagnostics> {
    parse_inner(source, file, options, true, None)
}

/// [`parse`], expanding each `[[agent_set]]` named in `items` from those items instead of its
/// stored list: a list just read from a source is checked this way before it is stored.
pub fn parse_with_items(
    source: &str,
    file: &Path,
    options: LoadOptions,
    items: &super::validate::ItemLists,
) -> Result<Spec, FileDiagnostics> {
    parse_inner(source, file, options, true, Some(items))
}

fn parse_inner(
    source: &str,
    file: &Path,
    options: LoadOptions,
    schedules: bool,
    items: Option<&super::validate::ItemLists>,
) -> Result<Spec, FileDiagnostics> {
    let fail = |mut diagnostics: Vec<Diagnostic>| {
        diagnostics.sort_by_key(|d| d.span.as_ref().map(|s| s.start));
        FileDiagnostics {
            file: file.to_path_buf(),
            source: source.to_string(),
            diagnostics,
        }
    };

    let document = DeTable::parse(source).map_err(|e| fail(vec![toml_error(&e)]))?;
    let mut diags = Vec::new();
    keys::check_all(document.get_ref(), &mut diags);

    // The document just parsed, read into the raw spec without parsing the text again (a
    // hook reads phoenix.toml on every tool call, a wrapper at each start); only a document
    // with a value of the wrong type is read again, for every such error at its line.
    use serde::Deserialize;
    let (raw, type_errors) = match RawSpec::deserialize(toml::de::Deserializer::from(document)) {
        Ok(raw) => (Some(raw), Vec::new()),
        Err(_) => deserialize_all(source),
    };
    let Some(raw) = raw else {
        diags.extend(type_errors);
        return Err(fail(diags));
    };
    diags.extend(type_errors);
    let spec = validate::spec(raw, source, file, options, schedules, items, &mut diags);
    if diags.is_empty() {
        Ok(spec)
    } else {
        Err(fail(diags))
    }
}

/// Deserialize the document, reporting every value of the wrong type rather than the first:
/// after each type error the offending line is blanked (offsets kept) and the rest is read
/// again. The spec read without those lines still goes through validation, so one run of
/// `phoenix validate` shows every problem. `None` when the document cannot be read at all.
fn deserialize_all(source: &str) -> (Option<RawSpec>, Vec<Diagnostic>) {
    const MAX_TYPE_ERRORS: usize = 50;
    let mut text = source.to_string();
    let mut errors = Vec::new();
    loop {
        match toml::from_str::<RawSpec>(&text) {
            Ok(raw) => return (Some(raw), errors),
            Err(e) => {
                let Some(span) = e.span().filter(|_| errors.len() < MAX_TYPE_ERRORS) else {
                    errors.push(toml_error(&e));
                    return (None, errors);
                };
                let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
                let end = text[span.start..]
                    .find('\n')
                    .map_or(text.len(), |i| span.start + i);
                // Byte for byte, so that every later span still points at the original text.
                let blanked: String = text.as_bytes()[start..end]
                    .iter()
                    .map(|&b| {
                        if b.is_ascii_whitespace() {
                            b as char
                        } else {
                            ' '
                        }
                    })
                    .collect();
                let before = text.clone();
                text.replace_range(start..end, &blanked);
                // A value spanning lines cannot be cut out this way: report what we have.
                if text == before || toml::de::DeTable::parse(&text).is_err() {
                    errors.push(toml_error(&e));
                    return (None, errors);
                }
                errors.push(toml_error(&e));
            }
        }
    }
}

fn toml_error(e: &toml::de::Error) -> Diagnostic {
    let message = e.message().trim().to_string();
    let hint = if message.contains("invalid type") {
        Some("check the value's type: durations and names are quoted strings, counts are bare numbers".to_string())
    } else {
        None
    };
    let mut d = Diagnostic::new(message, e.span());
    d.hint = hint;
    d
}
