//! `GET /metrics`: the fleet in the Prometheus text format (`crate::metrics`), served by
//! `phoenix serve` with the API, and alone by `phoenix run --metrics-listen` beside the daemon,
//! under the API's rules: loopback only unless a token is set, and off loopback every scrape
//! carries it (`auth`).

use std::net::SocketAddr;
use std::path::Path;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use super::error::ApiError;
use super::{App, auth, conn};
use crate::error::Context;

/// The handler, on the blocking pool (files): the scrape's text from the shared observation
/// of the fleet (`snapshot`), or 503 when the fleet's runtime cannot be observed (the server
/// itself is fine).
pub async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let observed = app.snapshot.read(&app).await?;
    let text = super::routes::blocking(move || {
        let spec = &observed.spec;
        let scraped = match &observed.world {
            Some(world) => app.metrics.scrape_world(spec, world),
            // A fleet across hosts: this host's agents, observed for the scrape.
            None => app.metrics.scrape(spec, &*crate::world::runtime_for(spec)),
        };
        scraped.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{e:#}"),
                "run `phoenix doctor` on the server",
            )
        })
    })
    .await?;
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    Ok(response)
}

/// `/metrics` and nothing else, with the API's guards.
fn router(app: App) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::not_found(
                "no such endpoint",
                "this listener serves `/metrics` only (`phoenix serve` has the API)",
            )
        })
        .with_state(app.clone())
        .layer(axum::middleware::from_fn_with_state(app, auth::guard))
        .layer(axum::middleware::map_response(super::security_headers))
}

/// Listen on `listen` for `phoenix run --metrics-listen`: bound now, so that a taken port or a
/// refused address stops the daemon before it starts, then served on a thread of its own (the
/// daemon's loop blocks its runtime during a pass) until the process ends. The address bound.
pub fn listen(
    config: &Path,
    listen: &str,
    token: Option<String>,
) -> crate::error::Result<SocketAddr> {
    let addr = super::parse_listen(listen)?;
    let limits = conn::Limits::from_env()?;
    let policy = auth::Policy::for_bind(addr, token)?;
    let listener = std::net::TcpListener::bind(addr).with_context(|| {
        format!("cannot listen on {addr} for metrics (another server there? pick another port with --metrics-listen)")
    })?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let config = config.to_path_buf();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot serve metrics");
                        return;
                    }
                };
                // Nothing stops it but the end of the daemon's process.
                let (_never, shutdown) = watch::channel(false);
                let app = App::new(&config, policy, shutdown);
                conn::serve(listener, router(app), limits, std::future::pending()).await;
            });
        })
        .context("cannot start the metrics thread")?;
    tracing::info!("metrics on http://{local}/metrics");
    Ok(local)
}
