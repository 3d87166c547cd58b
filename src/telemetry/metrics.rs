//! The fleet's metrics over OTLP: the facts `/metrics` serves (`crate::metrics`), under the
//! same names, as the OpenTelemetry SDK's observable instruments — counters as cumulative
//! monotonic sums, gauges as gauges — plus the reconcile duration as a histogram the daemon
//! records pass by pass.
//!
//! The SDK's periodic reader collects on its own thread every `metrics_interval`; the first
//! instrument called back in a collection samples the fleet (one look at tmux and each
//! agent's files, as a scrape does) and the others read that sample. The reconcile loop never
//! waits for a sample or a POST: all it does is record a pass's duration into the histogram,
//! an in-memory update.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Histogram, Meter, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use prometheus::proto::{MetricFamily, MetricType};

use super::http::UreqClient;
use crate::metrics::{Collector, Described};
use crate::spec::Spec;
use crate::world::SharedRuntime;

/// One sample's families by name, and when it was taken.
struct Sample {
    taken: Instant,
    families: Arc<HashMap<String, MetricFamily>>,
}

/// Samples the fleet at most once per collection, for the instruments' callbacks.
pub(super) struct Sampler {
    collector: Collector,
    /// The fleet as the daemon last loaded it (agents come and go with its reloads).
    spec: Mutex<Arc<Spec>>,
    runtime: SharedRuntime,
    latest: Mutex<Option<Sample>>,
    /// A sample younger than this is the current collection's: the callbacks of one
    /// collection run within milliseconds, collections an interval apart.
    fresh_for: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sampler {
    pub fn new(spec: &Spec, runtime: SharedRuntime) -> Sampler {
        Sampler {
            collector: Collector::new(),
            spec: Mutex::new(Arc::new(spec.clone())),
            runtime,
            latest: Mutex::new(None),
            fresh_for: spec.telemetry.metrics_interval / 2,
        }
    }

    pub fn spec_changed(&self, spec: &Spec) {
        *lock(&self.spec) = Arc::new(spec.clone());
    }

    /// The current collection's families: sampled now unless another instrument of this
    /// collection already did. A fleet that cannot be observed has no series this time.
    fn families(&self) -> Arc<HashMap<String, MetricFamily>> {
        let mut latest = lock(&self.latest);
        if let Some(sample) = latest.as_ref()
            && sample.taken.elapsed() < self.fresh_for
        {
            return sample.families.clone();
        }
        let spec = lock(&self.spec).clone();
        let families = match self.collector.sample(&spec, &*self.runtime) {
            Ok((fleet, agents)) => crate::metrics::families(&fleet, &agents)
                .into_iter()
                .map(|f| (f.name().to_string(), f))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "telemetry: cannot sample the fleet's metrics");
                HashMap::new()
            }
        };
        let families = Arc::new(families);
        *latest = Some(Sample {
            taken: Instant::now(),
            families: families.clone(),
        });
        families
    }

    /// Each series of the metric `name` in the current sample: its attributes and value.
    fn series(&self, name: &str, each: impl FnMut(Vec<KeyValue>, f64)) {
        let families = self.families();
        if let Some(family) = families.get(name) {
            series_of(family, each);
        }
    }
}

/// The series of a gauge or counter family, its labels as attributes.
fn series_of(family: &MetricFamily, mut each: impl FnMut(Vec<KeyValue>, f64)) {
    for metric in family.get_metric() {
        let attributes = metric
            .get_label()
            .iter()
            .map(|l| KeyValue::new(l.name().to_string(), l.value().to_string()))
            .collect();
        let value = match family.get_field_type() {
            MetricType::COUNTER => metric.get_counter().get_value(),
            _ => metric.get_gauge().get_value(),
        };
        each(attributes, value);
    }
}

