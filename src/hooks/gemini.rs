//! Gemini CLI fires PreCompress (`auto`) before every model call and only then decides whether
//! to compress: the history is compressed once the last prompt reached `compressionThreshold`
//! (setting `model.compressionThreshold`, default 0.5) of the model's context window (256k
//! tokens for Gemma 4 models, 1,048,576 for the others; Gemini CLI 0.61). Taken at its word,
//! every turn would count as a compaction and leave a snapshot and a handoff behind. The last
//! prompt's size is in the session's chat file, so phoenix applies the same rule.
//! Also here: which chat file holds a resumed session (`session_chat`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::state::bounded::{self, Links};

/// Gemini CLI's default share of the context window at which it compresses.
const DEFAULT_THRESHOLD: f64 = 0.5;
/// A settings file larger than this is not read.
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// What a chat file says about the last prompt.
#[derive(Debug, PartialEq, Eq)]
enum LastPrompt {
    /// `tokens.input` and the model of the last response.
    Sized(u64, String),
    /// The whole file was read and no response is in it yet: nothing to compress.
    NoResponseYet,
    /// No file, or its end says nothing.
    Unknown,
}

/// Will Gemini CLI compress before this model call? `transcript` is the payload's chat file,
/// `settings` the settings files in increasing precedence (user, then project). When the chat
/// file cannot tell, the answer is yes: better a handoff too many than a compaction without one.
pub fn will_compress(transcript: Option<&Path>, settings: &[PathBuf]) -> bool {
    let (tokens, model) = match transcript.map_or(LastPrompt::Unknown, last_prompt) {
        LastPrompt::Sized(tokens, model) => (tokens, model),
        LastPrompt::NoResponseYet => return false,
        LastPrompt::Unknown => return true,
    };
    let threshold = settings
        .iter()
        .rev()
        .filter_map(|p| bounded::read_whole(p, MAX_SETTINGS_BYTES, Links::Follow).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v.pointer("/model/compressionThreshold")?.as_f64())
        .find(|t| *t > 0.0)
        .unwrap_or(DEFAULT_THRESHOLD);
    tokens as f64 >= threshold * context_window(&model) as f64
}

fn context_window(model: &str) -> u64 {
    if model.starts_with("gemma-4") {
        256_000
    } else {
        1_048_576
    }
}

/// The prompt size (`tokens.input`) and model of the last model response in a chat file,
/// reading only its end.
fn last_prompt(path: &Path) -> LastPrompt {
    const TAIL: u64 = 64 * 1024;
    match bounded::read_tail(path, TAIL, Links::Follow) {
        Err(_) => LastPrompt::Unknown,
        Ok(tail) => match last_prompt_in(&String::from_utf8_lossy(&tail.bytes)) {
            Some((tokens, model)) => LastPrompt::Sized(tokens, model),
            None if !tail.truncated() => LastPrompt::NoResponseYet,
            None => LastPrompt::Unknown,
        },
    }
}

fn last_prompt_in(text: &str) -> Option<(u64, String)> {
    text.lines().rev().find_map(|line| {
        let v: Value = serde_json::from_str(line).ok()?;
        let tokens = v.pointer("/tokens/input")?.as_u64()?;
        Some((tokens, v["model"].as_str().unwrap_or("").to_string()))
    })
}

/// Chat files looked at in one directory at most.
const MAX_CHATS: usize = 10_000;

