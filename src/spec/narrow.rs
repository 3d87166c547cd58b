//! An agent's own part of phoenix.toml: the file as written with only that agent's
//! `[[agent]]` table. A wrapper reads it instead of the whole fleet's file when it starts
//! and between runs: a fleet of a thousand agents has a phoenix.toml of a hundred kilobytes,
//! and a thousand wrappers each parsing all of it cost as much as everything else a start
//! does. `apply` writes the part into the agent's state dir before it starts the agent; the
//! part names the digest of the phoenix.toml it was cut from, and is used only while the
//! file still has that digest (an edited file is read whole, as before) and its own text is
//! intact. The part parses into the same agent, fleet settings and defaults: it is cut from
//! the same text, and relative paths stay relative to phoenix.toml.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use toml_edit::{ArrayOfTables, DocumentMut, Item};

use super::Spec;
use super::load::{LoadError, LoadOptions, load_with, parse, parse_for_hook, read_config};
use super::paths::absolute;

/// The file in an agent's state dir that holds its part.
pub const AGENT_CONFIG: &str = "phoenix.toml.agent";

/// The first line of a part: what it was cut from and a digest of what follows.
const HEADER: &str = "# phoenix: one agent's part of phoenix.toml";

/// Each local agent's part of `source` (agent name → text of its file), or `None` when the
/// file is not in the form parts are cut from (agents written as an inline array).
pub fn parts(source: &str) -> Option<Vec<(String, String)>> {
    let mut doc: DocumentMut = source.parse().ok()?;
    let agents = match doc.remove("agent")? {
        Item::ArrayOfTables(agents) => agents,
        _ => return None,
    };
    let rest = doc.to_string();
    let from = crate::state::digest(source.as_bytes());
    let parts = agents
        .into_iter()
        .filter(|table| table.get("host").is_none())
        .filter_map(|table| {
            let name = table.get("name")?.as_str()?.to_string();
            let mut own = DocumentMut::new();
            let mut one = ArrayOfTables::new();
            one.push(table);
            own.insert("agent", Item::ArrayOfTables(one));
            let body = format!("{rest}\n{own}");
            let digest = crate::state::digest(body.as_bytes());
            Some((name, format!("{HEADER} {from} {digest}\n{body}")))
        })
        .collect();
    Some(parts)
}

/// Write `agent`'s part of `config` as the file is now into `dir` (its state dir); the part's
/// path, or `None` when there is none (the file cannot be read or cut, the agent is not in
/// it, the write failed): its wrapper then reads phoenix.toml whole. The parts of one text
/// are cut once per process (an apply writes a thousand).
pub fn write_part(config: &Path, agent: &str, dir: &Path) -> Option<PathBuf> {
    /// The file the parts were cut from, as its metadata said then, and the parts.
    type Cut = (FileStamp, Arc<BTreeMap<String, String>>);
    static CUT: Mutex<Option<Cut>> = Mutex::new(None);
    let parts = {
        let mut cut = CUT.lock().unwrap_or_else(|e| e.into_inner());
        // The same file unchanged since (inode, size, change time): cut already, without
        // reading it again for each of a thousand agents.
        let stamp = FileStamp::of(config);
        match &*cut {
            Some((of, parts)) if stamp.as_ref() == Some(of) => parts.clone(),
            _ => {
                let source = read_config(config).ok()?;
                let parts = Arc::new(parts(&source)?.into_iter().collect::<BTreeMap<_, _>>());
                // Only a stamp taken before the read that still holds after it.
                if let Some(stamp) = stamp.filter(|s| FileStamp::of(config).as_ref() == Some(s)) {
                    *cut = Some((stamp, parts.clone()));
                }
                parts
            }
        }
    };
    let path = dir.join(AGENT_CONFIG);
    // Not synced: the part is checked against its digests when read, and a part a crash
    // left short is refused (the wrapper reads phoenix.toml whole).
    crate::state::file::write_atomic(&path, parts.get(agent)?.as_bytes(), 0o600, false).ok()?;
    Some(path)
}

/// What tells a file changed without reading it: its inode, size and change time.
#[derive(PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    size: u64,
    changed: (i64, i64),
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            inode: meta.ino(),
            size: meta.size(),
            changed: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// The spec `agent`'s wrapper runs with: from its part at `part` while that is current and
/// intact, else from phoenix.toml itself. Either way `Spec::file` is `config`.
pub fn load_for_agent(config: &Path, agent: &str, part: Option<&Path>) -> Result<Spec, LoadError> {
    if let Some(spec) = part.and_then(|part| from_part(config, agent, part)) {
        return Ok(spec);
    }
    load_with(config, LoadOptions::default())
}

/// What a hook of `agent` reads under its wrapper: its part at `part` as a hook reads
/// phoenix.toml (`load_for_hook`), while that part is current and intact; `None` otherwise
/// (the hook reads phoenix.toml itself). A hook runs on every tool call.
pub fn load_part_for_hook(config: &Path, agent: &str, part: &Path) -> Option<Spec> {
    read_part(config, agent, part, |body, file| {
        parse_for_hook(body, file).ok()
    })
}

fn from_part(config: &Path, agent: &str, part: &Path) -> Option<Spec> {
    read_part(config, agent, part, |body, file| {
        parse(body, file, LoadOptions::default()).ok()
    })
}

