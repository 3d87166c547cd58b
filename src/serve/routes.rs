//! The HTTP API's routes and handlers. Each handler validates what it was given (names, ids,
//! bodies), then does its work on the blocking pool (tmux, SQLite, files) through the same
//! library functions the CLI calls, and answers JSON. Field names are stable; `/openapi.json`
//! describes them.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use super::error::ApiError;
use super::extract::{AgentName, JsonBody, PathParam, QueryParams};
use super::remote;
use crate::continuity::{self, Trigger, ledger};
use crate::hosts::reads;
use crate::spec::{AgentSpec, Spec};
use crate::state::{FleetDir, Retention, events};

/// Every API route: (method, path) as in the router and in `/openapi.json`.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/api/status"),
    ("get", "/api/agents/{agent}"),
    ("get", "/api/agents/{agent}/state"),
    ("get", "/api/agents/{agent}/ledger"),
    ("get", "/api/agents/{agent}/handoffs"),
    ("post", "/api/agents/{agent}/handoffs"),
    ("get", "/api/agents/{agent}/brief"),
    ("post", "/api/agents/{agent}/inject"),
    ("post", "/api/agents/{agent}/restart"),
    ("post", "/api/agents/{agent}/stop"),
    ("post", "/api/agents/{agent}/start"),
    ("get", "/api/agents/{agent}/pane"),
    ("get", "/api/agents/{agent}/day"),
    ("post", "/api/agents/{agent}/resolve"),
    ("get", "/api/agents/{agent}/messages"),
    ("post", "/api/agents/{agent}/messages"),
    ("get", "/api/handoffs"),
    ("get", "/api/handoffs/{id}"),
    ("get", "/api/search"),
    ("get", "/api/events"),
    ("get", "/api/plan"),
    ("post", "/api/watchdog"),
    ("get", "/api/stream"),
    ("get", "/metrics"),
];

pub fn router(app: App) -> Router {
    Router::new()
        .route("/api/status", get(status))
        .route("/api/agents/{agent}", get(agent))
        .route("/api/agents/{agent}/state", get(agent_state))
        .route("/api/agents/{agent}/ledger", get(agent_ledger))
        .route(
            "/api/agents/{agent}/handoffs",
            get(agent_handoffs).post(save_handoff),
        )
        .route("/api/agents/{agent}/brief", get(brief))
        .route("/api/agents/{agent}/inject", post(inject))
        .route("/api/agents/{agent}/restart", post(restart))
        .route("/api/agents/{agent}/stop", post(stop))
        .route("/api/agents/{agent}/start", post(start))
        .route("/api/agents/{agent}/pane", get(pane))
        .route("/api/agents/{agent}/day", get(day))
        .route("/api/agents/{agent}/resolve", post(resolve))
        .route(
            "/api/agents/{agent}/messages",
            get(super::messages::list).post(super::messages::send),
        )
        .route("/api/handoffs", get(handoffs))
        .route("/api/handoffs/{id}", get(show_handoff))
        .route("/api/search", get(search))
        .route("/api/events", get(critical_events))
        .route("/api/plan", get(plan))
        .route("/api/watchdog", post(watchdog))
        .route("/api/stream", get(stream))
        .route("/metrics", get(super::metrics::metrics))
        .route("/openapi.json", get(openapi))
        // The MCP tools (docs/mcp.md), for the operator: streamable HTTP, behind the same
        // guard as the API. Not in /openapi.json: `tools/list` describes them.
        .route_service(
            "/mcp",
            crate::mcp::server::http_service(&app.config, super::BODY_LIMIT),
        )
        .merge(super::assets::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

type ApiResult = Result<Response, ApiError>;

/// Blocking work running at once at most: a burst of requests queues here instead of
/// starting hundreds of threads that each call tmux.
static WORKERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

/// Run blocking work (tmux, SQLite, files) on the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = WORKERS.acquire().await.map_err(|e| {
        ApiError::internal(&crate::error::Error::msg(format!(
            "the request's worker pool is closed: {e}"
        )))
    })?;
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::internal(&crate::error::Error::msg(format!(
            "the request's worker failed: {e}"
        )))
    })?
}

/// The fleet's world; a runtime that cannot be observed is 503 (the server itself is fine).
fn observe(spec: &Spec) -> Result<crate::world::World, ApiError> {
    crate::status::observe(spec, &*crate::world::runtime_for(spec)).map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{e:#}"),
            "run `phoenix doctor` on the server",
        )
    })
}

fn ok(value: impl serde::Serialize) -> ApiResult {
    Ok(Json(value).into_response())
}

/// An agent name from a path or a query: validated before it is used anywhere.
pub(super) fn valid_agent(name: &str) -> Result<(), ApiError> {
    if crate::spec::valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            format!("`{}` is not a valid agent name", shown(name)),
            crate::spec::NAME_HINT,
        ))
    }
}

