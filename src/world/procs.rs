//! Process trees from /proc: the trees under the panes' own processes (from the kernel's
//! children lists), or one pass over all processes where the kernel keeps no such lists.

use std::collections::HashMap;
use std::fs;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    /// The kernel's short command name (`/proc/<pid>/comm`, at most 15 bytes).
    pub comm: String,
    /// Start time as seconds since the Unix epoch.
    pub started: i64,
    /// Process group. The wrapper starts the agent CLI as a group of its own; its helpers
    /// (a `tmux capture-pane`, say) stay in the wrapper's.
    pub pgid: u32,
}

/// A snapshot of every process on the host, indexed by parent.
#[derive(Debug, Default)]
pub struct ProcTable {
    procs: HashMap<u32, ProcInfo>,
    children: HashMap<u32, Vec<u32>>,
}

impl ProcTable {
    pub fn read() -> ProcTable {
        let boot = boot_time();
        let ticks = clock_ticks();
        let mut table = ProcTable::default();
        let Ok(entries) = fs::read_dir("/proc") else {
            return table;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(stat) = read_proc(&format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some(info) = parse_stat(pid, &stat, boot, ticks) {
                table.children.entry(info.ppid).or_default().push(pid);
                table.procs.insert(pid, info);
            }
        }
        for kids in table.children.values_mut() {
            kids.sort_unstable();
        }
        table
    }

    /// The process trees under each of `pids` (the pids themselves included), from the
    /// kernel's list of each process's children (`/proc/<pid>/task/<tid>/children`): a few
    /// reads per process of the trees instead of one for every process of the machine. For a
    /// root, its main thread's list is read first, the other threads' only when no child there
    /// leads a process group (a wrapper starts its agent from its main thread, as a group of
    /// its own); below the roots, each process's main thread's list. `None` when the kernel
    /// keeps no such lists.
    pub fn trees(pids: &[u32]) -> Option<ProcTable> {
        // A few reads per process: a thousand panes' trees are read on every core.
        let workers = crate::parallel::workers_for(pids.len());
        if workers < 2 {
            return ProcTable::trees_of(pids);
        }
        let chunks: Vec<&[u32]> = pids.chunks(pids.len().div_ceil(workers)).collect();
        let mut table = ProcTable::default();
        for part in crate::parallel::parallel_map(chunks, workers, ProcTable::trees_of) {
            let part = part?;
            table.procs.extend(part.procs);
            for (parent, kids) in part.children {
                table.children.entry(parent).or_default().extend(kids);
            }
        }
        for kids in table.children.values_mut() {
            kids.sort_unstable();
            kids.dedup();
        }
        Some(table)
    }

    /// `trees` on this thread.
    fn trees_of(pids: &[u32]) -> Option<ProcTable> {
        let boot = boot_time();
        let ticks = clock_ticks();
        let mut table = ProcTable::default();
        let mut below: Vec<u32> = Vec::new();
        for &pid in pids {
            let mut kids = match children_listed(pid, pid) {
                Some(kids) => kids,
                // A process gone meanwhile has no list; a kernel without lists has none at all.
                None if std::path::Path::new(&format!("/proc/{pid}")).exists() => return None,
                None => continue,
            };
            table.procs.extend(
                read_stats(&[pid], boot, ticks)
                    .into_iter()
                    .map(|p| (pid, p)),
            );
            let mut infos = read_stats(&kids, boot, ticks);
            if !infos.iter().any(|p| p.pgid == p.pid) {
                let tids = fs::read_dir(format!("/proc/{pid}/task"))
                    .into_iter()
                    .flatten();
                for tid in tids
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                {
                    let more: Vec<u32> = children_listed(pid, tid)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|k| !kids.contains(k))
                        .collect();
                    infos.extend(read_stats(&more, boot, ticks));
                    kids.extend(more);
                }
            }
            below.extend(infos.iter().map(|p| p.pid));
            table.add(infos);
        }
        while let Some(pid) = below.pop() {
            let infos = read_stats(&children_listed(pid, pid).unwrap_or_default(), boot, ticks);
            below.extend(infos.iter().map(|p| p.pid));
            table.add(infos);
        }
        for kids in table.children.values_mut() {
            kids.sort_unstable();
            kids.dedup();
        }
        Some(table)
    }

