//! Claude Code's folder trust: its first start in a folder it does not trust shows "Accessing
//! workspace: <dir> … Is this a project you created or one you trust?" and waits. 2.1.197 has
//! "Yes, I trust this folder" first; 2.1.332 has "No, exit" first and selected, so Enter quits
//! with exit 1. A supervised agent has nobody at its keyboard: phoenix records the answer the
//! way Claude's own dialog does, for the workdir the operator declared in phoenix.toml (that
//! declaration is the consent).
//!
//! What Claude reads (2.1.197 and 2.1.332, read from their binaries and tried): the global
//! config `$CLAUDE_CONFIG_DIR/.claude.json`, else `~/.claude.json`, its
//! `projects["<dir>"].hasTrustDialogAccepted`, looked up from the working directory upwards
//! (to the git root). Its dialog writes the git root's entry; phoenix writes the workdir's own
//! (a narrower answer, honoured by both versions), with the defaults Claude gives a new entry.
//!
//! The file is Claude's and rewritten by it while it runs (other agents' sessions too): the
//! change is made under Claude's own lock (the `<file>.lock` directory of proper-lockfile,
//! stale after 10 s), read bounded, everything else kept, written atomically with its mode.
//! A file that is not a regular file (a symlink to a dotfiles repo, say) is never rewritten:
//! the wrapper says what to set instead.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};

use crate::agent_cli::{Planned, Trusted, write_planned};
use crate::state::bounded::{self, Links};

/// Claude's global config grows with every project and session it saw: read up to this.
const MAX_CLAUDE_JSON_BYTES: u64 = 16 * 1024 * 1024;
/// How long phoenix waits for Claude's own lock on the file.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// proper-lockfile's default: a lock directory untouched this long is abandoned.
const LOCK_STALE: Duration = Duration::from_secs(10);

/// The global config file Claude Code reads trust from, for an agent whose environment is
/// `lookup`.
pub fn config_file(lookup: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    if let Some(dir) = lookup("CLAUDE_CONFIG_DIR") {
        return Ok(Path::new(&dir).join(".claude.json"));
    }
    let home = lookup("HOME").ok_or("HOME is not set: cannot find Claude Code's .claude.json")?;
    Ok(Path::new(&home).join(".claude.json"))
}

/// Record that Claude Code trusts `workdir` in `file`. `Ok(None)`: it does already.
pub fn ensure(file: &Path, workdir: &Path) -> Result<Option<Trusted>, String> {
    // Trusted already (the usual case, read through a link too): nothing to write.
    if trusted(file, workdir) == Ok(true) {
        return Ok(None);
    }
    // Never through a link nor into anything but a regular file: replacing it would cut the
    // user's link (or worse).
    match fs::symlink_metadata(file) {
        Ok(m) if !m.file_type().is_file() => {
            return Err(format!(
                "`{}` is not a regular file; phoenix does not rewrite it, so Claude Code will ask \
                 whether to trust `{}`: set `projects[\"{}\"].hasTrustDialogAccepted: true` there \
                 yourself",
                file.display(),
                workdir.display(),
                workdir.display()
            ));
        }
        _ => {}
    }
    // Checked before the lock: the usual case (trusted already) takes no lock.
    if plan(read(file)?.as_deref(), workdir)?.is_none() {
        return Ok(None);
    }
    let _lock = ClaudeLock::take(file)?;
    let planned = plan(read(file)?.as_deref(), workdir)?;
    write_planned(file, planned)
}

/// Whether Claude Code trusts `workdir` by `file` now, as it looks it up (2.1.197 and 2.1.332):
/// the entry of the workdir or of any directory above it (its dialog writes the git root's)
/// has `hasTrustDialogAccepted: true`. Only read, so through a link too.
pub fn trusted(file: &Path, workdir: &Path) -> Result<bool, String> {
    let text = match bounded::read_string(file, MAX_CLAUDE_JSON_BYTES, Links::Follow) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let config: Value = serde_json::from_str(&text)
        .map_err(|e| format!("`{}` is not JSON ({e})", file.display()))?;
    let projects = &config["projects"];
    Ok(workdir.ancestors().any(|dir| {
        projects[dir.to_string_lossy().as_ref()]["hasTrustDialogAccepted"] == Value::Bool(true)
    }))
}

