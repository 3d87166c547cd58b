//! Small text helpers shared by every layer: shortening for one-line displays and prompts,
//! counted nouns, finding the JSON object in an answer wrapped in prose, and the one rule for
//! text from outside phoenix on its way to the operator's terminal; for the tests, the
//! crate's own source text.

use std::borrow::Cow;

use serde_json::Value;

/// Text from outside phoenix (what an agent wrote or its pane shows, what a host answered, a
/// file's content or name) as it may reach the operator's terminal: every character a terminal
/// would act on instead of showing, or that would hide or reorder what is shown, is shown as a
/// visible stand-in. The keyboard's rule is `world::inert::keyboard_text`; this one is for the
/// screen, where a person should see that something was attempted.
///
/// - `\n` and `\t` stay; `\r\n` is a line end; a lone `\r` (which would overwrite the line)
///   is shown as `␍`.
/// - The other C0 controls and DEL become their Control Pictures (ESC is `␛`, BEL `␇`): no
///   escape sequence survives, so no OSC 52 clipboard write, OSC 0 title, CSI screen clear or
///   DCS reaches the terminal; what it would have said stays readable (`␛]0;title␇`).
/// - C1 controls (U+0080–U+009F: `\u{9b}` is an 8-bit CSI to many terminals), bidi controls
///   (Trojan Source) and invisible characters (zero-width space, word joiner, BOM, line and
///   paragraph separators, soft hyphen, Unicode tag characters) are shown as `\u{…}`.
///
/// Borrows when nothing needs a stand-in (the usual case: phoenix prints megabytes of status).
pub fn terminal_text(text: &str) -> Cow<'_, str> {
    let plain = |b: u8| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t';
    if text.bytes().all(plain) || !text.chars().any(needs_stand_in) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\t' => out.push(c),
            // Control Pictures: U+2400 + the code for C0, U+2421 for DEL.
            '\0'..='\x1f' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('?')),
            '\x7f' => out.push('\u{2421}'),
            c if needs_stand_in(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether `c` is acted on, hidden or reorders text on a terminal (see [`terminal_text`]).
pub fn needs_stand_in(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c,
            '\u{ad}'                       // soft hyphen
            | '\u{61c}'                    // Arabic letter mark
            | '\u{180e}'                   // Mongolian vowel separator
            | '\u{200b}' | '\u{200e}' | '\u{200f}' // zero-width space, LRM, RLM
            | '\u{2028}' | '\u{2029}'       // line and paragraph separators
            | '\u{202a}'..='\u{202e}'       // bidi embeddings and overrides
            | '\u{2060}'..='\u{2064}'       // word joiner, invisible operators
            | '\u{2066}'..='\u{2069}'       // bidi isolates
            | '\u{206a}'..='\u{206f}'       // deprecated format characters
            | '\u{feff}'                   // zero-width no-break space (BOM)
            | '\u{fff9}'..='\u{fffb}'       // interlinear annotations
            | '\u{e0000}'..='\u{e007f}' // tag characters: invisible ASCII
        )
}

