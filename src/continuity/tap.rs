//! The output-pattern tap: an agent's pane output (from `tmux pipe-pane`) read as a stream,
//! `->continuity:` commands found in it whatever the terminal did to them — ANSI escapes,
//! carriage returns, lines wrapped by the pane, reads that stop mid-line or mid-block, and
//! output far larger than any command.
//!
//! ```text
//! ->continuity:save <<<
//! Current task: …
//! >>>
//! ->continuity:load
//! ->continuity:uncertain "API rate limit handling unclear"
//! ->continuity:search "authentication patterns"
//! ```

/// A command found in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Save(String),
    Load,
    Uncertain(String),
    Search(String),
}

const MARKER: &str = "->continuity:";
/// A save block larger than this is cut off (and still saved): a runaway block must not eat
/// the tap's memory.
const MAX_BLOCK: usize = 64 * 1024;
/// A line without a newline is kept up to this much while more output arrives.
const MAX_LINE: usize = 16 * 1024;

/// Feed it chunks of output in order; it returns the commands completed by each chunk.
#[derive(Debug, Default)]
pub struct Tap {
    /// Bytes of an incomplete line (or escape sequence, or UTF-8 character).
    partial: Vec<u8>,
    /// Inside `save <<<` … `>>>`.
    block: Option<String>,
    /// An escape sequence left open at the end of the last chunk.
    in_escape: Escape,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Escape {
    #[default]
    None,
    /// After ESC.
    Start,
    /// CSI: ESC [ … final byte.
    Csi,
    /// OSC/DCS…: until BEL or ESC \.
    String,
    StringEsc,
}

impl Tap {
    pub fn new() -> Tap {
        Tap::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Command> {
        let mut out = Vec::new();
        for &b in chunk {
            if let Some(b) = self.strip(b) {
                if b == b'\n' {
                    let line = std::mem::take(&mut self.partial);
                    self.line(&String::from_utf8_lossy(&line), &mut out);
                } else if b == b'\r' {
                    // A carriage return redraws the line: keep what follows (progress bars),
                    // unless nothing follows (a CRLF line end).
                    self.partial.push(b'\r');
                } else if self.partial.len() < MAX_LINE {
                    self.partial.push(b);
                }
            }
        }
        out
    }

    /// Drop terminal escape sequences, one byte at a time (they may span chunks).
    fn strip(&mut self, b: u8) -> Option<u8> {
        match self.in_escape {
            Escape::None if b == 0x1b => {
                self.in_escape = Escape::Start;
                None
            }
            Escape::None => (b >= 0x20 || b == b'\n' || b == b'\r' || b == b'\t').then_some(b),
            Escape::Start => {
                self.in_escape = match b {
                    b'[' => Escape::Csi,
                    b']' | b'P' | b'_' | b'^' | b'X' => Escape::String,
                    _ => Escape::None,
                };
                None
            }
            Escape::Csi => {
                if (0x40..=0x7e).contains(&b) {
                    self.in_escape = Escape::None;
                }
                None
            }
            Escape::String => {
                match b {
                    0x07 => self.in_escape = Escape::None,
                    0x1b => self.in_escape = Escape::StringEsc,
                    _ => {}
                }
                None
            }
            Escape::StringEsc => {
                self.in_escape = if b == b'\\' {
                    Escape::None
                } else {
                    Escape::String
                };
                None
            }
        }
    }

    fn line(&mut self, raw: &str, out: &mut Vec<Command>) {
        // What a carriage return left visible: the text after the last one (a trailing one
        // is a CRLF line end).
        let raw = raw.trim_end_matches('\r');
        let line = raw.rsplit('\r').next().unwrap_or(raw);
        if let Some(block) = &mut self.block {
            if let Some(end) = line.find(">>>") {
                block.push_str(&line[..end]);
                let text = std::mem::take(block).trim().to_string();
                self.block = None;
                out.push(Command::Save(text));
                return;
            }
            if block.len() < MAX_BLOCK {
                block.push_str(line);
                block.push('\n');
            }
            return;
        }
        let Some(at) = line.find(MARKER) else {
            return;
        };
        let rest = line[at + MARKER.len()..].trim();
        let (verb, arg) = rest
            .split_once(char::is_whitespace)
            .map(|(v, a)| (v, a.trim()))
            .unwrap_or((rest, ""));
        match verb {
            "save" => match arg.strip_prefix("<<<") {
                Some(after) => {
                    // Everything on one line: `save <<< text >>>`.
                    if let Some(end) = after.find(">>>") {
                        out.push(Command::Save(after[..end].trim().to_string()));
                    } else {
                        let mut block = String::new();
                        if !after.trim().is_empty() {
                            block.push_str(after.trim());
                            block.push('\n');
                        }
                        self.block = Some(block);
                    }
                }
                None if !arg.is_empty() => out.push(Command::Save(unquote(arg))),
                None => {}
            },
            "load" => out.push(Command::Load),
            "uncertain" if !arg.is_empty() => out.push(Command::Uncertain(unquote(arg))),
            "search" if !arg.is_empty() => out.push(Command::Search(unquote(arg))),
            _ => {}
        }
    }
}

/// `phoenix tap --agent NAME`: read the pane's output from stdin until it closes and act on
/// every command: save a handoff, load the latest one into the agent, note an uncertain item,
/// search and give the agent the results. Actions run on a worker thread, so the pane's output
/// is always read promptly. A failing action is logged in ops.jsonl, never fatal.
pub fn run(config: &std::path::Path, agent: &str) -> anyhow::Result<i32> {
    use std::io::Read;
    let (tx, rx) = std::sync::mpsc::channel::<Command>();
    let config = config.to_path_buf();
    let name = agent.to_string();
    let worker = std::thread::spawn(move || {
        for command in rx {
            act(&config, &name, command);
        }
    });
    let mut tap = Tap::new();
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                for c in tap.feed(&buf[..n]) {
                    let _ = tx.send(c);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    drop(tx);
    let _ = worker.join();
    Ok(0)
}

fn act(config: &std::path::Path, name: &str, command: Command) {
    use serde_json::json;
    let spec = match crate::spec::load_with(
        config,
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("phoenix tap: {e}");
            return;
        }
    };
    let Some(agent) = spec.agent(name) else {
        return;
    };
    let fleet = crate::state::FleetDir::new(&spec.fleet.state_dir);
    let dir = fleet.agent(name);
    let (what, result): (&str, Result<serde_json::Value, String>) = match command {
        Command::Save(text) => (
            "save",
            super::auto_handoff(&spec, agent, super::Trigger::Manual, Some(&text))
                .map(|h| json!({"handoff": h.id})),
        ),
        Command::Uncertain(item) => (
            "uncertain",
            super::ledger::update(&dir, |l| {
                if !l.uncertain.contains(&item) {
                    l.uncertain.push(item.clone());
                }
            })
            .map(|_| json!({"item": item}))
            .map_err(|e| e.to_string()),
        ),
        Command::Load => (
            "load",
            match super::latest_for_startup(&dir) {
                Some(h) => {
                    let ledger = super::ledger::load(&dir);
                    let text = format!(
                        "[phoenix] continuity:load — latest handoff {} ({}){}\n{}",
                        h.id,
                        h.trigger.as_str(),
                        ledger
                            .current_task
                            .map(|t| format!("; current task: {t}"))
                            .unwrap_or_default(),
                        h.body.trim()
                    );
                    super::inject::to_agent(&spec, agent, &text)
                        .map(|r| json!({"handoff": h.id, "confirmed_by": r.confirmed_by}))
                        .map_err(|e| format!("{e:#}"))
                }
                None => super::inject::to_agent(
                    &spec,
                    agent,
                    "[phoenix] continuity:load — no handoff saved yet for this agent",
                )
                .map(|_| json!({"handoff": null}))
                .map_err(|e| format!("{e:#}")),
            },
        ),
        Command::Search(query) => (
            "search",
            crate::store::search(&fleet, &query, None, None, 5)
                .map_err(|e| e.to_string())
                .and_then(|hits| {
                    let mut text = format!("[phoenix] continuity:search \"{query}\": {} result(s)", hits.len());
                    for h in &hits {
                        text.push_str(&format!(
                            "\n- {} {} {}: {}",
                            h.kind,
                            h.agent,
                            h.reference,
                            h.snippet.replace('\n', " ")
                        ));
                    }
                    super::inject::to_agent(&spec, agent, &text)
                        .map(|r| json!({"query": query, "results": hits.len(), "confirmed_by": r.confirmed_by}))
                        .map_err(|e| format!("{e:#}"))
                }),
        ),
    };
    let _ = match result {
        Ok(details) => dir.record_op(&format!("tap_{what}"), details),
        Err(error) => dir.record_op(&format!("tap_{what}_failed"), json!({"error": error})),
    };
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<Command> {
        let mut tap = Tap::new();
        chunks.iter().flat_map(|c| tap.feed(c)).collect()
    }

    #[test]
    fn every_command_of_the_seed() {
        let out = all(&[
            b"->continuity:save <<<\nCurrent task: auth\nNext: login\n>>>\n\
            ->continuity:load\n->continuity:uncertain \"API rate limit handling unclear\"\n\
            ->continuity:search \"authentication patterns\"\n",
        ]);
        assert_eq!(
            out,
            [
                Command::Save("Current task: auth\nNext: login".into()),
                Command::Load,
                Command::Uncertain("API rate limit handling unclear".into()),
                Command::Search("authentication patterns".into()),
            ]
        );
    }

    #[test]
    fn ansi_escapes_crlf_and_prompts_around_the_marker() {
        let out = all(&[
            b"\x1b[32m\xe2\x8f\xba\x1b[0m ->conti\x1b[1mnuity:\x1b[0mload\r\n",
            b"\x1b]0;title\x07  ->continuity:save <<< one line >>>\r\n",
        ]);
        assert_eq!(out, [Command::Load, Command::Save("one line".into())]);
    }

    #[test]
    fn split_anywhere_gives_the_same_commands() {
        let text: &[u8] =
            b"noise\n->continuity:save <<<\nTask: x \xc3\xa9t\xc3\xa9\n>>>\n->continuity:load\n";
        let whole = all(&[text]);
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(all(&[a, b]), whole, "cut at {cut}");
        }
        assert_eq!(whole[0], Command::Save("Task: x été".into()));
    }

    #[test]
    fn garbage_and_huge_output_cost_bounded_memory() {
        let mut tap = Tap::new();
        let junk: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        let _ = tap.feed(&junk);
        assert!(tap.partial.len() <= MAX_LINE);
        let out = tap.feed(b"\n->continuity:load\n");
        assert_eq!(out, [Command::Load]);
        // An unterminated save block is bounded too, and the next >>> closes it.
        let _ = tap.feed(b"->continuity:save <<<\n");
        for _ in 0..10_000 {
            let _ = tap.feed(b"line of a block that never ends\n");
        }
        let out = tap.feed(b">>>\n");
        match &out[0] {
            Command::Save(t) => assert!(t.len() <= MAX_BLOCK + 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_redrawn_line_counts_as_what_is_left_on_screen() {
        let out = all(&[b"progress 10%\rprogress 100%\r->continuity:load\n"]);
        assert_eq!(out, [Command::Load]);
    }
}
