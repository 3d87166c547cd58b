//! The structured-file guard (`guard_structured_files = true`): before the agent edits a
//! .json/.toml/.yaml file its content is saved; after the edit the file is parsed, and if the
//! edit broke a file that parsed before, the saved version is put back and the agent is told
//! why (Enhanced Agent Resilience Protocol: validate after every edit, roll back, record).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::state::Op;
use crate::state::bounded::{self, Links};
use crate::state::{self, AgentDir, StateError};

const GUARD_DIR: &str = "guard";
/// Larger files are not snapshotted: copying them on every edit would slow the agent down.
const MAX_GUARDED_BYTES: u64 = 8 << 20;
/// Deeper YAML is refused as invalid (serde_json stops at 128 too).
const MAX_YAML_DEPTH: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Json,
    Toml,
    Yaml,
}

impl Kind {
    pub fn of(path: &Path) -> Option<Kind> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "json" => Some(Kind::Json),
            "toml" => Some(Kind::Toml),
            "yaml" | "yml" => Some(Kind::Yaml),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Json => "JSON",
            Kind::Toml => "TOML",
            Kind::Yaml => "YAML",
        }
    }
}

/// Why `bytes` is not a valid document of `kind`, if it is not.
pub fn validate(kind: Kind, bytes: &[u8]) -> Result<(), String> {
    match kind {
        Kind::Json => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Kind::Toml => {
            let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
            toml::from_str::<toml::Table>(text)
                .map(|_| ())
                .map_err(|e| e.message().trim().to_string())
        }
        Kind::Yaml => yaml_sanity(bytes),
    }
}

/// A YAML stream parses (every document in it), no mapping repeats a key, and nothing is
/// nested deeper than `MAX_YAML_DEPTH`. Read as a stream of parser events, never built into a
/// tree: building one expands every alias, and a few hundred bytes of nested aliases expand
/// to more memory than there is (an "alias bomb"). An alias here stays one event.
fn yaml_sanity(bytes: &[u8]) -> Result<(), String> {
    use yaml_rust2::parser::{Event, Parser};
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut parser = Parser::new_from_str(text);
    // One entry per open collection: `None` for a sequence, a mapping's keys so far and
    // whether its next node is a key.
    let mut open: Vec<Option<(std::collections::HashSet<String>, bool)>> = Vec::new();
    loop {
        let (event, mark) = parser.next_token().map_err(|e| e.to_string())?;
        let is_node = matches!(
            event,
            Event::Scalar(..)
                | Event::Alias(_)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
        );
        if is_node && let Some(Some((keys, at_key))) = open.last_mut() {
            if *at_key
                && let Event::Scalar(key, ..) = &event
                && !keys.insert(key.clone())
            {
                return Err(format!(
                    "{key:?}: duplicated key in mapping at line {} column {}",
                    mark.line(),
                    mark.col() + 1
                ));
            }
            *at_key = !*at_key;
        }
        match event {
            Event::SequenceStart(..) => open.push(None),
            Event::MappingStart(..) => open.push(Some((Default::default(), true))),
            Event::SequenceEnd | Event::MappingEnd => {
                open.pop();
            }
            Event::StreamEnd => return Ok(()),
            _ => {}
        }
        if open.len() > MAX_YAML_DEPTH {
            return Err(format!(
                "nested more than {MAX_YAML_DEPTH} levels deep at line {} column {}",
                mark.line(),
                mark.col() + 1
            ));
        }
    }
}

fn key(path: &Path) -> String {
    crate::state::digest(path.as_os_str().as_encoded_bytes())
}

fn resolve(cwd: &Path, file: &str) -> PathBuf {
    let p = PathBuf::from(file);
    if p.is_absolute() { p } else { cwd.join(p) }
}