fn read(file: &Path) -> Result<Option<String>, String> {
    match bounded::read_string(file, MAX_CLAUDE_JSON_BYTES, Links::Refuse) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// `existing` (Claude's global config, `None` when there is none yet) with `workdir` trusted,
/// and what changed; `None` when it is trusted already.
pub fn plan(existing: Option<&str>, workdir: &Path) -> Result<Planned, String> {
    let mut config: Map<String, Value> = match existing {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text).map_err(|e| {
            format!("is not a JSON object ({e}); phoenix leaves it to Claude Code to repair")
        })?,
        _ => Map::new(),
    };
    let key = workdir.to_string_lossy().into_owned();
    let projects = config
        .entry("projects")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(projects) = projects.as_object_mut() else {
        return Err("has a `projects` that is not an object; phoenix leaves it alone".into());
    };
    let entry = projects
        .entry(key.clone())
        .or_insert_with(new_project_entry);
    let Some(entry) = entry.as_object_mut() else {
        return Err(format!("has a `projects[\"{key}\"]` that is not an object"));
    };
    if entry.get("hasTrustDialogAccepted") == Some(&Value::Bool(true)) {
        return Ok(None);
    }
    entry.insert("hasTrustDialogAccepted".into(), Value::Bool(true));
    let text = serde_json::to_string_pretty(&Value::Object(config)).expect("json");
    Ok(Some((
        text,
        vec![format!("projects[\"{key}\"].hasTrustDialogAccepted = true")],
    )))
}

/// The fields Claude Code (2.1.332) gives a project entry it creates.
fn new_project_entry() -> Value {
    json!({
        "allowedTools": [],
        "mcpContextUris": [],
        "mcpServers": {},
        "enabledMcpjsonServers": [],
        "disabledMcpjsonServers": [],
        "hasTrustDialogAccepted": false,
        "hasClaudeMdExternalIncludesApproved": false,
        "hasClaudeMdExternalIncludesWarningShown": false,
    })
}

/// Claude Code's lock on its global config: the directory `<file>.lock` (proper-lockfile),
/// taken with mkdir, removed when dropped.
struct ClaudeLock(PathBuf);

