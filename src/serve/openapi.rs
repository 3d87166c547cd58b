//! The OpenAPI 3.1 description of the API, served at `/openapi.json`. Written by hand next to
//! the routes; a unit test in `routes` checks that every route is described and nothing else.

use serde_json::{Value, json};

fn agent_param() -> Value {
    json!({"name": "agent", "in": "path", "required": true,
           "description": "An agent declared in phoenix.toml: letters, digits, `_`, `-` (at most 64).",
           "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}})
}

fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Error responses an endpoint can give, by status code.
fn errors(codes: &[u16]) -> Vec<(String, Value)> {
    codes
        .iter()
        .map(|c| {
            let what = match c {
                400 => "Bad input: an invalid name, id, query or body field.",
                401 => "The token is missing or wrong.",
                403 => "A foreign host or origin.",
                404 => "No such agent, handoff or open loop.",
                409 => "The agent is not in a state for this (not running, busy, disabled).",
                413 => "The body is larger than 64 KiB.",
                415 => "The body is not `application/json`.",
                500 => "phoenix.toml cannot be loaded, or the action failed.",
                503 => "The fleet's runtime (its server) cannot be observed.",
                502 => "The agent runs on a host that cannot be reached (or has no phoenix that answers).",
                504 => "The agent's host did not answer in time.",
                _ => "Error.",
            };
            (c.to_string(), ok(what, r("Error")))
        })
        .collect()
}

fn op(summary: &str, params: Vec<Value>, response: Value, error_codes: &[u16]) -> Value {
    let mut responses = serde_json::Map::new();
    responses.insert("200".into(), response);
    for (code, body) in errors(error_codes) {
        responses.insert(code, body);
    }
    json!({"summary": summary, "parameters": params, "responses": responses})
}

fn action(summary: &str, body: Value, code: &str, response: Value, error_codes: &[u16]) -> Value {
    let mut v = op(summary, vec![agent_param()], response, error_codes);
    if code != "200" {
        let responses = v["responses"].as_object_mut().expect("responses");
        let ok = responses.remove("200").expect("200");
        responses.insert(code.into(), ok);
    }
    v["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": body}}});
    v["security"] = json!([{"bearer": []}, {}]);
    v
}

/// An action that reads no body (a body sent is ignored).
fn no_body(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("requestBody");
    }
    v
}

/// A row of `phoenix stop|start --json`.
fn lifecycle_row() -> Value {
    json!({"type": "object", "properties": {
        "agent": {"type": "string"}, "ok": {"type": "boolean"}, "detail": {"type": "string"},
        "host": {"type": "string", "description": "When the agent runs on a host."}}})
}