/// Save the guarded files among `files` before the tool runs.
pub fn snapshot(dir: &AgentDir, cwd: &Path, files: &[String]) -> Result<(), StateError> {
    let guard = dir.file(GUARD_DIR);
    for file in files {
        let path = resolve(cwd, file);
        let Some(kind) = Kind::of(&path) else {
            continue;
        };
        let meta = fs::metadata(&path).ok();
        if meta
            .as_ref()
            .is_some_and(|m| !m.is_file() || m.len() > MAX_GUARDED_BYTES)
        {
            continue;
        }
        state::create_private_dir(&guard).map_err(|source| StateError::Io {
            action: "create",
            path: guard.clone(),
            source,
        })?;
        let id = key(&path);
        let (existed, valid, mode) = match &meta {
            Some(m) => {
                // Not a regular file (any more), or grown past the limit: not guarded.
                let Ok(bytes) = bounded::read_whole(&path, MAX_GUARDED_BYTES, Links::Follow) else {
                    continue;
                };
                let orig = guard.join(format!("{id}.orig"));
                state::atomic_write(&orig, &bytes).map_err(|source| StateError::Io {
                    action: "write",
                    path: orig.clone(),
                    source,
                })?;
                (
                    true,
                    validate(kind, &bytes).is_ok(),
                    m.permissions().mode() & 0o7777,
                )
            }
            None => (false, false, 0o644),
        };
        let info = json!({"path": path, "existed": existed, "valid": valid, "mode": mode, "ts": state::now_rfc3339()});
        let meta_path = guard.join(format!("{id}.json"));
        state::atomic_write(&meta_path, info.to_string().as_bytes()).map_err(|source| {
            StateError::Io {
                action: "write",
                path: meta_path.clone(),
                source,
            }
        })?;
    }
    Ok(())
}

