//! One observed fleet for every reader of `phoenix serve`: `GET /api/status`, `GET
//! /api/agents/{agent}` and the live stream read the last observation instead of observing
//! tmux, /proc and every state dir once per request. It is refreshed by whoever reads it when
//! it is too old (one refresh at a time; the other readers wait for it and share it), when
//! something changed in the state dir (a hook, a wrapper's exit or start: they all write
//! there), when phoenix.toml changed, and after every write through the API, so that a
//! restart or a stop asked for over HTTP shows in the very next read. How old the observation
//! is goes out with it (`observed_age_ms`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::App;
use super::error::ApiError;
use crate::spec::Spec;
use crate::world::World;

/// An observation older than this is never served: the next reader refreshes it.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// After a change in the state dir the observation is refreshed, but not more often than this:
/// a busy fleet's hooks write many times a second.
pub const MIN_AGE: Duration = Duration::from_millis(50);
/// The status document's key whose value is set per response.
const AGE_KEY: &str = "observed_age_ms";

/// What phoenix.toml looked like when it was read: a different one is a changed config.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigStamp(Option<(u64, SystemTime, u64)>);

impl ConfigStamp {
    fn of(file: &Path) -> ConfigStamp {
        use std::os::unix::fs::MetadataExt;
        ConfigStamp(std::fs::metadata(file).ok().map(|m| {
            (
                m.len(),
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.ino(),
            )
        }))
    }
}

/// One observation of the fleet.
pub struct Observed {
    /// When observing began: the data is at least this old.
    pub at: Instant,
    writes: u64,
    changes: u64,
    config: ConfigStamp,
    pub spec: Arc<Spec>,
    /// `None` for a fleet across hosts: its document is read from every host.
    pub world: Option<Arc<World>>,
    /// The status document as sent, with `"observed_age_ms":0`: the age is set per response.
    status: String,
    /// Where that 0 is in `status`.
    age_at: Option<usize>,
}

impl Observed {
    pub fn age(&self) -> Duration {
        self.at.elapsed()
    }

    /// The status document as observed, its age left at 0: what changed or did not.
    pub fn status_without_age(&self) -> &str {
        &self.status
    }

    /// The status document with its age now.
    pub fn status_body(&self) -> String {
        let Some(at) = self.age_at else {
            return self.status.clone();
        };
        let mut body = String::with_capacity(self.status.len() + 8);
        body.push_str(&self.status[..at]);
        body.push_str(&self.age().as_millis().to_string());
        body.push_str(&self.status[at + 1..]);
        body
    }
}

/// The last observation and what makes it stale.
#[derive(Default)]
pub struct Snapshot {
    current: Mutex<Option<Arc<Observed>>>,
    /// Bumped after every write through the API: an observation from before it is not served.
    writes: AtomicU64,
    /// Bumped by the state dir's watcher.
    changes: Arc<AtomicU64>,
    /// One refresh at a time; readers that find it stale wait for the one in progress.
    refreshing: tokio::sync::Mutex<()>,
    watcher: Mutex<Option<(PathBuf, notify::RecommendedWatcher)>>,
}

impl Snapshot {
    /// A write through the API happened (or is about to be seen): the next read observes anew.
    pub fn invalidate(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    /// The current observation if it may still be served.
    fn fresh(&self, config: &Path) -> Option<Arc<Observed>> {
        let current = self.current.lock().ok()?.clone()?;
        may_serve(
            current.age(),
            current.writes != self.writes.load(Ordering::SeqCst),
            current.changes != self.changes.load(Ordering::SeqCst),
            current.config != ConfigStamp::of(config),
        )
        .then_some(current)
    }

    /// The fleet as last observed, refreshed first when it is stale.
    pub async fn read(&self, app: &App) -> Result<Arc<Observed>, ApiError> {
        if let Some(o) = self.fresh(&app.config) {
            return Ok(o);
        }
        let _one = self.refreshing.lock().await;
        // Whoever held the lock may have just refreshed it.
        if let Some(o) = self.fresh(&app.config) {
            return Ok(o);
        }
        let (writes, changes) = (
            self.writes.load(Ordering::SeqCst),
            self.changes.load(Ordering::SeqCst),
        );
        let app2 = app.clone();
        let observed = super::routes::blocking(move || observe(&app2, writes, changes)).await?;
        self.watch(&observed.spec);
        let observed = Arc::new(observed);
        if let Ok(mut current) = self.current.lock() {
            *current = Some(observed.clone());
        }
        Ok(observed)
    }

    /// Watch the fleet's state dir (again, when phoenix.toml moved it): any change there (a
    /// hook's write, a wrapper's record of an exit) makes the observation stale.
    fn watch(&self, spec: &Spec) {
        use notify::{EventKind, RecursiveMode, Watcher};
        let Ok(mut slot) = self.watcher.lock() else {
            return;
        };
        let root = spec.fleet.state_dir.join("agents");
        if slot.as_ref().is_some_and(|(watched, _)| *watched == root) || !root.is_dir() {
            return;
        }
        *slot = None;
        let changes = self.changes.clone();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            // Reads (ours among them) change nothing.
            if res.is_ok_and(|e| !matches!(e.kind, EventKind::Access(_))) {
                changes.fetch_add(1, Ordering::SeqCst);
            }
        });
        match watcher {
            Ok(mut w) => match w.watch(&root, RecursiveMode::Recursive) {
                Ok(()) => *slot = Some((root, w)),
                Err(e) => tracing::warn!(
                    "cannot watch `{}` ({e}): the status is refreshed every {} ms",
                    root.display(),
                    MAX_AGE.as_millis()
                ),
            },
            Err(e) => tracing::warn!("cannot watch the state dir ({e})"),
        }
    }
}

