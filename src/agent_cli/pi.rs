//! pi (badlogic/pi-mono, npm `@mariozechner/pi-coding-agent`): no hook commands, but
//! TypeScript extensions (`<workdir>/.pi/extensions/*.ts`, loaded at every start, no trust
//! asked) that get its lifecycle events. phoenix keeps its hooks for a pi agent in
//! `<workdir>/.pi/phoenix-hooks.json` (pi never reads it; the same JSON every hooked CLI gets,
//! merged and pruned the same way) and, before each start, writes the extension
//! `.pi/extensions/phoenix.ts` from the agent's entries there: each event runs
//! `phoenix hook …` as an argv array (never a shell) with a payload in Claude Code's words on
//! stdin, and gives the answer back to pi. Resumed with `--session <id>`.
//!
//! Notes on its versions and quirks (0.73.1, read from its `dist/` and `docs/`):
//! - Events used: `session_start` (reason `startup` also for `--session`: the extension says
//!   `resume` when the session already holds messages), `before_agent_start` (the prompt; the
//!   only place an extension adds a message to the model's context, so the session-start
//!   context waits there too), `tool_call`, `tool_result`, `session_before_compact`,
//!   `agent_end` (the end of a prompt's turns), `session_shutdown` (reason `quit` for Ctrl+C,
//!   Ctrl+D, SIGHUP and SIGTERM alike: never taken for a user's choice to leave).
//! - The session file (`~/.pi/agent/sessions/--<cwd>--/<ts>_<uuid>.jsonl`, or under
//!   `PI_CODING_AGENT_DIR`) is written only once the first assistant message is there.
//! - A failed model call is an assistant message with `stopReason: "error"` and
//!   `errorMessage`, then `agent_end` as for any turn; the stop hook reads it from the session
//!   file. pi retries overloaded, rate-limited and 5xx answers itself (`retry` settings), and a
//!   context overflow it compacts and retries once itself after `agent_end`: such a turn is
//!   pi's to heal, only one that still fails after pi's compaction is a failed turn.
//! - The bash tool fails a non-zero exit with `Command exited with code N` in its result.
//! - Every assistant message carries `usage` {input, output, cacheRead, cacheWrite, cost}.

use std::path::Path;

use serde_json::Value;

use super::usage::{self, Record, Tokens};
use super::version::{Proven, Version};
use super::{AgentCli, HookEntry, TrustRequest, Trusted, TurnError, entry as e, write_planned};
use crate::state::bounded::{self, Links};

/// pi's adapter.
pub struct Pi;

/// The extension phoenix writes, relative to the workdir.
pub const EXTENSION_FILE: &str = ".pi/extensions/phoenix.ts";

/// How much of a session file's end is read for the last turn.
const TAIL: u64 = 1 << 20;

/// The versions phoenix was proven with (its real-CLI suite passed against it). `events`:
/// pi's own extension events, which phoenix's generated extension maps; the pi events phoenix uses.
pub const PROVEN: &[Proven] = &[Proven {
    version: Version(0, 73, 1),
    events: &[
        "session_start",
        "before_agent_start",
        "tool_call",
        "tool_result",
        "session_before_compact",
        "agent_end",
        "session_shutdown",
    ],
    matcher_values: &[],
    changes: "the first version proven",
}];

impl AgentCli for Pi {
    /// It has no sandbox of its own to coordinate.
    fn own_sandbox(&self, cmd: super::own_sandbox::Command<'_>) -> super::own_sandbox::OwnSandbox {
        super::own_sandbox::none_of_its_own(
            self,
            "pi 0.73.1: a sandbox is only an example extension",
            cmd.argv,
        )
    }