/// `text` cut to `max` characters, keeping the start.
pub fn shorten(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// The longest start of `text` of at most `max` bytes that ends between two characters: a
/// cut by byte length never splits a character.
pub fn cut_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Bytes read up to a byte limit, as text: an invalid sequence inside is shown as U+FFFD (as
/// `String::from_utf8_lossy` does), but a character the limit cut at the end is left out, not
/// shown as a broken one.
pub fn cut_utf8(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        // Only the end is incomplete: everything before it is valid.
        Err(e) if e.error_len().is_none() => {
            Cow::Borrowed(std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default())
        }
        Err(_) => {
            // Invalid inside: the whole as lossy, without an incomplete last character.
            let mut end = bytes.len();
            let start = end.saturating_sub(3);
            for i in (start..end).rev() {
                if bytes[i] & 0xc0 != 0x80 {
                    let want = match bytes[i] {
                        b if b >= 0xf0 => 4,
                        b if b >= 0xe0 => 3,
                        b if b >= 0xc0 => 2,
                        _ => 1,
                    };
                    if end - i < want {
                        end = i;
                    }
                    break;
                }
            }
            String::from_utf8_lossy(&bytes[..end]).into_owned().into()
        }
    }
}

/// `text` cut to `max` characters, keeping the end (where an error usually is).
pub fn keep_end(text: &str, max: usize) -> String {
    let text = text.trim();
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let mut s = String::from("…");
    s.extend(text.chars().skip(n - max + 1));
    s
}

/// The first JSON object in `text` (answers often come wrapped in prose or code fences).
pub fn json_object(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str(trimmed) {
        return Some(v);
    }
    let mut start = 0;
    while let Some(i) = text[start..].find('{') {
        let from = start + i;
        let mut stream = serde_json::Deserializer::from_str(&text[from..]).into_iter::<Value>();
        if let Some(Ok(v @ Value::Object(_))) = stream.next() {
            return Some(v);
        }
        start = from + 1;
    }
    None
}

/// `counted(1, "agent")` is "1 agent", `counted(3, "agent")` is "3 agents".
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Every Rust file below `src/` as (its path there, `/`-separated, and its text): for the
/// tests that check a rule over the whole source (imports, who names tmux, who branches on
/// the kind of CLI).
/// Quote one word for a POSIX shell: the hook commands the CLIs run through `sh -c`, the
/// pipe command tmux runs, the one command line ssh hands to a host's login shell.
pub fn sh_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./=:,+@%".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What kind of JSON value `v` is, as an error message says it ("a string", "an array").
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Terminal escape sequences (CSI, and OSC/DCS/APC/PM/SOS strings up to BEL or ESC \\) and the
/// C0 controls other than tab, newline and carriage return taken out of a byte stream, one byte
/// at a time: a sequence may span the chunks the stream arrives in. The tap reads markers from
/// what is left, the pane log keeps it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct EscapeFilter {
    state: Escape,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Escape {
    #[default]
    None,
    /// After ESC.
    Start,
    /// CSI: ESC [ … final byte.
    Csi,
    /// OSC, DCS, APC, PM, SOS: until BEL or ESC \\.
    String,
    StringEsc,
}

impl EscapeFilter {
    /// `b` when it is text outside any escape sequence.
    pub fn feed(&mut self, b: u8) -> Option<u8> {
        match self.state {
            Escape::None if b == 0x1b => {
                self.state = Escape::Start;
                None
            }
            Escape::None => (b >= 0x20 || matches!(b, b'\n' | b'\r' | b'\t')).then_some(b),
            Escape::Start => {
                self.state = match b {
                    b'[' => Escape::Csi,
                    b']' | b'P' | b'_' | b'^' | b'X' => Escape::String,
                    _ => Escape::None,
                };
                None
            }
            Escape::Csi => {
                if (0x40..=0x7e).contains(&b) {
                    self.state = Escape::None;
                }
                None
            }
            Escape::String => {
                match b {
                    0x07 => self.state = Escape::None,
                    0x1b => self.state = Escape::StringEsc,
                    _ => {}
                }
                None
            }
            Escape::StringEsc => {
                self.state = if b == b'\\' {
                    Escape::None
                } else {
                    Escape::String
                };
                None
            }
        }
    }
}

#[cfg(test)]
pub(crate) fn crate_sources() -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(&src).unwrap().to_string_lossy();
            (rel.into_owned(), std::fs::read_to_string(&file).unwrap())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{counted, terminal_text};

    /// Whether a terminal would act on something in `text` (ESC, C0 but `\n` and `\t`, DEL,
    /// C1) or show it reordered or hidden.
    fn acts_on_terminal(text: &str) -> bool {
        text.chars().any(super::needs_stand_in)
    }

    #[test]
    fn osc_52_clipboard_write_is_shown_not_sent() {
        let shown = terminal_text("ok\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07done");
        assert_eq!(shown, "ok␛]52;c;Y3VybCBldmlsIHwgc2g=␇done");
        assert!(!acts_on_terminal(&shown));
    }

    #[test]
    fn title_change_screen_clear_and_dcs_are_shown_not_sent() {
        assert_eq!(terminal_text("\x1b]0;pwned\x1b\\"), "␛]0;pwned␛\\");
        assert_eq!(terminal_text("\x1b[2J\x1b[H\x1b[3J"), "␛[2J␛[H␛[3J");
        assert_eq!(terminal_text("\x1bP+q544e\x1b\\"), "␛P+q544e␛\\");
        assert_eq!(terminal_text("lone \x1b"), "lone ␛");
        assert_eq!(terminal_text("\x1b[31mred\x1b[0m"), "␛[31mred␛[0m");
    }

    #[test]
    fn eight_bit_controls_and_invisible_characters_are_shown_as_code_points() {
        assert_eq!(
            terminal_text("a\u{9b}2Jb\u{9d}0;t\u{9c}"),
            "a\\u{9b}2Jb\\u{9d}0;t\\u{9c}"
        );
        assert_eq!(
            terminal_text("admin\u{202e}gnp.exe\u{2066}x\u{2069}"),
            "admin\\u{202e}gnp.exe\\u{2066}x\\u{2069}"
        );
        assert_eq!(
            terminal_text("a\u{200b}b\u{feff}c"),
            "a\\u{200b}b\\u{feff}c"
        );
        assert_eq!(
            terminal_text("hi\u{e0041}\u{e0042}"),
            "hi\\u{e0041}\\u{e0042}"
        );
        assert_eq!(terminal_text("\x00\x08\x7f"), "␀␈␡");
        assert!(!acts_on_terminal(&terminal_text("\u{85}\u{9f}\u{80}")));
    }

    #[test]
    fn ordinary_text_newlines_and_tabs_are_kept() {
        let text = "Current task: été → ok 日本語 👨\u{200d}👩 \u{feed}\n\tindented\nlast\n";
        assert_eq!(terminal_text(text), text);
        assert!(matches!(terminal_text(text), std::borrow::Cow::Borrowed(_)));
        assert_eq!(terminal_text("line\r\nnext\rover"), "line\nnext␍over");
    }

    /// A cut by byte length never splits a character: `logs` and the tap showed a broken one.
    #[test]
    fn a_cut_by_bytes_ends_between_characters() {
        use super::{cut_bytes, cut_utf8};
        assert_eq!(cut_bytes("été", 2), "é");
        assert_eq!(cut_bytes("été", 1), "");
        assert_eq!(cut_bytes("日本", 5), "日");
        assert_eq!(cut_bytes("abc", 10), "abc");
        let bytes = "aé日👨".as_bytes();
        for n in 0..=bytes.len() {
            let text = cut_utf8(&bytes[..n]);
            assert!(!text.contains('\u{fffd}'), "{n}: {text:?}");
            assert!("aé日👨".starts_with(&*text), "{n}: {text:?}");
        }
        // Invalid inside stays visible as such; only the cut at the end goes.
        assert_eq!(cut_utf8(b"a\xffb\xc3"), "a\u{fffd}b");
        assert_eq!(cut_utf8(b"a\xffb\xc3\xa9"), "a\u{fffd}b\u{e9}");
    }

    #[test]
    fn one_is_singular_and_zero_and_many_are_plural() {
        assert_eq!(counted(0, "agent"), "0 agents");
        assert_eq!(counted(1, "agent"), "1 agent");
        assert_eq!(counted(3, "agent"), "3 agents");
    }
}