/// The meter provider posting to `<endpoint>/v1/metrics` every `interval`, its instruments
/// registered, and the histogram the daemon records its passes into.
/// Series per metric the exporter keeps for a fleet of `agents`: room for every agent's
/// series of the widest metric (a health series per watchdog check, restarts by each
/// reason), with margin for agents added by a reload, and never below the SDK's default.
pub(super) fn series_limit(agents: usize) -> usize {
    const PER_AGENT: usize = 16;
    (agents + 16).saturating_mul(PER_AGENT).max(2000)
}

pub(super) fn start(
    endpoint: &str,
    resource: Resource,
    client: UreqClient,
    interval: Duration,
    series_limit: usize,
    sampler: Arc<Sampler>,
) -> crate::error::Result<(SdkMeterProvider, Histogram<f64>)> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{endpoint}/v1/metrics"))
        .with_timeout(super::EXPORT_TIMEOUT)
        .build()
        .map_err(|e| {
            crate::error::Error::msg(format!("cannot set up the OTLP metric exporter: {e}"))
        })?;
    let provider = SdkMeterProvider::builder()
        .with_resource(resource)
        // The SDK keeps 2,000 series per metric by default and folds the rest into one
        // "overflow" point: a fleet of a few hundred agents (a health series per check)
        // would lose its agents' names. The SDK sizes its tables to the limit up front, so
        // the limit follows the fleet instead of being large for every fleet.
        .with_view(move |_: &opentelemetry_sdk::metrics::Instrument| {
            opentelemetry_sdk::metrics::Stream::builder()
                .with_cardinality_limit(series_limit)
                .build()
                .ok()
        })
        .with_reader(
            PeriodicReader::builder(exporter)
                .with_interval(interval)
                .build(),
        )
        .build();
    let meter = provider.meter(super::SCOPE);
    for described in crate::metrics::catalogue() {
        match described.kind {
            MetricType::COUNTER => counter(&meter, described, sampler.clone()),
            MetricType::GAUGE => gauge(&meter, described, sampler.clone()),
            // The one histogram, the reconcile duration, is recorded pass by pass below.
            _ => {}
        }
    }
    Ok((provider, durations(&meter)))
}

/// The unit of a metric whose name says it is in seconds (the others are counts or USD,
/// which their names say).
fn unit(name: &str) -> Option<&'static str> {
    name.contains("_seconds").then_some("s")
}

/// A cumulative monotonic sum: the counts are whole numbers of their logs.
fn counter(meter: &Meter, d: Described, sampler: Arc<Sampler>) {
    let mut builder = meter
        .u64_observable_counter(d.name)
        .with_description(d.help)
        .with_callback(move |observer: &dyn AsyncInstrument<u64>| {
            sampler.series(d.name, |attributes, value| {
                observer.observe(value as u64, &attributes)
            })
        });
    if let Some(unit) = unit(d.name) {
        builder = builder.with_unit(unit);
    }
    builder.build();
}

fn gauge(meter: &Meter, d: Described, sampler: Arc<Sampler>) {
    let mut builder = meter
        .f64_observable_gauge(d.name)
        .with_description(d.help)
        .with_callback(move |observer: &dyn AsyncInstrument<f64>| {
            sampler.series(d.name, |attributes, value| {
                observer.observe(value, &attributes)
            })
        });
    if let Some(unit) = unit(d.name) {
        builder = builder.with_unit(unit);
    }
    builder.build();
}

/// The reconcile duration, in the buckets `/metrics` uses. Recorded by this daemon (its
/// start is the sum's start), where `/metrics` counts every daemon's passes from a file: the
/// SDK has no instrument to observe a histogram's buckets.
fn durations(meter: &Meter) -> Histogram<f64> {
    let (name, help) = crate::metrics::DURATION;
    meter
        .f64_histogram(name)
        .with_description(help)
        .with_unit("s")
        .with_boundaries(crate::state::daemon::RECONCILE_BUCKETS.to_vec())
        .build()
}
