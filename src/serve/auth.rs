//! Who may talk to `phoenix serve` (and to `phoenix run --metrics-listen`). By default it
//! listens on loopback only. Any other address needs a token (`PHOENIX_TOKEN`), and then every
//! API call and every `/metrics` scrape must carry it; on loopback a token,
//! when set, guards every mutating call. Tokens are compared in constant time. Browsers get two
//! more checks: on a loopback address the `Host` must be a loopback name (a DNS-rebinding page
//! cannot pass as `localhost`), and a mutating request from a page of another origin is refused.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::App;
use super::error::ApiError;

/// Shorter tokens are refused: they can be guessed.
pub const MIN_TOKEN_LEN: usize = 16;
pub const TOKEN_ENV: &str = "PHOENIX_TOKEN";

/// How requests are checked, decided once at start.
#[derive(Debug, Clone)]
pub struct Policy {
    pub token: Option<String>,
    /// Read calls need the token too (any non-loopback address).
    pub reads_need_token: bool,
    /// Check `Host` against loopback names (the server listens on loopback).
    pub loopback: bool,
}

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "refusing to listen on {0} without a token: any address but loopback is reachable from other machines"
    )]
    NeedsToken(SocketAddr),
    #[error("`{TOKEN_ENV}` is too short ({0} characters; at least {MIN_TOKEN_LEN})")]
    ShortToken(usize),
}

/// A refused bind stops `phoenix serve` with the hint on its own line.
impl From<BindError> for crate::error::Error {
    fn from(e: BindError) -> Self {
        crate::error::Error::with_hint(&e, e.hint())
    }
}

impl BindError {
    pub fn hint(&self) -> String {
        match self {
            BindError::NeedsToken(_) => format!(
                "set `{TOKEN_ENV}` (e.g. `export {TOKEN_ENV}=$(openssl rand -hex 32)`) and send it as \
                 `Authorization: Bearer …`, or listen on 127.0.0.1 and reach it through an SSH tunnel"
            ),
            BindError::ShortToken(_) => {
                "use a long random token, e.g. `openssl rand -hex 32`".to_string()
            }
        }
    }
}

impl Policy {
    /// The policy for listening on `addr` with `token` (empty counts as unset).
    pub fn for_bind(addr: SocketAddr, token: Option<String>) -> Result<Policy, BindError> {
        let token = token.filter(|t| !t.is_empty());
        if let Some(t) = &token
            && t.chars().count() < MIN_TOKEN_LEN
        {
            return Err(BindError::ShortToken(t.chars().count()));
        }
        let loopback = addr.ip().is_loopback();
        if !loopback && token.is_none() {
            return Err(BindError::NeedsToken(addr));
        }
        Ok(Policy {
            token,
            reads_need_token: !loopback,
            loopback,
        })
    }

    /// Check one request; `Err` is the response to send instead.
    pub fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
        // The checks below read the first of each; a second one (which a proxy or another
        // parser may take instead) must not get a request past them.
        for (name, label) in [
            (header::HOST, "Host"),
            (header::ORIGIN, "Origin"),
            (header::AUTHORIZATION, "Authorization"),
        ] {
            if headers.get_all(name).iter().nth(1).is_some() {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("more than one `{label}` header"),
                    "send `Host`, `Origin` and `Authorization` at most once each",
                ));
            }
        }
        if self.loopback
            && let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok())
            && !is_loopback_host(host)
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("host `{host}` is not this server's loopback address"),
                "open the dashboard as http://127.0.0.1:PORT/ or http://localhost:PORT/",
            ));
        }
        let mutating = !matches!(*method, Method::GET | Method::HEAD);
        if mutating && let Some(origin) = headers.get(header::ORIGIN) {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
            let same = origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .is_some_and(|(_, rest)| Some(rest) == host);
            if !same {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross-origin request refused",
                    "actions are accepted from the dashboard this server serves, or from clients that send no `Origin`",
                ));
            }
        }
        // `/metrics` is read like the API: by anyone on loopback, with the token elsewhere;
        // `/mcp` is the API's tools over MCP, every call a POST: with a token, it needs it.
        let api = path.starts_with("/api/") || path == "/metrics" || path == "/mcp";
        let needs_token = api && (mutating || self.reads_need_token);
        let Some(token) = &self.token else {
            return Ok(());
        };
        if !needs_token {
            return Ok(());
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim);
        match given {
            Some(g) if constant_time_eq(token.as_bytes(), g.as_bytes()) => Ok(()),
            Some(_) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "wrong token",
                format!("send the value of `{TOKEN_ENV}` the server was started with"),
            )),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                if mutating {
                    "this action needs the token"
                } else {
                    "this server needs the token for every API call"
                },
                format!(
                    "send `Authorization: Bearer <{TOKEN_ENV}>` (in the dashboard: the key button)"
                ),
            )),
        }
    }
}

