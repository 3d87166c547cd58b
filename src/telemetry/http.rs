//! The OTLP exporter's HTTP client: ureq, which phoenix already builds for its webhooks, in
//! place of the reqwest or hyper stacks the OpenTelemetry crates offer. The SDK's batch
//! processors call it from their own threads, so a blocking POST blocks nobody else.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

use super::Counts;

#[derive(Debug)]
pub(super) struct UreqClient {
    agent: ureq::Agent,
    counts: Arc<Counts>,
}

impl UreqClient {
    pub fn new(timeout: Duration, counts: Arc<Counts>) -> UreqClient {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // A collector's redirect is not followed (the spans would go to an origin of its
            // choosing): the 3xx counts as a failed post.
            .max_redirects(0)
            .user_agent(concat!("phoenix/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        UreqClient { agent, counts }
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let answer = self.agent.run(request.map(|body| body.to_vec()));
        let mut response = match answer {
            Ok(r) => r,
            Err(e) => {
                self.counts.failed_posts.fetch_add(1, Ordering::Relaxed);
                return Err(Box::new(e));
            }
        };
        if !response.status().is_success() {
            self.counts.failed_posts.fetch_add(1, Ordering::Relaxed);
        }
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .unwrap_or_default();
        let mut out = Response::builder()
            .status(response.status())
            .body(Bytes::from(body))?;
        *out.headers_mut() = std::mem::take(response.headers_mut());
        Ok(out)
    }
}
