-- policies/recovery.lua: phoenix's default recovery policy.
--
-- phoenix calls these entry points with plain tables and expects a table back:
--   on_exit(agent, exit)           -> { action = "resume" | "fresh" | "safe_mode", delay?, reason? }
--   on_unhealthy(agent, health)    -> { action = "revive" | "notify" | "ignore" | "safe_mode", reason? }
--   diagnose(trauma)               -> { root_cause, explanation, confidence }
--   prescribe(diagnosis, trauma)   -> { action = "retry" | "modify_prompt" | "summarize_history"
--                                       | "abort", modified_prompt?, reminder?, delay?, reason? }
-- Durations are seconds. An entry point this file does not define falls back to phoenix's
-- built-in default, and so does one that errors or returns something invalid (a critical
-- event then says where). Copy this file to policies/recovery.lua next to phoenix.toml to
-- change it; `phoenix policy test policies/recovery.lua policies/fixtures/<fixture>.json`
-- runs one call.
--
-- Helpers: phoenix.log(...), phoenix.now(), phoenix.match(text, phrases),
-- phoenix.status(text), phoenix.statuses(text), phoenix.duration("10m"),
-- phoenix.format_duration(seconds).
-- The agent's limits: agent.restart.{when, cooldown, backoff_max, max_crashes, crash_window},
-- agent.thresholds.{silence, error_cascade, runaway}, agent.max_recoveries.

local patterns = require("patterns")

local M = {}

-- Wait cooldown * 2^(n-1), capped at backoff_max.
local function backoff(restart, attempt)
  return math.min(restart.cooldown * 2 ^ (attempt - 1), restart.backoff_max)
end

-- What a shell reports for a command it found but could not run (126) or did not find (127).
local CANNOT_RUN = { [126] = "not executable", [127] = "not found" }

-- Hybrid resume (Phoenix Protocol v2.0): a clean exit waits for a person (with
-- restart.when = "always" it resumes after the cooldown; "never" leaves every exit stopped); a
-- command that cannot run too; a crash resumes the session after a backoff, unless the CLI refused to
-- resume it (then fresh); too many crashes within the window stop the loop.
function M.on_exit(agent, exit)
  local clean = exit.code == 0 and exit.signal == nil
  -- restart.when: "on-failure" (the default), "always" (a clean exit too), "never".
  local when = agent.restart.when or "on-failure"
  if when == "never" then
    local what = clean and "clean exit" or (exit.signal and string.format("signal %d", exit.signal)
      or (exit.code and string.format("exit code %d", exit.code)) or "unknown exit")
    return { action = "safe_mode", reason = what .. '; restart.when = "never": left stopped until `phoenix restart`' }
  end
  if clean and when == "always" then
    local action, next = "resume", exit.session_id and "resuming" or "restarting"
    if exit.fresh_requested then action, next = "fresh", "starting fresh, as requested" end
    return { action = action, delay = agent.restart.cooldown,
      reason = 'exited cleanly; restart.when = "always": ' .. next }
  end
  if clean then
    return { action = "safe_mode", reason = "exited cleanly: left stopped until `phoenix restart`" }
  end
  -- The command itself cannot run: no restart fixes that, a person has to.
  if exit.showed_life == false and exit.signal == nil and CANNOT_RUN[exit.code] then
    return { action = "safe_mode", reason = string.format(
      "the agent's command cannot be run (exit %d: %s): fix `command` in phoenix.toml",
      exit.code, CANNOT_RUN[exit.code]) }
  end
  local restart = agent.restart
  local crashes = math.max(exit.crashes_in_window or 0, 1)
  local count = string.format("crash %d of %d within %s", crashes, restart.max_crashes,
    phoenix.format_duration(restart.crash_window))
  if crashes >= restart.max_crashes then
    return { action = "safe_mode", reason = count .. ": crash loop stopped" }
  end
  -- The backoff starts over after a session that did work (crashes_since_work; 0: not known).
  local since_work = exit.crashes_since_work or 0
  local attempt = crashes
  if since_work > 0 then attempt = math.max(math.min(since_work, crashes), 1) end
  local delay = backoff(restart, attempt)
  if exit.fresh_requested then
    return { action = "fresh", delay = delay, reason = count .. "; a fresh start was requested" }
  end
  -- Only the CLI's own refusal says a session cannot be resumed. A resume that showed no
  -- life because it was killed (a signal, the operator, the machine) or had no time is
  -- still the conversation: resumed again, the crash limit above ending a loop.
  if exit.resumed and exit.resume_refused then
    return { action = "fresh", delay = delay, reason = count .. "; the CLI cannot resume the session: starting fresh" }
  end
  local next = exit.session_id and "resuming" or "restarting"
  return { action = "resume", delay = delay, reason = count .. ": " .. next }
end

-- Revive once per task; runaway work and repeated failures go to a person.
function M.on_unhealthy(agent, health)
  local findings = health.findings or {}
  if #findings == 0 then
    return { action = "ignore", reason = "nothing found" }
  end
  local only_runaway = true
  for _, f in ipairs(findings) do
    if f.check ~= "runaway" then only_runaway = false end
  end
  if only_runaway then
    return { action = "notify", reason = "long-running work is reported, not interrupted" }
  end
  if (health.revivals_for_task or 0) >= (health.max_revivals or 1) then
    return { action = "safe_mode", reason = "already revived for this task: unrecoverable" }
  end
  return { action = "revive", reason = "first failure of this task: revive" }