    fn display_name(&self) -> &'static str {
        "pi"
    }

    fn proven(&self) -> &'static [Proven] {
        PROVEN
    }

    fn program_names(&self) -> &'static [&'static str] {
        &["pi"]
    }

    fn npm_package(&self) -> Option<&'static str> {
        Some("@mariozechner/pi-coding-agent")
    }

    fn version_in(&self, output: &str) -> Option<Version> {
        Version::find_in(output)
    }

    fn resume_argv(&self, mut base: Vec<String>, id: &str) -> Option<Vec<String>> {
        base.extend(["--session".to_string(), id.to_string()]);
        Some(base)
    }

    fn hook_file(&self) -> Option<&'static str> {
        Some(".pi/phoenix-hooks.json")
    }

    fn sandbox_home(
        &self,
        home: &std::path::Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
        let _ = env;
        (vec![home.join(".pi")], vec![])
    }

    fn sandbox_project_settings(&self) -> &'static [&'static str] {
        &[".pi/extensions"]
    }

    /// The hook file, and the extension written from it.
    fn own_files(&self) -> Vec<&'static str> {
        vec![".pi/phoenix-hooks.json", EXTENSION_FILE]
    }

    /// Event names are pi's; timeouts in milliseconds (the extension's unit).
    fn hook_entries(&self) -> Vec<HookEntry> {
        vec![
            e("session_start", None, "session-start", 10_000, ""),
            e("before_agent_start", None, "prompt", 5_000, ""),
            e("tool_call", None, "pre-tool", 5_000, ""),
            e("tool_result", None, "heartbeat", 5_000, ""),
            e("session_before_compact", None, "pre-compact", 30_000, ""),
            e("agent_end", None, "stop", 5_000, ""),
            e("session_shutdown", None, "session-end", 5_000, ""),
        ]
    }

    /// pi runs no hook commands: the extension that runs them is written before each start.
    fn needs_trust(&self) -> bool {
        true
    }

    fn trust(&self, r: &TrustRequest<'_>) -> Result<Option<Trusted>, String> {
        let file = r.workdir.join(EXTENSION_FILE);
        let existing = super::read_optional(&file)?;
        let text = extension(r.hooks_text, &r.agent.name)?;
        if existing.as_deref() == Some(text.as_str()) {
            return Ok(None);
        }
        write_planned(
            &file,
            Some((text, vec![format!("{} (pi extension)", r.agent.name)])),
        )
    }

    fn trust_note(&self) -> Option<&'static str> {
        Some(
            "pi runs extensions, not hook commands: before each start the wrapper writes\n\
             .pi/extensions/phoenix.ts, which runs these commands (argv, no shell) on pi's events.",
        )
    }

    /// The extension's command line says `--cli pi`; its payloads also name pi's event in
    /// `pi_event`, which no other CLI sends.
    fn claims_payload(&self, _event: &str, has_field: &dyn Fn(&str) -> bool) -> bool {
        has_field("pi_event")
    }

    fn last_turn_error(&self, transcript: &Path) -> Option<TurnError> {
        let tail = bounded::read_tail(transcript, TAIL, Links::Follow).ok()?;
        last_turn_error_in(&tail.lines_text())
    }

    /// pi fires no `session_start` after a compaction: the context phoenix gave at session
    /// start went into the summary, and is given again with the next prompt.
    fn compaction_skips_session_start(&self) -> bool {
        true
    }

    /// Its turn-end payload carries the model's text (`last_assistant_message`).
    fn markers_at_turn_end(&self) -> bool {
        true
    }

    fn last_turn_text(&self, transcript: &Path, needle: &str) -> Option<String> {
        let tail = bounded::read_tail(transcript, TAIL, Links::Follow).ok()?;
        let text = tail.lines_text();
        text.contains(needle)
            .then(|| last_turn_text_in(&text))
            .flatten()
    }

    /// `{"type":"message","id","timestamp","message":{"role":"assistant","model",
    /// "usage":{input, output, cacheRead, cacheWrite, totalTokens, cost}}}`: one line per
    /// response, `input` without the cached part.
    fn usage_record(&self, record: &Value) -> Option<Record> {
        if record.get("type").and_then(Value::as_str) != Some("message")
            || record.pointer("/message/role").and_then(Value::as_str) != Some("assistant")
        {
            return None;
        }
        let u = record.pointer("/message/usage").filter(|u| u.is_object())?;
        let tokens = Tokens {
            input: usage::count(u, "input"),
            output: usage::count(u, "output"),
            cache_write: usage::count(u, "cacheWrite"),
            cache_read: usage::count(u, "cacheRead"),
        };
        (!tokens.is_zero()).then(|| Record::Response {
            id: usage::text(record, "/id"),
            model: usage::text(record, "/message/model"),
            at: usage::text(record, "/timestamp"),
            tokens,
        })
    }
}

/// The message entries of a session file's text, oldest first.
fn entries(text: &str) -> impl DoubleEndedIterator<Item = Value> + '_ {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
}

fn role(entry: &Value) -> Option<&str> {
    (entry.get("type").and_then(Value::as_str) == Some("message"))
        .then(|| entry.pointer("/message/role").and_then(Value::as_str))
        .flatten()
}

