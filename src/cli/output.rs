//! How the CLI writes: one JSON style (pretty, `format_version` first) for every `--json`,
//! errors as JSON when `--json` was asked for, colour only where a person reads it, and
//! nothing from outside phoenix reaching the operator's terminal raw.
//!
//! Colour goes through anstream, which strips escape codes when the stream is not a terminal,
//! when `NO_COLOR` is set or after `--no-color` (`ColorChoice::Never`), so callers style
//! freely and never check a TTY themselves.
//!
//! Every human line goes through one writer ([`out`], [`err`]; the CLI's `print!`-family
//! macros are these, see `cli/mod.rs`), which shows any control character, escape sequence,
//! bidi control or invisible character as a visible stand-in ([`crate::text::terminal_text`]):
//! an agent's state, handoff, message or pane, a host's answer, a path in an error. phoenix's
//! own styling gets through because [`paint`] marks it with a key made fresh for each process
//! instead of ESC, which the writer turns back into ESC: no text from outside knows the key, so
//! none can pass for phoenix's styling. JSON needs none of this: serde_json writes C0 as `\u`
//! escapes, and [`json`] escapes DEL, C1 and the invisible characters too.

use std::borrow::Cow;
use std::io::Write;
use std::sync::OnceLock;

use anstyle::{AnsiColor, Style};
use serde::Serialize;
use serde_json::{Map, Value};

/// The version of every `--json` document phoenix prints (and of `GET /api/status`). Bumped
/// when a field changes meaning or disappears; new fields do not bump it.
pub const FORMAT_VERSION: u32 = crate::plan::FORMAT_VERSION;

pub const ADD: Style = AnsiColor::Green.on_default();
pub const CHANGE: Style = AnsiColor::Yellow.on_default();
pub const REMOVE: Style = AnsiColor::Red.on_default();
pub const ERROR: Style = AnsiColor::Red.on_default().bold();
pub const HINT: Style = AnsiColor::Cyan.on_default();

/// `text` in `style` (the escapes are stripped on the way out where colour is off). Only
/// [`out`] and [`err`] understand the result: its escapes are marked (see the module's doc).
pub fn paint(style: Style, text: &str) -> String {
    let key = style_key();
    let open = style.render().to_string().replace('\x1b', key);
    let close = style.render_reset().to_string().replace('\x1b', key);
    format!("{open}{text}{close}")
}

/// What stands for ESC in phoenix's own styling until the writer: eight characters of a
/// private-use plane drawn from the process's random hash keys (128 bits), so that no text
/// from outside the process can hold it.
fn style_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new();
        (0..8u64)
            .map(|i| char::from_u32(0xF0000 + (random.hash_one(i) & 0xFFFF) as u32).unwrap_or('?'))
            .collect()
    })
}

/// `text` as it may reach a terminal: phoenix's own styling (marked by [`paint`]) as escape
/// sequences, everything else through [`crate::text::terminal_text`]. With `styled` false,
/// phoenix's styling is dropped too (for tests comparing the words).
fn for_terminal(text: &str, styled: bool) -> Cow<'_, str> {
    let key = style_key();
    if !text.contains(key) {
        return crate::text::terminal_text(text);
    }
    let mut shown = String::with_capacity(text.len());
    let mut pieces = text.split(key);
    shown.push_str(&crate::text::terminal_text(
        pieces.next().unwrap_or_default(),
    ));
    for piece in pieces {
        // A marked escape is a style `paint` rendered: `[`, parameters, `m`.
        let params = piece
            .strip_prefix('[')
            .map(|rest| {
                rest.len()
                    - rest
                        .trim_start_matches(|c: char| c.is_ascii_digit() || c == ';')
                        .len()
            })
            .filter(|&n| piece[1 + n..].starts_with('m'));
        let rest = match params {
            Some(n) => {
                if styled {
                    shown.push('\x1b');
                    shown.push_str(&piece[..n + 2]);
                }
                &piece[n + 2..]
            }
            None => piece,
        };
        shown.push_str(&crate::text::terminal_text(rest));
    }
    Cow::Owned(shown)
}

/// `text` without phoenix's styling and with outside text made inert: what a terminal without
/// colour shows.
#[cfg(test)]
pub fn unstyled(text: &str) -> String {
    for_terminal(text, false).into_owned()
}

/// A health word in its colour: green when all is well, yellow on the way back or with a
/// warning, red when down.
pub fn health(word: &str) -> Style {
    match word {
        "healthy" => ADD,
        "warning" | "recovering" => CHANGE,
        "down" => REMOVE,
        _ => Style::new(),
    }
}

/// A rendered plan with its symbols coloured as Terraform does: `+` green, `~` yellow, `-`
/// and `-/+` red (hook-file diff lines the same way). The plan renders itself without
/// colour; only the CLI, which knows where the text goes, paints it.
pub fn plan(text: &str) -> String {
    text.split_inclusive('\n')
        .map(|line| {
            let body = line.trim_start();
            let style = if body.starts_with("-/+") || body.starts_with('-') {
                REMOVE
            } else if body.starts_with('+') {
                ADD
            } else if body.starts_with('~') {
                CHANGE
            } else {
                return line.to_string();
            };
            let (content, newline) = match line.strip_suffix('\n') {
                Some(c) => (c, "\n"),
                None => (line, ""),
            };
            format!("{}{newline}", paint(style, content))
        })
        .collect()
}

/// Colour off for the whole process (`--no-color`); `NO_COLOR` and pipes are seen by anstream.
pub fn disable_colour() {
    anstream::ColorChoice::Never.write_global();
}

