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
        other => dir.record_op(&format!("hook_{}", other.replace('-', "_")), Value::Null)?,
    }
    Ok(())
}
