//! Live updates for the dashboard: `GET /api/stream`, server-sent events. One task observes the
//! fleet every `INTERVAL` while at least one client listens (nothing is observed for nobody),
//! and every client gets an `event: status` with the fleet status whenever it changed, and an
//! `event: events` with the size of `critical_events.jsonl` whenever that grew or shrank.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::{mpsc, watch};

use super::App;

/// How often the fleet is observed while someone listens.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Live streams open at once at most: each holds a connection for as long as the client
/// likes, so without a limit they alone could fill the server's connection cap.
pub const MAX_STREAMS: usize = 32;

/// What the observer publishes.
#[derive(Clone)]
pub struct Hub {
    status: watch::Sender<Option<Arc<str>>>,
    events: watch::Sender<u64>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            status: watch::channel(None).0,
            events: watch::channel(0).0,
        }
    }
}

impl Hub {
    /// Live streams open now.
    pub fn listeners(&self) -> usize {
        self.status.receiver_count()
    }

    /// The observer: runs until `shutdown`, observing only while clients listen.
    pub async fn run(app: App, mut shutdown: watch::Receiver<bool>) {
        let hub = app.live.clone();
        let mut last_error = String::new();
        // The last document sent, without its age (which changes every time).
        let mut last_sent: Option<String> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(INTERVAL) => {}
                _ = shutdown.changed() => return,
            }
            if hub.status.receiver_count() == 0 {
                continue;
            }
            let status = app.snapshot.read(&app).await;
            let observer = app.clone();
            let Ok(events) = tokio::task::spawn_blocking(move || {
                observer
                    .spec()
                    .ok()
                    .map(|s| crate::state::FleetDir::new(&s.fleet.state_dir).critical_events_path())
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map_or(0, |m| m.len())
            })
            .await
            else {
                continue;
            };
            match status {
                Ok(observed) => {
                    last_error.clear();
                    if last_sent.as_deref() != Some(observed.status_without_age()) {
                        last_sent = Some(observed.status_without_age().to_string());
                        let text = observed.status_body();
                        hub.status
                            .send_modify(|current| *current = Some(text.into()));
                    }
                }
                // Said once, not every second.
                Err(e) if e.error != last_error => {
                    tracing::warn!("live status: {}", e.error);
                    last_error = e.error;
                }
                Err(_) => {}
            }
            hub.events.send_if_modified(|current| {
                let changed = *current != events;
                *current = events;
                changed
            });
        }
    }
}

/// One client's stream: the current status at once, then every change.
pub fn stream(
    app: &App,
    first: String,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let mut status = app.live.status.subscribe();
    let mut events = app.live.events.subscribe();
    let mut shutdown = app.shutdown.clone();
    let (tx, rx) = mpsc::channel::<Event>(8);
    tokio::spawn(async move {
        if tx
            .send(Event::default().event("status").data(first))
            .await
            .is_err()
        {
            return;
        }
        status.mark_unchanged();
        events.mark_unchanged();
        loop {
            let event = tokio::select! {
                r = status.changed() => {
                    if r.is_err() { return; }
                    let Some(text) = status.borrow_and_update().clone() else { continue };
                    Event::default().event("status").data(&*text)
                }
                r = events.changed() => {
                    if r.is_err() { return; }
                    let len = *events.borrow_and_update();
                    Event::default().event("events").data(len.to_string())
                }
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
            };
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    let stream =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
        );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