    /// Every process under `root` (itself included), from the children lists of every
    /// thread at every level: a child that a worker thread started (a multi-threaded CLI's
    /// tool process) is on that thread's list only. For a sweep that must miss nothing of
    /// one tree, where `trees` reads what an observation of many needs. `None` when the
    /// kernel keeps no such lists.
    pub fn whole_tree(root: u32) -> Option<ProcTable> {
        let (boot, ticks) = (boot_time(), clock_ticks());
        let mut table = ProcTable::default();
        table.add(read_stats(&[root], boot, ticks));
        let mut below = vec![root];
        while let Some(pid) = below.pop() {
            let mut kids: Vec<u32> = Vec::new();
            let tids = match fs::read_dir(format!("/proc/{pid}/task")) {
                Ok(tids) => tids,
                // It ended meanwhile.
                Err(_) if !std::path::Path::new(&format!("/proc/{pid}")).exists() => continue,
                Err(_) => return None,
            };
            for tid in tids
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
            {
                match children_listed(pid, tid) {
                    Some(listed) => kids.extend(listed),
                    // A thread that ended meanwhile has no list; a kernel without lists none.
                    None if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {}
                    None => return None,
                }
            }
            kids.sort_unstable();
            kids.dedup();
            kids.retain(|k| !table.procs.contains_key(k));
            let infos = read_stats(&kids, boot, ticks);
            below.extend(infos.iter().map(|p| p.pid));
            table.add(infos);
        }
        Some(table)
    }

    fn add(&mut self, infos: Vec<ProcInfo>) {
        for info in infos {
            self.children.entry(info.ppid).or_default().push(info.pid);
            self.procs.insert(info.pid, info);
        }
    }

    /// Every process in the snapshot, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = &ProcInfo> {
        self.procs.values()
    }

    pub fn get(&self, pid: u32) -> Option<&ProcInfo> {
        self.procs.get(&pid)
    }

    /// All descendants of `pid`, breadth first (children before grandchildren).
    pub fn descendants(&self, pid: u32) -> Vec<ProcInfo> {
        let mut out = Vec::new();
        let mut queue = std::collections::VecDeque::from([pid]);
        while let Some(p) = queue.pop_front() {
            for kid in self.children.get(&p).into_iter().flatten() {
                if let Some(info) = self.procs.get(kid) {
                    out.push(info.clone());
                    queue.push_back(*kid);
                }
            }
        }
        out
    }
}

/// The arguments `pid` was started with (`/proc/<pid>/cmdline`), read up to 64 KiB.
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    fs::File::open(format!("/proc/{pid}/cmdline"))
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// One process as it is now; `None` once it is gone or only a zombie (it has ended: all that
/// is left is its exit status for its parent to collect).
pub fn live(pid: u32) -> Option<ProcInfo> {
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    let state = stat.get(stat.rfind(')')? + 2..)?.chars().next()?;
    if matches!(state, 'Z' | 'X') {
        return None;
    }
    parse_stat(pid, &stat, boot_time(), clock_ticks())
}

/// Whether `pid`'s environment (`/proc/<pid>/environ`, read up to 256 KiB) holds
/// `key=value`. False for processes of other users, whose environment cannot be read.
pub fn environ_has(pid: u32, key: &str, value: &[u8]) -> bool {
    use std::io::Read;
    let mut bytes = Vec::new();
    let Ok(file) = fs::File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    if file.take(256 * 1024).read_to_end(&mut bytes).is_err() {
        return false;
    }
    bytes.split(|b| *b == 0).any(|entry| {
        entry
            .strip_prefix(key.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
            == Some(value)
    })
}

/// Parse `/proc/<pid>/stat`. The command name is in parentheses and may itself contain
/// spaces and parentheses, so split at the last `)`.
fn parse_stat(pid: u32, stat: &str, boot: i64, ticks: i64) -> Option<ProcInfo> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // Fields after the name: state(3) ppid(4) … starttime(22); rest[0] is field 3.
    let ppid = rest.get(1)?.parse().ok()?;
    let pgid = rest.get(2)?.parse().ok()?;
    let start_ticks: i64 = rest.get(19)?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        comm,
        started: boot + start_ticks / ticks.max(1),
        pgid,
    })
}

/// The parent of `pid` (`/proc/<pid>/stat` field 4), from one small read: what a hook walks
/// to find the process that ran it.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    let rest: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    rest.get(1)?.parse().ok()
}

/// `pid` and the processes above it, nearest first, each with its arguments; read one at a
/// time as the caller walks (it stops at init, or at a process already gone).
pub fn ancestors(pid: u32) -> impl Iterator<Item = (u32, Vec<String>)> {
    let mut next = Some(pid);
    std::iter::from_fn(move || {
        let pid = next.filter(|p| *p > 1)?;
        let argv = cmdline(pid)?;
        next = parent(pid);
        Some((pid, argv))
    })
}

