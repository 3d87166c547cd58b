//! A custom CLI: any program. phoenix installs no hooks for it and knows no resume form
//! (an agent may declare one with `resume`); its startup context is pasted into its pane, and
//! output in its pane counts as a sign of life. A custom program may still call
//! `phoenix hook …` itself: the wrapper then leaves the startup context to that hook.

use super::AgentCli;

/// A custom CLI's adapter: the trait's defaults, without a session-start hook.
pub struct Custom;

impl AgentCli for Custom {
    fn has_session_start_hook(&self) -> bool {
        false
    }

    /// A custom program often wraps one of the known CLIs: their prompts, each whole.
    fn approval_prompts(&self) -> &'static [super::ApprovalPrompt] {
        &[
            super::CLAUDE_APPROVAL,
            super::CODEX_APPROVAL,
            super::GEMINI_APPROVAL,
        ]
    }
}