/// After the tool ran: parse each guarded file that was snapshotted; restore the ones the edit
/// broke. Returns what to tell the agent (empty when every file is fine).
pub fn check(dir: &AgentDir, cwd: &Path, files: &[String]) -> Vec<String> {
    let guard = dir.file(GUARD_DIR);
    let mut messages = Vec::new();
    for file in files {
        let path = resolve(cwd, file);
        let Some(kind) = Kind::of(&path) else {
            continue;
        };
        let id = key(&path);
        let meta_path = guard.join(format!("{id}.json"));
        let orig_path = guard.join(format!("{id}.orig"));
        let Ok(info) = state::file::read_bounded(&meta_path, 1 << 20)
            .map_err(|_| ())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|_| ()))
        else {
            continue;
        };
        // Bounded: the agent may have replaced the file with a FIFO or a huge one.
        let current = bounded::read_whole(&path, MAX_GUARDED_BYTES, Links::Follow).ok();
        let problem = match &current {
            Some(bytes) => validate(kind, bytes).err(),
            None => None,
        };
        if let Some(problem) = problem {
            let existed = info["existed"].as_bool().unwrap_or(false);
            let valid_before = info["valid"].as_bool().unwrap_or(false);
            let shown = path.display();
            if existed && valid_before {
                let mode = info["mode"].as_u64().unwrap_or(0o644) as u32;
                let restored = state::file::read_bounded(&orig_path, MAX_GUARDED_BYTES)
                    .and_then(|orig| state::atomic_write_mode(&path, &orig, mode));
                match restored {
                    Ok(()) => {
                        let _ = dir.record_op(
                            Op::GuardRestored,
                            json!({"path": path, "kind": kind.name(), "error": problem}),
                        );
                        messages.push(format!(
                            "phoenix restored `{shown}`: your edit left it invalid {} ({problem}). \
                             The previous version is back in place; make the change again so that the file stays valid {}.",
                            kind.name(),
                            kind.name()
                        ));
                    }
                    Err(e) => {
                        dir.record_hook_error("guard", &format!("cannot restore `{shown}`: {e}"));
                        messages.push(format!(
                            "`{shown}` is no longer valid {} ({problem}) and phoenix could not restore it: fix it now.",
                            kind.name()
                        ));
                    }
                }
            } else {
                messages.push(format!(
                    "`{shown}` is not valid {} ({problem}): fix it now.",
                    kind.name()
                ));
            }
        }
        let _ = fs::remove_file(&meta_path);
        let _ = fs::remove_file(&orig_path);
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FleetDir;

    #[test]
    fn validators() {
        assert!(validate(Kind::Json, b"{\"a\": [1]}").is_ok());
        assert!(validate(Kind::Json, b"{\"a\": [1}").is_err());
        assert!(validate(Kind::Toml, b"a = 1\n[b]\nc = \"x\"\n").is_ok());
        assert!(validate(Kind::Toml, b"a = \n").is_err());
        assert!(
            validate(
                Kind::Yaml,
                b"a:\n  b: 1\nrun: |\n\tliteral tab is content? no\n"
            )
            .is_err()
        );
        assert!(validate(Kind::Yaml, b"a:\n  b: 1\nrun: |\n  echo [\n  \tx\n").is_ok());
        assert!(validate(Kind::Yaml, b"a:\n\tb: 1\n").is_err());
        // What the old light check let through: an unclosed flow sequence, a bad indent.
        assert!(validate(Kind::Yaml, b"a: [1\n").is_err());
        assert!(validate(Kind::Yaml, b"a:\n  b: 1\n c: 2\n").is_err());
        assert!(validate(Kind::Yaml, b"---\na: 1\n---\nb: [1, 2]\n").is_ok());
    }

    /// Nine levels of nine aliases: 9^9 nodes if the aliases were expanded.
    pub(crate) const ALIAS_BOMB: &str =
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
";

    #[test]
    fn yaml_aliases_are_not_expanded_and_depth_is_bounded() {
        let started = std::time::Instant::now();
        assert!(validate(Kind::Yaml, ALIAS_BOMB.as_bytes()).is_ok());
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
        assert!(
            validate(Kind::Yaml, b"a: *nowhere\n")
                .unwrap_err()
                .contains("unknown anchor")
        );
        let err = validate(Kind::Yaml, b"a: 1\nb: 2\na: 3\n").unwrap_err();
        assert!(err.contains("\"a\": duplicated key"), "{err}");
        assert!(validate(Kind::Yaml, b"- {a: 1}\n- {a: 1}\n").is_ok());
        // Deep nesting is refused, not recursed into (flow and block style).
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(
            validate(Kind::Yaml, deep.as_bytes())
                .unwrap_err()
                .contains("nested more than")
        );
        let deep = "- ".repeat(100_000) + "x\n";
        assert!(
            validate(Kind::Yaml, deep.as_bytes())
                .unwrap_err()
                .contains("nested more than")
        );
        let fine = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(validate(Kind::Yaml, fine.as_bytes()).is_ok());
    }

    #[test]
    fn broken_edit_is_restored_and_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path().join(".phoenix")).agent("a");
        dir.ensure().unwrap();
        let file = tmp.path().join("conf.json");
        fs::write(&file, b"{\"ok\": true}").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
        let files = vec!["conf.json".to_string()];

        snapshot(&dir, tmp.path(), &files).unwrap();
        fs::write(&file, b"{\"ok\": tru").unwrap();
        let messages = check(&dir, tmp.path(), &files);
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].contains("restored"), "{messages:?}");
        assert_eq!(fs::read(&file).unwrap(), b"{\"ok\": true}");
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(fs::read_dir(dir.file(GUARD_DIR)).unwrap().count(), 0);

        snapshot(&dir, tmp.path(), &files).unwrap();
        fs::write(&file, b"{\"ok\": false}").unwrap();
        assert!(check(&dir, tmp.path(), &files).is_empty());
        assert_eq!(fs::read(&file).unwrap(), b"{\"ok\": false}");
    }

    #[test]
    fn new_broken_file_is_reported_not_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path().join(".phoenix")).agent("a");
        dir.ensure().unwrap();
        let files = vec![tmp.path().join("new.toml").display().to_string()];
        snapshot(&dir, tmp.path(), &files).unwrap();
        fs::write(tmp.path().join("new.toml"), b"a = ").unwrap();
        let messages = check(&dir, tmp.path(), &files);
        assert!(messages[0].contains("is not valid TOML"), "{messages:?}");
        assert!(tmp.path().join("new.toml").exists());
    }
}
