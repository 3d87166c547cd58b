// phoenix dashboard: plain JavaScript, no build step. Every value from the server is put into
// the page as text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);

const state = {
  fleet: null,          // the last /api/status document
  selected: null,       // selected agent name
  tab: "overview",
  handoff: null,        // id of the handoff shown
  pids: new Map(),      // agent -> pid, to flash rows that changed
  rendered: false,
};

// ---- helpers ----

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function token() { return sessionStorage.getItem("phoenix-token") || ""; }

function headers(extra) {
  const h = Object.assign({ "Accept": "application/json" }, extra || {});
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : "HTTP " + status);
    this.status = status;
    this.hint = body && body.hint ? body.hint : "";
  }
}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  const init = { method: opts.method || "GET", headers: headers() };
  if (opts.body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  }
  const res = await fetch(path, init);
  let body = null;
  try { body = await res.json(); } catch (_) { body = null; }
  if (!res.ok) {
    const err = new ApiError(res.status, body);
    if (res.status === 401) askToken(err.message);
    throw err;
  }
  return body;
}

function ago(iso) {
  if (!iso) return "–";
  const secs = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return human(secs) + " ago";
}

function human(secs) {
  if (secs === null || secs === undefined) return "–";
  if (secs < 60) return secs + "s";
  if (secs < 3600) return Math.floor(secs / 60) + "m";
  if (secs < 86400) return Math.floor(secs / 3600) + "h" + Math.floor((secs % 3600) / 60) + "m";
  return Math.floor(secs / 86400) + "d" + Math.floor((secs % 86400) / 3600) + "h";
}

function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function toast(message, hint, isError) {
  const t = el("div", { class: "toast" + (isError ? " error" : "") },
    el("div", { text: message }), hint ? el("div", { class: "hint", text: hint }) : null);
  $("#toasts").append(t);
  setTimeout(() => t.remove(), isError ? 9000 : 5000);
}

function fail(err) {
  toast(err.message || String(err), err.hint || "", true);
}

// ---- dialogs ----

function confirmAction(title, text, extra) {
  const dialog = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").textContent = text;
  const box = $("#confirm-extra");
  box.replaceChildren(...(extra || []));
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    const first = box.querySelector("input, textarea");
    (first || $("#confirm-ok")).focus();
  });
}

function askToken(why) {
  const dialog = $("#token-dialog");
  if (dialog.open) return;
  $("#token-why").textContent = why
    ? why + ": enter the server's PHOENIX_TOKEN. It is kept in this tab only."
    : "Actions need the server's PHOENIX_TOKEN. It is kept in this tab only.";
  $("#token-input").value = token();
  dialog.returnValue = "";
  dialog.showModal();
}

$("#token-dialog").addEventListener("close", () => {
  if ($("#token-dialog").returnValue !== "ok") return;
  const value = $("#token-input").value.trim();
  if (value) sessionStorage.setItem("phoenix-token", value);
  else sessionStorage.removeItem("phoenix-token");
  startLive();
  refreshAll();
});
$("#token-button").addEventListener("click", () => askToken(""));

// ---- fleet table ----

const HEALTH_TITLE = {
  healthy: "running, nothing found by the watchdog",
  warning: "running, but the watchdog's last pass found something",
  recovering: "being restarted",
  down: "not running",
  stopped: "stopped on purpose (clean exit)",
  disabled: "disabled in phoenix.toml",
  unmanaged: "running but no longer declared",
};

function meter(ctx) {
  const c = ctx || { score: 0, level: "none" };
  const parts = [];
  if (c.last_handoff) parts.push("last handoff " + ago(c.last_handoff));
  if (c.last_brief) parts.push("brief " + ago(c.last_brief));
  if (!c.last_handoff && !c.last_brief) parts.push("nothing saved yet");
  parts.push(c.tool_calls_since + (c.tool_calls_capped ? "+" : "") + " tool calls since");
  parts.push(c.compactions + " compaction(s)");
  parts.push(c.handoffs + " handoff(s)" + (c.has_ledger ? ", ledger" : ", no ledger"));
  const fill = el("div", { class: "fill" });
  fill.style.width = Math.max(3, c.score) + "%";
  const label = c.level === "none" ? "no context" : `${c.level} · ${c.score}`;
  return el("span", { class: "meter " + c.level, title: parts.join("\n") },
    el("span", { class: "bar" }, fill), el("span", { class: "label", text: label }));
}

function actionButton(label, action, agent, title) {
  return el("button", {
    type: "button", class: "small", text: label, title,
    dataset: { action, agent },
    onclick: (e) => { e.stopPropagation(); act(action, agent, e.currentTarget); },
  });
}

