//! The dashboard: one HTML page, its script and its stylesheet, embedded in the binary (no
//! build step, nothing to install). Served with a strict Content-Security-Policy: the page
//! loads only its own files and talks only to this server.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::App;

pub const INDEX_HTML: &str = include_str!("dashboard/index.html");
pub const APP_JS: &str = include_str!("dashboard/app.js");
pub const APP_CSS: &str = include_str!("dashboard/app.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn router() -> Router<App> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    // The files change only with the binary: revalidate rather than keep a stale copy.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
