//! Bounded reads of files phoenix does not control: transcripts and session files a hook
//! payload names, files agents write, templates and handoff inputs. Only regular files are
//! opened (a FIFO would block `open()`, `/dev/zero` never ends), and never more than a byte
//! limit is read, so no such file can hang or exhaust a hook, the watchdog or the wrapper.

use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a bounded read returned nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("`{path}` is not a regular file ({kind}): not read", path = path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("`{path}` has {len} bytes, more than the {max} read: not read", path = path.display())]
    TooLarge { path: PathBuf, len: u64, max: u64 },
    #[error("cannot read `{path}`: {source}", path = path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl ReadError {
    /// The file does not exist (the usual, quiet case for optional files).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Whether the last path component may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Someone else's file (a CLI's transcript, a template): symlinks are followed.
    Follow,
    /// A file in phoenix's own state dir: a symlink is refused.
    Refuse,
}

/// The end of a file, at most `max` bytes of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tail {
    pub bytes: Vec<u8>,
    /// Where in the file `bytes` start; > 0 when the file was longer than the limit.
    pub start: u64,
}

impl Tail {
    /// The text from the first whole line on (a tail that starts mid-file starts mid-line).
    pub fn lines_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        if self.start == 0 {
            return text.into_owned();
        }
        text.split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default()
    }

    /// Was only part of the file read?
    pub fn truncated(&self) -> bool {
        self.start > 0
    }
}

fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "not a file"
    }
}

/// Open `path` for reading if it is a regular file. The type is checked before opening (so a
/// device is never opened) and again on the open file (so a swap in between is caught); the
/// open is non-blocking, so even a FIFO swapped in cannot block it.
pub fn open_regular(path: &Path, links: Links) -> Result<(File, Metadata), ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let refuse = |meta: &Metadata| ReadError::NotRegular {
        path: path.to_path_buf(),
        kind: kind(meta),
    };
    let before = match links {
        Links::Follow => std::fs::metadata(path),
        Links::Refuse => std::fs::symlink_metadata(path),
    }
    .map_err(io)?;
    if !before.is_file() {
        return Err(refuse(&before));
    }
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(refuse(&meta));
    }
    Ok((file, meta))
}

/// The last `max` bytes of the regular file at `path`.
pub fn read_tail(path: &Path, max: u64, links: Links) -> Result<Tail, ReadError> {
    let (mut file, meta) = open_regular(path, links)?;
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let start = meta.len().saturating_sub(max);
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut bytes = Vec::new();
    // `take`: a file that grows while it is read still yields at most `max` bytes.
    file.take(max).read_to_end(&mut bytes).map_err(io)?;
    Ok(Tail { bytes, start })
}

/// The whole regular file at `path`, refused when it has more than `max` bytes.
pub fn read_whole(path: &Path, max: u64, links: Links) -> Result<Vec<u8>, ReadError> {
    let (file, meta) = open_regular(path, links)?;
    let too_large = |len| ReadError::TooLarge {
        path: path.to_path_buf(),
        len,
        max,
    };
    if meta.len() > max {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `read_whole` as UTF-8 text.
pub fn read_string(path: &Path, max: u64, links: Links) -> Result<String, ReadError> {
    String::from_utf8(read_whole(path, max, links)?).map_err(|e| ReadError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fifo_and_dev_zero_are_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = Instant::now();
        for path in [fifo.as_path(), Path::new("/dev/zero"), tmp.path()] {
            let err = read_tail(path, 1024, Links::Follow).unwrap_err();
            assert!(
                matches!(err, ReadError::NotRegular { .. }),
                "{}: {err}",
                path.display()
            );
            assert!(read_whole(path, 1024, Links::Follow).is_err());
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        let err = read_tail(Path::new("/dev/zero"), 1, Links::Follow).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/dev/zero` is not a regular file (a character device): not read"
        );
    }

    #[test]
    fn a_large_file_is_read_at_its_tail_only() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.jsonl");
        std::fs::write(&path, "first line\nsecond line\nthird\n").unwrap();
        let tail = read_tail(&path, 14, Links::Follow).unwrap();
        assert_eq!(tail.bytes.len(), 14);
        assert!(tail.truncated());
        assert_eq!(tail.lines_text(), "third\n");
        let whole = read_tail(&path, 1 << 20, Links::Follow).unwrap();
        assert_eq!(whole.start, 0);
        assert_eq!(whole.lines_text(), "first line\nsecond line\nthird\n");
        assert!(matches!(
            read_whole(&path, 10, Links::Follow),
            Err(ReadError::TooLarge { len: 29, .. })
        ));
        assert_eq!(read_whole(&path, 29, Links::Follow).unwrap().len(), 29);
    }

    #[test]
    fn a_symlink_is_refused_where_the_file_is_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::write(&real, "x").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(read_whole(&link, 10, Links::Follow).is_ok());
        assert!(matches!(
            read_whole(&link, 10, Links::Refuse),
            Err(ReadError::NotRegular {
                kind: "a symlink",
                ..
            })
        ));
        assert!(
            read_whole(&tmp.path().join("missing"), 10, Links::Follow)
                .unwrap_err()
                .is_not_found()
        );
    }
}