// Rows are kept and updated in place (keyed by agent), so that a click or a focused button
// survives the live updates.
const rows = new Map();

function fleetRow(agent) {
  let row = rows.get(agent);
  if (row) return row;
  const cells = {};
  const tr = el("tr", { dataset: { agent }, onclick: () => selectAgent(agent) });
  for (const [name, cls] of [["agent", ""], ["health", "health"], ["pid", "num pid"], ["uptime", "num uptime"],
    ["activity", "activity"], ["loops", "num loops"], ["crashes", "num crashes"], ["messages", "num messages"], ["context", "context"], ["today", "num today"],
    ["needs", "needs-input"], ["actions", "actions-cell"]]) {
    cells[name] = el("td", { class: cls || null });
    tr.append(cells[name]);
  }
  row = { tr, cells, declared: null };
  rows.set(agent, row);
  return row;
}

// The host an agent runs on, when the fleet has hosts: `local` for this machine's, a host's
// name otherwise (marked when that host did not answer: its row is not current).
function hostLabel(a, doc) {
  if (!doc.hosts) return "";
  const host = a.host || null;
  const down = host && (doc.hosts.find((h) => h.host === host) || {}).error;
  return el("span", {
    class: "host" + (host ? "" : " local") + (down ? " unreachable" : ""),
    dataset: { host: host || "local" },
    text: host || "local",
    title: down || (host ? "runs on host " + host : "runs on this machine"),
  });
}

// Today's usage: tokens ("12.3k"), the estimated cost ("$0.42", "unpriced") and a title with
// the kinds of tokens.
function today(u) {
  if (!u) return ["–", "", ""];
  const t = u.tokens || {};
  const total = t.total || 0;
  const short = total >= 1e6 ? (total / 1e6).toFixed(1) + "M" : total >= 1e3 ? (total / 1e3).toFixed(1) + "k" : String(total);
  const priced = u.cost_usd === null || u.cost_usd === undefined ? "" : "$" + Number(u.cost_usd).toFixed(2);
  const unpriced = (u.unpriced_models || []).length ? "unpriced" : "";
  const cost = [priced, unpriced].filter(Boolean).join(" + ");
  return [total ? short : "–", total ? cost : "", `${u.day}: ${total} tokens` +
    (unpriced ? ` (unpriced: ${u.unpriced_models.join(", ")})` : "")];
}

function setText(node, text, title) {
  const value = String(text);
  if (node.textContent !== value) node.textContent = value;
  if (title !== undefined) node.title = title;
}