/// A name as it may appear in a message: short, one line.
fn shown(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    crate::text::shorten(&flat, 80)
}

/// The declared agent `name`, or 404 naming the declared ones.
fn declared<'a>(spec: &'a Spec, name: &str) -> Result<&'a AgentSpec, ApiError> {
    spec.agent(name).ok_or_else(|| {
        let names = spec.agent_names();
        let mut list = names
            .iter()
            .take(20)
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > 20 {
            list.push_str(&format!(" and {} more", names.len() - 20));
        }
        ApiError::not_found(
            format!("no agent `{name}` in {}", spec.file.display()),
            if names.is_empty() {
                "the fleet declares no agents".to_string()
            } else {
                format!("declared agents: {list}")
            },
        )
    })
}

/// The spec and the declared agent `name`.
fn spec_and_agent(app: &App, name: &str) -> Result<(Spec, AgentSpec), ApiError> {
    let spec = app.spec()?;
    let agent = declared(&spec, name)?.clone();
    Ok((spec, agent))
}

/// The spec and the host of agent `name`, when phoenix.toml puts it on one: its routes
/// are then answered by that host's phoenix ([`remote`]).
pub(super) fn on_host(app: &App, name: &str) -> Result<Option<(Spec, String)>, ApiError> {
    let spec = app.spec()?;
    Ok(remote::host_of(&spec, name).map(|host| (spec, host)))
}

fn fleet(spec: &Spec) -> FleetDir {
    FleetDir::new(&spec.fleet.state_dir)
}

// ---- reads ----

/// Observe the fleet now: its world (`None` for a fleet across hosts, whose document is read
/// from every host) and the status document (`GET /api/status`, the live stream), which
/// `serve::snapshot` keeps for every reader.
pub fn observe_status(spec: &Spec) -> Result<(Option<crate::world::World>, Value), ApiError> {
    if !spec.hosts.is_empty() {
        // Every host's rows too, as `status --json` shows them (one function renders both).
        let runtime = crate::world::runtime_for(spec);
        let doc = crate::hosts::reads::fleet_status(spec, &*runtime, None).map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{e:#}"),
                "run `phoenix doctor` on the server",
            )
        })?;
        return Ok((None, doc));
    }
    let world = observe(spec)?;
    let rows = crate::status::rows(spec, &world);
    let daemon = crate::state::daemon::daemon_pid(&fleet(spec));
    let doc = crate::status::document(spec, &world, &rows, daemon);
    Ok((Some(world), doc))
}

/// The fleet's status from the shared observation (`serve::snapshot`), with its age.
async fn status(State(app): State<App>) -> ApiResult {
    let observed = app.snapshot.read(&app).await?;
    let mut response = observed.status_body().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

async fn agent(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    let observed = app.snapshot.read(&app).await?;
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            let args = ["status", "--json", "--", name.as_str()];
            let mut doc = remote::run(&spec, &host, &args, reads::STATUS_TIMEOUT)?;
            let mut row = doc["agents"][0].take();
            row["host"] = Value::from(host);
            return Ok(row);
        }
        let spec = &observed.spec;
        // A fleet across hosts has no world of its own in the observation: observed here.
        let world = match &observed.world {
            Some(world) => world.clone(),
            None => std::sync::Arc::new(observe(spec)?),
        };
        let row = crate::status::agent(spec, &world, &name).ok_or_else(|| {
            declared(spec, &name)
                .err()
                .unwrap_or_else(|| ApiError::not_found(format!("no agent `{name}`"), ""))
        })?;
        Ok(serde_json::to_value(row).unwrap_or_default())
    })
    .await?)
}

async fn agent_state(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            let args = ["state", "show", "--json", "--", name.as_str()];
            return remote::run(&spec, &host, &args, remote::READ_TIMEOUT);
        }
        let (spec, _) = spec_and_agent(&app, &name)?;
        let state = fleet(&spec)
            .agent(&name)
            .shown_state(Retention::from(&spec.thresholds))
            .map_err(|e| ApiError::internal(&e.into()))?;
        Ok(serde_json::to_value(state).unwrap_or_default())
    })
    .await?)
}

async fn agent_ledger(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            let args = ["ledger", "--json", "--", name.as_str()];
            return remote::run(&spec, &host, &args, remote::READ_TIMEOUT);
        }
        let (spec, _) = spec_and_agent(&app, &name)?;
        let dir = fleet(&spec).agent(&name);
        let mut ledger = ledger::load(&dir);
        if ledger.agent.is_empty() {
            ledger.agent = name;
        }
        Ok(serde_json::to_value(ledger).unwrap_or_default())
    })
    .await?)
}