impl ClaudeLock {
    fn take(file: &Path) -> Result<ClaudeLock, String> {
        let mut name = file.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        if let Some(parent) = file.parent() {
            let _ = fs::create_dir_all(parent);
        }
        let until = Instant::now() + LOCK_WAIT;
        loop {
            match fs::create_dir(&lock) {
                Ok(()) => return Ok(ClaudeLock(lock)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = fs::symlink_metadata(&lock)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok());
                    // Abandoned by a Claude that died holding it: proper-lockfile takes it
                    // over the same way.
                    if age.is_some_and(|a| a > LOCK_STALE) && fs::remove_dir(&lock).is_ok() {
                        continue;
                    }
                }
                Err(e) => return Err(format!("cannot lock `{}`: {e}", lock.display())),
            }
            if Instant::now() >= until {
                return Err(format!(
                    "`{}` stayed locked by Claude Code for {} s: trust not recorded this start",
                    lock.display(),
                    LOCK_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ClaudeLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_is_added_for_the_workdir_and_everything_else_kept() {
        let existing = r#"{"numStartups": 7, "projects": {"/other": {"hasTrustDialogAccepted": false, "lastCost": 1.5}}, "userID": "u"}"#;
        let (text, entries) = plan(Some(existing), Path::new("/w")).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["projects"]["/w"]["hasTrustDialogAccepted"], true);
        assert_eq!(v["projects"]["/w"]["allowedTools"], json!([]));
        assert_eq!(v["projects"]["/other"]["hasTrustDialogAccepted"], false);
        assert_eq!(v["projects"]["/other"]["lastCost"], 1.5);
        assert_eq!(v["numStartups"], 7);
        assert_eq!(v["userID"], "u");
        assert_eq!(entries, ["projects[\"/w\"].hasTrustDialogAccepted = true"]);
        // Trusted already: nothing to do.
        assert_eq!(plan(Some(&text), Path::new("/w")).unwrap(), None);
        // An entry of its own keeps its fields.
        let own =
            r#"{"projects": {"/w": {"lastSessionId": "s1", "hasTrustDialogAccepted": false}}}"#;
        let (text, _) = plan(Some(own), Path::new("/w")).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["projects"]["/w"]["lastSessionId"], "s1");
        assert_eq!(v["projects"]["/w"]["hasTrustDialogAccepted"], true);
        // No file yet.
        assert!(plan(None, Path::new("/w")).unwrap().is_some());
    }

    #[test]
    fn trust_is_read_from_the_workdir_or_a_directory_above_it_as_claude_looks_it_up() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(".claude.json");
        let w = Path::new("/repo/sub/w");
        assert_eq!(trusted(&file, w), Ok(false), "no file yet");
        let with = |projects: Value| {
            fs::write(&file, json!({ "projects": projects }).to_string()).unwrap();
            trusted(&file, w)
        };
        assert_eq!(with(json!({})), Ok(false));
        assert_eq!(
            with(json!({"/repo/sub/w": {"hasTrustDialogAccepted": false}})),
            Ok(false)
        );
        assert_eq!(
            with(json!({"/repo/sub/w": {"hasTrustDialogAccepted": true}})),
            Ok(true)
        );
        // The dialog answered in the git root.
        assert_eq!(
            with(json!({"/repo": {"hasTrustDialogAccepted": true}})),
            Ok(true)
        );
        assert_eq!(
            with(json!({"/repo/sub/w/deeper": {"hasTrustDialogAccepted": true}})),
            Ok(false)
        );
        assert_eq!(
            with(json!({"/repo/sub/x": {"hasTrustDialogAccepted": true}})),
            Ok(false)
        );
        fs::write(&file, "{broken").unwrap();
        assert!(trusted(&file, w).is_err());
        // Read through a link (a dotfiles repo): nothing is written.
        let real = tmp.path().join("dotfiles.json");
        fs::write(
            &real,
            json!({"projects": {"/repo": {"hasTrustDialogAccepted": true}}}).to_string(),
        )
        .unwrap();
        let link = tmp.path().join("linked.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(trusted(&link, w), Ok(true));
    }

    #[test]
    fn a_config_phoenix_cannot_read_is_left_alone() {
        assert!(plan(Some("{not json"), Path::new("/w")).is_err());
        assert!(plan(Some(r#"{"projects": []}"#), Path::new("/w")).is_err());
        assert!(plan(Some(r#"{"projects": {"/w": true}}"#), Path::new("/w")).is_err());
    }

    #[test]
    fn the_file_is_rewritten_under_claudes_lock_and_a_link_never() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(".claude.json");
        fs::write(&file, r#"{"userID": "u"}"#).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        let t = ensure(&file, Path::new("/w")).unwrap().unwrap();
        assert_eq!(t.file, file);
        let v: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(v["userID"], "u");
        assert_eq!(v["projects"]["/w"]["hasTrustDialogAccepted"], true);
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(!tmp.path().join(".claude.json.lock").exists());
        assert_eq!(ensure(&file, Path::new("/w")).unwrap(), None);

        // Claude holds its lock: phoenix waits for it, then gives up without writing.
        fs::create_dir(tmp.path().join(".claude.json.lock")).unwrap();
        let e = ensure(&file, Path::new("/x")).unwrap_err();
        assert!(e.contains("stayed locked"), "{e}");
        assert!(!fs::read_to_string(&file).unwrap().contains("/x"));
        fs::remove_dir(tmp.path().join(".claude.json.lock")).unwrap();

        // A symlinked config (a dotfiles repo) is not replaced.
        let real = tmp.path().join("dotfiles.json");
        fs::write(&real, "{}").unwrap();
        let link = tmp.path().join("linked.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = ensure(&link, Path::new("/w")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(e.contains("hasTrustDialogAccepted"), "{e}");
        assert_eq!(fs::read_to_string(&real).unwrap(), "{}");
        // Trusted there by a person: nothing to do, no complaint.
        let trusting = r#"{"projects": {"/w": {"hasTrustDialogAccepted": true}}}"#;
        fs::write(&real, trusting).unwrap();
        assert_eq!(ensure(&link, Path::new("/w")), Ok(None));
        assert_eq!(fs::read_to_string(&real).unwrap(), trusting);
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