function renderFleet(doc) {
  state.fleet = doc;
  $("#fleet-name").textContent = "· fleet " + doc.fleet;
  const agents = doc.agents || [];
  const counts = {};
  for (const a of agents) counts[a.health] = (counts[a.health] || 0) + 1;
  const waiting = agents.filter((a) => a.needs_input).length;
  $("#fleet-summary").textContent = `${agents.length} agent${agents.length === 1 ? "" : "s"}` +
    Object.entries(counts).map(([k, v]) => ` · ${v} ${k}`).join("") +
    (waiting ? ` · ${waiting} need${waiting === 1 ? "s" : ""} a human` : "") +
    (doc.server_running ? "" : " · tmux server not running") +
    (doc.hosts || []).filter((h) => h.error).map((h) => " · " + h.error).join("");
  const body = $("#fleet-body");
  const seen = new Set();
  for (const a of agents) {
    seen.add(a.agent);
    const row = fleetRow(a.agent);
    const { tr, cells } = row;
    const previous = state.pids.get(a.agent);
    state.pids.set(a.agent, a.pid);
    Object.assign(tr.dataset, { state: a.state, health: a.health });
    tr.classList.toggle("selected", a.agent === state.selected);
    if (previous !== undefined && previous !== a.pid) {
      tr.classList.remove("changed");
      void tr.offsetWidth; // restart the highlight
      tr.classList.add("changed");
    }
    cells.agent.replaceChildren(el("span", { class: "agent-name", text: a.agent }),
      hostLabel(a, doc),
      a.current_task ? el("span", { class: "task", text: a.current_task, title: a.current_task }) : "");
    cells.health.replaceChildren(el("span", { class: "badge " + a.health, title: HEALTH_TITLE[a.health] || "" },
      a.health, el("span", { class: "state", text: a.state }),
      a.watchdog && a.watchdog.length ? el("span", { class: "state", text: "(" + a.watchdog.join(", ") + ")" }) : ""));
    setText(cells.pid, a.pid === null ? "–" : a.pid);
    setText(cells.uptime, human(a.uptime_secs));
    setText(cells.activity, ago(a.last_activity), a.last_activity || "");
    setText(cells.loops, a.open_loops + (a.stale_loops ? ` (${a.stale_loops} stale)` : ""));
    setText(cells.crashes, a.max_crashes ? `${a.crashes}/${a.max_crashes}` : a.crashes);
    setText(cells.messages, a.messages_pending || "–",
      a.messages_pending ? `${a.messages_pending} message(s) waiting for the end of its turn` : "no message waiting");
    cells.context.replaceChildren(meter(a.context));
    const [tokens, cost, usageTitle] = today(a.usage_today);
    setText(cells.today, tokens + (cost ? " · " + cost : ""), usageTitle);
    tr.classList.toggle("needs-input", !!a.needs_input);
    if (a.needs_input) {
      const w = a.needs_input;
      cells.needs.replaceChildren(el("span", { class: "badge waiting", title: `${w.message || w.reason} (since ${w.since}, seen by ${w.source})` },
        w.reason.replace(/_/g, " ")));
    } else {
      setText(cells.needs, "–");
    }
    if (row.declared !== a.declared) {
      row.declared = a.declared;
      cells.actions.replaceChildren(a.declared ? el("span", { class: "actions" },
        actionButton("Stop", "stop", a.agent, "Stop it: it stays down until started"),
        actionButton("Start", "start", a.agent, "Start it again after a stop, a clean exit or safe mode"),
        actionButton("Restart", "restart", a.agent, "Restart, resuming its session"),
        actionButton("Fresh", "fresh", a.agent, "Restart with a fresh session"),
        actionButton("Save handoff", "save", a.agent, "Save a handoff now"),
        actionButton("Inject", "inject", a.agent, "Give it its latest handoff, or text"),
        actionButton("Message", "message", a.agent, "Send it a message, given at the end of its turn")) : "");
    }
    body.append(tr); // keeps the server's order; moving a node keeps it alive
  }
  for (const [agent, row] of rows) {
    if (!seen.has(agent)) { row.tr.remove(); rows.delete(agent); }
  }
  for (const stray of [...body.children]) {
    if (!stray.dataset.agent) stray.remove();
  }
  if (!agents.length) body.replaceChildren(el("tr", {}, el("td", { colspan: 12, class: "empty", text: "No agents declared." })));
  if (!state.rendered) {
    state.rendered = true;
    performance.mark("fleet-rendered");
    document.body.dataset.ready = "true";
    if (!state.selected && agents.length) selectAgent(agents[0].agent);
    setTimeout(loadPlan, 0); // the plan observes the fleet again: after the table is up
  }
}

async function loadStatus() {
  try {
    renderFleet(await api("/api/status"));
  } catch (e) {
    if (e.status !== 401) $("#fleet-summary").textContent = "cannot load the status: " + e.message;
  }
}

async function loadPlan() {
  try {
    const plan = await api("/api/plan");
    const n = (plan.changes || []).length;
    $("#plan-summary").textContent = n === 0 ? "plan: nothing to do" : `plan: ${n} change(s) pending`;
    $("#plan-summary").title = plan.text || "";
  } catch (e) {
    $("#plan-summary").textContent = "";
  }
}

// ---- live updates: server-sent events over fetch (so the token header goes along) ----

let liveAbort = null;
let pollTimer = null;

function setLive(mode, text) {
  const node = $("#live");
  node.className = "live " + mode;
  node.textContent = text;
}

function startPolling() {
  if (pollTimer) return;
  setLive("poll", "polling");
  loadStatus();
  pollTimer = setInterval(() => { loadStatus(); }, 3000);
}

function stopPolling() {
  if (pollTimer) clearInterval(pollTimer);
  pollTimer = null;
}

async function startLive() {
  if (liveAbort) liveAbort.abort();
  const abort = new AbortController();
  liveAbort = abort;
  try {
    const res = await fetch("/api/stream", { headers: headers({ "Accept": "text/event-stream" }), signal: abort.signal });
    if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
    stopPolling();
    setLive("on", "live");
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        handleFrame(frame);
      }
    }
    throw new Error("stream ended");
  } catch (e) {
    if (abort.signal.aborted) return;
    startPolling();
    setTimeout(() => { if (liveAbort === abort) startLive(); }, 5000);
  }
}

function handleFrame(frame) {
  let event = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return;
  if (event === "status") {
    try { renderFleet(JSON.parse(data.join("\n"))); } catch (_) { /* a partial frame: the next one comes */ }
  } else if (event === "events") {
    loadEvents();
  }
}

// ---- the selected agent: ledger, open loops, brief ----

