//! `phoenix hook <event>`: called by the agent CLIs on every session start and tool call.
//! Whatever happens inside, a hook exits 0 and never breaks the agent.

use std::io::Read;
use std::path::Path;

use serde_json::{Value, json};

use crate::spec::{self, LoadOptions};
use crate::state::{self, FleetDir};

/// Largest payload read from stdin; the rest is ignored.
const MAX_PAYLOAD: u64 = 1 << 20;

pub fn run(config: &Path, event: &str, agent: &str, payload_arg: Option<String>) -> i32 {
    let payload = payload_arg.unwrap_or_else(|| {
        let mut buf = String::new();
        let _ = std::io::stdin().take(MAX_PAYLOAD).read_to_string(&mut buf);
        buf
    });
    if let Err(e) = handle(config, event, agent, &payload) {
        eprintln!("phoenix hook {event}: {e:#}");
    }
    0
}

fn handle(config: &Path, event: &str, agent: &str, payload: &str) -> anyhow::Result<()> {
    let spec = spec::load_with(
        config,
        LoadOptions {
            check_filesystem: false,
        },
    )?;
    if spec.agent(agent).is_none() {
        anyhow::bail!("agent `{agent}` is not declared in {}", spec.file.display());
    }
    let dir = FleetDir::new(&spec.fleet.state_dir).agent(agent);
    dir.ensure()?;
    let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    match event {
        "heartbeat" | "tool-error" => {
            let tool = payload
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or("");
            state::append_jsonl(
                &dir.file("tool_use.jsonl"),
                &json!({"ts": state::now_rfc3339(), "tool": tool, "ok": event == "heartbeat"}),
            )?;
        }
        "session-start" => {
            record_session(&dir, &payload)?;
            dir.record_op(
                "hook_session_start",
                json!({"session_id": payload.get("session_id"), "source": payload.get("source")}),
            )?;
        }
        other => dir.record_op(&format!("hook_{}", other.replace('-', "_")), Value::Null)?,
    }
    Ok(())
}

/// Minimal session bookkeeping so the wrapper can resume: the id goes to a plain `session_id`
/// file and into `state.json` (`session_id`, `session_cwd`, `session_source`), both written
/// atomically. The state.json issue replaces this with its locked store.
fn record_session(dir: &state::AgentDir, payload: &Value) -> anyhow::Result<()> {
    let Some(id) = payload.get("session_id").and_then(Value::as_str) else {
        return Ok(());
    };
    if id.is_empty() {
        return Ok(());
    }
    state::atomic_write(&dir.file("session_id"), id.as_bytes())?;
    let path = dir.file("state.json");
    let mut doc: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"agent": dir.name}));
    doc["session_id"] = json!(id);
    doc["session_cwd"] = payload.get("cwd").cloned().unwrap_or(Value::Null);
    doc["session_source"] = payload.get("source").cloned().unwrap_or(Value::Null);
    doc["last_active"] = json!(state::now_rfc3339());
    state::atomic_write(&path, &serde_json::to_vec_pretty(&doc)?)?;
    Ok(())
}