async fn agent_handoffs(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            let args = ["handoff", "list", "--json", "--", name.as_str()];
            let mut doc = remote::run(&spec, &host, &args, remote::READ_TIMEOUT)?;
            doc["agent"] = Value::from(name);
            return Ok(doc);
        }
        let (spec, _) = spec_and_agent(&app, &name)?;
        let list: Vec<Value> = continuity::handoffs(&spec, [name.as_str()])
            .iter()
            .map(continuity::summary_json)
            .collect();
        Ok(json!({"agent": name, "handoffs": list}))
    })
    .await?)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandoffsQuery {
    agent: Option<String>,
}

async fn handoffs(State(app): State<App>, QueryParams(q): QueryParams<HandoffsQuery>) -> ApiResult {
    if let Some(a) = &q.agent {
        valid_agent(a)?;
    }
    ok(blocking(move || {
        let spec = app.spec()?;
        if let Some(host) = q.agent.as_deref().and_then(|a| remote::host_of(&spec, a)) {
            let agent = q.agent.as_deref().unwrap_or_default();
            let args = ["handoff", "list", "--json", "--", agent];
            return remote::run(&spec, &host, &args, remote::READ_TIMEOUT);
        }
        let names: Vec<String> = match &q.agent {
            Some(a) => vec![declared(&spec, a)?.name.clone()],
            None => spec.agent_names().iter().map(|s| s.to_string()).collect(),
        };
        let list: Vec<Value> = continuity::handoffs(&spec, names.iter().map(String::as_str))
            .iter()
            .map(continuity::summary_json)
            .collect();
        let doc = json!({"handoffs": list});
        if spec.hosts.is_empty() || q.agent.is_some() {
            return Ok(doc);
        }
        let args = ["handoff".to_string(), "list".into(), "--json".into()];
        let answers = remote::ask_all(&spec, &args, remote::READ_TIMEOUT);
        Ok(remote::merged(doc, "handoffs", answers, false))
    })
    .await?)
}

async fn show_handoff(
    State(app): State<App>,
    PathParam(id): PathParam,
    QueryParams(q): QueryParams<HandoffsQuery>,
) -> ApiResult {
    if !continuity::valid_handoff_id(&id) {
        return Err(ApiError::bad_request(
            format!("`{}` is not a valid handoff id", shown(&id)),
            "handoff ids are letters, digits, `-`, `_` and `.` as `GET /api/handoffs` lists them",
        ));
    }
    if let Some(a) = &q.agent {
        valid_agent(a)?;
    }
    ok(blocking(move || {
        let spec = app.spec()?;
        if let Some(host) = q.agent.as_deref().and_then(|a| remote::host_of(&spec, a)) {
            let agent = format!("--agent={}", q.agent.as_deref().unwrap_or_default());
            let args = [
                "handoff",
                "show",
                "--json",
                agent.as_str(),
                "--",
                id.as_str(),
            ];
            return remote::run(&spec, &host, &args, remote::READ_TIMEOUT);
        }
        if let Some(a) = &q.agent {
            declared(&spec, a)?;
        }
        let found = continuity::find_handoff(&spec, &id, q.agent.as_deref()).ok_or_else(|| {
            ApiError::not_found(
                format!("no handoff `{id}`"),
                "`GET /api/handoffs` lists them",
            )
        })?;
        Ok(serde_json::to_value(found).unwrap_or_default())
    })
    .await?)
}

async fn brief(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            let args = ["brief", "--json", "--", name.as_str()];
            return remote::run(&spec, &host, &args, remote::READ_TIMEOUT);
        }
        let (spec, _) = spec_and_agent(&app, &name)?;
        let dir = fleet(&spec).agent(&name);
        let updated_at = std::fs::metadata(dir.file(crate::state::BRIEF))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| jiff::Timestamp::try_from(t).ok())
            .map(crate::state::rfc3339);
        Ok(json!({"agent": name, "brief": continuity::brief::read(&dir), "updated_at": updated_at}))
    })
    .await?)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchQuery {
    q: Option<String>,
    agent: Option<String>,
    kind: Option<String>,
    limit: Option<usize>,
}

const KINDS: [&str; 4] = ["handoff", "brief", "decision", "event"];

