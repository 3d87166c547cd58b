//! What a phoenix binary needs of the host it is copied to: its platform (from its ELF
//! header) and the newest glibc it was linked against (from the symbol versions it asks the
//! dynamic loader for). A static (musl) build asks for none and runs on any Linux of its
//! architecture; this machine's ordinary build needs this machine's glibc or newer, which an
//! older host does not have. Said by `hosts check`, refused by `hosts install` before anything
//! is copied.

use std::fmt;
use std::path::{Path, PathBuf};

use super::fleet::Link;
use super::install::Platform;

use crate::state::bounded::Links;
use crate::world::Check;

/// A glibc version (`2.36`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Glibc {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for Glibc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Glibc {
    /// `2.36` or `2.36.1`.
    fn parse(text: &str) -> Option<Glibc> {
        let mut parts = text.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Glibc { major, minor })
    }

    /// What `getconf GNU_LIBC_VERSION` prints (`glibc 2.36`); `None` for anything else (a
    /// musl system's getconf knows no such variable).
    pub fn from_getconf(text: &str) -> Option<Glibc> {
        let mut words = text.split_whitespace();
        (words.next()? == "glibc")
            .then(|| Glibc::parse(words.next()?))
            .flatten()
    }
}

/// What a binary needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    pub platform: Platform,
    /// The newest `GLIBC_2.N` symbol version it asks for; `None`: linked statically (or
    /// against another libc), no glibc needed.
    pub glibc: Option<Glibc>,
}

/// A phoenix is tens of MB; anything much larger is not one.
const MAX_BINARY: u64 = 512 << 20;

/// Read `path` (a regular file, bounded; the operator's own file, so a link is followed) and
/// say what it needs.
pub fn needs(path: &Path) -> Result<Needs, String> {
    let bytes = crate::state::bounded::read_whole(path, MAX_BINARY, Links::Follow)
        .map_err(|e| format!("cannot read the phoenix to copy: {e}"))?;
    needs_of(&bytes).ok_or_else(|| {
        format!(
            "`{}` is not a Linux executable (no ELF header phoenix knows)",
            path.display()
        )
    })
}

/// The ELF header's machine, and the glibc symbol versions among the binary's strings.
fn needs_of(bytes: &[u8]) -> Option<Needs> {
    if bytes.len() < 20 || &bytes[..4] != b"\x7fELF" {
        return None;
    }
    // e_machine, at 18, in the byte order EI_DATA (5) gives.
    let machine = match bytes[5] {
        1 => u16::from_le_bytes([bytes[18], bytes[19]]),
        2 => u16::from_be_bytes([bytes[18], bytes[19]]),
        _ => return None,
    };
    let arch = match machine {
        0x3e => "x86_64",
        0xb7 => "aarch64",
        0x03 => "x86",
        0x28 => "arm",
        0x15 => "powerpc64",
        0xf3 => "riscv64",
        _ => return None,
    };
    Some(Needs {
        platform: Platform {
            os: "linux".into(),
            arch: arch.into(),
        },
        glibc: newest_glibc(bytes),
    })
}

/// The newest `GLIBC_2.N[.M]` among the NUL-terminated strings of the binary (the version
/// needs of its dynamic section name them; a static build has none).
fn newest_glibc(bytes: &[u8]) -> Option<Glibc> {
    const TAG: &[u8] = b"GLIBC_";
    let mut newest = None;
    let mut rest = bytes;
    while let Some(at) = memchr_tag(rest, TAG) {
        let after = &rest[at + TAG.len()..];
        let end = after
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .unwrap_or(after.len());
        // Only a whole string: `GLIBC_2.34\0`, not a prefix of a longer word.
        if after.get(end) == Some(&0)
            && let Some(v) = std::str::from_utf8(&after[..end])
                .ok()
                .and_then(Glibc::parse)
        {
            newest = newest.max(Some(v));
        }
        rest = &after[end..];
    }
    newest
}

fn memchr_tag(haystack: &[u8], tag: &[u8]) -> Option<usize> {
    haystack.windows(tag.len()).position(|w| w == tag)
}

/// Whether a binary that needs `needs` runs on a host of `platform` whose glibc is `host`
/// (`None`: none found there). `Err` says why not, in words for the operator.
pub fn runs_on(needs: &Needs, platform: &Platform, host: Option<Glibc>) -> Result<(), String> {
    if needs.platform != *platform {
        return Err(format!(
            "it is built for {} and the host is {platform}",
            needs.platform
        ));
    }
    match (needs.glibc, host) {
        (None, _) => Ok(()),
        (Some(need), Some(have)) if have >= need => Ok(()),
        (Some(need), Some(have)) => Err(format!(
            "it needs glibc {need} or newer and the host has glibc {have}"
        )),
        (Some(need), None) => Err(format!(
            "it needs glibc {need} or newer and the host has no glibc (`getconf GNU_LIBC_VERSION` names none)"
        )),
    }
}

/// The phoenix `hosts install` copies to `host`: its `binary`, else the one running.
pub fn to_copy(host: &crate::spec::HostSpec) -> std::io::Result<PathBuf> {
    match &host.binary {
        Some(binary) => Ok(binary.clone()),
        None => crate::process::main_binary(),
    }
}