function selectAgent(name) {
  state.selected = name;
  for (const tr of document.querySelectorAll("#fleet-body tr")) {
    tr.classList.toggle("selected", tr.dataset.agent === name);
  }
  $("#agent-name").textContent = name;
  loadAgentTab();
}

for (const b of document.querySelectorAll("#agent-tabs button")) {
  b.addEventListener("click", () => {
    state.tab = b.dataset.tab;
    for (const o of document.querySelectorAll("#agent-tabs button")) o.classList.toggle("active", o === b);
    loadAgentTab();
  });
}

function items(title, list) {
  if (!list || !list.length) return null;
  return [el("div", { class: "section-title", text: title }),
    el("ul", { class: "items" }, list.map((i) => el("li", { text: typeof i === "string" ? i : i.text })))];
}

async function loadAgentTab() {
  const name = state.selected;
  if (!name) return;
  const body = $("#agent-body");
  body.classList.remove("muted");
  try {
    if (state.tab === "overview") {
      const enc = encodeURIComponent(name);
      const [row, day, pane] = await Promise.all([
        api(`/api/agents/${enc}`),
        api(`/api/agents/${enc}/day`).catch((e) => ({ error: e })),
        api(`/api/agents/${enc}/pane?lines=20`).catch((e) => ({ error: e })),
      ]);
      if (state.selected !== name) return;
      body.replaceChildren(...[
        el("div", { class: "section-title", text: "Supervision" }),
        whyDown(row),
        el("div", { class: "section-title", text: "Today: tokens and estimated cost per hour, crashes" }),
        day.error ? el("div", { class: "empty", text: day.error.message }) : dayChart(day),
        el("div", { class: "section-title", text: "Pane" }),
        pane.error ? el("div", { class: "empty", text: pane.error.message })
          : pane.running ? el("pre", { class: "pane-preview", text: pane.text || "(nothing on screen)" })
            : el("div", { class: "empty", text: "No pane: the agent is not running." }),
      ]);
      body.dataset.view = "overview";
      body.dataset.agent = name; // whose overview this is (the name above changes first)
    } else if (state.tab === "ledger") {
      const l = await api(`/api/agents/${encodeURIComponent(name)}/ledger`);
      if (state.selected !== name) return;
      const parts = [
        el("div", { class: "section-title", text: "Current task" }),
        el("div", { text: l.current_task || "–" }),
        items("Completed", l.completed), items("In progress", l.in_progress), items("Next", l.next),
        items("Blocked", l.blocked), items("Key decisions", l.decisions), items("Uncertain", l.uncertain),
        items("Files", l.files),
        el("div", { class: "section-title", text: "Updated" }), el("div", { class: "muted", text: l.updated_at ? when(l.updated_at) : "never" }),
      ];
      body.replaceChildren(...parts.flat().filter(Boolean));
      body.dataset.view = "ledger";
    } else if (state.tab === "loops") {
      const s = await api(`/api/agents/${encodeURIComponent(name)}/state`);
      if (state.selected !== name) return;
      const loops = (s.open_loops || []).map((lp) => el("div", { class: "loop", dataset: { loop: lp.id } },
        el("span", { class: "id", text: lp.id }),
        el("span", { text: lp.text }),
        el("span", { class: "muted", text: lp.added }),
        lp.stale ? el("span", { class: "stale", text: "stale" }) : null,
        el("button", { type: "button", class: "small", text: "Resolve", dataset: { action: "resolve", loop: lp.id },
          onclick: () => resolveLoop(name, lp.id, lp.text) })));
      const resolved = (s.resolved || []).map((r) => el("li", {}, el("span", { class: "mono", text: r.id }), " — ", r.reason, " ", el("span", { class: "muted", text: "(" + r.resolved_date + ")" })));
      body.replaceChildren(...[
        el("div", { class: "section-title", text: `Open loops (${loops.length})` }),
        loops.length ? el("div", {}, loops) : el("div", { class: "empty", text: "No open loops." }),
        resolved.length ? el("div", { class: "section-title", text: "Recently resolved" }) : null,
        resolved.length ? el("ul", { class: "items" }, resolved) : null,
        el("div", { class: "section-title", text: "Status" }),
        el("div", { text: `${s.status || "–"} · last active ${ago(s.last_active)}` + (s.session_id ? ` · session ${s.session_id}` : "") }),
      ].filter(Boolean));
      body.dataset.view = "loops";
    } else {
      const b = await api(`/api/agents/${encodeURIComponent(name)}/brief`);
      if (state.selected !== name) return;
      body.replaceChildren(b.brief && b.brief.trim()
        ? el("div", {}, el("div", { class: "muted", text: "updated " + when(b.updated_at) }), el("pre", { text: b.brief }))
        : el("div", { class: "empty", text: "No brief yet: `phoenix brief " + name + " --generate` writes one." }));
      body.dataset.view = "brief";
    }
  } catch (e) {
    body.replaceChildren(el("div", { class: "empty", text: e.message + (e.hint ? " — " + e.hint : "") }));
  }
}