async fn search(State(app): State<App>, QueryParams(q): QueryParams<SearchQuery>) -> ApiResult {
    let text = q.q.unwrap_or_default();
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "nothing to search for",
            "pass the words as `q`, e.g. /api/search?q=refresh+tokens",
        ));
    }
    if text.len() > 1000 {
        return Err(ApiError::bad_request(
            "the query is longer than 1000 bytes",
            "search for a few words",
        ));
    }
    if let Some(a) = &q.agent {
        valid_agent(a)?;
    }
    if let Some(k) = &q.kind
        && !KINDS.contains(&k.as_str())
    {
        return Err(ApiError::bad_request(
            format!("unknown kind `{}`", shown(k)),
            format!("one of: {}", KINDS.join(", ")),
        ));
    }
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    ok(blocking(move || {
        let spec = app.spec()?;
        let started = std::time::Instant::now();
        let hits = crate::store::search(
            &fleet(&spec),
            &text,
            q.agent.as_deref(),
            q.kind.as_deref(),
            limit,
        )
        .map_err(|e| ApiError::internal(&e.into()))?;
        if spec.hosts.is_empty() {
            return Ok(json!({
                "query": text, "results": hits,
                "ms": started.elapsed().as_secs_f64() * 1000.0,
            }));
        }
        // Every host's index too (only the agent's host with an agent), merged by rank.
        let local: Vec<Value> = match q.agent.as_deref().and_then(|a| reads::host_of(&spec, a)) {
            Some(_) => Vec::new(),
            None => hits
                .iter()
                .map(|h| serde_json::to_value(h).unwrap_or_default())
                .collect(),
        };
        let mut links = crate::hosts::fleet::links(&spec);
        if let Some(agent) = &q.agent {
            links.retain(|l| reads::host_of(&spec, agent) == Some(l.name()));
        }
        let mut args = vec![
            "handoff".to_string(),
            "search".into(),
            "--json".into(),
            format!("--limit={limit}"),
        ];
        args.extend(q.agent.as_ref().map(|a| format!("--agent={a}")));
        args.extend(q.kind.as_ref().map(|k| format!("--kind={k}")));
        args.extend(["--".into(), text.clone()]);
        let answers = reads::ask_json(&links, &args, reads::READ_TIMEOUT);
        let merged = reads::merge_hits(local, answers, limit);
        Ok(json!({
            "query": text, "results": merged.rows, "hosts": merged.unreachable,
            "ms": started.elapsed().as_secs_f64() * 1000.0,
        }))
    })
    .await?)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    since: Option<String>,
    agent: Option<String>,
    event: Option<String>,
    limit: Option<usize>,
}

async fn critical_events(
    State(app): State<App>,
    QueryParams(q): QueryParams<EventsQuery>,
) -> ApiResult {
    let since = match q.since.as_deref() {
        None | Some("") => None,
        Some(s) => Some(parse_since(s)?),
    };
    if let Some(a) = &q.agent {
        valid_agent(a)?;
    }
    let limit = q.limit.unwrap_or(500).clamp(1, 10_000);
    ok(blocking(move || {
        let spec = app.spec()?;
        let declared = spec.agent_names();
        let filter = events::Filter {
            agent: q.agent.as_deref(),
            event: q.event.as_deref(),
            limit: Some(limit),
            since,
            agents: &declared,
            all_steps: false,
        };
        let (list, skipped) = events::read(&fleet(&spec), &filter);
        let doc = json!({"events": list, "skipped_lines": skipped});
        if spec.hosts.is_empty() {
            return Ok(doc);
        }
        Ok(host_events(&spec, doc, &q, since, limit))
    })
    .await?)
}

/// `doc` (this machine's events) with every host's that `q` asks for merged in, one
/// timeline, each with its host; an agent of this machine asks no host.
fn host_events(
    spec: &Spec,
    doc: Value,
    q: &EventsQuery,
    since: Option<jiff::Timestamp>,
    limit: usize,
) -> Value {
    let mut links = crate::hosts::fleet::links(spec);
    if let Some(agent) = &q.agent {
        links.retain(|l| reads::host_of(spec, agent) == Some(l.name()));
    }
    let mut args = vec![
        "events".to_string(),
        "--json".into(),
        format!("--limit={limit}"),
    ];
    args.extend(q.agent.as_ref().map(|a| format!("--agent={a}")));
    args.extend(q.event.as_ref().map(|e| format!("--event={e}")));
    if let Some(since) = since {
        let age = jiff::Timestamp::now().as_second() - since.as_second();
        args.push(format!("--since={}s", age.max(1)));
    }
    let answers = reads::ask_json(&links, &args, reads::READ_TIMEOUT);
    let mut doc = remote::merged(doc, "events", answers, true);
    if let Some(list) = doc["events"].as_array_mut() {
        let extra = list.len().saturating_sub(limit);
        list.drain(..extra);
    }
    doc
}

/// `since`: an age (`90s`, `30m`, `1h`, `7d`) or an RFC 3339 time.
fn parse_since(text: &str) -> Result<jiff::Timestamp, ApiError> {
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    crate::spec::duration::parse(text)
        .ok()
        .and_then(events::Filter::since_age)
        .ok_or_else(|| {
            ApiError::bad_request(
                format!("`since` = `{}` is neither a duration nor a time", shown(text)),
                "use an age like `30m`, `1h`, `7d`, or an RFC 3339 time like `2026-11-23T17:00:00Z`",
            )
        })
}

