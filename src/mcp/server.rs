//! The protocol side (the official SDK, rmcp): `initialize`, `tools/list`, `tools/call`, and
//! `tasks/get` / `tasks/cancel` for a `wait_for` a client runs as a task. Each call is
//! authorized, run on the blocking pool and recorded by the module's own functions; this file
//! only turns them into MCP results.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult,
    GetTaskParams, GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use super::wait::WaitRequest;
use super::{Authorized, Caller, Context, ToolError, authorize, record, tools};
use crate::spec::Spec;

/// How often a `wait_for` that runs as a plain call tells a client that asked for progress
/// that it is still waiting (which resets the client's own timeout, where it has one).
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// One MCP server: its context, and the `wait_for` tasks it runs.
#[derive(Clone)]
pub struct PhoenixMcp {
    ctx: Arc<Context>,
    tasks: TaskManager,
}

impl PhoenixMcp {
    pub fn new(ctx: Context) -> PhoenixMcp {
        PhoenixMcp {
            ctx: Arc::new(ctx),
            tasks: TaskManager::new(),
        }
    }
}

/// The tools as `tools/list` gives them.
pub fn tool_list() -> Vec<Tool> {
    tools::TOOLS
        .iter()
        .map(|t| {
            let schema = match tools::input_schema(t.name) {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            Tool::new(t.name, t.description, Arc::new(schema))
        })
        .collect()
}

fn internal(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("{e}"), None)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, McpError> {
    tokio::task::spawn_blocking(f).await.map_err(internal)
}

/// A tool's answer: its document, with the arguments phoenix ignored named.
fn answer(result: Result<Value, ToolError>, ignored: &[String]) -> CallToolResult {
    match result {
        Ok(mut value) => {
            if !ignored.is_empty()
                && let Value::Object(map) = &mut value
            {
                map.insert("ignored_arguments".into(), json!(ignored));
            }
            CallToolResult::structured(value)
        }
        Err(e) => CallToolResult::structured_error(e.to_json()),
    }
}

/// A call that passed the check, with the spec it was checked against.
type Prepared = (Option<Spec>, Result<Authorized, ToolError>);

fn prepare(ctx: &Context, name: &str, args: Map<String, Value>) -> Prepared {
    match ctx.spec() {
        Ok(spec) => {
            let call = authorize(&spec, &ctx.caller, name, args);
            (Some(spec), call)
        }
        Err(e) => (None, Err(e)),
    }
}

impl PhoenixMcp {
    fn record(
        &self,
        spec: Option<&Spec>,
        tool: &str,
        target: Option<&str>,
        r: Result<(), &ToolError>,
        since: Instant,
    ) {
        if let Some(spec) = spec {
            let ms = since.elapsed().as_secs_f64() * 1000.0;
            record(spec, &self.ctx.caller, tool, target, r, ms, self.ctx.via);
        }
    }

    /// `wait_for` as an MCP task: answered at once with the task, which the client polls.
    fn wait_task(
        &self,
        spec: Spec,
        call: Authorized,
        request: WaitRequest,
        started: Instant,
    ) -> CreateTaskResult {
        let ttl_ms = request.timeout.as_millis() as u64 + 600_000;
        let server = self.clone();
        let task = self.tasks.spawn(
            TaskOptions::new()
                .with_ttl_ms(ttl_ms)
                .with_poll_interval_ms(500)
                .with_status_message(format!(
                    "waiting for agent `{}`: {}",
                    request.agent,
                    request.until.as_str()
                )),
            move |task| {
                Box::pin(async move {
                    let cancel = Arc::new(AtomicBool::new(false));
                    let flag = cancel.clone();
                    let waited = {
                        let spec = spec.clone();
                        tokio::task::spawn_blocking(move || super::wait::wait_for(&spec, &request, &flag))
                    };
                    let result = tokio::select! {
                        r = waited => r.unwrap_or_else(|e| Err(ToolError::failed(e.to_string(), ""))),
                        () = task.cancelled() => {
                            cancel.store(true, Ordering::Relaxed);
                            Err(ToolError::Cancelled)
                        }
                    };
                    server.record(Some(&spec), call.tool, call.target.as_deref(), result.as_ref().map(|_| ()), started);
                    match result {
                        Err(ToolError::Cancelled) => Err(TaskExit::Cancelled),
                        other => Ok(answer(other, &call.ignored)),
                    }
                })
            },
        );
        CreateTaskResult::new(task)
    }

    /// `wait_for` as a plain call: the answer when the wait ends, progress meanwhile.
    async fn wait_inline(
        &self,
        spec: Spec,
        call: Authorized,
        request: WaitRequest,
        context: RequestContext<RoleServer>,
        started: Instant,
    ) -> CallToolResult {
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let waited = {
            let spec = spec.clone();
            tokio::task::spawn_blocking(move || super::wait::wait_for(&spec, &request, &flag))
        };
        tokio::pin!(waited);
        let token = context.meta.get_progress_token();
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        let mut progress = 0.0;
        let result = loop {
            tokio::select! {
                r = &mut waited => break r.unwrap_or_else(|e| Err(ToolError::failed(e.to_string(), ""))),
                () = context.ct.cancelled() => {
                    cancel.store(true, Ordering::Relaxed);
                    break Err(ToolError::Cancelled);
                }
                _ = ticks.tick() => {
                    if let Some(token) = &token {
                        progress += 1.0;
                        let mut note = ProgressNotificationParam::new(token.clone(), progress);
                        note.message = Some(format!("still waiting ({} s)", started.elapsed().as_secs()));
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        };
        self.record(
            Some(&spec),
            call.tool,
            call.target.as_deref(),
            result.as_ref().map(|_| ()),
            started,
        );
        answer(result, &call.ignored)
    }
}

impl ServerHandler for PhoenixMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("phoenix", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "The fleet of AI coding agents phoenix supervises, as tools. You are `{}`: messages you send carry that name. `wait_for` waits for another agent's turn to end (across its crashes and restarts).",
            self.ctx.caller.name()
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        // A refused call is recorded with the agent it named, when it named one.
        let named = args
            .get("agent")
            .and_then(Value::as_str)
            .map(str::to_string);
        let ctx = self.ctx.clone();
        let tool = name.clone();
        let (spec, call) = blocking(move || prepare(&ctx, &tool, args)).await?;
        let call = match call {
            Ok(call) => call,
            Err(e) => {
                self.record(spec.as_ref(), &name, named.as_deref(), Err(&e), started);
                if let ToolError::UnknownTool(_) = e {
                    return Err(McpError::invalid_params(e.to_string(), Some(e.to_json())));
                }
                return Ok(answer(Err(e), &[]).into());
            }
        };
        let spec = spec.expect("an authorized call has its spec");
        if call.tool == "wait_for" {
            let request = match WaitRequest::from_call(&call) {
                Ok(r) => r,
                Err(e) => {
                    self.record(
                        Some(&spec),
                        call.tool,
                        call.target.as_deref(),
                        Err(&e),
                        started,
                    );
                    return Ok(answer(Err(e), &[]).into());
                }
            };
            let tasks = context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks());
            if tasks {
                return Ok(CallToolResponse::Task(
                    self.wait_task(spec, call, request, started),
                ));
            }
            return Ok(self
                .wait_inline(spec, call, request, context, started)
                .await
                .into());
        }
        let ctx = self.ctx.clone();
        let (spec, call, result) = blocking(move || {
            let result = tools::run(&spec, &ctx.config, &ctx.caller, &call);
            (spec, call, result)
        })
        .await?;
        self.record(
            Some(&spec),
            call.tool,
            call.target.as_deref(),
            result.as_ref().map(|_| ()),
            started,
        );
        Ok(answer(result, &call.ignored).into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }
}

/// `phoenix mcp`: serve the fleet of `config` on the reader and writer `io` makes (the CLI's
/// stdin and stdout) until the client closes them. The caller is who this process's
/// environment says phoenix started (or the operator).
pub fn serve_stdio<R, W>(config: &Path, io: impl FnOnce() -> (R, W)) -> crate::error::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let spec = crate::spec::load_with(
        config,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )?;
    let caller = Caller::from_env(&spec)?;
    let ctx = Context {
        config: config.to_path_buf(),
        caller,
        via: "stdio",
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::error::Error::msg(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let service = PhoenixMcp::new(ctx)
            .serve(io())
            .await
            .map_err(|e| crate::error::Error::msg(format!("MCP initialize failed: {e}")))?;
        service
            .waiting()
            .await
            .map_err(|e| crate::error::Error::msg(format!("the MCP session failed: {e}")))?;
        Ok(())
    })
}

/// `/mcp` on `phoenix serve`: the same tools over streamable HTTP, for the operator (the
/// API's auth guard is in front of it), refusing request bodies over `body_limit` bytes.
pub fn http_service(
    config: &Path,
    body_limit: usize,
) -> rmcp::transport::StreamableHttpService<
    PhoenixMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let config = config.to_path_buf();
    rmcp::transport::StreamableHttpService::new(
        move || {
            Ok(PhoenixMcp::new(Context {
                config: config.clone(),
                caller: Caller::Operator,
                via: "http",
            }))
        },
        Default::default(),
        // Hosts and origins are the API guard's to check (loopback names, or the token).
        rmcp::transport::StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_max_request_body_bytes(body_limit),
    )
}