pub fn document() -> Value {
    let reads = [400, 401, 403, 404, 409, 500, 502, 504];
    let acts = [400, 401, 403, 404, 409, 413, 415, 500, 502, 504];
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "phoenix",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The fleet's status, state, ledgers, handoffs, briefs, critical events and plan; \
                and actions: save or inject a handoff, inject text, restart, resolve an open loop, run a \
                watchdog pass; `/metrics` for Prometheus. In a fleet with `[[host]]`s, the per-agent routes of an agent \
                of a host are answered by that host over ssh, and every row and document carries `host`. Errors are `{error, hint}`. When the server has a token (`PHOENIX_TOKEN`), \
                every action needs `Authorization: Bearer <token>`; on a non-loopback address every API \
                call does.",
        },
        "paths": {
            "/api/status": {"get": op("Every agent: state, health, pid, uptime, last activity, open loops, crashes, context freshness, tokens and cost today.",
                vec![], ok("The fleet.", r("FleetStatus")), &[401, 403, 500, 503])},
            "/api/agents/{agent}": {"get": op("One agent's status, with its supervision summary (crash history, last stop).",
                vec![agent_param()], ok("The agent.", r("AgentStatus")), &[400, 401, 403, 404, 409, 500, 502, 503, 504])},
            "/api/agents/{agent}/state": {"get": op("The agent's state.json, open loops flagged stale.",
                vec![agent_param()], ok("state.json.", r("AgentState")), &reads)},
            "/api/agents/{agent}/ledger": {"get": op("The agent's ledger.",
                vec![agent_param()], ok("ledger.json.", r("Ledger")), &reads)},
            "/api/agents/{agent}/handoffs": {
                "get": op("The agent's handoffs, oldest first.", vec![agent_param()],
                    ok("Handoff summaries.", json!({"type": "object", "properties": {
                        "agent": {"type": "string"},
                        "handoffs": {"type": "array", "items": r("HandoffSummary")}}})), &reads),
                "post": action("Save a handoff now (indexed at once).",
                    json!({"type": "object", "additionalProperties": false, "properties": {
                        "reason": {"type": "string", "enum": crate::continuity::Trigger::NAMES, "default": "manual"},
                        "body": {"type": "string", "description": "`Current task: … / Completed: … / Next: … / Key decision: …` lines."}}}),
                    "201", ok("The saved handoff.", r("HandoffSummary")), &acts),
            },
            "/api/agents/{agent}/brief": {"get": op("The agent's brief.md.", vec![agent_param()],
                ok("The brief (empty when there is none).", json!({"type": "object", "properties": {
                    "agent": {"type": "string"}, "brief": {"type": "string"},
                    "updated_at": {"type": ["string", "null"], "format": "date-time"}}})), &reads)},
            "/api/agents/{agent}/inject": {"post": action(
                "Give the running agent a handoff (the latest by default) or text: pasted when it waits for input, delivery confirmed.",
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "handoff_id": {"type": "string"},
                    "text": {"type": "string", "description": "Plain text: no control characters but newlines and tabs."}}}),
                "200", ok("Delivered.", r("InjectReport")), &acts)},
            "/api/agents/{agent}/restart": {"post": action(
                "Restart the agent on purpose (clears .clean-exit and its crash quarantine): resume its session, or fresh.",
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "fresh": {"type": "boolean", "default": false}}}),
                "200", ok("Restarted.", r("RestartReport")), &acts)},
            "/api/agents/{agent}/stop": {"post": no_body(action(
                "Stop the agent as `phoenix stop` does: recorded first, it stays down through `apply` and the daemon until a start.",
                json!({"type": "object"}),
                "200", ok("Its row of `phoenix stop --json`.", lifecycle_row()), &acts))},
            "/api/agents/{agent}/start": {"post": no_body(action(
                "Start the agent again as `phoenix start` does (lifts a stop, a clean exit's hold and its crash counts).",
                json!({"type": "object"}),
                "200", ok("Its row of `phoenix start --json`.", lifecycle_row()), &acts))},
            "/api/agents/{agent}/pane": {"get": op("The last lines of the agent's pane as it shows them now (plain text).",
                vec![agent_param(), json!({"name": "lines", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 30}})],
                ok("The pane's text; `running: false` and no text when the agent has no pane.", json!({"type": "object", "properties": {
                    "agent": {"type": "string"}, "running": {"type": "boolean"},
                    "pane": {"type": ["string", "null"]}, "text": {"type": "string"}}})), &reads)},
            "/api/agents/{agent}/day": {"get": op("The agent's day: tokens and estimated cost per local hour since midnight, and today's crashes.",
                vec![agent_param()],
                ok("Hours with usage and crashes, oldest first.", json!({"type": "object", "properties": {
                    "agent": {"type": "string"}, "since": {"type": "string", "format": "date-time"},
                    "hours": {"type": "array", "items": {"type": "object", "properties": {
                        "hour": {"type": "string", "format": "date-time"}, "tokens": {"type": "integer"},
                        "cost_usd": {"type": "number"}, "unpriced": {"type": "boolean", "description": "Some tokens of the hour are of a model without a price."}}}},
                    "crashes": {"type": "array", "items": {"type": "object", "properties": {
                        "ts": {"type": "string", "format": "date-time"}, "reason": {"type": "string"},
                        "code": {"type": ["integer", "null"]}, "signal": {"type": ["integer", "null"]}}}}}})), &reads)},
            "/api/agents/{agent}/resolve": {"post": action(
                "Resolve an open loop: appended to resolved.jsonl and moved in state.json.",
                json!({"type": "object", "additionalProperties": false, "required": ["id", "reason"], "properties": {
                    "id": {"type": "string"}, "reason": {"type": "string"}}}),
                "200", ok("Resolved.", json!({"type": "object", "properties": {
                    "agent": {"type": "string"}, "resolved": {"type": "object"}}})), &acts)},
            "/api/agents/{agent}/messages": {
                "get": op("The agent's inbox: pending messages, then delivered ones, oldest first.",
                    vec![agent_param()], ok("The inbox.", json!({"type": "object", "properties": {
                        "agent": {"type": "string"},
                        "pending": {"type": "array", "items": r("Message")},
                        "delivered": {"type": "array", "items": r("Message")}}})), &reads),
                "post": action(
                    "Send the agent a message: kept in its inbox and given to it at its next turn boundary (after its current turn), or at once, interrupting it, when `urgent`. A new session gets pending messages in its startup context.",
                    json!({"type": "object", "additionalProperties": false, "required": ["text"], "properties": {
                        "text": {"type": "string", "maxLength": crate::state::inbox::MAX_TEXT_BYTES,
                                 "description": "At most 16 KiB (bytes, after control characters other than newlines and tabs are dropped)."},
                        "from": {"type": "string", "default": "operator", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"},
                        "urgent": {"type": "boolean", "default": false}}}),
                    "201", ok("In the inbox.", r("Message")), &acts),
            },
            "/api/handoffs": {"get": op("Every agent's handoffs (or one agent's).",
                vec![query("agent", "Only this agent's.", json!({"type": "string"}))],
                ok("Handoff summaries.", json!({"type": "object", "properties": {
                    "handoffs": {"type": "array", "items": r("HandoffSummary")}}})), &reads)},
            "/api/handoffs/{id}": {"get": op("One handoff, whole.",
                vec![json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$"}}),
                     query("agent", "Look only among this agent's handoffs.", json!({"type": "string"}))],
                ok("The handoff.", r("Handoff")), &reads)},
            "/api/search": {"get": op("Ranked full-text search over handoffs, briefs, ledger decisions and critical events.",
                vec![json!({"name": "q", "in": "query", "required": true, "schema": {"type": "string"}}),
                     query("agent", "Only this agent's documents.", json!({"type": "string"})),
                     query("kind", "Only this kind.", json!({"type": "string", "enum": ["handoff", "brief", "decision", "event"]})),
                     query("limit", "At most this many (1–100).", json!({"type": "integer", "default": 20}))],
                ok("Best first.", json!({"type": "object", "properties": {
                    "query": {"type": "string"}, "ms": {"type": "number"},
                    "results": {"type": "array", "items": r("Hit")}}})), &reads)},
            "/api/events": {"get": op("Critical events, oldest first; for one agent its session ends too.",
                vec![query("since", "An age (`30m`, `1h`, `7d`) or an RFC 3339 time.", json!({"type": "string"})),
                     query("agent", "Only this agent's.", json!({"type": "string"})),
                     query("event", "Only events whose name starts with this.", json!({"type": "string"})),
                     query("limit", "Only the last N (default 500).", json!({"type": "integer"}))],
                ok("Events.", json!({"type": "object", "properties": {
                    "events": {"type": "array", "items": r("Event")},
                    "skipped_lines": {"type": "integer"}}})), &reads)},
            "/api/plan": {"get": op("What `phoenix apply` would change now.", vec![],
                ok("The plan, as `phoenix plan --json` prints it, with `text` as people read it.", r("Plan")), &[401, 403, 500, 503])},
            "/api/watchdog": {"post": {
                "summary": "Run one watchdog pass now (checks every agent, heals the unhealthy ones).",
                "security": [{"bearer": []}, {}],
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {
                    "200": ok("The pass, as `phoenix watchdog --once --json` prints it.", json!({"type": "object", "properties": {
                        "ts": {"type": "string"}, "fleet": {"type": "string"},
                        "agents": {"type": "array", "items": {"type": "object"}}}})),
                    "401": ok("The token is missing or wrong.", r("Error")),
                    "403": ok("A foreign host or origin.", r("Error")),
                    "500": ok("phoenix.toml cannot be loaded, or the pass failed.", r("Error")),
                }}},
            "/api/stream": {"get": {
                "summary": "Server-sent events: `status` (the FleetStatus document) whenever it changes, `events` (the size of critical_events.jsonl) whenever it does.",
                "responses": {"200": {"description": "An event stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                              "401": ok("The token is missing or wrong.", r("Error")),
                              "503": ok("32 live streams are open already.", r("Error"))}}},
            "/metrics": {"get": {
                "summary": "The fleet for Prometheus: per agent (labels `agent`, `cli`) up, restarts by reason, crashes in the window, safe mode, failing health checks, watchdog findings, seconds since activity, open and stale loops, handoffs saved, Clinic recoveries, injections, session tokens, hook errors; fleet-wide reconcile passes and their durations. The names are listed in the README (Metrics).",
                "responses": {"200": {"description": "The Prometheus text format, version 0.0.4.",
                                      "content": {"text/plain; version=0.0.4": {"schema": {"type": "string"}}}},
                              "401": ok("The token is missing or wrong (off loopback every scrape needs it).", r("Error")),
                              "403": ok("A foreign host.", r("Error")),
                              "500": ok("phoenix.toml cannot be loaded.", r("Error")),
                              "503": ok("The fleet's runtime (its server) cannot be observed.", r("Error"))}}},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                "description": "The value of PHOENIX_TOKEN on the server."}},
            "schemas": {
                "Error": {"type": "object", "required": ["error", "hint"], "properties": {
                    "error": {"type": "string", "description": "What went wrong."},
                    "hint": {"type": "string", "description": "What to do about it."}}},
                "FleetStatus": {"type": "object", "properties": {
                    "format_version": {"type": "integer"},
                    "fleet": {"type": "string"}, "observed_at": {"type": "string", "format": "date-time"},
                    "observed_age_ms": {"type": "integer", "description": "How old the shared observation was when sent (at most about 1 s; a write through the API makes the next read observe anew)."},
                    "server_running": {"type": "boolean"}, "tmux_socket": {"type": "string"},
                    "daemon": {"type": "object", "properties": {
                        "running": {"type": "boolean"}, "pid": {"type": ["integer", "null"]}}},
                    "taken_down_at": {"type": ["string", "null"], "description": "When `phoenix down` took the fleet down (empty: its marker cannot be read); until the operator's `phoenix apply` nothing is revived. Null when the fleet is up."},
                    "agents": {"type": "array", "items": r("AgentStatus")}}},
                "AgentStatus": {"type": "object", "properties": {
                    "agent": {"type": "string"}, "declared": {"type": "boolean"}, "enabled": {"type": "boolean"},
                    "host": {"type": ["string", "null"], "description": "With `[[host]]`s: the host the agent runs on, null for this machine."},
                    "state": {"type": "string", "enum": ["declared", "unknown", "running", "starting", "cooldown", "safe-mode", "dead", "stopped", "moved", "disabled", "pruned-pending"]},
                    "health": {"type": "string", "enum": ["healthy", "warning", "recovering", "down", "stopped", "disabled", "unmanaged", "unknown"]},
                    "watchdog": {"type": "array", "items": {"type": "string"}, "description": "What the watchdog's last pass found."},
                    "pane": {"type": ["string", "null"]}, "pid": {"type": ["integer", "null"]},
                    "uptime_secs": {"type": ["integer", "null"]},
                    "last_activity": {"type": ["string", "null"], "format": "date-time"},
                    "cli": {"type": ["string", "null"]}, "status": {"type": ["string", "null"]},
                    "current_task": {"type": ["string", "null"]},
                    "open_loops": {"type": "integer"}, "stale_loops": {"type": "integer"},
                    "crashes": {"type": "integer", "description": "Within the agent's crash_window."},
                    "max_crashes": {"type": ["integer", "null"]},
                    "context": r("Context"),
                    "usage_today": {"oneOf": [r("UsageToday"), {"type": "null"}]},
                    "needs_input": {"oneOf": [r("NeedsInput"), {"type": "null"}]},
                    "supervision": {"type": "object", "description": "Only from /api/agents/{agent}."}}},
                "NeedsInput": {"type": "object", "description": "What a running agent waits for, when it waits for a person.", "properties": {
                    "reason": {"type": "string", "enum": ["permission_prompt", "idle_prompt", "elicitation_dialog", "elicitation_url_dialog", "worker_permission_prompt", "agent_needs_input", "approval_prompt", "idle_with_open_loops"]},
                    "message": {"type": "string", "description": "What the CLI or the screen said, one line."},
                    "since": {"type": "string", "format": "date-time"},
                    "source": {"type": "string", "enum": ["hook", "watchdog"]}}},
                "UsageToday": {"type": "object", "description": "Tokens and estimated cost today (the local day), from the agent's usage ledger.", "properties": {
                    "day": {"type": "string", "format": "date"},
                    "tokens": {"type": "object", "properties": {
                        "input": {"type": "integer"}, "output": {"type": "integer"},
                        "cache_write": {"type": "integer"}, "cache_read": {"type": "integer"},
                        "total": {"type": "integer"}}},
                    "cost_usd": {"type": ["number", "null"], "description": "Of the priced models; null when none is priced."},
                    "unpriced_models": {"type": "array", "items": {"type": "string"}, "description": "Counted, cost unknown (never taken as 0)."}}},
                "Context": {"type": "object", "description": "How fresh the agent's saved context is.", "properties": {
                    "handoffs": {"type": "integer"},
                    "last_handoff": {"type": ["string", "null"], "format": "date-time"},
                    "last_handoff_id": {"type": ["string", "null"]},
                    "last_brief": {"type": ["string", "null"], "format": "date-time"},
                    "has_ledger": {"type": "boolean"},
                    "tool_calls_since": {"type": "integer", "description": "Since the newer of the last handoff and brief."},
                    "tool_calls_capped": {"type": "boolean"},
                    "compactions": {"type": "integer"},
                    "score": {"type": "integer", "minimum": 0, "maximum": 100},
                    "level": {"type": "string", "enum": ["fresh", "aging", "stale", "none"]}}},
                "AgentState": {"type": "object", "description": "state.json (Phoenix Protocol fields; unknown fields kept).", "properties": {
                    "agent": {"type": "string"}, "last_active": {"type": ["string", "null"]},
                    "status": {"type": "string"}, "current_task": {"type": ["string", "null"]},
                    "session_id": {"type": ["string", "null"]},
                    "open_loops": {"type": "array", "items": {"type": "object", "properties": {
                        "id": {"type": "string"}, "text": {"type": "string"}, "added": {"type": "string"}, "stale": {"type": "boolean"}}}},
                    "resolved": {"type": "array", "items": {"type": "object"}},
                    "numbers": {"type": "object", "additionalProperties": {"type": "string"}}}},
                "Ledger": {"type": "object", "properties": {
                    "agent": {"type": "string"}, "current_task": {"type": ["string", "null"]},
                    "completed": {"type": "array", "items": {"type": "string"}},
                    "in_progress": {"type": "array", "items": {"type": "string"}},
                    "next": {"type": "array", "items": {"type": "string"}},
                    "blocked": {"type": "array", "items": {"type": "string"}},
                    "decisions": {"type": "array", "items": {"type": "object", "properties": {
                        "text": {"type": "string"}, "ts": {"type": ["string", "null"]}}}},
                    "uncertain": {"type": "array", "items": {"type": "string"}},
                    "files": {"type": "array", "items": {"type": "string"}},
                    "notes": {"type": "array", "items": {"type": "string"}},
                    "updated_at": {"type": ["string", "null"]}}},
                "HandoffSummary": {"type": "object", "properties": {
                    "id": {"type": "string"}, "agent": {"type": "string"}, "cli": {"type": "string"},
                    "created_at": {"type": "string", "format": "date-time"},
                    "trigger_reason": {"type": "string", "enum": crate::continuity::Trigger::NAMES},
                    "related": {"type": "array", "items": {"type": "string"}},
                    "summary": {"type": "string"}}},
                "Handoff": {"type": "object", "properties": {
                    "id": {"type": "string"}, "agent": {"type": "string"}, "cli": {"type": "string"},
                    "created_at": {"type": "string"}, "trigger": {"type": "string"},
                    "related": {"type": "array", "items": {"type": "string"}},
                    "summary": {"type": "string"}, "body": {"type": "string", "description": "Markdown."}}},
                "Hit": {"type": "object", "properties": {
                    "kind": {"type": "string"}, "agent": {"type": "string"}, "reference": {"type": "string"},
                    "ts": {"type": ["string", "null"]}, "title": {"type": "string"},
                    "snippet": {"type": "string", "description": "Matched words in [ ]."},
                    "rank": {"type": "number", "description": "bm25: lower is better."}}},
                "Event": {"type": "object", "properties": {
                    "ts": {"type": "string"}, "event": {"type": "string"}, "agent": {"type": "string"},
                    "reason": {"type": "string"}, "action_taken": {"type": ["string", "null"]},
                    "details": {"type": "object"}}},
                "InjectReport": {"type": "object", "properties": {
                    "agent": {"type": "string"}, "handoff_id": {"type": ["string", "null"]},
                    "chars": {"type": "integer"}, "pane": {"type": "string"}, "attempts": {"type": "integer"},
                    "confirmed_by": {"type": "string", "enum": ["prompt hook", "input line cleared", "screen changed"]},
                    "waited_ms": {"type": "integer"}}},
                "Message": {"type": "object", "properties": {
                    "id": {"type": "string"}, "from": {"type": "string"},
                    "sent_at": {"type": "string", "format": "date-time"}, "text": {"type": "string"},
                    "urgent": {"type": "boolean"},
                    "delivered_at": {"type": "string", "format": "date-time", "description": "Absent while pending."},
                    "confirmed_by": {"type": "string", "enum": ["prompt hook", "input line cleared", "screen changed", "session start", "typed, unconfirmed"]}}},
                "RestartReport": {"type": "object", "properties": {
                    "agent": {"type": "string"}, "fresh": {"type": "boolean"},
                    "via": {"type": "string", "enum": ["wrapper", "respawn", "start"]},
                    "pane": {"type": ["string", "null"]}, "pid": {"type": ["integer", "null"]}}},
                "Plan": {"type": "object", "properties": {
                    "format_version": {"type": "integer"},
                    "changes": {"type": "array", "items": {"type": "object"}},
                    "unmanaged": {"type": "array", "items": {"type": "object"}},
                    "summary": {"type": "object"}, "text": {"type": "string"}}},
            }
        }
    })
}