async fn plan(State(app): State<App>) -> ApiResult {
    ok(blocking(move || {
        let spec = crate::spec::load(&app.config).map_err(|e| ApiError::config(&e))?;
        let world = observe(&spec)?;
        let options = crate::plan::PlanOptions::for_this_binary(false)
            .map_err(|e| ApiError::internal(&e.into()))?;
        let plan = crate::plan::diff(&spec, &world, &options);
        let mut doc = plan.to_json();
        doc["text"] = Value::String(plan.to_string());
        Ok(doc)
    })
    .await?)
}

async fn stream(State(app): State<App>) -> ApiResult {
    let first = app.snapshot.read(&app).await?.status_body();
    // Checked after the last await, right before subscribing: no other stream slips between.
    if app.live.listeners() >= super::live::MAX_STREAMS {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} live streams are open already", super::live::MAX_STREAMS),
            "close a dashboard tab; `GET /api/status` answers without a stream",
        ));
    }
    let mut response = super::live::stream(&app, first).into_response();
    // A stream never ends by itself: a browser must not keep its connection for reuse (Chromium
    // drains an abandoned response for a minute, holding one of its six connections per host).
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(response)
}

async fn openapi() -> Response {
    let mut r = Json(super::openapi::document()).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn not_found() -> ApiError {
    ApiError::not_found(
        "no such endpoint",
        "the API is under /api (see /openapi.json); the dashboard is at /",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this endpoint does not take that method",
        "see /openapi.json: reads are GET, actions are POST with a JSON body",
    )
}

// ---- actions ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveBody {
    /// manual (default), auto_restart, context_limit, crash, pre_compact, move
    reason: Option<String>,
    /// `Current task: … / Completed: … / Next: …`, as `phoenix handoff save` reads on stdin.
    body: Option<String>,
}

async fn save_handoff(
    State(app): State<App>,
    AgentName(name): AgentName,
    JsonBody(body): JsonBody<SaveBody>,
) -> ApiResult {
    let reason = body.reason.as_deref().unwrap_or("manual");
    let flag = format!("--reason={reason}");
    let trigger = Trigger::parse(reason).ok_or_else(|| {
        ApiError::bad_request(
            format!("unknown reason `{}`", shown(reason)),
            format!("one of: {}", Trigger::NAMES.join(", ")),
        )
    })?;
    let text = body.body.filter(|b| !b.trim().is_empty());
    let h = blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            if text.is_some() {
                return Err(ApiError::bad_request(
                    format!("agent `{name}` runs on host `{host}`: notes cannot be sent there yet"),
                    format!("save without `body` (phoenix adds what it knows), or run `phoenix handoff save {name}` on {host}"),
                ));
            }
            let args = ["handoff", "save", "--no-input", "--json", flag.as_str(), "--", name.as_str()];
            return remote::run(&spec, &host, &args, remote::ACTION_TIMEOUT);
        }
        let (spec, agent) = spec_and_agent(&app, &name)?;
        let h = continuity::save(&spec, &agent, trigger, text.as_deref()).map_err(|e| {
            ApiError::internal(&crate::error::Error::msg(format!(
                "cannot save the handoff: {e}"
            )))
        })?;
        tracing::info!("saved handoff {} for agent `{name}`", h.id);
        Ok(continuity::summary_json(&h))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(h)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectBody {
    /// A handoff of this agent; the latest when neither this nor `text` is given.
    handoff_id: Option<String>,
    /// Text to give the agent instead of a handoff.
    text: Option<String>,
}

