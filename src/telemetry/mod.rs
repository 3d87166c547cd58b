//! OpenTelemetry export (`[telemetry] otlp_endpoint`): the daemon's events as OTLP log records,
//! its reconcile passes and the agents' recoveries as spans, and the fleet's metrics (those of
//! `/metrics`, every `metrics_interval`), posted over OTLP/HTTP (protobuf) by the
//! `opentelemetry` SDK.
//!
//! Only `phoenix run` exports. The hooks (a process per tool call) and the wrappers write their
//! steps to ops.jsonl as always, and the daemon, which already follows every ops log for its
//! journal, turns each step into a record: a hook never opens a connection, and an unreachable
//! collector never slows a tool call. Nothing here blocks its caller either: records go into a
//! bounded queue ([`QUEUE`]) that one export thread drains; when it is full a record is dropped
//! and counted ([`Counts`]), never waited for. The metrics are sampled and posted on the SDK's
//! own reader thread (`metrics`).

mod export;
mod http;
mod metrics;
pub mod records;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::Histogram;

use crate::spec::Spec;

/// Records waiting for the export thread at most; more are dropped (and counted).
pub const QUEUE: usize = 4096;

/// How long one POST to the collector may take.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The instrumentation scope of every record and span.
pub const SCOPE: &str = "phoenix";

/// What happened to the records handed to the exporter, since the daemon started.
#[derive(Debug, Default)]
pub struct Counts {
    /// Taken into the queue.
    pub queued: AtomicU64,
    /// Dropped because the queue was full (the collector is slow or unreachable).
    pub dropped: AtomicU64,
    /// POSTs the collector did not accept (refused, timed out, not 2xx).
    pub failed_posts: AtomicU64,
}

impl Counts {
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.queued.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.failed_posts.load(Ordering::Relaxed),
        )
    }
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl From<&str> for Attr {
    fn from(s: &str) -> Attr {
        Attr::Str(s.to_string())
    }
}

impl From<String> for Attr {
    fn from(s: String) -> Attr {
        Attr::Str(s)
    }
}

impl From<i64> for Attr {
    fn from(n: i64) -> Attr {
        Attr::Int(n)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// One event, exported as an OTLP log record.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    pub time: SystemTime,
    pub level: Level,
    pub body: String,
    pub attributes: Vec<(String, Attr)>,
}

/// Something that took time, exported as a span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub name: &'static str,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(String, Attr)>,
    /// Why it failed, when it did (the span's status is then an error).
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Log(LogRecord),
    Span(SpanRecord),
}

/// The handle the daemon sends records through; cheap to share.
pub struct Telemetry {
    tx: SyncSender<Record>,
    counts: Arc<Counts>,
    /// Told when the export thread is done (a Mutex only to make the handle `Sync`).
    done: Mutex<Receiver<()>>,
    endpoint: String,
    /// Answers the metric instruments from the fleet as the daemon last loaded it.
    sampler: Arc<metrics::Sampler>,
    /// The reconcile passes' durations (an in-memory update; the reader thread exports it).
    durations: Histogram<f64>,
}

impl Telemetry {
    /// The exporter of `spec`'s `[telemetry]`, its thread started; `None` when it is off.
    pub fn start(spec: &Spec) -> crate::error::Result<Option<Telemetry>> {
        let Some(endpoint) = spec.telemetry.otlp_endpoint.clone() else {
            return Ok(None);
        };
        let counts = Arc::new(Counts::default());
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let (done_tx, done) = std::sync::mpsc::sync_channel(1);
        let sampler = Arc::new(metrics::Sampler::new(spec, crate::world::runtime_for(spec)));
        let (exporter, durations) =
            export::Exporter::new(&endpoint, spec, counts.clone(), sampler.clone())?;
        std::thread::Builder::new()
            .name("phoenix-otlp".into())
            .spawn(move || {
                exporter.drain(rx);
                let _ = done_tx.send(());
            })
            .map_err(|e| {
                crate::error::Error::msg(format!("cannot start the OTLP export thread: {e}"))
            })?;
        Ok(Some(Telemetry {
            tx,
            counts,
            done: Mutex::new(done),
            endpoint,
            sampler,
            durations,
        }))
    }

    /// The daemon reloaded its config: the metrics describe the new fleet from the next
    /// sample on.
    pub fn spec_changed(&self, spec: &Spec) {
        self.sampler.spec_changed(spec);
    }

    /// One reconcile pass took `took`, for the duration histogram.
    pub fn pass_took(&self, took: Duration) {
        self.durations.record(took.as_secs_f64(), &[]);
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Queue `record` for export, or drop and count it when the queue is full: never waits.
    pub fn send(&self, record: Record) {
        match self.tx.try_send(record) {
            Ok(()) => self.counts.queued.fetch_add(1, Ordering::Relaxed),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Export what is queued and stop, waiting `within` at most (an unreachable collector
    /// must not hold up the daemon's exit); true when everything was handed over in time.
    pub fn shutdown(self, within: Duration) -> bool {
        let Telemetry { tx, done, .. } = self;
        drop(tx);
        done.into_inner()
            .is_ok_and(|done| done.recv_timeout(within).is_ok())
    }
}

/// The machine's name, for the `host.name` resource attribute.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".to_string())
}
