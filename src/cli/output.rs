//! How the CLI writes: one JSON style (pretty, `format_version` first) for every `--json`,
//! errors as JSON when `--json` was asked for, and colour only where a person reads it.
//!
//! Colour goes through anstream, which strips escape codes when the stream is not a terminal,
//! when `NO_COLOR` is set or after `--no-color` (`ColorChoice::Never`), so callers style
//! freely and never check a TTY themselves.

use std::io::Write;

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

/// `text` in `style` (the escapes are stripped on the way out where colour is off).
pub fn paint(style: Style, text: &str) -> String {
    format!("{style}{text}{style:#}")
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
    // writes control characters as `\u` escapes), and a thousand agents' status is a
    // megabyte it would scan byte by byte.
    write_out(std::io::stdout().lock(), &text);
}

/// An error as `--json` prints it, on stdout so a script reads one stream:
/// `{"format_version":1,"ok":false,"error":{"message":…,"hint":…}}`.
pub fn error_document(message: &str, hint: Option<&str>) -> Value {
    document(serde_json::json!({
        "ok": false,
        "error": {"message": message, "hint": hint},
    }))
}

/// Write to stdout, treating a closed pipe (`phoenix status | head`) as success.
pub fn out(text: &str) {
    write_out(anstream::stdout().lock(), text);
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