async fn inject(
    State(app): State<App>,
    AgentName(name): AgentName,
    JsonBody(body): JsonBody<InjectBody>,
) -> ApiResult {
    if body.handoff_id.is_some() && body.text.is_some() {
        return Err(ApiError::bad_request(
            "give either `handoff_id` or `text`, not both",
            "`{}` injects the latest handoff",
        ));
    }
    if let Some(id) = &body.handoff_id
        && !continuity::valid_handoff_id(id)
    {
        return Err(ApiError::bad_request(
            format!("`{}` is not a valid handoff id", shown(id)),
            "`GET /api/agents/AGENT/handoffs` lists the agent's handoffs",
        ));
    }
    if let Some(text) = &body.text {
        if text.trim().is_empty() {
            return Err(ApiError::bad_request(
                "`text` is empty",
                "send the words to give the agent",
            ));
        }
        // Escape sequences could end the bracketed paste and type keys into the agent's pane.
        if text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
        {
            return Err(ApiError::bad_request(
                "`text` contains control characters",
                "send plain text: lines and tabs only, no escape sequences",
            ));
        }
    }
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            return inject_on_host(&spec, &host, &name, body);
        }
        let (spec, agent) = spec_and_agent(&app, &name)?;
        let (text, handoff_id) = match body.text {
            Some(text) => (text, None),
            None => {
                let dir = fleet(&spec).agent(&name);
                let h = match &body.handoff_id {
                    Some(id) => {
                        continuity::find_handoff(&spec, id, Some(&name)).ok_or_else(|| {
                            ApiError::not_found(
                                format!("agent `{name}` has no handoff `{id}`"),
                                format!("`GET /api/agents/{name}/handoffs` lists them"),
                            )
                        })?
                    }
                    None => continuity::latest_for_startup(&dir).ok_or_else(|| {
                        ApiError::not_found(
                            format!("agent `{name}` has no handoff yet"),
                            format!("save one first: `POST /api/agents/{name}/handoffs`"),
                        )
                    })?,
                };
                (continuity::inject::handoff_text(&h), Some(h.id))
            }
        };
        let report = continuity::inject::to_agent(&spec, &agent, &text).map_err(|e| match e {
            continuity::inject::InjectError::NotRunning(_) => ApiError::conflict(
                e.to_string(),
                format!("restart it (`POST /api/agents/{name}/restart`), then inject again"),
            ),
            continuity::inject::InjectError::Delivery(_) => {
                ApiError::conflict(e.to_string(), "try again when the agent waits for input")
            }
            continuity::inject::InjectError::Unconfirmed { .. } => ApiError::conflict(
                e.to_string(),
                "look at the agent's pane before injecting again: the text may be there already",
            ),
            other => ApiError::internal(&other.into()),
        })?;
        tracing::info!("injected {} characters into agent `{name}`", text.len());
        Ok(json!({
            "agent": name, "handoff_id": handoff_id, "chars": text.len(),
            "pane": report.pane, "attempts": report.attempts,
            "confirmed_by": report.confirmed_by, "waited_ms": report.waited_ms,
        }))
    })
    .await?)
}

/// `inject` of an agent of a host: the text pasted there by its host (in the request, never an
/// argv), or its handoff (the latest, or `handoff_id`) by its host's `phoenix handoff inject`.
fn inject_on_host(
    spec: &Spec,
    host: &str,
    name: &str,
    body: InjectBody,
) -> Result<Value, ApiError> {
    if let Some(text) = body.text {
        let mut doc = remote::inject(spec, host, name, &text)?;
        doc["handoff_id"] = Value::Null;
        tracing::info!(
            "injected {} characters into agent `{name}` on host `{host}`",
            text.len()
        );
        return Ok(doc);
    }
    let id = body.handoff_id.map(|id| format!("--id={id}"));
    let mut args = vec!["handoff", "inject", "--json"];
    args.extend(id.as_deref());
    args.extend(["--", name]);
    let mut doc = remote::run(spec, host, &args, remote::ACTION_TIMEOUT)?;
    doc["agent"] = Value::from(name);
    tracing::info!("injected a handoff into agent `{name}` on host `{host}`");
    Ok(doc)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartBody {
    /// Start a fresh session instead of resuming the recorded one.
    #[serde(default)]
    fresh: bool,
}

async fn restart(
    State(app): State<App>,
    AgentName(name): AgentName,
    JsonBody(body): JsonBody<RestartBody>,
) -> ApiResult {
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            return restart_on_host(&spec, &host, &name, body.fresh);
        }
        let (_, agent) = spec_and_agent(&app, &name)?;
        if !agent.enabled {
            return Err(ApiError::conflict(
                format!("agent `{name}` is disabled in phoenix.toml"),
                "set `enabled = true` for it first",
            ));
        }
        let report = crate::controller::request::restart(&app.config, &name, body.fresh)
            .map_err(|e| ApiError::internal(&e))?;
        tracing::info!(
            "restarted agent `{name}` ({}, via {})",
            if body.fresh { "fresh" } else { "resume" },
            report.via
        );
        Ok(serde_json::to_value(report).unwrap_or_default())
    })
    .await?)
}

