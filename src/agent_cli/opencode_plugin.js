// phoenix's opencode plugin (written by phoenix before each start; do not edit, it is
// rewritten). opencode runs no shell hooks of its own: this plugin reads the hooks phoenix
// installed in .opencode/phoenix-hooks.json and runs each handler's command on opencode's
// events with the event as JSON on stdin (in the shape of Claude Code's hook payloads). Values
// never go through a shell: the command line is phoenix's own, the payload is stdin.
// It also keeps the session's record (assistant messages with their tokens and cost, and the
// errors turns ended in) as JSON lines, the `transcript_path` it reports.
import { spawn, spawnSync } from "node:child_process";
import { appendFileSync, mkdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

const HOOKS_FILE = join(".opencode", "phoenix-hooks.json");
// Answers longer than this are cut (a hook answers a few kilobytes at most).
const MAX_ANSWER = 1 << 20;

function handlersOf(directory) {
  try {
    const hooks = JSON.parse(readFileSync(join(directory, HOOKS_FILE), "utf8")).hooks || {};
    const out = {};
    for (const [event, groups] of Object.entries(hooks)) {
      out[event] = (Array.isArray(groups) ? groups : [])
        .flatMap((g) => (Array.isArray(g.hooks) ? g.hooks : []))
        .filter((h) => h && h.type === "command" && typeof h.command === "string");
    }
    return out;
  } catch {
    return {};
  }
}

// Run one handler: `sh -c COMMAND` (the command phoenix wrote), the payload on stdin; resolves
// to its stdout (cut), never rejects, killed after its timeout (milliseconds).
function run(handler, payload) {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn("/bin/sh", ["-c", handler.command], { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      return resolve("");
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), handler.timeout || 10000);
    child.stdout.on("data", (d) => {
      if (out.length < MAX_ANSWER) out += d.toString();
    });
    child.on("error", () => {
      clearTimeout(timer);
      resolve("");
    });
    child.on("close", () => {
      clearTimeout(timer);
      resolve(out);
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}

// What the answers say to the model (`additionalContext`) or about the tool call (`reason`).
function said(answers, key) {
  return answers
    .map((a) => {
      try {
        const v = JSON.parse(a);
        return key === "reason" ? v.reason : v.hookSpecificOutput?.additionalContext;
      } catch {
        return undefined;
      }
    })
    .filter((t) => typeof t === "string" && t.trim() !== "")
    .join("\n\n");
}

export const PhoenixHooks = async ({ directory }) => {
  const handlers = handlersOf(directory);
  // No phoenix hooks here (removed, or another user's workdir): the plugin does nothing.
  if (Object.keys(handlers).length === 0) return {};
  const dataHome = process.env.XDG_DATA_HOME || join(homedir(), ".local", "share");
  const records = join(dataHome, "opencode", "phoenix");
  const created = new Set(); // sessions created by this process
  const started = new Set(); // sessions whose session-start ran in this process
  const texts = new Map(); // message id -> { part id -> text } of assistant messages
  const lastAssistant = new Map(); // session id -> message id
  const recordOf = (sessionID) => join(records, `${sessionID}.jsonl`);
  const record = (sessionID, line) => {
    try {
      mkdirSync(records, { recursive: true });
      appendFileSync(recordOf(sessionID), JSON.stringify(line) + "\n");
    } catch {}
  };
  const fire = async (event, sessionID, fields) => {
    const list = handlers[event] || [];
    if (list.length === 0) return [];
    const payload = {
      hook_event_name: event,
      session_id: sessionID,
      transcript_path: sessionID ? recordOf(sessionID) : undefined,
      cwd: directory,
      ...fields,
    };
    const answers = [];
    for (const h of list) answers.push(await run(h, payload));
    return answers;
  };
  const start = async (sessionID) => {
    if (started.has(sessionID)) return [];
    started.add(sessionID);
    return fire("session.start", sessionID, { source: created.has(sessionID) ? "startup" : "resume" });
  };
  const lastText = (sessionID) => {
    const id = lastAssistant.get(sessionID);
    const parts = id && texts.get(id);
    return parts ? Object.values(parts).join("\n") : undefined;
  };
  let ending = false;
  const end = () => {
    if (ending) return;
    ending = true;
    for (const sessionID of started) {
      for (const h of handlers["session.end"] || []) {
        const payload = { hook_event_name: "session.end", session_id: sessionID, transcript_path: recordOf(sessionID), cwd: directory, reason: "exit" };
        try {
          spawnSync("/bin/sh", ["-c", h.command], { input: JSON.stringify(payload), timeout: h.timeout || 5000, stdio: ["pipe", "ignore", "ignore"] });
        } catch {}
      }
    }
  };
  process.on("exit", end);
  for (const signal of ["SIGTERM", "SIGHUP", "SIGINT"]) {
    process.once(signal, () => {
      end();
      process.exit(128 + ({ SIGHUP: 1, SIGINT: 2, SIGTERM: 15 })[signal]);
    });
  }

  return {
    event: async ({ event }) => {
      const p = event.properties || {};
      switch (event.type) {
        case "session.created":
          if (p.info?.id && !p.info.parentID) created.add(p.info.id);
          break;
        case "message.part.updated": {
          const part = p.part;
          if (part?.type === "text" && texts.has(part.messageID) && !part.synthetic) {
            texts.get(part.messageID)[part.id] = part.text || "";
          }
          break;
        }
        case "message.updated": {
          const info = p.info;
          if (info?.role !== "assistant") break;
          if (!texts.has(info.id)) texts.set(info.id, {});
          lastAssistant.set(info.sessionID, info.id);
          if (info.time?.completed || info.error) record(info.sessionID, info);
          break;
        }
        case "session.error":
          if (p.sessionID) record(p.sessionID, { type: "session.error", error: p.error, time: Date.now() });
          break;
        case "session.idle":
          if (p.sessionID && started.has(p.sessionID)) {
            await fire("session.idle", p.sessionID, { last_assistant_message: lastText(p.sessionID) });
          }
          break;
      }
    },
    "chat.message": async (input, output) => {
      const sessionID = input.sessionID;
      const textPart = (output.parts || []).find((x) => x.type === "text" && !x.synthetic);
      const answers = [...(await start(sessionID))];
      answers.push(...(await fire("chat.message", sessionID, { prompt: textPart?.text ?? "" })));
      const context = said(answers, "context");
      if (context && textPart) textPart.text = `${textPart.text}\n\n${context}`;
    },
    "tool.execute.before": async (input, output) => {
      await start(input.sessionID);
      await fire("tool.execute.before", input.sessionID, {
        tool_name: input.tool,
        tool_use_id: input.callID,
        tool_input: output.args,
      });
    },
    "tool.execute.after": async (input, output) => {
      const answers = await fire("tool.execute.after", input.sessionID, {
        tool_name: input.tool,
        tool_use_id: input.callID,
        tool_input: input.args,
        tool_response: { metadata: output.metadata, output: output.output, title: output.title },
      });
      const reason = said(answers, "reason");
      if (reason && typeof output.output === "string") output.output = `${output.output}\n\n${reason}`;
    },
    "experimental.session.compacting": async (input, output) => {
      const answers = await fire("session.compacting", input.sessionID, { trigger: "auto" });
      const context = said(answers, "context");
      if (context && Array.isArray(output.context)) output.context.push(context);
    },
  };
};