// Why the agent is in the state it is: safe mode (and why), a crash loop, a stop on purpose, a
// clean exit, a cooldown after a crash; with how its last run ended.
function whyDown(a) {
  const s = a.supervision || {};
  const lines = [];
  let verdict;
  if (s.safe_mode) {
    verdict = el("span", { class: "badge down", text: "safe mode" });
    lines.push(`since ${when(s.safe_mode.since)}: ${s.safe_mode.reason}. \`phoenix restart ${a.agent}\` (or Start) lifts it.`);
  } else if (s.max_crashes && s.crashes_in_window >= s.max_crashes) {
    verdict = el("span", { class: "badge down", text: "crash loop" });
    lines.push(`${s.crashes_in_window} crashes in the window (max ${s.max_crashes}).`);
  } else if (a.state === "stopped") {
    const clean = s.last_end && s.last_end.reason === "clean_exit";
    verdict = el("span", { class: "badge stopped", text: clean ? "exited cleanly" : "stopped" });
    lines.push(clean ? "Its CLI exited on its own; it is held until started (Start)."
      : "Stopped on purpose: it stays down until started (Start, or `phoenix start " + a.agent + "`).");
  } else if (a.state === "cooldown") {
    verdict = el("span", { class: "badge recovering", text: "restarting" });
    lines.push("Waiting out the cooldown after its last exit.");
  } else if (a.state === "running") {
    verdict = el("span", { class: "badge " + a.health, text: a.health === "healthy" ? "running" : a.health });
  } else {
    verdict = el("span", { class: "badge " + a.health, text: a.state });
    if (a.state === "declared") lines.push("Not started: `phoenix apply` starts it.");
  }
  if (s.crashes_in_window !== undefined && !lines.some((l) => l.includes("crashes in the window"))) {
    lines.push(`${s.crashes_in_window} crash(es) in the window` + (s.max_crashes ? ` (max ${s.max_crashes})` : "") + ".");
  }
  const end = s.last_end;
  if (end) {
    const how = end.signal != null ? `, signal ${end.signal}` : end.code != null ? `, exit code ${end.code}` : "";
    lines.push(`Last stop: ${String(end.reason || "?").replace(/_/g, " ")}${how}, ${ago(end.ts)}` + (end.explain ? ` — ${end.explain}` : ""));
  }
  return el("div", { class: "why", dataset: { why: verdict.textContent } }, verdict,
    el("ul", { class: "items" }, lines.map((l) => el("li", { text: l }))));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c) node.append(c);
  return node;
}

function short(n) {
  return n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e3 ? (n / 1e3).toFixed(1) + "k" : String(n);
}

