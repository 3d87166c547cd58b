//! What a hook prints: the shape its CLI reads (`AgentCli::render`; each CLI's file says why),
//! or Claude Code's `hookSpecificOutput` JSON when the CLI is not known.

pub use crate::agent_cli::Reply;
use crate::spec::Cli;

/// The exact stdout for `reply`.
pub fn render(cli: Option<Cli>, reply: &Reply) -> String {
    match cli {
        Some(cli) => cli.adapter().render(reply),
        None => crate::agent_cli::render_hook_specific(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
