//! The versions of a CLI phoenix was proven with, and what each of them knows: its hook
//! events and, per event, the values its matcher is compared with (Claude Code's SessionStart
//! sources, its notification types). The hook configuration phoenix writes for an installed
//! version names only what that version knows: Claude Code 2.1.197 stops at a blocking
//! "Settings Warning" when a settings file names an event it does not know.
//!
//! Pure data and decisions; finding which version is installed is `world::cli_version`'s.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::HookEntry;

/// A CLI's version, `major.minor.patch` (a pre-release or build suffix is left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// The first `N.N.N` word of `text` (`2.1.332 (Claude Code)`, `codex-cli 0.171.0`).
    pub fn find_in(text: &str) -> Option<Version> {
        text.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
            .filter_map(|word| {
                let word = word.trim_start_matches('v');
                // `0.171.0-alpha.1`: the part before the suffix.
                let core = word.split(['-', '+']).next().unwrap_or(word);
                Version::parse(core)
            })
            .next()
    }

    /// Exactly `N.N.N`.
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.split('.');
        let mut next = || parts.next()?.parse::<u32>().ok();
        let v = Version(next()?, next()?, next()?);
        parts.next().is_none().then_some(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// One version phoenix was proven with (its real-CLI suites passed against it), and what it
/// knows, read from that version's own code.
#[derive(Debug, Clone, Copy)]
pub struct Proven {
    pub version: Version,
    /// Every hook event it accepts in a settings file.
    pub events: &'static [&'static str],
    /// Per event, the values its matcher is compared with, when they are names (SessionStart
    /// sources, notification types); events not listed match tool names or nothing.
    pub matcher_values: &'static [(&'static str, &'static [&'static str])],
    /// What changed since the proven version before it, for `docs/hooks.md` and messages.
    pub changes: &'static str,
}

/// Where an installed version stands against the proven ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// One of the proven versions, or between two of them.
    Proven,
    /// Older than every proven version.
    Older,
    /// Newer than every proven version.
    Newer,
    /// Not known (the CLI did not say).
    Unknown,
}

/// The proven version whose knowledge the hooks for `installed` are made from: the newest
/// proven at or below it (a version between two proven ones may lack what the newer one
/// added; one newer than all knows at least what the newest knew), the oldest when it is
/// older than all or not known (the safest: what the oldest knows, the others know too).
/// `proven` is sorted oldest first and not empty.
pub fn made_for(proven: &'static [Proven], installed: Option<Version>) -> &'static Proven {
    let oldest = &proven[0];
    match installed {
        None => oldest,
        Some(v) => proven
            .iter()
            .rev()
            .find(|p| p.version <= v)
            .unwrap_or(oldest),
    }
}

/// How `installed` stands against `proven` (sorted oldest first, not empty).
pub fn standing(proven: &[Proven], installed: Option<Version>) -> Standing {
    let (Some(first), Some(last)) = (proven.first(), proven.last()) else {
        return Standing::Unknown;
    };
    match installed {
        None => Standing::Unknown,
        Some(v) if v < first.version => Standing::Older,
        Some(v) if v > last.version => Standing::Newer,
        Some(_) => Standing::Proven,
    }
}

/// `2.1.197–2.1.332`, or the one version.
pub fn range_text(proven: &[Proven]) -> String {
    match (proven.first(), proven.last()) {
        (Some(a), Some(b)) if a.version != b.version => format!("{}–{}", a.version, b.version),
        (Some(a), _) => a.version.to_string(),
        _ => String::new(),
    }
}

/// One hook entry as written for a version: its event, and its matcher with only the names
/// that version knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub entry: HookEntry,
    pub matcher: Option<String>,
}

