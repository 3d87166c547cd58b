//! API errors: always `{"error": "…", "hint": "…"}` with a status code that says whose fault it
//! was (4xx: the request, 5xx: phoenix or the machine). Rejections of axum's extractors
//! (a malformed or oversized body, a wrong content type) are turned into the same shape.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::BODY_LIMIT;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    pub error: String,
    pub hint: String,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>, hint: impl Into<String>) -> Self {
        ApiError {
            status,
            error: error.into(),
            hint: hint.into(),
        }
    }

    pub fn bad_request(error: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error, hint)
    }

    pub fn not_found(error: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, error, hint)
    }

    pub fn conflict(error: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, error, hint)
    }

    /// Something failed on phoenix's side; the message chain says what.
    pub fn internal(err: &crate::error::Error) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{err:#}"),
            "nothing was changed by the request itself; see the server's log, or run the same \
             action with the phoenix CLI for details (`phoenix doctor` checks the environment)",
        )
    }

    /// phoenix.toml cannot be loaded (it may have been edited while serving).
    pub fn config(err: &crate::spec::LoadError) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "phoenix.toml cannot be loaded: {}",
                first_line(&err.to_string())
            ),
            err.hint()
                .unwrap_or_else(|| "run `phoenix validate` to see every problem".into()),
        )
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, Json(self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"phoenix\""),
            );
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let text = rejection.body_text();
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the request body must be JSON",
                "send `Content-Type: application/json` and a JSON object (`{}` when there are no fields)",
            ),
            JsonRejection::BytesRejection(_) if status == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(
                    status,
                    format!("the request body is larger than {} KiB", BODY_LIMIT / 1024),
                    "send a smaller body: handoffs and injected text are limited to that size",
                )
            }
            JsonRejection::JsonDataError(_) => ApiError::bad_request(
                text,
                "see /openapi.json for the fields this endpoint takes; unknown fields are refused",
            ),
            _ => ApiError::new(
                if status.is_client_error() {
                    status
                } else {
                    StatusCode::BAD_REQUEST
                },
                text,
                "send a JSON object (see /openapi.json)",
            ),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request(
            rejection.body_text(),
            "see /openapi.json for this endpoint's query parameters",
        )
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::bad_request(
            rejection.body_text(),
            "names in the path are plain words: letters, digits, `_` and `-`",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_serialise_as_error_and_hint_only() {
        let e = ApiError::not_found("no agent `x`", "declared: a, b");
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"error": "no agent `x`", "hint": "declared: a, b"})
        );
    }
}