/// The chat file that holds the session `reported` names. Gemini CLI 0.61 resumed with
/// `--resume` keeps writing the session's own file, `session-<start minute>-<id8>.jsonl`, yet
/// first creates one named after the current minute (only its metadata in it) and reports that
/// one to the SessionStart hook: once a minute has turned since the session began, the
/// reported file holds none of the conversation. Of the files of that session (same
/// directory, same `-<id8>.jsonl`), the largest is the one with the conversation.
pub fn session_chat(reported: &Path) -> PathBuf {
    let (Some(dir), Some(name)) = (reported.parent(), reported.file_name()) else {
        return reported.to_path_buf();
    };
    let name = name.to_string_lossy();
    let Some(id8) = name
        .strip_prefix("session-")
        .and_then(|n| n.strip_suffix(".jsonl"))
        .and_then(|n| n.rsplit_once('-'))
        .map(|(_, id8)| format!("-{id8}.jsonl"))
    else {
        return reported.to_path_buf();
    };
    let size = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    };
    let mut best = (size(reported).unwrap_or(0), reported.to_path_buf());
    for entry in std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(MAX_CHATS)
    {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file.starts_with("session-") && file.ends_with(&id8) {
            let path = entry.path();
            if let Some(len) = size(&path).filter(|len| *len > best.0) {
                best = (len, path);
            }
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = r#"{"sessionId":"s","kind":"main"}
{"id":"1","type":"user","content":[{"text":"hi"}]}
{"id":"2","type":"gemini","content":"","tokens":{"input":600000,"output":5,"total":600005},"model":"gemini-3.1-pro-preview"}
{"id":"3","type":"user","content":[{"text":"more"}]}
{"id":"4","type":"gemini","content":"ok","tokens":{"input":1200,"output":5,"total":1205},"model":"gemini-3.1-pro-preview"}
"#;

    #[test]
    fn the_last_response_gives_the_prompt_size() {
        assert_eq!(
            last_prompt_in(CHAT),
            Some((1200, "gemini-3.1-pro-preview".to_string()))
        );
        assert_eq!(last_prompt_in("{\"kind\":\"main\"}\nnot json\n"), None);
    }

    #[test]
    fn compresses_past_the_threshold_of_the_context_window() {
        let tmp = tempfile::tempdir().unwrap();
        let chat = tmp.path().join("chat.jsonl");
        let small = tmp.path().join("small.jsonl");
        std::fs::write(&small, CHAT).unwrap();
        assert!(!will_compress(Some(&small), &[]));
        let big = CHAT.replace("\"input\":1200", "\"input\":530000");
        std::fs::write(&chat, &big).unwrap();
        assert!(will_compress(Some(&chat), &[]));
        let gemma = CHAT
            .replace("\"input\":1200", "\"input\":130000")
            .replace("gemini-3.1-pro-preview", "gemma-4-31b-it");
        std::fs::write(&chat, gemma).unwrap();
        assert!(will_compress(Some(&chat), &[]));
        // A lower threshold from the settings (the project's wins over the user's).
        let user = tmp.path().join("user.json");
        let project = tmp.path().join("project.json");
        std::fs::write(&user, r#"{"model": {"compressionThreshold": 0.9}}"#).unwrap();
        std::fs::write(&project, r#"{"model": {"compressionThreshold": 0.001}}"#).unwrap();
        assert!(will_compress(Some(&small), &[user.clone(), project]));
        assert!(!will_compress(Some(&small), &[user]));
        // Nothing known: assume it compresses.
        assert!(will_compress(None, &[]));
        assert!(will_compress(Some(&tmp.path().join("missing")), &[]));
        // The first call of a session: no response yet, nothing to compress.
        std::fs::write(&chat, "{\"kind\":\"main\"}\n{\"type\":\"user\"}\n").unwrap();
        assert!(!will_compress(Some(&chat), &[]));
        // A long file whose end says nothing: unknown.
        let long = format!(
            "{}\n{{\"type\":\"user\",\"text\":\"{}\"}}\n",
            CHAT,
            "x".repeat(70_000)
        );
        std::fs::write(&chat, long).unwrap();
        assert!(will_compress(Some(&chat), &[]));
    }

    #[test]
    fn a_resumed_session_is_in_its_own_chat_file_not_the_one_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let chats = tmp.path();
        let own = chats.join("session-2026-11-25T15-05-c37e69ac.jsonl");
        let stray = chats.join("session-2026-11-25T15-06-c37e69ac.jsonl");
        let other = chats.join("session-2026-11-25T15-07-0badc0de.jsonl");
        std::fs::write(
            &own,
            "{\"sessionId\":\"c37e69ac\"}\n{\"type\":\"user\"}\n{\"type\":\"gemini\"}\n",
        )
        .unwrap();
        std::fs::write(&stray, "{\"sessionId\":\"c37e69ac\"}\n").unwrap();
        std::fs::write(&other, "x".repeat(10_000)).unwrap();
        assert_eq!(session_chat(&stray), own);
        assert_eq!(session_chat(&own), own);
        assert_eq!(session_chat(&other), other);
        // Not a chat file's name, or no file at all: as reported.
        let odd = chats.join("notes.jsonl");
        assert_eq!(session_chat(&odd), odd);
        let gone = chats.join("session-2026-11-25T15-08-12345678.jsonl");
        assert_eq!(session_chat(&gone), gone);
    }
}