/// `hosts check`'s row for what `hosts install` would copy to the host: whether it runs there.
pub fn install_row(link: &Link) -> Check {
    let check = "phoenix to install".to_string();
    let failed = |detail: String, fix: Option<String>| Check {
        check: check.clone(),
        ok: false,
        detail,
        fix,
    };
    let path = match to_copy(&link.host) {
        Ok(path) => path,
        Err(e) => return failed(format!("cannot tell which phoenix runs here: {e}"), None),
    };
    let needs = match needs(&path) {
        Ok(needs) => needs,
        Err(e) => {
            return failed(
                e,
                Some(format!(
                    "point `binary` in host `{}`'s [[host]] entry at a phoenix",
                    link.name()
                )),
            );
        }
    };
    let (platform, glibc) = match super::install::host_side(link) {
        Ok(side) => side,
        Err(e) => return failed(e.to_string(), e.hint()),
    };
    let what = match needs.glibc {
        None => "static".to_string(),
        Some(v) => format!("needs glibc {v}"),
    };
    match runs_on(&needs, &platform, glibc) {
        Ok(()) => Check {
            check,
            ok: true,
            detail: format!(
                "`hosts install` copies {} ({what}), which runs on the host ({platform}{})",
                path.display(),
                glibc.map_or(String::new(), |v| format!(", glibc {v}"))
            ),
            fix: None,
        },
        Err(why) => failed(
            format!(
                "`hosts install` would copy {}, which cannot run there: {why}",
                path.display()
            ),
            Some(match needs.platform == platform {
                true => static_build_hint(link.name()),
                false => format!(
                    "set `binary` in host `{}`'s [[host]] entry to a phoenix built for {platform}",
                    link.name()
                ),
            }),
        ),
    }
}

/// What to do instead: a static build, and where to say it.
pub fn static_build_hint(host: &str) -> String {
    format!(
        "build a static phoenix, which needs no glibc: `rustup target add x86_64-unknown-linux-musl && cargo build --release --target x86_64-unknown-linux-musl` (musl-gcc installed: Debian's musl-tools), set `binary = \"target/x86_64-unknown-linux-musl/release/phoenix\"` in host `{host}`'s [[host]] entry, and run `phoenix hosts install {host}`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16, strings: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b.extend_from_slice(strings);
        b
    }

    #[test]
    fn the_newest_glibc_version_asked_for_is_what_a_binary_needs() {
        let bin = elf(
            0x3e,
            b"\0GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_PRIVATE\0GLIBC_2.9\0GLIBC_2.39x\0",
        );
        let needs = needs_of(&bin).unwrap();
        assert_eq!(needs.platform.to_string(), "linux-x86_64");
        assert_eq!(
            needs.glibc,
            Some(Glibc {
                major: 2,
                minor: 34
            })
        );
        // A static build names no glibc.
        let needs = needs_of(&elf(0xb7, b"\0musl\0")).unwrap();
        assert_eq!(needs.glibc, None);
        assert_eq!(needs.platform.arch, "aarch64");
        assert_eq!(needs_of(b"#!/bin/sh\necho hi\n"), None);
    }

    #[test]
    fn this_phoenix_is_read_as_what_it_is() {
        let exe = std::env::current_exe().unwrap();
        let needs = needs(&exe).unwrap();
        assert_eq!(needs.platform, Platform::here());
        // Built against glibc here, and no newer than the glibc it runs on.
        let here = Glibc::from_getconf(&String::from_utf8_lossy(
            &std::process::Command::new("getconf")
                .arg("GNU_LIBC_VERSION")
                .output()
                .unwrap()
                .stdout,
        ));
        assert!(
            needs.glibc.is_some() && needs.glibc <= here,
            "{needs:?} {here:?}"
        );
    }

    #[test]
    fn a_host_runs_a_binary_whose_glibc_it_has_or_a_static_one() {
        let x86 = Platform {
            os: "linux".into(),
            arch: "x86_64".into(),
        };
        let v = |minor| Glibc { major: 2, minor };
        let dynamic = Needs {
            platform: x86.clone(),
            glibc: Some(v(36)),
        };
        assert!(runs_on(&dynamic, &x86, Some(v(36))).is_ok());
        assert!(runs_on(&dynamic, &x86, Some(v(39))).is_ok());
        let old = runs_on(&dynamic, &x86, Some(v(31))).unwrap_err();
        assert!(
            old.contains("needs glibc 2.36") && old.contains("has glibc 2.31"),
            "{old}"
        );
        assert!(
            runs_on(&dynamic, &x86, None)
                .unwrap_err()
                .contains("no glibc")
        );
        let fixed = Needs {
            platform: x86.clone(),
            glibc: None,
        };
        assert!(runs_on(&fixed, &x86, Some(v(17))).is_ok());
        assert!(runs_on(&fixed, &x86, None).is_ok());
        let arm = Platform {
            os: "linux".into(),
            arch: "aarch64".into(),
        };
        assert!(
            runs_on(&fixed, &arm, None)
                .unwrap_err()
                .contains("built for")
        );
        assert_eq!(Glibc::from_getconf("glibc 2.36\n"), Some(v(36)));
        assert_eq!(Glibc::from_getconf("getconf: Unrecognized variable"), None);
    }
}