/// Middleware: every request passes `Policy::check`.
pub async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    match app
        .policy
        .check(request.method(), request.uri().path(), request.headers())
    {
        Ok(()) => next.run(request).await,
        Err(e) => {
            if e.status == StatusCode::UNAUTHORIZED || e.status == StatusCode::FORBIDDEN {
                tracing::warn!(
                    "{} {}: {} ({})",
                    request.method(),
                    request.uri().path(),
                    e.error,
                    e.status
                );
            }
            e.into_response()
        }
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Equal without an early exit: the time taken depends on the expected token's length only,
/// not on how much of a guess is right.
pub fn constant_time_eq(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(expected.len() != given.len());
    for (i, e) in expected.iter().enumerate() {
        diff |= e ^ given.get(i).copied().unwrap_or(!e);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret-token-123", b"secret-token-123"));
        assert!(!constant_time_eq(b"secret-token-123", b"secret-token-12"));
        assert!(!constant_time_eq(b"secret-token-123", b"secret-token-1234"));
        assert!(!constant_time_eq(b"secret-token-123", b"Secret-token-123"));
        assert!(!constant_time_eq(b"abc", b""));
    }

    #[test]
    fn binding_beyond_loopback_needs_a_long_token() {
        let lan: SocketAddr = "0.0.0.0:7878".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:7878".parse().unwrap();
        assert!(matches!(
            Policy::for_bind(lan, None),
            Err(BindError::NeedsToken(_))
        ));
        assert!(matches!(
            Policy::for_bind(lan, Some(String::new())),
            Err(BindError::NeedsToken(_))
        ));
        assert!(matches!(
            Policy::for_bind(lo, Some("short".into())),
            Err(BindError::ShortToken(5))
        ));
        let p = Policy::for_bind(lan, Some("x".repeat(32))).unwrap();
        assert!(p.reads_need_token && !p.loopback);
        let p = Policy::for_bind(lo, None).unwrap();
        assert!(!p.reads_need_token && p.loopback && p.token.is_none());
    }

    #[test]
    fn a_second_host_origin_or_token_header_is_a_bad_request() {
        let p = Policy::for_bind("127.0.0.1:7878".parse().unwrap(), None).unwrap();
        for (name, second) in [
            ("host", "evil.example"),
            ("origin", "http://evil.example"),
            ("authorization", "Bearer x"),
        ] {
            let mut h = headers(&[("host", "127.0.0.1:7878"), (name, second)]);
            h.append(name, second.parse().unwrap());
            let e = p.check(&Method::GET, "/api/status", &h).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{name}");
            assert!(e.error.contains("more than one"), "{name}: {}", e.error);
        }
    }

    #[test]
    fn rebinding_hosts_and_foreign_origins_are_refused() {
        let p = Policy::for_bind("127.0.0.1:7878".parse().unwrap(), None).unwrap();
        let get = Method::GET;
        let post = Method::POST;
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "[::1]:7878",
            "127.0.0.2",
        ] {
            assert!(
                p.check(&get, "/api/status", &headers(&[("host", ok)]))
                    .is_ok(),
                "{ok}"
            );
        }
        let e = p
            .check(&get, "/", &headers(&[("host", "evil.example:7878")]))
            .unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        let same = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "http://127.0.0.1:7878"),
        ]);
        assert!(p.check(&post, "/api/watchdog", &same).is_ok());
        let foreign = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "https://evil.example"),
        ]);
        assert_eq!(
            p.check(&post, "/api/watchdog", &foreign)
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn a_token_guards_actions_on_loopback_and_everything_elsewhere() {
        let token = "0123456789abcdef0123".to_string();
        let lo = Policy::for_bind("127.0.0.1:1".parse().unwrap(), Some(token.clone())).unwrap();
        let h = headers(&[("host", "127.0.0.1:1")]);
        assert!(lo.check(&Method::GET, "/api/status", &h).is_ok());
        assert_eq!(
            lo.check(&Method::POST, "/api/watchdog", &h)
                .unwrap_err()
                .status,
            StatusCode::UNAUTHORIZED
        );
        let authed = headers(&[
            ("host", "127.0.0.1:1"),
            ("authorization", &format!("Bearer {token}")),
        ]);
        assert!(lo.check(&Method::POST, "/api/watchdog", &authed).is_ok());
        let lan = Policy::for_bind("0.0.0.0:1".parse().unwrap(), Some(token.clone())).unwrap();
        let h = headers(&[("host", "fleet.lan:1")]);
        assert_eq!(
            lan.check(&Method::GET, "/api/status", &h)
                .unwrap_err()
                .status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            lan.check(&Method::GET, "/metrics", &h).unwrap_err().status,
            StatusCode::UNAUTHORIZED,
            "the fleet's metrics are data too"
        );
        let lo_host = headers(&[("host", "127.0.0.1:1")]);
        assert!(lo.check(&Method::GET, "/metrics", &lo_host).is_ok());
        // The page itself carries no data: it loads, then asks for the token.
        assert!(lan.check(&Method::GET, "/", &h).is_ok());
        assert!(lan.check(&Method::GET, "/openapi.json", &h).is_ok());
    }
}