/// The session `pid` belongs to (`/proc/<pid>/stat` field 6), a zombie's too.
pub fn session(pid: u32) -> Option<u32> {
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    let rest: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    rest.get(3)?.parse().ok()
}

/// The children the kernel lists for thread `tid` of `pid`.
fn children_listed(pid: u32, tid: u32) -> Option<Vec<u32>> {
    let text = read_proc(&format!("/proc/{pid}/task/{tid}/children"))?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

/// The processes `pids` that still exist, from their stat.
fn read_stats(pids: &[u32], boot: i64, ticks: i64) -> Vec<ProcInfo> {
    pids.iter()
        .filter_map(|&pid| {
            let stat = read_proc(&format!("/proc/{pid}/stat"))?;
            parse_stat(pid, &stat, boot, ticks)
        })
        .collect()
}

/// A /proc file's text in as few calls as it takes: an open, a read and a close for a
/// short one (`fs::read_to_string` adds a stat and a read that finds the end). A read that
/// leaves room to spare has reached the end: the kernel fills the buffer from its records
/// while there are more (a record is a few bytes; the margin is far larger).
fn read_proc(path: &str) -> Option<String> {
    use std::io::Read;
    const MARGIN: usize = 64;
    let mut file = fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    loop {
        let n = match file.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        len += n;
        if n == 0 || len + MARGIN < buf.len() {
            break;
        }
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

fn boot_time() -> i64 {
    fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn clock_ticks() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t } else { 100 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A /proc file read in few calls is the whole file: a short one, and one of many
    /// records longer than the first buffer.
    #[test]
    fn a_proc_file_is_read_whole() {
        for path in ["/proc/cpuinfo", "/proc/self/cmdline", "/proc/stat"] {
            let whole = fs::read_to_string(path).unwrap();
            let fast = read_proc(path).unwrap();
            if path == "/proc/stat" {
                // Its counters move between the two reads; its lines stay.
                assert_eq!(fast.lines().count(), whole.lines().count(), "{path}");
            } else {
                assert_eq!(fast, whole, "{path}");
            }
        }
        assert!(fs::read_to_string("/proc/cpuinfo").unwrap().len() > 1024);
        assert_eq!(read_proc("/proc/no-such-file"), None);
    }

    #[test]
    fn the_children_of_a_process_are_read_from_its_list() {
        use std::os::unix::process::CommandExt;
        // Spawned from the test's thread, not the main one: found through the other lists.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let me = std::process::id();
        let Some(table) = ProcTable::trees(&[me, 999_999_999]) else {
            eprintln!("SKIPPED: this kernel keeps no /proc/PID/task/TID/children lists");
            let _ = child.kill();
            let _ = child.wait();
            return;
        };
        let kids = table.descendants(me);
        let _ = child.kill();
        let _ = child.wait();
        let sleep = kids
            .iter()
            .find(|p| p.pid == child.id())
            .expect("the child");
        assert_eq!((sleep.ppid, sleep.pgid), (me, child.id()));
        assert_eq!(sleep.comm, "sleep");
    }

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let stat = "42 (my (odd) name) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0";
        let info = parse_stat(42, stat, 1000, 100).unwrap();
        assert_eq!(info.comm, "my (odd) name");
        assert_eq!(info.ppid, 7);
        assert_eq!(info.started, 1005);
    }

    #[test]
    fn finds_our_own_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let table = ProcTable::read();
        let kids = table.descendants(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            kids.iter()
                .any(|p| p.pid == child.id() && p.comm == "sleep")
        );
    }

    #[test]
    fn reads_a_childs_environment_and_sees_it_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("PHOENIX_PROCS_TEST", "a b")
            .spawn()
            .unwrap();
        let pid = child.id();
        // `spawn` can return while the child is still between fork and exec (its environ
        // then reads empty): wait for the exec, up to a bound.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !environ_has(pid, "PHOENIX_PROCS_TEST", b"a b")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(environ_has(pid, "PHOENIX_PROCS_TEST", b"a b"));
        assert!(!environ_has(pid, "PHOENIX_PROCS_TEST", b"a"));
        assert!(!environ_has(pid, "PHOENIX_PROCS", b"a b"));
        assert!(live(pid).is_some_and(|p| p.comm == "sleep"));
        let _ = child.kill();
        let _ = child.wait();
        assert!(live(pid).is_none());
    }
}