/// A `--json` document: an object with `format_version` first. Every command's JSON goes
/// through here so that all share one style.
pub fn document(value: impl Serialize) -> Value {
    let value = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut doc = Map::new();
    doc.insert("format_version".into(), FORMAT_VERSION.into());
    match value {
        Value::Object(fields) => {
            for (k, v) in fields {
                if k != "format_version" {
                    doc.insert(k, v);
                }
            }
        }
        // Callers name their lists (`{"events": [...]}`); anything else still gets a version.
        other => {
            doc.insert("value".into(), other);
        }
    }
    Value::Object(doc)
}

/// Print a `--json` document (pretty, one trailing newline).
pub fn json(value: impl Serialize) {
    let doc = document(value);
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    // Straight to stdout: JSON holds no escape sequence for anstream to strip (serde_json
    // writes control characters as `\u` escapes, `inert_json` the rest), and a thousand
    // agents' status is a megabyte it would scan byte by byte.
    write_out(std::io::stdout().lock(), &inert_json(text));
}

/// `value` as one line of JSON (for `--follow --json` and the host protocol), escaped as
/// [`json`] escapes: [`out`] leaves it as it is.
pub fn json_line(value: &impl Serialize) -> String {
    let mut text = inert_json(serde_json::to_string(value).unwrap_or_default());
    text.push('\n');
    text
}

/// JSON text with what serde_json writes as it is but a terminal acts on or hides (DEL, C1,
/// bidi controls, invisible characters: [`crate::text::terminal_text`]'s list) as `\u`
/// escapes. Outside its strings JSON is ASCII without DEL, so every such character is in a
/// string, where an escape means the same character.
fn inert_json(text: String) -> String {
    let ascii_without_del = text.bytes().all(|b| b < 0x7f);
    if ascii_without_del || !text.chars().any(crate::text::needs_stand_in) {
        return text;
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if crate::text::needs_stand_in(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                escaped.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            escaped.push(c);
        }
    }
    escaped
}

/// An error as `--json` prints it, on stdout so a script reads one stream:
/// `{"format_version":1,"ok":false,"error":{"message":…,"hint":…}}`.
pub fn error_document(message: &str, hint: Option<&str>) -> Value {
    document(serde_json::json!({
        "ok": false,
        "error": {"message": message, "hint": hint},
    }))
}

/// Write to stdout, treating a closed pipe (`phoenix status | head`) as success. What came
/// from outside phoenix is shown inert, phoenix's own colour kept (see the module's doc).
pub fn out(text: &str) {
    write_out(anstream::stdout().lock(), &for_terminal(text, true));
}

/// Write to stderr as [`out`] writes to stdout (an error, a warning, a host's stderr).
pub fn err(text: &str) {
    let mut stderr = anstream::stderr().lock();
    let _ = stderr
        .write_all(for_terminal(text, true).as_bytes())
        .and_then(|_| stderr.flush());
}

/// Write `text` to `stdout` and flush; a closed pipe ends the process as a success.
fn write_out(mut stdout: impl Write, text: &str) {
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ESC in `shown` starts an SGR (colour) sequence, and no C1 control is there.
    fn only_colour_escapes(shown: &str) -> bool {
        let mut rest = shown;
        while let Some(at) = rest.find('\x1b') {
            let after = &rest[at + 1..];
            let Some(params) = after.strip_prefix('[') else {
                return false;
            };
            let n = params.len()
                - params
                    .trim_start_matches(|c: char| c.is_ascii_digit() || c == ';')
                    .len();
            if !params[n..].starts_with('m') {
                return false;
            }
            rest = &params[n + 1..];
        }
        !shown.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c))
    }

    #[test]
    fn phoenix_colour_is_kept_and_an_agents_escapes_are_shown() {
        let agent = "task\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u{9b}1;1H";
        let line = format!("{} {agent}\n", paint(ADD, "healthy"));
        let shown = for_terminal(&line, true);
        assert!(shown.starts_with(&format!("{}healthy{}", ADD.render(), ADD.render_reset())));
        assert!(shown.ends_with(" task␛]52;c;cm0gLXJmIH4=␇␛[2J\\u{9b}1;1H\n"));
        assert!(only_colour_escapes(&shown), "{shown:?}");
        assert_eq!(
            unstyled(&line),
            format!("healthy {}\n", crate::text::terminal_text(agent))
        );
    }

    #[test]
    fn an_agent_cannot_pass_its_escapes_for_phoenix_colour() {
        // The plain SGR phoenix's green renders to, and a mark without the key: both shown.
        let forged = format!("{}fake{}", ADD.render(), ADD.render_reset());
        let shown = for_terminal(&forged, true);
        assert!(!shown.contains('\x1b'), "{shown:?}");
        // Outside text painted by phoenix, holding part of the key: styled only where phoenix
        // painted.
        let line = paint(
            REMOVE,
            &format!("down: {}[2J", style_key().chars().next().unwrap()),
        );
        let shown = for_terminal(&line, true);
        assert_eq!(shown.matches('\x1b').count(), 2, "{shown:?}");
        assert!(only_colour_escapes(&shown));
    }

    #[test]
    fn json_escapes_what_a_terminal_would_act_on() {
        let value = serde_json::json!({"task": "a\x1b]0;t\x07\u{9b}2J\u{202e}x\u{7f}\u{e0041}é"});
        let line = json_line(&value);
        assert!(line.ends_with("}\n"));
        assert!(!line.chars().any(crate::text::needs_stand_in), "{line}");
        assert!(
            line.contains(r"\u001b]0;t\u0007\u009b2J\u202ex\u007f\udb40\udc41é"),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
        let pretty = inert_json(serde_json::to_string_pretty(&value).unwrap());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap(),
            value
        );
        // What `out` then does to it: nothing.
        assert_eq!(for_terminal(&line, true), line);
    }
}