// 24 local hours from midnight: a bar of tokens per hour, the running cost as a line, each
// crash a red mark at its time.
function dayChart(day) {
  const start = Date.parse(day.since);
  const W = 480, H = 140, left = 34, right = 40, top = 10, bottom = 34;
  const plotW = W - left - right, plotH = H - top - bottom;
  const slot = plotW / 24;
  const byHour = new Array(24).fill(null);
  for (const h of day.hours || []) {
    const i = Math.floor((Date.parse(h.hour) - start) / 3600000);
    if (i >= 0 && i < 24) byHour[i] = h;
  }
  const maxTokens = Math.max(1, ...byHour.map((h) => (h ? h.tokens : 0)));
  let cost = 0;
  const costs = byHour.map((h) => (cost += h ? h.cost_usd : 0));
  const maxCost = Math.max(0.01, cost);
  const nowHour = Math.min(24, (Date.now() - start) / 3600000);
  const parts = [];
  parts.push(svg("line", { x1: left, y1: top + plotH, x2: left + plotW, y2: top + plotH, class: "axis" }));
  for (let i = 0; i <= 24; i += 6) {
    parts.push(svg("text", { x: left + i * slot, y: H - bottom + 14, class: "tick", "text-anchor": "middle", text: String(i).padStart(2, "0") + ":00" }));
  }
  parts.push(svg("text", { x: left - 4, y: top + 8, class: "tick", "text-anchor": "end", text: short(maxTokens) }));
  parts.push(svg("text", { x: left + plotW + 4, y: top + 8, class: "tick cost", text: "$" + maxCost.toFixed(2) }));
  byHour.forEach((h, i) => {
    if (!h || !h.tokens) return;
    const bh = Math.max(1, (h.tokens / maxTokens) * plotH);
    parts.push(svg("rect", { x: left + i * slot + 1, y: top + plotH - bh, width: slot - 2, height: bh, class: "bar" },
      svg("title", { text: `${String(i).padStart(2, "0")}:00 — ${h.tokens} tokens, $${h.cost_usd.toFixed(2)}` + (h.unpriced ? " (+ unpriced)" : "") })));
  });
  const points = [];
  for (let i = 0; i < Math.ceil(nowHour); i++) {
    points.push(`${left + (i + 1) * slot},${top + plotH - (costs[i] / maxCost) * plotH}`);
  }
  if (points.length) parts.push(svg("polyline", { points: `${left},${top + plotH} ` + points.join(" "), class: "cost-line" }));
  for (const c of day.crashes || []) {
    const x = left + ((Date.parse(c.ts) - start) / 3600000) * slot;
    const how = c.signal != null ? `signal ${c.signal}` : c.code != null ? `exit code ${c.code}` : "";
    parts.push(svg("g", { class: "crash" },
      svg("line", { x1: x, y1: top, x2: x, y2: top + plotH + 6 }),
      svg("circle", { cx: x, cy: top + plotH + 6, r: 3 }),
      svg("title", { text: `crash ${new Date(c.ts).toLocaleTimeString()}: ${c.reason} ${how}` })));
  }
  const tokens = byHour.reduce((n, h) => n + (h ? h.tokens : 0), 0);
  return el("div", { class: "day" },
    svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "day-chart", role: "img", "aria-label": "tokens and cost today" }, parts),
    el("div", { class: "muted legend" },
      el("span", { class: "key bar" }), ` tokens per hour (${short(tokens)} today) `,
      el("span", { class: "key cost-line" }), ` estimated cost ($${cost.toFixed(2)} today) `,
      el("span", { class: "key crash" }), ` crashes (${(day.crashes || []).length} today)`),
    (day.crashes || []).length ? el("ol", { class: "crashes" }, day.crashes.map((c) =>
      el("li", { class: "crit" }, el("span", { class: "mono", text: new Date(c.ts).toLocaleTimeString() }), " ",
        String(c.reason).replace(/_/g, " "), c.signal != null ? ` (signal ${c.signal})` : c.code != null ? ` (exit code ${c.code})` : ""))) : null);
}

// ---- handoffs: list, search, view ----

async function loadHandoffs() {
  const q = $("#search").value.trim();
  const list = $("#handoff-list");
  try {
    if (q) {
      const r = await api("/api/search?limit=50&q=" + encodeURIComponent(q));
      if ($("#search").value.trim() !== q) return;
      list.replaceChildren(...(r.results.length ? r.results.map(hitItem)
        : [el("li", { class: "empty", text: `Nothing found for “${q}”.` })]));
      list.dataset.query = q;
    } else {
      const r = await api("/api/handoffs");
      const all = r.handoffs.slice().sort((a, b) => (a.created_at < b.created_at ? 1 : -1)).slice(0, 200);
      list.replaceChildren(...(all.length ? all.map(handoffItem)
        : [el("li", { class: "empty", text: "No handoffs yet." })]));
      list.dataset.query = "";
    }
  } catch (e) {
    list.replaceChildren(el("li", { class: "empty", text: e.message }));
  }
}

function handoffItem(h) {
  return el("li", { dataset: { handoff: h.id, agent: h.agent }, class: h.id === state.handoff ? "selected" : null,
    onclick: () => showHandoff(h.id, h.agent) },
    el("div", { text: h.summary }),
    el("div", { class: "meta" }, el("span", { class: "accent", text: h.agent }), el("span", { text: h.trigger_reason }), el("span", { text: when(h.created_at) })));
}

function snippet(text) {
  // The index marks matches with [ ]: shown as <mark>, everything as text.
  const out = [];
  const re = /\[([^\]]*)\]/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    out.push(text.slice(last, m.index), el("mark", { text: m[1] }));
    last = re.lastIndex;
  }
  out.push(text.slice(last));
  return out;
}

function hitItem(h) {
  const open = h.kind === "handoff" ? () => showHandoff(h.reference, h.agent) : null;
  return el("li", { dataset: { kind: h.kind, handoff: h.kind === "handoff" ? h.reference : null, agent: h.agent }, onclick: open },
    el("div", {}, el("span", { class: "kind", text: h.kind }), " ", h.title),
    el("div", { class: "snippet" }, snippet(h.snippet.replace(/\n/g, " "))),
    el("div", { class: "meta" }, el("span", { class: "accent", text: h.agent }), el("span", { text: when(h.ts) })));
}