/// The part at `part` read by `read` as if it were `config`, if it is current and intact and
/// declares `agent`.
fn read_part(
    config: &Path,
    agent: &str,
    part: &Path,
    read: impl FnOnce(&str, &Path) -> Option<Spec>,
) -> Option<Spec> {
    part_text(config, part)
        .and_then(|body| read(&body, &absolute(config)))
        .filter(|spec| spec.agent(agent).is_some())
}

/// The text of the part at `part` after its header, if it was cut from `config` as it is
/// now and is intact.
fn part_text(config: &Path, part: &Path) -> Option<String> {
    let source = read_config(config).ok()?;
    let bytes = crate::state::file::read_bounded(part, super::load::MAX_CONFIG_BYTES).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (header, body) = text.split_once('\n')?;
    let mut words = header.strip_prefix(HEADER)?.split_whitespace();
    let (from, digest) = (words.next()?, words.next()?);
    if from != crate::state::digest(source.as_bytes())
        || digest != crate::state::digest(body.as_bytes())
    {
        return None;
    }
    Some(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"# a fleet
[fleet]
name = "research"
state_dir = "state"

[defaults]
cli = "custom"
env = { SHARED = "1" }

[defaults.restart]
max_crashes = 7

[thresholds]
silence = "45m"

[[agent]]
name = "one"
command = "sleep 1"
workdir = "."
tap = false

[agent.restart]
cooldown = "2s"

[[agent]]
name = "two"
command = "sleep 2"
workdir = "sub"
env = { OWN = "2" }

[[agent]]
name = "far"
host = "box"
command = "sleep 3"

[[host]]
name = "box"
ssh = "op@box.example"
"#;

    fn fleet() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        let config = dir.path().join("phoenix.toml");
        std::fs::write(&config, SOURCE).unwrap();
        (dir, config)
    }

    /// A part parses into the very agent and fleet settings the whole file does: defaults,
    /// sub-tables, relative paths and the fleet's identity included. Remote agents have none.
    #[test]
    fn a_part_reads_as_its_agent_of_the_whole_file() {
        let (dir, config) = fleet();
        let whole = super::super::load(&config).unwrap();
        let parts = parts(SOURCE).unwrap();
        let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["one", "two"]);
        for (name, text) in &parts {
            let state = dir.path().join(name);
            std::fs::create_dir_all(&state).unwrap();
            std::fs::write(state.join(AGENT_CONFIG), text).unwrap();
            let spec =
                from_part(&config, name, &state.join(AGENT_CONFIG)).expect("the part is used");
            assert_eq!(spec.agents.len(), 1);
            assert_eq!(
                format!("{:?}", spec.agents[0]),
                format!("{:?}", whole.agent(name).unwrap())
            );
            assert_eq!(format!("{:?}", spec.fleet), format!("{:?}", whole.fleet));
            assert_eq!(
                format!("{:?}", spec.thresholds),
                format!("{:?}", whole.thresholds)
            );
            assert_eq!(format!("{:?}", spec.hosts), format!("{:?}", whole.hosts));
            assert_eq!(spec.file, whole.file);
        }
    }

    /// A part is used only while phoenix.toml is the file it was cut from and its own text is
    /// intact; otherwise the wrapper reads phoenix.toml itself (and sees the edit).
    #[test]
    fn an_edited_file_or_a_damaged_part_is_read_whole() {
        let (dir, config) = fleet();
        let state = dir.path().join("one");
        std::fs::create_dir_all(&state).unwrap();
        let written = write_part(&config, "one", &state).unwrap();
        assert_eq!(written, state.join(AGENT_CONFIG));
        assert!(
            write_part(&config, "far", &state).is_none(),
            "a remote agent has none"
        );
        let part = std::fs::read_to_string(&written).unwrap();
        assert!(from_part(&config, "one", &state.join(AGENT_CONFIG)).is_some());
        // Another agent's name: not this part's.
        assert!(from_part(&config, "two", &state.join(AGENT_CONFIG)).is_none());
        // A damaged part (a byte changed after the header).
        let damaged = part.replace("sleep 1", "sleep 9");
        std::fs::write(state.join(AGENT_CONFIG), &damaged).unwrap();
        assert!(from_part(&config, "one", &state.join(AGENT_CONFIG)).is_none());
        // phoenix.toml edited since: the whole file, with the edit.
        std::fs::write(state.join(AGENT_CONFIG), &part).unwrap();
        std::fs::write(&config, SOURCE.replace("sleep 1", "sleep 5")).unwrap();
        assert!(from_part(&config, "one", &state.join(AGENT_CONFIG)).is_none());
        assert!(load_part_for_hook(&config, "one", &state.join(AGENT_CONFIG)).is_none());
        let spec = load_for_agent(&config, "one", Some(&state.join(AGENT_CONFIG))).unwrap();
        assert_eq!(spec.agent("one").unwrap().argv, ["sleep", "5"]);
        assert_eq!(spec.agents.len(), 2);
        // A link in the part's place is not followed.
        std::fs::remove_file(state.join(AGENT_CONFIG)).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, &part).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join(AGENT_CONFIG)).unwrap();
        assert!(from_part(&config, "one", &state.join(AGENT_CONFIG)).is_none());
    }

    /// Agents written as an inline array are not cut into parts (each wrapper reads the file).
    #[test]
    fn agents_in_an_inline_array_have_no_parts() {
        let inline = "agent = [{ name = \"a\", cli = \"custom\", command = \"sleep 1\" }]\n";
        assert!(parts(inline).is_none());
    }
}