/// Whether an observation of this age may be served: never after a write through the API or
/// an edit of phoenix.toml since, never when older than `MAX_AGE`, and after a change in the
/// state dir only while younger than `MIN_AGE`.
fn may_serve(age: Duration, written: bool, changed: bool, config_changed: bool) -> bool {
    !written && !config_changed && (age < MIN_AGE || (age < MAX_AGE && !changed))
}

/// Observe the fleet now: the spec, the world (one runtime listing, /proc, the state dirs) and
/// the status document rendered from them.
fn observe(app: &App, writes: u64, changes: u64) -> Result<Observed, ApiError> {
    let at = Instant::now();
    // Stamped before it is read: an edit while reading shows as a change next time.
    let config = ConfigStamp::of(&app.config);
    let spec = app.spec()?;
    let (world, mut doc) = super::routes::observe_status(&spec)?;
    // A fleet across hosts renders its own document: it says its age all the same.
    if let Some(map) = doc.as_object_mut() {
        map.insert(AGE_KEY.into(), 0.into());
    }
    let status = doc.to_string();
    Ok(Observed {
        at,
        writes,
        changes,
        config,
        spec: Arc::new(spec),
        world: world.map(Arc::new),
        age_at: age_at(&status),
        status,
    })
}

/// Where the age's 0 is in the serialized document: at its first `"observed_age_ms":0`. No
/// string in it can hold that text (a `"` inside a JSON string is escaped), and the key comes
/// before the agents and hosts, whose rows might carry one of their own.
fn age_at(text: &str) -> Option<usize> {
    let key = format!("\"{AGE_KEY}\":0");
    text.find(&key).map(|i| i + key.len() - 1)
}

/// After a request that may change the fleet (every method but GET and HEAD) the next read
/// observes anew: a restart, a stop or an injection shows at once.
pub async fn invalidate_after_writes(
    State(app): State<App>,
    request: Request,
    next: Next,
) -> Response {
    let writes = !matches!(*request.method(), Method::GET | Method::HEAD);
    let response = next.run(request).await;
    if writes {
        app.snapshot.invalidate();
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staleness_is_bounded_and_writes_are_seen_at_once() {
        let ms = Duration::from_millis;
        assert!(may_serve(ms(0), false, false, false));
        assert!(may_serve(ms(900), false, false, false));
        assert!(
            !may_serve(MAX_AGE, false, false, false),
            "never older than MAX_AGE"
        );
        // A hook wrote: refreshed, though not more often than MIN_AGE.
        assert!(may_serve(ms(20), false, true, false));
        assert!(!may_serve(ms(60), false, true, false));
        // A write through the API or an edited config: never served again.
        assert!(!may_serve(ms(0), true, false, false));
        assert!(!may_serve(ms(0), false, false, true));
    }

    #[test]
    fn the_age_is_set_per_response_in_its_place() {
        let doc = serde_json::json!({"format_version": 1, "fleet": "f \"observed_age_ms\":0",
            "observed_at": "t", "observed_age_ms": 0,
            "agents": [{"agent": "a", "observed_age_ms": 0}]});
        let status = doc.to_string();
        let observed = Observed {
            at: Instant::now() - Duration::from_millis(250),
            writes: 0,
            changes: 0,
            config: ConfigStamp(None),
            spec: Arc::new(
                crate::spec::parse(
                    "",
                    Path::new("/f/phoenix.toml"),
                    crate::spec::LoadOptions {
                        check_filesystem: false,
                    },
                )
                .unwrap(),
            ),
            world: None,
            age_at: age_at(&status),
            status,
        };
        let text = observed.status_body();
        assert!(text.starts_with("{\"format_version\":1,"), "{text}");
        let body: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(body["observed_age_ms"].as_u64().unwrap() >= 250, "{body}");
        assert_eq!(body["fleet"], "f \"observed_age_ms\":0");
        assert_eq!(body["agents"][0]["observed_age_ms"], 0);
    }
}