async function showHandoff(id, agent) {
  state.handoff = id;
  for (const li of document.querySelectorAll("#handoff-list li")) li.classList.toggle("selected", li.dataset.handoff === id);
  const view = $("#handoff-view");
  try {
    const h = await api(`/api/handoffs/${encodeURIComponent(id)}?agent=${encodeURIComponent(agent)}`);
    view.classList.remove("muted");
    view.replaceChildren(
      el("div", { class: "view-head" },
        el("strong", { text: h.summary }),
        el("span", { class: "kind", text: h.trigger }),
        el("span", { class: "muted", text: `${h.agent} · ${when(h.created_at)}` }),
        el("button", { type: "button", class: "small right", text: "Inject into " + h.agent, dataset: { action: "inject-handoff" },
          onclick: () => injectHandoff(h.agent, h.id) })),
      el("pre", { id: "handoff-body", text: h.body }));
    view.dataset.handoff = h.id;
  } catch (e) {
    view.replaceChildren(el("div", { class: "empty", text: e.message }));
  }
}

let searchTimer = null;
$("#search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(loadHandoffs, 250);
});

// ---- critical events ----

function eventClass(name) {
  if (/crash|unhealthy|corrupt|failed|error|quarantine|safe/.test(name)) return "bad";
  if (/clinic|policy|fallback|revive|stale/.test(name)) return "warn";
  return "";
}

async function loadEvents() {
  const since = $("#events-since").value;
  const list = $("#events");
  try {
    const r = await api(`/api/events?limit=300&since=${encodeURIComponent(since)}`);
    const events = r.events.slice().reverse();
    list.replaceChildren(...(events.length ? events.map((e) => el("li", { dataset: { event: e.event } },
      el("span", { class: "ts", text: when(e.ts) }),
      el("span", { class: "accent", text: e.agent || "–" }),
      el("span", { class: "ev " + eventClass(e.event || ""), text: e.event }),
      el("span", { class: "reason", title: e.reason || "", text: (e.reason || "") + (e.action_taken ? " → " + e.action_taken : "") })))
      : [el("li", { class: "empty", text: "No critical events in this period." })]));
  } catch (e) {
    list.replaceChildren(el("li", { class: "empty", text: e.message }));
  }
}
$("#events-since").addEventListener("change", loadEvents);

// ---- actions (each confirmed first) ----

function busy(button, on) {
  if (button) button.disabled = on;
}

async function act(action, agent, button) {
  const path = `/api/agents/${encodeURIComponent(agent)}`;
  if (action === "stop" || action === "start") {
    const stopping = action === "stop";
    const ok = await confirmAction(stopping ? `Stop ${agent}?` : `Start ${agent}?`,
      stopping ? `Agent ${agent} is stopped and stays down (through apply and the daemon) until it is started.`
        : `Agent ${agent} is started again: its stop, a clean exit's hold and its crash count are lifted.`);
    if (!ok) return;
    busy(button, true);
    try {
      const r = await api(path + "/" + action, { method: "POST", body: {} });
      toast(`${stopping ? "Stopped" : "Started"} ${agent}`, r.detail || "");
      loadStatus();
      if (state.selected === agent) loadAgentTab();
    } catch (e) { fail(e); } finally { busy(button, false); }
  } else if (action === "restart" || action === "fresh") {
    const fresh = action === "fresh";
    const ok = await confirmAction(fresh ? "Restart with a fresh session?" : "Restart?",
      fresh ? `Agent ${agent} is stopped and started with a clean session; its latest handoff is given back to it.`
        : `Agent ${agent} is stopped and started again, resuming its session.`);
    if (!ok) return;
    busy(button, true);
    try {
      const r = await api(path + "/restart", { method: "POST", body: { fresh } });
      toast(`Restarted ${agent}` + (r.pid ? ` (pid ${r.pid})` : " — not running yet"), r.pid ? "" : "check its row in a moment");
      loadStatus();
    } catch (e) { fail(e); } finally { busy(button, false); }
  } else if (action === "save") {
    const area = el("textarea", { id: "save-body", placeholder: "Current task: …\nCompleted: …\nNext: …\nKey decision: …" });
    const ok = await confirmAction(`Save a handoff for ${agent}?`, "phoenix adds what it knows (state, ledger, last tool calls). Your notes are optional.",
      [el("label", { for: "save-body", text: "Notes (optional)" }), area]);
    if (!ok) return;
    busy(button, true);
    try {
      const h = await api(path + "/handoffs", { method: "POST", body: { reason: "manual", body: area.value } });
      toast(`Saved handoff ${h.id}`, "");
      loadHandoffs();
      loadStatus();
    } catch (e) { fail(e); } finally { busy(button, false); }
  } else if (action === "message") {
    const area = el("textarea", { id: "message-text", placeholder: "What the agent should know" });
    const urgent = el("input", { type: "checkbox", id: "message-urgent" });
    const ok = await confirmAction(`Send ${agent} a message?`, "It is kept in the agent's inbox and given to it when its current turn ends (urgent: at once, interrupting it).",
      [el("label", { for: "message-text", text: "Message" }), area,
        el("label", { for: "message-urgent" }, urgent, " urgent")]);
    if (!ok) return;
    busy(button, true);
    try {
      const m = await api(path + "/messages", { method: "POST", body: { text: area.value, urgent: urgent.checked } });
      toast(`Message ${m.id} for ${agent}`, m.urgent ? "urgent: given at once" : "given at the end of its turn");
      loadStatus();
    } catch (e) { fail(e); } finally { busy(button, false); }
  } else if (action === "inject") {
    const area = el("textarea", { id: "inject-text", placeholder: "Leave empty to give it its latest handoff" });
    const ok = await confirmAction(`Inject into ${agent}?`, "The text is pasted into the agent's session when it waits for input.",
      [el("label", { for: "inject-text", text: "Text (optional)" }), area]);
    if (!ok) return;
    busy(button, true);
    try {
      const text = area.value.trim();
      const r = await api(path + "/inject", { method: "POST", body: text ? { text } : {} });
      toast(`Injected into ${agent} (${r.confirmed_by})`, r.handoff_id ? "handoff " + r.handoff_id : "");
    } catch (e) { fail(e); } finally { busy(button, false); }
  }
}

