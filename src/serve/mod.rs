//! `phoenix serve`: the HTTP API (JSON in and out, `/openapi.json`) and the web dashboard,
//! in one process on the tokio runtime (axum). Loopback only unless a token is set
//! (`auth`); blocking work — tmux, SQLite, files — runs on the blocking pool through the
//! library functions the CLI uses (`routes`); the dashboard is embedded (`assets`) and kept
//! live by server-sent events (`live`). `/metrics` is the fleet for Prometheus (`metrics`).

pub mod assets;
pub mod auth;
pub mod conn;
pub mod error;
pub mod extract;
pub mod live;
mod messages;
pub mod metrics;
pub mod openapi;
pub mod remote;
pub mod routes;
pub mod snapshot;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Context;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use tokio::sync::watch;

use crate::spec::{self, LoadOptions, Spec};
use error::ApiError;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// `phoenix run --metrics-listen` without an address.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:7879";
/// Request bodies larger than this are refused (413).
pub const BODY_LIMIT: usize = 64 * 1024;

/// What one server knows; cheap to clone into handlers.
#[derive(Clone)]
pub struct App(Arc<Inner>);

pub struct Inner {
    /// phoenix.toml: read again on every request, so edits are seen without a restart.
    pub config: PathBuf,
    pub policy: auth::Policy,
    pub live: live::Hub,
    /// Flips to true on SIGTERM/SIGINT: live streams end so the server can stop.
    pub shutdown: watch::Receiver<bool>,
    /// How far `/metrics` has counted each agent's logs.
    pub metrics: crate::metrics::Collector,
    /// The fleet as last observed, shared by the status reads.
    pub snapshot: snapshot::Snapshot,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl App {
    pub fn new(config: &Path, policy: auth::Policy, shutdown: watch::Receiver<bool>) -> App {
        App(Arc::new(Inner {
            config: config.to_path_buf(),
            policy,
            live: live::Hub::default(),
            shutdown,
            metrics: crate::metrics::Collector::new(),
            snapshot: snapshot::Snapshot::default(),
        }))
    }

    /// The spec as it is now (without filesystem checks: a moved workdir must not hide the
    /// fleet from its operator).
    pub fn spec(&self) -> Result<Spec, ApiError> {
        spec::load_with(
            &self.config,
            LoadOptions {
                check_filesystem: false,
            },
        )
        .map_err(|e| ApiError::config(&e))
    }
}

/// The whole application: routes, the auth guard, the body limit, security headers.
pub fn app(app: App) -> axum::Router {
    routes::router(app.clone())
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            snapshot::invalidate_after_writes,
        ))
        .layer(axum::middleware::from_fn_with_state(app, auth::guard))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::map_response(security_headers))
}

pub(crate) async fn security_headers(
    mut response: axum::response::Response,
) -> axum::response::Response {
    let h = response.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// `--listen`: `HOST:PORT` with an IP address, or `localhost:PORT`.
pub fn parse_listen(text: &str) -> crate::error::Result<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = text.strip_prefix("localhost:")
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    crate::bail!(
        "`--listen {text}` is not an address: use IP:PORT, e.g. `127.0.0.1:7878` or `[::1]:7878` (port 0 picks a free one)"
    )
}

/// `phoenix serve`: listen until SIGTERM or SIGINT. `listening` gets the line that says where,
/// once the port is bound (the CLI prints it: only `cli/` prints).
pub fn run(
    config: &Path,
    listen: &str,
    token: Option<String>,
    listening: impl FnOnce(&str),
) -> crate::error::Result<i32> {
    let addr = parse_listen(listen)?;
    let limits = conn::Limits::from_env()?;
    let policy = auth::Policy::for_bind(addr, token)?;
    // A server for a fleet that cannot be read helps no one: say so now.
    let spec = spec::load_with(
        config,
        LoadOptions {
            check_filesystem: false,
        },
    )?;
    crate::controller::init_tracing(crate::controller::RunOptions::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| {
                format!("cannot listen on {addr} (another server there? pick another port with --listen)")
            })?;
        let local = listener.local_addr()?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let state = App::new(config, policy, stop_rx.clone());
        tokio::spawn(live::Hub::run(state.clone(), stop_rx));
        listening(&format!(
            "phoenix serve: fleet `{}` on http://{local}/ (API under /api, description at /openapi.json, Prometheus metrics at /metrics){}\n",
            spec.fleet.name,
            if state.policy.token.is_some() {
                "; token required for actions"
            } else {
                ""
            }
        ));
        tracing::info!("listening on http://{local}/");
        let info = announce(&spec, local);
        conn::serve(listener, app(state), limits, async move {
            shutdown_signal().await;
            tracing::info!("stopping: finishing the requests in flight");
            let _ = stop_tx.send(true);
        })
        .await;
        if let Some(path) = info {
            let _ = std::fs::remove_file(path);
        }
        Ok(0)
    })
}

/// Say where the dashboard is (`serve.json` in the state dir: its URL and this pid), so that
/// a "needs a human" push can link to it. Best effort: without a state dir, nothing.
fn announce(spec: &Spec, local: SocketAddr) -> Option<std::path::PathBuf> {
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    if !fleet.root.is_dir() {
        return None;
    }
    let path = fleet.root.join(crate::notify::ntfy::SERVE_INFO);
    let info = serde_json::json!({"url": format!("http://{local}/"), "pid": std::process::id()});
    crate::state::file::write_atomic(&path, info.to_string().as_bytes(), 0o600, false).ok()?;
    Some(path)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
