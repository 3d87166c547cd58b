//! What the API's handlers take from a request: each extractor turns axum's rejection into an
//! `ApiError` (JSON with a hint), and an agent name in the path is checked before a handler
//! sees it.

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::routes::valid_agent;

/// The one parameter of the path (`/api/handoffs/{id}`).
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(param) = Path::<String>::from_request_parts(parts, state).await?;
        Ok(PathParam(param))
    }
}

/// The agent named in the path (`/api/agents/{name}/…`), a valid agent name.
pub struct AgentName(pub String);

impl<S: Send + Sync> FromRequestParts<S> for AgentName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let PathParam(name) = PathParam::from_request_parts(parts, state).await?;
        valid_agent(&name)?;
        Ok(AgentName(name))
    }
}

/// The query string, parsed into `T`.
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(query) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(QueryParams(query))
    }
}

/// The JSON request body, parsed into `T`.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(body) = axum::Json::<T>::from_request(request, state).await?;
        Ok(JsonBody(body))
    }
}
