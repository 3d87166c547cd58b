//! `GET|POST /api/agents/{agent}/messages`: an agent's inbox, and a message for it (given at
//! its next turn boundary, or at once with `urgent`), as `phoenix inbox` and `phoenix send`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::App;
use super::error::ApiError;
use super::extract::{AgentName, JsonBody};
use super::routes::blocking;
use crate::continuity::messages::{self, Error};
use crate::state::FleetDir;
use crate::state::inbox::{self, SendError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MessageBody {
    text: String,
    /// Who sends it (default `operator`).
    from: Option<String>,
    #[serde(default)]
    urgent: bool,
}

pub(super) async fn send(
    State(app): State<App>,
    AgentName(name): AgentName,
    JsonBody(body): JsonBody<MessageBody>,
) -> Result<Response, ApiError> {
    let message = blocking(move || {
        let from = body.from.as_deref().unwrap_or("operator");
        if let Some((spec, host)) = super::routes::on_host(&app, &name)? {
            // Its host keeps its inbox: sent there as `phoenix send` sends it.
            let mut args = vec![
                "send".to_string(),
                format!("--from={from}"),
                "--json".into(),
            ];
            args.extend(body.urgent.then(|| "--urgent".to_string()));
            args.extend(["--".to_string(), name.clone(), body.text.clone()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let doc = super::remote::run(&spec, &host, &args, super::remote::ACTION_TIMEOUT)?;
            let mut message = doc["message"].clone();
            message["host"] = serde_json::Value::from(host);
            return Ok(message);
        }
        let spec = app.spec()?;
        messages::send(&spec, &name, from, &body.text, body.urgent).map_err(|e| match &e {
            Error::UnknownAgent { .. } => {
                ApiError::not_found(e.to_string(), "`GET /api/status` lists the agents")
            }
            Error::Inbox {
                source: SendError::Full { .. },
                ..
            } => ApiError::conflict(
                e.to_string(),
                "wait until the agent has taken its messages (`GET /api/agents/AGENT/messages`)",
            ),
            Error::Inbox {
                source: SendError::Io { .. },
                ..
            } => ApiError::internal(&e.into()),
            Error::Inbox { .. } => ApiError::bad_request(
                e.to_string(),
                format!(
                    "send plain text of at most {} bytes, `from` of letters, digits, `-`, `_`, `.`",
                    inbox::MAX_TEXT_BYTES
                ),
            ),
        })
        .map(|m| serde_json::to_value(m).unwrap_or_default())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(message)).into_response())
}

pub(super) async fn list(
    State(app): State<App>,
    AgentName(name): AgentName,
) -> Result<Response, ApiError> {
    let value = blocking(move || {
        if let Some((spec, host)) = super::routes::on_host(&app, &name)? {
            let args = ["inbox", "--json", "--", name.as_str()];
            return super::remote::run(&spec, &host, &args, super::remote::READ_TIMEOUT);
        }
        let spec = app.spec()?;
        if spec.agent(&name).is_none() {
            return Err(ApiError::not_found(
                format!("no agent `{name}` in phoenix.toml"),
                "`GET /api/status` lists the agents",
            ));
        }
        let dir = FleetDir::new(&spec.fleet.state_dir).agent(&name);
        let all = inbox::read(&dir).map_err(|e| {
            ApiError::internal(&crate::error::Error::msg(format!(
                "cannot read agent `{name}`'s inbox: {e}"
            )))
        })?;
        let (pending, delivered): (Vec<_>, Vec<_>) = all.into_iter().partition(|m| m.is_pending());
        Ok(json!({"agent": name, "pending": pending, "delivered": delivered}))
    })
    .await?;
    Ok(Json(value).into_response())
}