/// What pi's own `isContextOverflow` (pi-ai 0.73, `utils/overflow.js`) takes for a prompt too
/// long for the model, by the fixed parts of its patterns; a rate limit never is one.
fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    const OVERFLOW: [&str; 17] = [
        "prompt is too long",
        "request_too_large",
        "input is too long for requested model",
        "exceeds the context window",
        "reduce the length of the messages",
        "maximum context length is",
        "maximum prompt length is",
        "exceeds the available context size",
        "greater than the context length",
        "context window exceeds limit",
        "exceeded model token limit",
        "model_context_window_exceeded",
        "context_length_exceeded",
        "context length exceeded",
        "too many tokens",
        "token limit exceeded",
        "exceeded max context length",
    ];
    let rate_limited = m.contains("rate limit") || m.contains("too many requests");
    !rate_limited && OVERFLOW.iter().any(|p| m.contains(p))
}

/// What pi's `_isRetryableError` (0.73) retries by itself (`retry.maxRetries`, 3 by default):
/// the words of its pattern, compared without spaces and punctuation as its `.?` allows.
fn is_retryable(message: &str) -> bool {
    const RETRIED: [&str; 28] = [
        "overloaded",
        "providerreturnederror",
        "ratelimit",
        "toomanyrequests",
        "429",
        "500",
        "502",
        "503",
        "504",
        "serviceunavailable",
        "servererror",
        "internalerror",
        "networkerror",
        "connectionerror",
        "connectionrefused",
        "connectionlost",
        "websocketclosed",
        "websocketerror",
        "othersideclosed",
        "fetchfailed",
        "upstreamconnect",
        "resetbeforeheaders",
        "sockethangup",
        "endedwithout",
        "http2requestdidnotgetaresponse",
        "timedout",
        "timeout",
        "terminated",
    ];
    let squeezed: String = message
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    !is_context_overflow(message)
        && (RETRIED.iter().any(|p| squeezed.contains(p)) || squeezed.contains("retrydelay"))
}

/// Attempts pi makes at a retryable error before it gives up (`retry.maxRetries` default).
const PI_RETRIES: usize = 3;