/// `entries` as `level` knows them: an entry whose event it does not know is left out (an
/// unknown event breaks the settings file: Claude Code 2.1.197's "Settings Warning"). A
/// matcher is kept whole: it is a pattern compared with what the CLI sends, so a name an older
/// version never sends matches nothing there and costs nothing (2.1.197 runs a SessionStart
/// matcher naming `fork` as it runs one without), while leaving it out would lose it for a
/// version phoenix could not tell (a wrapper script, a build between two proven ones).
pub fn fit(entries: Vec<HookEntry>, level: &Proven) -> Vec<Fitted> {
    entries
        .into_iter()
        .filter(|e| level.events.contains(&e.event))
        .map(|entry| Fitted {
            matcher: entry.matcher.map(str::to_string),
            entry,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_cli::entry;

    const OLD: Proven = Proven {
        version: Version(1, 0, 0),
        events: &["Start", "Note", "Tool"],
        matcher_values: &[("Start", &["startup", "resume"]), ("Note", &["a", "b"])],
        changes: "",
    };
    const NEW: Proven = Proven {
        version: Version(1, 2, 0),
        events: &["Start", "Note", "Tool", "Switch"],
        matcher_values: &[
            ("Start", &["startup", "resume", "fork"]),
            ("Note", &["a", "b", "c"]),
        ],
        changes: "",
    };
    static BOTH: [Proven; 2] = [OLD, NEW];

    #[test]
    fn versions_are_read_from_what_each_cli_prints() {
        let v = Version::find_in;
        assert_eq!(v("2.1.332 (Claude Code)"), Some(Version(2, 1, 332)));
        assert_eq!(v("codex-cli 0.171.0\n"), Some(Version(0, 171, 0)));
        assert_eq!(v("0.61.0"), Some(Version(0, 61, 0)));
        assert_eq!(v("v1.2.3-beta.1"), Some(Version(1, 2, 3)));
        assert_eq!(v("usage: claude [options]"), None);
        assert_eq!(v("9.1"), None);
        assert!(Version(2, 1, 197) < Version(2, 1, 332));
        assert!(Version(0, 99, 9) < Version(0, 171, 0));
    }

    #[test]
    fn hooks_are_made_from_the_newest_proven_version_at_or_below_the_installed_one() {
        let at = |v: Option<Version>| made_for(&BOTH, v).version;
        assert_eq!(at(Some(Version(1, 0, 0))), Version(1, 0, 0));
        assert_eq!(at(Some(Version(1, 1, 5))), Version(1, 0, 0));
        assert_eq!(at(Some(Version(1, 2, 0))), Version(1, 2, 0));
        assert_eq!(at(Some(Version(3, 0, 0))), Version(1, 2, 0));
        assert_eq!(at(Some(Version(0, 9, 0))), Version(1, 0, 0));
        assert_eq!(at(None), Version(1, 0, 0));
        assert_eq!(standing(&BOTH, Some(Version(1, 1, 5))), Standing::Proven);
        assert_eq!(standing(&BOTH, Some(Version(0, 9, 0))), Standing::Older);
        assert_eq!(standing(&BOTH, Some(Version(1, 2, 1))), Standing::Newer);
        assert_eq!(standing(&BOTH, None), Standing::Unknown);
        assert_eq!(range_text(&BOTH), "1.0.0–1.2.0");
        assert_eq!(range_text(&BOTH[..1]), "1.0.0");
    }

    #[test]
    fn an_older_version_gets_no_event_it_does_not_know_and_every_matcher_whole() {
        let wanted = vec![
            entry(
                "Start",
                Some("startup|resume|fork"),
                "session-start",
                10,
                "",
            ),
            entry("Switch", None, "switch", 5, ""),
            entry("Note", Some("c"), "note", 5, ""),
            entry("Tool", Some("*"), "tool", 5, ""),
        ];
        let old = fit(wanted.clone(), &OLD);
        let shape: Vec<(&str, Option<&str>)> = old
            .iter()
            .map(|f| (f.entry.event, f.matcher.as_deref()))
            .collect();
        assert_eq!(
            shape,
            [
                ("Start", Some("startup|resume|fork")),
                ("Note", Some("c")),
                ("Tool", Some("*")),
            ]
        );
        let new = fit(wanted, &NEW);
        let shape: Vec<(&str, Option<&str>)> = new
            .iter()
            .map(|f| (f.entry.event, f.matcher.as_deref()))
            .collect();
        assert_eq!(
            shape,
            [
                ("Start", Some("startup|resume|fork")),
                ("Switch", None),
                ("Note", Some("c")),
                ("Tool", Some("*")),
            ]
        );
    }
}
