-- policies/patterns.lua: how the default `diagnose` recognises a root cause.
--
-- Checked in order, first match wins: the causes a restart cannot fix come first, so that
-- "429 quota exceeded" is quota and not a transient rate limit. Phrases are matched as plain
-- text, ignoring case; statuses are HTTP codes mentioned on an error line. Override this file
-- (policies/patterns.lua next to phoenix.toml) to add your own phrases.

return {
  {
    cause = "invalid_credentials",
    statuses = { 401, 403 },
    phrases = {
      "invalid api key", "invalid x-api-key", "invalid_api_key", "api key not valid",
      "authentication_error", "authentication failed", "unauthorized", "token has expired",
      "token expired", "please run /login", "not logged in", "invalid credentials",
      "permission_error",
    },
  },
  {
    cause = "quota_exhausted",
    statuses = {},
    phrases = {
      "insufficient_quota", "exceeded your current quota", "quota exceeded",
      "quota has been exhausted", "credit balance is too low", "usage limit reached", "billing",
    },
  },
  {
    cause = "model_unavailable",
    statuses = {},
    phrases = {
      "model_not_found", "model not found", "unknown model", "invalid model",
      "model is not available", "model does not exist", "does not have access to model",
      "no such model",
      -- Anthropic's 404 for a model it does not know ("type":"not_found_error",
      -- "message":"model: claude-x"), Claude Code's own wording, Gemini's 404.
      "not_found_error", "issue with the selected model", "is not found for api version",
      -- Gemini CLI's dialog after a 404 for its model.
      "you don't have access to gemini",
    },
  },
  {
    cause = "context_length_exceeded",
    statuses = { 413 },
    phrases = {
      "prompt is too long", "context_length_exceeded", "context_window_exceeded",
      "context length", "context window", "maximum context", "too many tokens",
      "input is too long", "request_too_large", "token limit",
      "exceeds the maximum number of tokens",
    },
  },
  {
    cause = "hallucinated_tool",
    statuses = {},
    phrases = {
      "unknown tool", "no such tool", "tool not found", "not a valid tool", "invalid tool name",
      "unrecognized tool", "no tool named", "tool does not exist",
    },
  },
  {
    cause = "invalid_tool_arguments",
    statuses = {},
    phrases = {
      "inputvalidationerror", "invalid input", "invalid arguments", "invalid parameters",
      "validation error", "missing required", "required parameter", "unexpected parameter",
      "does not match schema", "schema validation",
    },
  },
  {
    cause = "transient_error",
    statuses = { 408, 429, 500, 502, 503, 504, 529 },
    phrases = {
      "rate limit", "rate_limit", "overloaded", "timed out", "timeout", "connection reset",
      "econnreset", "econnrefused", "connection refused", "socket hang up", "network error",
      "service unavailable", "bad gateway", "internal server error", "temporarily unavailable",
    },
  },
  {
    cause = "ambiguous_instruction",
    statuses = {},
    phrases = {
      "ambiguous", "unclear what", "could you clarify", "please clarify",
      "which one do you mean", "need more information",
    },
  },
  {
    cause = "logic_error",
    statuses = {},
    phrases = {
      "panicked at", "traceback (most recent call last)", "assertion failed", "assertionerror",
      "typeerror", "referenceerror", "segmentation fault", "tests failed", "test failed",
      "exception",
    },
  },
}