end

local function contains(list, value)
  for _, v in ipairs(list or {}) do
    if v == value then return true end
  end
  return false
end

-- The model an error names ("model: claude-x", "selected model (claude-x)",
-- "models/gemini-x", "have access to gemini-x", "the model `gpt-x` does not exist"), for a
-- person to fix.
local function model_named(text)
  local lower = text:lower()
  for _, start in ipairs({ "model:", "selected model (", "models/", "have access to ", "the model `" }) do
    local s, e = lower:find(start, 1, true)
    if s then
      local name = text:sub(e + 1):gsub("^ +", ""):match("^[%w%._%-@:]+")
      if name then name = name:gsub("[:%.]+$", "") end
      -- Model names carry a version or a dash; "it" or "model" is no name.
      if name and name:find("[%d%-]") then return name end
    end
  end
  return nil
end

-- Classify a failure by the phrases and HTTP statuses in policies/patterns.lua, first
-- match wins.
function M.diagnose(trauma)
  -- The error itself, not the stack trace: that is often the pane's tail, whose banners and
  -- menus ("billing", "login") would be taken for the error.
  local text = table.concat({ trauma.error_type or "", trauma.error_message or "" }, "\n")
  local codes = phoenix.statuses(text)
  for _, p in ipairs(patterns) do
    local phrase = phoenix.match(text, p.phrases)
    if phrase then
      local explanation = 'the error mentions "' .. phrase .. '"'
      local model = p.cause == "model_unavailable" and model_named(text)
      if model then
        explanation = "the model `" .. model .. "` is not available (" .. explanation .. ")"
      end
      return { root_cause = p.cause, explanation = explanation, confidence = 0.9 }
    end
    for _, code in ipairs(codes) do
      if contains(p.statuses, code) then
        return { root_cause = p.cause, explanation = "the error carries HTTP status " .. code, confidence = 0.8 }
      end
    end
  end
  -- A failed call to a tool the agent never used successfully is most likely made up.
  local calls = trauma.tool_calls or {}
  for i = #calls, 1, -1 do
    local call = calls[i]
    if not call.ok then
      local tools = trauma.available_tools or {}
      if #tools > 0 and not contains(tools, call.tool) then
        return {
          root_cause = "hallucinated_tool",
          explanation = "the last failed call used `" .. call.tool .. "`, which is not among the tools that worked",
          confidence = 0.6,
        }
      end
      break
    end
  end
  return { root_cause = "unknown", explanation = "no known pattern in the error text", confidence = 0.2 }
end

-- A restart cannot fix these: stop the crash loop at once and tell a person.
local NEEDS_A_PERSON = { invalid_credentials = true, model_unavailable = true, quota_exhausted = true }

-- Map a root cause to a treatment. phoenix itself stops at agent.max_recoveries per task.
function M.prescribe(diagnosis, trauma)
  local cause = diagnosis.root_cause
  if cause == "model_unavailable" then
    local model = model_named(table.concat({ trauma.error_type or "", trauma.error_message or "" }, "\n"))
    local which = model and ("the model `" .. model .. "`") or "the agent's model"
    local fix = trauma.agent and trauma.agent.model_fix
      or "fix the model the agent's `command` in phoenix.toml gives, or the one its CLI's own settings give"
    return { action = "abort", reason = which .. " cannot be used: " .. fix }
  end
  if NEEDS_A_PERSON[cause] then
    return { action = "abort", reason = "a restart cannot fix this; a person has to" }
  end
  if cause == "context_length_exceeded" then
    return { action = "summarize_history", reason = "the context is full: clear, don't compact" }
  end
  if cause == "hallucinated_tool" then
    local tools = trauma.available_tools or {}
    local reminder = "Use only the tools you have been given; do not invent tool names."
    if #tools > 0 then
      reminder = "Use only these tools: " .. table.concat(tools, ", ") .. ". Do not invent tool names."
    end
    return { action = "modify_prompt", reminder = reminder, reason = "a tool that does not exist was called" }
  end
  if cause == "invalid_tool_arguments" then
    return {
      action = "modify_prompt",
      reminder = "A tool call was rejected for its arguments. Check each tool's required parameters and their types before calling it.",
      reason = "a tool was called with invalid arguments",
    }
  end
  if cause == "ambiguous_instruction" then
    return {
      action = "modify_prompt",
      reminder = "The instruction was ambiguous. Pick the most reasonable interpretation, state it, and record the open question instead of stopping.",
      reason = "the instruction was ambiguous",
    }
  end
  if cause == "logic_error" then
    return {
      action = "modify_prompt",
      reminder = "The previous attempt failed with the error below. Find its cause before trying the same thing again.",
      reason = "the previous attempt failed with an error",
    }
  end
  return {
    action = "retry",
    delay = backoff(trauma.agent.restart, (trauma.recoveries or 0) + 1),
    reason = "retry after a backoff",
  }
end

return M
