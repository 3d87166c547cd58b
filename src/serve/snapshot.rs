//! One observed fleet for every reader of `phoenix serve`: `GET /api/status`, `GET
//! /api/agents/{agent}` and the live stream read the last observation instead of observing
//! tmux, /proc and every state dir once per request. It is refreshed in the background, one
//! refresh at a time, when a reader finds it getting old or something changed in the state dir
//! (a hook, a wrapper's exit or start: they all write there); readers keep getting the last
//! one meanwhile, so no request waits for an observation of the whole fleet. A reader waits
//! only when there is none yet, when it would be older than `MAX_AGE`, when phoenix.toml
//! changed, and after every write through the API, so that a restart or a stop asked for over
//! HTTP shows in the very next read. How old the observation is goes out with it
//! (`observed_age_ms`).

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

/// An observation older than this is never served: the next reader waits for a new one.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// A reader that finds the observation this old starts a refresh in the background: it is
/// replaced long before `MAX_AGE` while it is being read.
pub const REFRESH_AGE: Duration = Duration::from_millis(250);
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
    /// One refresh at a time; readers that must wait wait for the one in progress.
    refreshing: tokio::sync::Mutex<()>,
    /// A refresh runs in the background.
    background: std::sync::atomic::AtomicBool,
    watcher: Mutex<Option<(PathBuf, crate::state::tree_watch::TreeWatch)>>,
}

impl Snapshot {
    /// A write through the API happened (or is about to be seen): the next read observes anew.
    pub fn invalidate(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    /// The current observation and what may be done with it.
    fn current(&self, config: &Path) -> Option<(Arc<Observed>, Verdict)> {
        let current = self.current.lock().ok()?.clone()?;
        let verdict = verdict(
            current.age(),
            current.writes != self.writes.load(Ordering::SeqCst),
            current.changes != self.changes.load(Ordering::SeqCst),
            current.config != ConfigStamp::of(config),
        );
        Some((current, verdict))
    }

    /// The fleet as last observed; observed first when it may not be served any more.
    pub async fn read(&self, app: &App) -> Result<Arc<Observed>, ApiError> {
        match self.current(&app.config) {
            Some((current, Verdict::Serve)) => Ok(current),
            Some((current, Verdict::ServeAndRefresh)) => {
                self.refresh_in_background(app);
                Ok(current)
            }
            _ => self.refresh(app).await,
        }
    }

    /// One refresh on a task of its own, unless one is running: readers go on meanwhile.
    fn refresh_in_background(&self, app: &App) {
        if self.background.swap(true, Ordering::SeqCst) {
            return;
        }
        let app = app.clone();
        tokio::spawn(async move {
            let _ = app.snapshot.refresh(&app).await;
            app.snapshot.background.store(false, Ordering::SeqCst);
        });
    }

    /// Observe the fleet now, unless the refresh that held the lock just did.
    async fn refresh(&self, app: &App) -> Result<Arc<Observed>, ApiError> {
        let _one = self.refreshing.lock().await;
        if let Some((current, Verdict::Serve)) = self.current(&app.config) {
            return Ok(current);
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
        let Ok(mut slot) = self.watcher.lock() else {
            return;
        };
        let root = spec.fleet.state_dir.join("agents");
        if slot.as_ref().is_some_and(|(watched, _)| *watched == root) || !root.is_dir() {
            return;
        }
        *slot = None;
        let changes = self.changes.clone();
        // Only writes are watched: reads (ours among them) change nothing.
        match crate::state::tree_watch::watch_tree(
            &root,
            crate::state::tree_watch::STATE_DIR_DEPTH,
            move |_| {
                changes.fetch_add(1, Ordering::SeqCst);
            },
        ) {
            Ok(w) => *slot = Some((root, w)),
            Err(e) => tracing::warn!(
                "cannot watch `{}` ({e}): the status is refreshed every {} ms",
                root.display(),
                MAX_AGE.as_millis()
            ),
        }
    }
}

/// What a reader does with the last observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Serve,
    /// Serve it, and have a new one observed for the next readers.
    ServeAndRefresh,
    /// Wait for a new one.
    Wait,
}

/// What may be done with an observation of this age: never served after a write through the
/// API or an edit of phoenix.toml since, nor when older than `MAX_AGE`; refreshed (while still
/// served) from `REFRESH_AGE` on, and after a change in the state dir from `MIN_AGE` on.
fn verdict(age: Duration, written: bool, changed: bool, config_changed: bool) -> Verdict {
    if written || config_changed || age >= MAX_AGE {
        Verdict::Wait
    } else if age >= REFRESH_AGE || (changed && age >= MIN_AGE) {
        Verdict::ServeAndRefresh
    } else {
        Verdict::Serve
    }
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
        use Verdict::*;
        assert_eq!(verdict(ms(0), false, false, false), Serve);
        // Getting old: still served while a new one is observed.
        assert_eq!(verdict(REFRESH_AGE, false, false, false), ServeAndRefresh);
        assert_eq!(verdict(ms(900), false, false, false), ServeAndRefresh);
        assert_eq!(
            verdict(MAX_AGE, false, false, false),
            Wait,
            "never older than MAX_AGE"
        );
        // A hook wrote: refreshed, though not more often than MIN_AGE.
        assert_eq!(verdict(ms(20), false, true, false), Serve);
        assert_eq!(verdict(ms(60), false, true, false), ServeAndRefresh);
        // A write through the API or an edited config: never served again.
        assert_eq!(verdict(ms(0), true, false, false), Wait);
        assert_eq!(verdict(ms(0), false, false, true), Wait);
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
