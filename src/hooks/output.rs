//! What a hook prints, per CLI. Claude Code and Codex read `hookSpecificOutput` JSON (Codex's
//! SessionStart parser rejects unknown keys, so nothing else is ever added); Gemini turns
//! plain text into a user-only message and parses stderr when stdout is empty, so it always
//! gets JSON, `{}` when there is nothing to say.

use serde_json::json;

use crate::spec::Cli;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nothing,
    /// Context for the model (`additionalContext` of `event`).
    Context {
        event: String,
        text: String,
    },
    /// Feedback about the tool call that just ran (the CLI's blocking feedback channel).
    Feedback {
        event: String,
        reason: String,
    },
}

/// The exact stdout for `reply`.
pub fn render(cli: Option<Cli>, reply: &Reply) -> String {
    let gemini = cli == Some(Cli::Gemini);
    let value = match reply {
        Reply::Nothing if gemini => json!({}),
        Reply::Nothing => return String::new(),
        Reply::Context { event, text } => {
            json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})
        }
        // Gemini's `decision` would replace the tool's result; the context is appended instead.
        Reply::Feedback { event, reason } if gemini => {
            json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": reason}})
        }
        Reply::Feedback { reason, .. } => json!({"decision": "block", "reason": reason}),
    };
    format!("{value}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_always_gets_json() {
        assert_eq!(render(Some(Cli::Gemini), &Reply::Nothing), "{}\n");
        assert_eq!(render(Some(Cli::Claude), &Reply::Nothing), "");
        assert_eq!(render(None, &Reply::Nothing), "");
    }

    #[test]
    fn session_start_context_has_exactly_the_codex_keys() {
        let out = render(
            Some(Cli::Codex),
            &Reply::Context {
                event: "SessionStart".into(),
                text: "hi".into(),
            },
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "hi"}})
        );
    }

    #[test]
    fn feedback_per_cli() {
        let reply = Reply::Feedback {
            event: "AfterTool".into(),
            reason: "restored".into(),
        };
        let claude: serde_json::Value =
            serde_json::from_str(&render(Some(Cli::Claude), &reply)).unwrap();
        assert_eq!(claude["decision"], "block");
        let gemini: serde_json::Value =
            serde_json::from_str(&render(Some(Cli::Gemini), &reply)).unwrap();
        assert_eq!(
            gemini["hookSpecificOutput"]["additionalContext"],
            "restored"
        );
        assert!(gemini.get("decision").is_none());
    }
}
