//! Keeping critical_events.jsonl bounded: events older than the retention are dropped.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::state::{self, FleetDir};

/// Drop events older than `retention` from critical_events.jsonl (atomically, keeping lines
/// that do not parse: a person may want to see them). Returns how many were dropped.
pub fn prune_events(fleet: &FleetDir, retention: Duration) -> std::io::Result<usize> {
    let path = fleet.critical_events_path();
    // Never through a link planted in its place.
    let read = |path: &Path| -> std::io::Result<String> {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut state::file::open_read(path)?, &mut text)?;
        Ok(text)
    };
    let Ok(text) = read(&path) else {
        return Ok(0);
    };
    let cutoff = jiff::Timestamp::now().as_second() - retention.as_secs() as i64;
    let time = |line: &str| {
        serde_json::from_str::<Value>(line).ok().and_then(|v| {
            v["ts"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        })
    };
    let old = |line: &str| time(line).is_some_and(|t| t.as_second() < cutoff);
    // Cheap check first: events are appended in time order, so look at the oldest one.
    if text
        .lines()
        .find_map(time)
        .is_none_or(|t| t.as_second() >= cutoff)
    {
        return Ok(0);
    }
    let (lock, lock_refused) = fleet.events_lock_checked()?;
    // Read again under the lock: an event appended meanwhile must not be lost.
    let text = read(&path)?;
    let mut dropped = 0;
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        if old(line) {
            dropped += 1;
        } else {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let written = state::atomic_write(&path, kept.as_bytes());
    drop(lock);
    // Recorded once the lock is released: recording takes it.
    if let Some(aside) = lock_refused {
        state::file::report_refused(&fleet.events_lock_path(), &aside);
    }
    written.map(|()| dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_events_are_pruned_and_new_and_unreadable_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let fleet = FleetDir::new(tmp.path());
        fleet.ensure().unwrap();
        let now = jiff::Timestamp::now();
        let old = (now - jiff::SignedDuration::from_hours(24 * 40)).to_string();
        let text = format!(
            "not json\n{{\"ts\":\"{old}\",\"event\":\"a\"}}\n{{\"ts\":\"{old}\",\"event\":\"b\"}}\n{{\"ts\":\"{now}\",\"event\":\"c\"}}\n"
        );
        std::fs::write(fleet.critical_events_path(), text).unwrap();
        let dropped = prune_events(&fleet, Duration::from_secs(30 * 86_400)).unwrap();
        assert_eq!(dropped, 2);
        let kept = std::fs::read_to_string(fleet.critical_events_path()).unwrap();
        assert_eq!(kept.lines().count(), 2, "{kept}");
        assert!(kept.contains("not json") && kept.contains("\"c\""));
        // Nothing old left: the file is not rewritten.
        assert_eq!(
            prune_events(&fleet, Duration::from_secs(30 * 86_400)).unwrap(),
            0
        );
    }
}