/// `stop` and `start` as `phoenix stop|start AGENT` do them (the stop's record first, the
/// hosts' agents on their host): the same binary runs the verb, so there is one way to stop.
fn lifecycle_verb(app: &App, verb: &str, name: &str) -> Result<Value, ApiError> {
    declared_anywhere(&app.spec()?, name)?;
    let exe = crate::process::main_binary().map_err(|e| {
        ApiError::internal(&crate::error::Error::msg(format!(
            "cannot find the phoenix binary: {e}"
        )))
    })?;
    let output = std::process::Command::new(exe)
        .arg("--config")
        .arg(&app.config)
        .args([verb, "--json", "--", name])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            ApiError::internal(&crate::error::Error::msg(format!(
                "cannot run phoenix {verb}: {e}"
            )))
        })?;
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let row = doc["agents"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["agent"] == name))
        .cloned();
    match row {
        Some(row) if row["ok"] != false && output.status.success() => {
            tracing::info!("{verb} of agent `{name}`: {}", row["detail"]);
            Ok(row)
        }
        Some(row) => Err(ApiError::conflict(
            row["detail"]
                .as_str()
                .unwrap_or("it did not succeed")
                .to_string(),
            "see `phoenix status` on the server",
        )),
        None => Err(ApiError::conflict(
            doc["error"]["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&output.stderr).trim().to_string()),
            doc["error"]["hint"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )),
    }
}

/// An agent declared here or on one of the hosts, else 404.
fn declared_anywhere(spec: &Spec, name: &str) -> Result<(), ApiError> {
    if spec.remote_agents.iter().any(|a| a.name == name) {
        return Ok(());
    }
    declared(spec, name).map(drop)
}

async fn stop(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || lifecycle_verb(&app, "stop", &name)).await?)
}

async fn start(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || lifecycle_verb(&app, "start", &name)).await?)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PaneQuery {
    lines: Option<usize>,
}

/// The most lines `/pane` shows: a preview, not the pane's history (`logs` keeps that).
const PANE_LINES_MAX: usize = 200;

/// The last lines of the agent's pane as the pane shows them now (text, no escapes), or
/// `running: false` and no text when it has no pane.
async fn pane(
    State(app): State<App>,
    AgentName(name): AgentName,
    QueryParams(q): QueryParams<PaneQuery>,
) -> ApiResult {
    let lines = q.lines.unwrap_or(30).clamp(1, PANE_LINES_MAX);
    ok(blocking(move || {
        if on_host(&app, &name)?.is_some() {
            return Err(ApiError::conflict(
                format!("agent `{name}` runs on another host: its pane is there"),
                format!("`phoenix attach {name}` opens it"),
            ));
        }
        let (spec, _) = spec_and_agent(&app, &name)?;
        let world = observe(&spec)?;
        let Some(pane) = world.pane_of(&name) else {
            return Ok(json!({"agent": name, "running": false, "pane": null, "text": ""}));
        };
        let runtime = crate::world::runtime_for(&spec);
        let text = runtime
            .capture(&pane.id, lines)
            .map_err(|e| ApiError::internal(&crate::error::Error::msg(e.to_string())))?;
        // The pane's own blank lines below the cursor are no output.
        let text = text.trim_end().to_string();
        let kept: Vec<&str> = text.lines().collect();
        let start = kept.len().saturating_sub(lines);
        Ok(json!({"agent": name, "running": true, "pane": pane.id, "text": kept[start..].join("\n")}))
    })
    .await?)
}

/// The agent's day: tokens and estimated cost per local hour since midnight (its usage
/// ledger, brought up to date), and its crashes today (its restart ledger), oldest first
/// ([`crate::usage::report::day`]).
async fn day(State(app): State<App>, AgentName(name): AgentName) -> ApiResult {
    ok(blocking(move || {
        if on_host(&app, &name)?.is_some() {
            return Err(ApiError::conflict(
                format!("agent `{name}` runs on another host: its records are there"),
                format!("`phoenix usage {name}` reads them"),
            ));
        }
        let (spec, agent) = spec_and_agent(&app, &name)?;
        let mut notes = Vec::new();
        let day = crate::usage::report::day(&spec, &name, agent.cli, &mut notes);
        for note in &notes {
            tracing::warn!("usage of agent `{name}`: {note}");
        }
        let mut doc = serde_json::to_value(day).unwrap_or_default();
        doc["agent"] = Value::from(name);
        Ok(doc)
    })
    .await?)
}

/// `restart` of an agent of a host: its host's `phoenix restart`, whose report (the pane and
/// pid it runs in now) comes back with `host`.
fn restart_on_host(spec: &Spec, host: &str, name: &str, fresh: bool) -> Result<Value, ApiError> {
    let enabled = spec
        .remote_agents
        .iter()
        .any(|a| a.name == name && a.enabled);
    if !enabled {
        return Err(ApiError::conflict(
            format!("agent `{name}` is disabled in phoenix.toml"),
            "set `enabled = true` for it first",
        ));
    }
    let mut args = vec!["restart", "--json"];
    if fresh {
        args.push("--fresh");
    }
    args.extend(["--", name]);
    let doc = remote::run(spec, host, &args, remote::ACTION_TIMEOUT)?;
    tracing::info!("restarted agent `{name}` on host `{host}`");
    // `restart --json` is one list whatever the count (an older host's is the one report):
    // the API answers with the one agent's row.
    if let Some([row]) = doc["agents"].as_array().map(Vec::as_slice) {
        if row["ok"] == false {
            return Err(ApiError::conflict(
                row["detail"]
                    .as_str()
                    .unwrap_or("the restart failed")
                    .to_string(),
                "see `phoenix status` on that host",
            ));
        }
        let mut row = row.clone();
        if let Some(fields) = row.as_object_mut() {
            // Labelled with its host like every row the API gives for a host's agent.
            fields.insert("host".into(), Value::from(host));
            if !doc["format_version"].is_null() {
                fields.insert("format_version".into(), doc["format_version"].clone());
            }
        }
        return Ok(row);
    }
    Ok(doc)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    /// The open loop's id.
    id: String,
    /// Why it is resolved.
    reason: String,
}