/// The error the last turn ended in: the last assistant message since the last prompt, when it
/// has `stopReason: "error"` and pi will not heal it itself. pi fires `agent_end` before it
/// decides: a context overflow counts only once pi compacted for it (a `compaction` entry since
/// the prompt), a retryable error only after pi's last retry (more failures in a row than it
/// retries: each failed attempt stays in the session file).
pub fn last_turn_error_in(text: &str) -> Option<TurnError> {
    let mut compacted = false;
    let mut last: Option<Value> = None;
    let mut failures_in_a_row = 0;
    for entry in entries(text) {
        match (entry.get("type").and_then(Value::as_str), role(&entry)) {
            (_, Some("user")) => {
                compacted = false;
                last = None;
                failures_in_a_row = 0;
            }
            (_, Some("assistant")) => {
                let failed =
                    entry.pointer("/message/stopReason").and_then(Value::as_str) == Some("error");
                failures_in_a_row = if failed { failures_in_a_row + 1 } else { 0 };
                last = Some(entry);
            }
            (Some("compaction"), _) => compacted = true,
            _ => {}
        }
    }
    let last = last?;
    let message = &last["message"];
    if message.get("stopReason").and_then(Value::as_str) != Some("error") {
        return None;
    }
    let text = message
        .get("errorMessage")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    let overflow = is_context_overflow(&text);
    if (overflow && !compacted) || (is_retryable(&text) && failures_in_a_row <= PI_RETRIES) {
        return None;
    }
    Some(TurnError {
        kind: if overflow {
            "context_length_exceeded".into()
        } else {
            "api_error".into()
        },
        message: text,
        ts: last
            .get("timestamp")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// The model's text since the last prompt, in order.
pub fn last_turn_text_in(text: &str) -> Option<String> {
    let mut said: Vec<String> = Vec::new();
    for entry in entries(text) {
        match role(&entry) {
            Some("user") => said.clear(),
            Some("assistant") => said.extend(
                entry
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .map(str::to_string),
            ),
            _ => {}
        }
    }
    (!said.is_empty()).then(|| said.join("\n"))
}

/// The extension's text for `agent`: phoenix's handlers for it in the hook file, each as the
/// argv its command line splits into, by pi event.
pub fn extension(hooks_text: &str, agent: &str) -> Result<String, String> {
    let table = super::handler_argv_table(hooks_text, agent, ".pi/phoenix-hooks.json")?;
    Ok(EXTENSION.replace("__PHOENIX_HOOKS__", &table))
}

/// The extension, with `__PHOENIX_HOOKS__` for the table of handlers.
const EXTENSION: &str = r#"// Written by phoenix before each start of this agent, from .pi/phoenix-hooks.json: edits are
// overwritten. It runs `phoenix hook …` on pi's events (an argv, never a shell) with the event as
// JSON on stdin, and gives phoenix's answer back to pi. A hook that fails or times out is ignored.
import { spawn } from "node:child_process";

const HOOKS: Record<string, { argv: string[]; timeout: number }[]> = __PHOENIX_HOOKS__;
const MAX_REPLY = 1 << 20;

function runOne(h: { argv: string[]; timeout: number }, input: string): Promise<any> {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn(h.argv[0], h.argv.slice(1), { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      return resolve(null);
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), h.timeout);
    child.on("error", () => { clearTimeout(timer); resolve(null); });
    child.stdout.on("data", (d) => { if (out.length < MAX_REPLY) out += d.toString(); });
    child.on("close", () => {
      clearTimeout(timer);
      try { resolve(out.trim() ? JSON.parse(out) : null); } catch { resolve(null); }
    });
    child.stdin.on("error", () => {});
    child.stdin.end(input);
  });
}

async function run(event: string, ctx: any, fields: Record<string, any>): Promise<any[]> {
  const sm = ctx.sessionManager;
  const payload = {
    session_id: sm.getSessionId(),
    transcript_path: sm.getSessionFile() ?? null,
    cwd: ctx.cwd,
    pi_event: event,
    ...fields,
  };
  const input = JSON.stringify(payload);
  const replies = [];
  for (const h of HOOKS[event] ?? []) replies.push(await runOne(h, input));
  return replies.filter((r) => r && typeof r === "object");
}

const contexts = (replies: any[]): string[] =>
  replies.map((r) => r.hookSpecificOutput?.additionalContext).filter((t) => typeof t === "string" && t);

const textOf = (content: any): string =>
  Array.isArray(content) ? content.filter((c) => c?.type === "text").map((c) => c.text).join("\n") : String(content ?? "");

export default function (pi: any) {
  // The session-start context reaches the model with the next prompt: pi lets an extension
  // add a message only there.
  let held: string[] = [];

  pi.on("session_start", async (event: any, ctx: any) => {
    const resumed = ctx.sessionManager.getEntries().some((e: any) => e.type === "message");
    const source = { startup: resumed ? "resume" : "startup", new: "clear", reload: "resume" }[event.reason] ?? event.reason;
    held = contexts(await run("session_start", ctx, { hook_event_name: "SessionStart", source }));
  });

  pi.on("before_agent_start", async (event: any, ctx: any) => {
    const said = contexts(await run("before_agent_start", ctx, { hook_event_name: "UserPromptSubmit", prompt: event.prompt }));
    const text = [...held.splice(0), ...said].join("\n\n");
    if (text) return { message: { customType: "phoenix", content: text, display: false } };
  });

  pi.on("tool_call", async (event: any, ctx: any) => {
    await run("tool_call", ctx, {
      hook_event_name: "PreToolUse", tool_name: event.toolName, tool_input: event.input, tool_use_id: event.toolCallId,
    });
  });

  pi.on("tool_result", async (event: any, ctx: any) => {
    const output = textOf(event.content);
    const response: Record<string, any> = { output: output.slice(-4096), is_error: !!event.isError };
    if (event.isError) {
      const code = /Command exited with code (-?\d+)\s*$/.exec(output);
      if (code && event.toolName === "bash") response.exit_code = Number(code[1]);
      else response.error = { message: output.split("\n").find((l) => l.trim()) ?? "tool failed" };
    }
    const replies = await run("tool_result", ctx, {
      hook_event_name: "PostToolUse", tool_name: event.toolName, tool_input: event.input,
      tool_use_id: event.toolCallId, tool_response: response,
    });
    const feedback = replies.filter((r) => r.decision === "block" && r.reason).map((r) => String(r.reason));
    if (feedback.length) return { content: [...(event.content ?? []), { type: "text", text: feedback.join("\n") }] };
  });

  pi.on("session_before_compact", async (event: any, ctx: any) => {
    await run("session_before_compact", ctx, {
      hook_event_name: "PreCompact", trigger: event.customInstructions === undefined ? "auto" : "manual",
      custom_instructions: event.customInstructions ?? null,
    });
  });

  pi.on("agent_end", async (event: any, ctx: any) => {
    const said = (event.messages ?? []).filter((m: any) => m.role === "assistant").map((m: any) => textOf(m.content)).filter((t: string) => t);
    await run("agent_end", ctx, { hook_event_name: "Stop", last_assistant_message: said.join("\n") });
  });

  pi.on("session_shutdown", async (event: any, ctx: any) => {
    await run("session_shutdown", ctx, { hook_event_name: "SessionEnd", reason: event.reason });
  });
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failed_call_is_a_failed_turn_but_an_overflow_is_pi_s_until_it_compacted() {
        let user = r#"{"type":"message","id":"u1","message":{"role":"user","content":"go"}}"#;
        let err = |m: &str| {
            format!(
                r#"{{"type":"message","id":"a1","timestamp":"2026-12-02T00:00:00Z","message":{{"role":"assistant","content":[],"stopReason":"error","errorMessage":"{m}"}}}}"#
            )
        };
        let ok = r#"{"type":"message","id":"a2","message":{"role":"assistant","content":[{"type":"text","text":"Done."}],"stopReason":"stop"}}"#;
        let compaction = r#"{"type":"compaction","id":"c1","summary":"s"}"#;
        let failed =
            last_turn_error_in(&format!("{user}\n{}\n", err("401 invalid x-api-key"))).unwrap();
        assert_eq!(failed.kind, "api_error");
        assert_eq!(failed.message, "401 invalid x-api-key");
        let overflow = err("400 prompt is too long: 210000 tokens > 200000 maximum");
        assert_eq!(last_turn_error_in(&format!("{user}\n{overflow}\n")), None);
        let again =
            last_turn_error_in(&format!("{user}\n{overflow}\n{compaction}\n{overflow}\n")).unwrap();
        assert_eq!(again.kind, "context_length_exceeded");
        assert_eq!(
            last_turn_error_in(&format!("{user}\n{overflow}\n{user}\n{ok}\n")),
            None
        );
        // An overload pi retries three times: only the fourth failure in a row is the turn's.
        let overloaded = err("529 overloaded_error: Overloaded");
        let tries = |n: usize| format!("{user}\n{ok}\n{}", format!("{overloaded}\n").repeat(n));
        for n in 1..=3 {
            assert_eq!(last_turn_error_in(&tries(n)), None, "{n}");
        }
        assert_eq!(last_turn_error_in(&tries(4)).unwrap().kind, "api_error");
        assert_eq!(
            last_turn_text_in(&format!("{user}\n{ok}\n")).as_deref(),
            Some("Done.")
        );
    }

    #[test]
    fn usage_of_an_assistant_message() {
        let line = r#"{"type":"message","id":"b2c3d4e5","parentId":"a1","timestamp":"2026-12-02T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Hi!"}],"api":"anthropic-messages","provider":"scripted","model":"claude-scripted","usage":{"input":10,"output":5,"cacheRead":3,"cacheWrite":2,"totalTokens":20,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop"}}"#;
        let record = usage::record_in(&serde_json::from_str(line).unwrap());
        assert!(usage::may_hold_usage(line));
        assert_eq!(
            record,
            Some(Record::Response {
                id: Some("b2c3d4e5".into()),
                model: Some("claude-scripted".into()),
                at: Some("2026-12-02T00:00:02.000Z".into()),
                tokens: Tokens {
                    input: 10,
                    output: 5,
                    cache_write: 2,
                    cache_read: 3
                },
            })
        );
    }

    #[test]
    fn the_extension_runs_only_this_agent_s_handlers_as_argv() {
        let hooks = json!({"hooks": {
            "agent_end": [
                {"hooks": [{"type": "command", "command": "'/opt/my dir/phoenix' --config /c.toml hook stop --agent a1 --cli pi", "timeout": 5000}]},
                {"hooks": [{"type": "command", "command": "/bin/phoenix hook stop --agent other --cli pi", "timeout": 5000}]},
                {"hooks": [{"type": "command", "command": "notify-send done"}]},
            ]
        }});
        let text = extension(&hooks.to_string(), "a1").unwrap();
        assert!(text.contains(r#""/opt/my dir/phoenix","#), "{text}");
        assert!(
            !text.contains("other") && !text.contains("notify-send"),
            "{text}"
        );
        assert!(!text.contains("__PHOENIX_HOOKS__"));
    }
}
