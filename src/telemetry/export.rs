//! The export thread: records from the queue into the OpenTelemetry SDK's logger and tracer,
//! whose batch processors post them to the collector; and the meter provider, whose periodic
//! reader posts the fleet's metrics on a thread of its own.

use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::metrics::Histogram;
use opentelemetry::trace::{Span as _, Status, Tracer as _, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{BatchLogProcessor, SdkLoggerProvider};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};

use super::http::UreqClient;
use super::metrics::Sampler;
use super::{Attr, Counts, Level, LogRecord, Record, SCOPE, SpanRecord};
use crate::spec::Spec;

/// Records handed to the SDK between two flushes. The SDK's own queue is larger (2048), so
/// the SDK never drops: a slow collector makes the flush (on this thread) wait instead, the
/// daemon's queue fills, and the drop is counted there, where it can be seen.
const FLUSH_EVERY: usize = 256;

/// The SDK exports what it holds this often (its defaults: logs 1 s, spans 5 s).
const SCHEDULED_DELAY: Duration = Duration::from_secs(1);

pub(super) struct Exporter {
    logs: SdkLoggerProvider,
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
}

/// Who every record, span and data point comes from.
fn resource(fleet: &str) -> Resource {
    Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "phoenix"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("phoenix.fleet", fleet.to_string()),
            KeyValue::new("host.name", super::host_name()),
        ])
        .build()
}

impl Exporter {
    /// The providers posting to `endpoint`, and the histogram the daemon records its passes
    /// into; `sampler` answers the metric instruments.
    pub fn new(
        endpoint: &str,
        spec: &Spec,
        counts: Arc<Counts>,
        sampler: Arc<Sampler>,
    ) -> crate::error::Result<(Exporter, Histogram<f64>)> {
        let resource = resource(&spec.fleet.name);
        let client = || UreqClient::new(super::EXPORT_TIMEOUT, counts.clone());
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            crate::error::Error::msg(format!("cannot set up the OTLP {what} exporter: {e}"))
        };
        let log_exporter = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_http_client(client())
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{endpoint}/v1/logs"))
            .with_timeout(super::EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed("log", &e))?;
        let span_exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client())
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_timeout(super::EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed("span", &e))?;
        let logs = SdkLoggerProvider::builder()
            .with_resource(resource.clone())
            .with_log_processor(
                BatchLogProcessor::builder(log_exporter)
                    .with_batch_config(
                        opentelemetry_sdk::logs::BatchConfigBuilder::default()
                            .with_scheduled_delay(SCHEDULED_DELAY)
                            .build(),
                    )
                    .build(),
            )
            .build();
        let traces = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_span_processor(
                BatchSpanProcessor::builder(span_exporter)
                    .with_batch_config(
                        opentelemetry_sdk::trace::BatchConfigBuilder::default()
                            .with_scheduled_delay(SCHEDULED_DELAY)
                            .build(),
                    )
                    .build(),
            )
            .build();
        let (metrics, durations) = super::metrics::start(
            endpoint,
            resource,
            client(),
            spec.telemetry.metrics_interval,
            super::metrics::series_limit(spec.agents.len()),
            sampler,
        )?;
        Ok((
            Exporter {
                logs,
                traces,
                metrics,
            },
            durations,
        ))
    }

    /// Until the daemon drops its sender: each record into the SDK; then what is left is
    /// exported and the providers shut down.
    pub fn drain(self, rx: Receiver<Record>) {
        let logger = self.logs.logger(SCOPE);
        let tracer = self.traces.tracer(SCOPE);
        let mut pending = 0;
        while let Ok(record) = rx.recv() {
            match record {
                Record::Log(r) => emit_log(&logger, r),
                Record::Span(s) => emit_span(&tracer, s),
            }
            pending += 1;
            if pending >= FLUSH_EVERY {
                let _ = self.logs.force_flush();
                let _ = self.traces.force_flush();
                pending = 0;
            }
        }
        let _ = self.logs.shutdown();
        let _ = self.traces.shutdown();
        // A last collection and export of the metrics.
        let _ = self.metrics.shutdown();
    }
}

fn emit_log(logger: &opentelemetry_sdk::logs::SdkLogger, r: LogRecord) {
    let mut record = logger.create_log_record();
    record.set_timestamp(r.time);
    record.set_observed_timestamp(std::time::SystemTime::now());
    let (number, text) = match r.level {
        Level::Info => (Severity::Info, "INFO"),
        Level::Warn => (Severity::Warn, "WARN"),
        Level::Error => (Severity::Error, "ERROR"),
    };
    record.set_severity_number(number);
    record.set_severity_text(text);
    record.set_body(AnyValue::from(r.body));
    for (key, value) in r.attributes {
        let value = match value {
            Attr::Str(s) => AnyValue::from(s),
            Attr::Int(n) => AnyValue::from(n),
            Attr::Float(f) => AnyValue::from(f),
            Attr::Bool(b) => AnyValue::from(b),
        };
        record.add_attribute(key, value);
    }
    logger.emit(record);
}

fn emit_span(tracer: &opentelemetry_sdk::trace::SdkTracer, s: SpanRecord) {
    let attributes = s.attributes.into_iter().map(|(key, value)| {
        let value = match value {
            Attr::Str(s) => Value::from(s),
            Attr::Int(n) => Value::from(n),
            Attr::Float(f) => Value::from(f),
            Attr::Bool(b) => Value::from(b),
        };
        KeyValue::new(key, value)
    });
    let mut span = tracer
        .span_builder(s.name)
        .with_start_time(s.start)
        .with_attributes(attributes.collect::<Vec<_>>())
        .start(tracer);
    span.set_status(match s.error {
        Some(why) => Status::error(why),
        None => Status::Ok,
    });
    span.end_with_timestamp(s.end);
}
