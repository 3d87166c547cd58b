//! A loopback OTLP/HTTP receiver: accepts `POST /v1/logs`, `/v1/traces` and `/v1/metrics` (protobuf),
//! decodes them with the `opentelemetry-proto` messages and keeps what arrived, flattened for
//! assertions. HTTP/1.1 with keep-alive, as exporters pool their connections. Stops on drop.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{AggregationTemporality, metric, number_data_point};
use prost::Message;

use super::http_receiver::{Answer, Loopback};

/// One log record or span as received, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct Received {
    /// The log record's body, or the span's name.
    pub text: String,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
    pub severity: String,
}

/// One data point of a metric as received, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct Point {
    pub metric: String,
    /// `gauge`, `sum` or `histogram`.
    pub kind: &'static str,
    /// A sum's: monotonic and cumulative.
    pub monotonic_cumulative: bool,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
    /// A gauge's or sum's value; a histogram's count.
    pub value: f64,
    /// A histogram's bucket bounds.
    pub bounds: Vec<f64>,
}

#[derive(Default)]
struct Store {
    logs: Vec<Received>,
    spans: Vec<Received>,
    points: Vec<Point>,
    /// Every request line seen, for failure messages.
    requests: Vec<String>,
}

pub struct OtlpReceiver {
    pub url: String,
    store: Arc<Mutex<Store>>,
    _server: Loopback,
}

impl OtlpReceiver {
    pub fn start() -> OtlpReceiver {
        let store = Arc::new(Mutex::new(Store::default()));
        let s = store.clone();
        let server = Loopback::start(move |raw| Answer {
            status: receive(&raw.line, &raw.body, &s),
            content_type: "application/x-protobuf",
            body: b"",
        });
        OtlpReceiver {
            url: server.url.clone(),
            store,
            _server: server,
        }
    }

    pub fn logs(&self) -> Vec<Received> {
        self.store.lock().unwrap().logs.clone()
    }

    pub fn spans(&self) -> Vec<Received> {
        self.store.lock().unwrap().spans.clone()
    }

    /// Every data point received so far, oldest first.
    pub fn points(&self) -> Vec<Point> {
        self.store.lock().unwrap().points.clone()
    }

    pub fn requests(&self) -> Vec<String> {
        self.store.lock().unwrap().requests.clone()
    }
}

fn receive(request_line: &str, body: &[u8], store: &Mutex<Store>) -> &'static str {
    let mut store = store.lock().unwrap();
    store.requests.push(request_line.to_string());
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    if !request_line.starts_with("POST ") {
        return "405 Method Not Allowed";
    }
    match path {
        "/v1/logs" => {
            let Ok(req) = ExportLogsServiceRequest::decode(body) else {
                return "400 Bad Request";
            };
            for rl in req.resource_logs {
                let resource = attrs(&rl.resource.map(|r| r.attributes).unwrap_or_default());
                for record in rl.scope_logs.into_iter().flat_map(|s| s.log_records) {
                    store.logs.push(Received {
                        text: record.body.as_ref().map(text).unwrap_or_default(),
                        attributes: attrs(&record.attributes),
                        resource: resource.clone(),
                        severity: record.severity_text,
                    });
                }
            }
            "200 OK"
        }
        "/v1/traces" => {
            let Ok(req) = ExportTraceServiceRequest::decode(body) else {
                return "400 Bad Request";
            };
            for rs in req.resource_spans {
                let resource = attrs(&rs.resource.map(|r| r.attributes).unwrap_or_default());
                for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                    store.spans.push(Received {
                        text: span.name,
                        attributes: attrs(&span.attributes),
                        resource: resource.clone(),
                        severity: String::new(),
                    });
                }
            }
            "200 OK"
        }
        "/v1/metrics" => {
            let Ok(req) = ExportMetricsServiceRequest::decode(body) else {
                return "400 Bad Request";
            };
            for rm in req.resource_metrics {
                let resource = attrs(&rm.resource.map(|r| r.attributes).unwrap_or_default());
                for m in rm.scope_metrics.into_iter().flat_map(|s| s.metrics) {
                    store.points.extend(points(&m.name, m.data, &resource));
                }
            }
            "200 OK"
        }
        _ => "404 Not Found",
    }
}

/// The data points of one metric, flattened.
fn points(
    name: &str,
    data: Option<metric::Data>,
    resource: &BTreeMap<String, String>,
) -> Vec<Point> {
    let point = |kind, monotonic_cumulative, attributes: &[KeyValue], value, bounds| Point {
        metric: name.to_string(),
        kind,
        monotonic_cumulative,
        attributes: attrs(attributes),
        resource: resource.clone(),
        value,
        bounds,
    };
    let number = |v: Option<number_data_point::Value>| match v {
        Some(number_data_point::Value::AsDouble(f)) => f,
        Some(number_data_point::Value::AsInt(n)) => n as f64,
        None => f64::NAN,
    };
    match data {
        Some(metric::Data::Gauge(g)) => g
            .data_points
            .iter()
            .map(|p| point("gauge", false, &p.attributes, number(p.value), vec![]))
            .collect(),
        Some(metric::Data::Sum(s)) => {
            let mc = s.is_monotonic
                && s.aggregation_temporality == AggregationTemporality::Cumulative as i32;
            s.data_points
                .iter()
                .map(|p| point("sum", mc, &p.attributes, number(p.value), vec![]))
                .collect()
        }
        Some(metric::Data::Histogram(h)) => h
            .data_points
            .iter()
            .map(|p| {
                let bounds = p.explicit_bounds.clone();
                point("histogram", false, &p.attributes, p.count as f64, bounds)
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(f)) => f.to_string(),
        other => format!("{other:?}"),
    }
}