async fn resolve(
    State(app): State<App>,
    AgentName(name): AgentName,
    JsonBody(body): JsonBody<ResolveBody>,
) -> ApiResult {
    if body.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "`reason` is empty",
            "say why the loop is resolved; it is kept in resolved.jsonl",
        ));
    }
    if !crate::state::agent::valid_loop_id(&body.id) {
        return Err(ApiError::bad_request(
            format!("`{}` is not a valid loop id", shown(&body.id)),
            "loop ids are letters, digits and `-_.:/` (see `GET /api/agents/AGENT/state`)",
        ));
    }
    ok(blocking(move || {
        if let Some((spec, host)) = on_host(&app, &name)? {
            return resolve_on_host(&spec, &host, &name, &body);
        }
        let (spec, _) = spec_and_agent(&app, &name)?;
        let dir = fleet(&spec).agent(&name);
        if !dir.exists() {
            return Err(ApiError::not_found(
                format!("agent `{name}` has no open loop `{}`", body.id),
                "it has no state yet",
            ));
        }
        let item = dir
            .resolve(
                Retention::from(&spec.thresholds),
                &body.id,
                body.reason.trim(),
            )
            .map_err(|e| match e {
                crate::state::StateError::Rejected(msg) => ApiError::not_found(
                    msg,
                    format!("`GET /api/agents/{name}/state` lists the open loops"),
                ),
                other => ApiError::internal(&other.into()),
            })?;
        tracing::info!("resolved loop `{}` of agent `{name}`", item.id);
        Ok(json!({"agent": name, "resolved": item}))
    })
    .await?)
}

/// `resolve` of an agent of a host: its host's `phoenix resolve`.
fn resolve_on_host(
    spec: &Spec,
    host: &str,
    name: &str,
    body: &ResolveBody,
) -> Result<Value, ApiError> {
    let link = reads::link_to(spec, host)
        .ok_or_else(|| ApiError::not_found(format!("host `{host}` is not declared"), ""))?;
    let reason = body.reason.trim();
    let args = ["resolve", "--", name, body.id.as_str(), reason];
    let ran = link
        .run(&args, remote::ACTION_TIMEOUT)
        .map_err(|e| remote::error(&e))?;
    if ran.code != Some(0) {
        let said = ran.stderr.lines().find(|l| !l.trim().is_empty());
        return Err(ApiError::not_found(
            format!(
                "host `{host}`: {}",
                said.unwrap_or("the loop was not resolved")
            ),
            format!("`GET /api/agents/{name}/state` lists the open loops"),
        ));
    }
    tracing::info!(
        "resolved loop `{}` of agent `{name}` on host `{host}`",
        body.id
    );
    Ok(json!({"agent": name, "host": host, "resolved": {"id": body.id, "reason": reason}}))
}

async fn watchdog(State(app): State<App>) -> ApiResult {
    ok(blocking(move || {
        let report = crate::watchdog::pass(&app.config).map_err(|e| ApiError::internal(&e))?;
        tracing::info!(
            "watchdog pass: {}, {} unhealthy",
            crate::text::counted(report.agents.len(), "agent"),
            report.unhealthy()
        );
        Ok(report)
    })
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_ages_and_times() {
        let t = parse_since("2026-11-23T17:00:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-23T17:00:00Z");
        let hour_ago = parse_since("1h").unwrap();
        let delta = jiff::Timestamp::now().as_second() - hour_ago.as_second();
        assert!((3599..=3601).contains(&delta), "{delta}");
        assert_eq!(parse_since("soon").unwrap_err().status, 400);
    }

    #[test]
    fn every_route_is_in_the_openapi_document() {
        let doc = super::super::openapi::document();
        for (method, path) in ROUTES {
            assert!(
                doc["paths"][path][method].is_object(),
                "{method} {path} is not described in /openapi.json"
            );
        }
        let described: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum();
        assert_eq!(
            described,
            ROUTES.len(),
            "described routes that do not exist"
        );
    }
}