async function injectHandoff(agent, id) {
  const ok = await confirmAction(`Inject this handoff into ${agent}?`, `Handoff ${id} is pasted into the agent's session when it waits for input.`);
  if (!ok) return;
  try {
    const r = await api(`/api/agents/${encodeURIComponent(agent)}/inject`, { method: "POST", body: { handoff_id: id } });
    toast(`Injected handoff into ${agent} (${r.confirmed_by})`, "");
  } catch (e) { fail(e); }
}

async function resolveLoop(agent, id, text) {
  const input = el("input", { type: "text", id: "resolve-reason", placeholder: "why it is resolved" });
  const ok = await confirmAction(`Resolve loop ${id}?`, text, [el("label", { for: "resolve-reason", text: "Reason" }), input]);
  if (!ok) return;
  try {
    await api(`/api/agents/${encodeURIComponent(agent)}/resolve`, { method: "POST", body: { id, reason: input.value.trim() || "resolved from the dashboard" } });
    toast(`Resolved ${id} for ${agent}`, "");
    loadAgentTab();
    loadStatus();
  } catch (e) { fail(e); }
}

$("#run-watchdog").addEventListener("click", async (e) => {
  const ok = await confirmAction("Run a watchdog pass?", "Every agent is checked now; unhealthy ones are healed by the on_unhealthy policy (revive, notify or safe mode).");
  if (!ok) return;
  const button = e.currentTarget;
  busy(button, true);
  try {
    const r = await api("/api/watchdog", { method: "POST", body: {} });
    const unhealthy = r.agents.filter((a) => a.verdict === "unhealthy").length;
    const suspect = r.agents.filter((a) => a.verdict === "suspect").length;
    toast(`Watchdog: ${r.agents.length} checked, ${unhealthy} unhealthy, ${suspect} suspect`, "");
    loadStatus();
    loadEvents();
  } catch (err) { fail(err); } finally { busy(button, false); }
});

// ---- start ----

function refreshAll() {
  loadStatus();
  loadHandoffs();
  loadEvents();
  loadPlan();
}

// A browser keeps at most six connections to one server: a tab out of sight (or being left)
// gives its stream's back, and gets a fresh one when it is looked at again.
function stopLive() {
  if (liveAbort) liveAbort.abort();
  liveAbort = null;
  stopPolling();
  setLive("off", "paused");
}
window.addEventListener("pagehide", stopLive);
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "hidden") stopLive();
  else if (!liveAbort) startLive();
});

// The stream's first event is the status: the table needs no request of its own.
startLive();
loadHandoffs();
loadEvents();
setInterval(loadPlan, 30000);
setInterval(() => { if (state.fleet) renderFleet(state.fleet); }, 10000); // "x ago" stays true
