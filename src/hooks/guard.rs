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
/// YAML nested deeper than this is not checked (the parser's own stack is on the heap, but
/// the keys kept per open mapping are not free): it is reported as too deep to check and
/// left alone, never called invalid.
const MAX_YAML_DEPTH: usize = 10_000;

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

/// Why a document did not pass as valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// It does not parse: an edit that leaves it so is undone.
    Invalid(String),
    /// It nests deeper than the parser goes (serde_json stops at 128 levels, toml at 80,
    /// the YAML check at `MAX_YAML_DEPTH`), found before any error: it may well be valid, so
    /// it is never undone, only said to be unchecked.
    TooDeep(String),
}

impl Problem {
    /// A parser's error, sorted: its depth limit means "not checked", anything else "invalid".
    fn from_parser(message: String) -> Problem {
        if message.contains("recursion") {
            Problem::TooDeep(message)
        } else {
            Problem::Invalid(message)
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Invalid(why) | Problem::TooDeep(why) => f.write_str(why),
        }
    }
}

/// Why `bytes` is not a valid document of `kind`, if it is not. Each check is bounded: the
/// parsers stop at a depth (no stack overflow), and what is deeper is `TooDeep`.
pub fn validate(kind: Kind, bytes: &[u8]) -> Result<(), Problem> {
    match kind {
        Kind::Json => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map(|_| ())
            .map_err(|e| Problem::from_parser(e.to_string())),
        Kind::Toml => {
            let text = std::str::from_utf8(bytes).map_err(|e| Problem::Invalid(e.to_string()))?;
            toml::from_str::<toml::Table>(text)
                .map(|_| ())
                .map_err(|e| Problem::from_parser(e.message().trim().to_string()))
        }
        Kind::Yaml => yaml_sanity(bytes),
    }
}

/// A YAML stream parses (every document in it), no mapping repeats a key, and nothing is
/// nested deeper than `MAX_YAML_DEPTH`. Read as a stream of parser events, never built into a
/// tree: building one expands every alias, and a few hundred bytes of nested aliases expand
/// to more memory than there is (an "alias bomb"). An alias here stays one event.
fn yaml_sanity(bytes: &[u8]) -> Result<(), Problem> {
    use yaml_rust2::parser::{Event, Parser};
    let text =
        std::str::from_utf8(bytes).map_err(|e| Problem::Invalid(format!("not UTF-8: {e}")))?;
    let mut parser = Parser::new_from_str(text);
    // One entry per open collection: `None` for a sequence, a mapping's keys so far and
    // whether its next node is a key.
    let mut open: Vec<Option<(std::collections::HashSet<String>, bool)>> = Vec::new();
    loop {
        let (event, mark) = parser
            .next_token()
            .map_err(|e| Problem::from_parser(e.to_string()))?;
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
                return Err(Problem::Invalid(format!(
                    "{key:?}: duplicated key in mapping at line {} column {}",
                    mark.line(),
                    mark.col() + 1
                )));
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
            return Err(Problem::TooDeep(format!(
                "nested more than {MAX_YAML_DEPTH} levels deep at line {} column {}",
                mark.line(),
                mark.col() + 1
            )));
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
        let problem = match current.as_deref().map(|bytes| validate(kind, bytes)) {
            Some(Err(Problem::Invalid(why))) => Some(why),
            Some(Err(Problem::TooDeep(why))) => {
                // Maybe valid: never undone on a guess.
                messages.push(format!(
                    "phoenix could not check `{}` ({why}): it is nested too deeply to check, and was left as you wrote it.",
                    path.display()
                ));
                None
            }
            _ => None,
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
                .to_string()
                .contains("unknown anchor")
        );
        let err = validate(Kind::Yaml, b"a: 1\nb: 2\na: 3\n").unwrap_err();
        assert!(err.to_string().contains("\"a\": duplicated key"), "{err}");
        assert!(validate(Kind::Yaml, b"- {a: 1}\n- {a: 1}\n").is_ok());
        // Deep nesting is never recursed into, and what is too deep to check is said so,
        // never called invalid (flow and block style).
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(validate(Kind::Yaml, deep.as_bytes()), Ok(()));
        let deeper = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        assert!(matches!(
            validate(Kind::Yaml, deeper.as_bytes()),
            Err(Problem::TooDeep(_))
        ));
        let deep = "- ".repeat(100_000) + "x\n";
        let err = validate(Kind::Yaml, deep.as_bytes()).unwrap_err();
        assert!(matches!(err, Problem::TooDeep(_)), "{err}");
        assert!(err.to_string().contains("nested more than"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn very_deep_json_is_checked_without_recursing() {
        let deep = deep_valid(Kind::Json, 1_000_000);
        assert_eq!(validate(Kind::Json, deep.as_bytes()), Ok(()));
        assert!(matches!(
            validate(Kind::Json, &deep.as_bytes()[1..]),
            Err(Problem::Invalid(_))
        ));
    }

    /// A valid document nested `depth` levels deep, of each kind.
    fn deep_valid(kind: Kind, depth: usize) -> String {
        match kind {
            Kind::Json => format!("{}1{}", "[".repeat(depth), "]".repeat(depth)),
            Kind::Toml => format!("a = {}1{}\n", "[".repeat(depth), "]".repeat(depth)),
            Kind::Yaml => {
                let mut text = String::new();
                for level in 0..depth {
                    text.push_str(&"  ".repeat(level));
                    text.push_str("k:\n");
                }
                text.push_str(&"  ".repeat(depth));
                text.push_str("v: 1\n");
                text
            }
        }
    }

    #[test]
    fn valid_files_nested_deeper_than_the_parsers_go_are_never_reverted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = FleetDir::new(tmp.path().join(".phoenix")).agent("a");
        dir.ensure().unwrap();
        for (kind, name) in [
            (Kind::Json, "deep.json"),
            (Kind::Toml, "deep.toml"),
            (Kind::Yaml, "deep.yaml"),
        ] {
            let file = tmp.path().join(name);
            let files = vec![name.to_string()];
            fs::write(&file, deep_valid(kind, 2)).unwrap();
            snapshot(&dir, tmp.path(), &files).unwrap();
            // The agent's edit: valid, 250 levels deep.
            let deep = deep_valid(kind, 250);
            fs::write(&file, &deep).unwrap();
            let messages = check(&dir, tmp.path(), &files);
            assert_eq!(fs::read_to_string(&file).unwrap(), deep, "{name}: reverted");
            assert!(
                messages.iter().all(|m| !m.contains("restored")),
                "{name}: {messages:?}"
            );
            // JSON and YAML are read as streams (nothing recursed into); toml stops at 80.
            if kind == Kind::Toml {
                assert!(
                    messages.iter().any(|m| m.contains("too deeply to check")),
                    "{name}: {messages:?}"
                );
            }
        }
        // A broken edit is still undone.
        let file = tmp.path().join("deep.toml");
        fs::write(&file, b"a = 1\n").unwrap();
        let files = vec!["deep.toml".to_string()];
        snapshot(&dir, tmp.path(), &files).unwrap();
        fs::write(&file, b"a = [[[1\n").unwrap();
        let messages = check(&dir, tmp.path(), &files);
        assert!(messages[0].contains("restored"), "{messages:?}");
        assert_eq!(fs::read(&file).unwrap(), b"a = 1\n");
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
