//! Making values inert before they reach tmux or a pane's keyboard: the one text sanitizer
//! every paste and every typed text goes through, and the escapes for what tmux itself parses
//! (`;` ending an argument splits the command, `#` starts a format in the arguments tmux
//! format-expands).

/// The one rule for text that is pasted or typed into a pane (and for what is saved to be
/// pasted later: handoff bodies, template output, tap answers): no control characters but
/// `\n` and `\t`. With no ESC at all no escape sequence can be smuggled in — no OSC changing
/// the title, no `ESC[201~` ending a bracketed paste early so that the rest arrives as typed
/// keys. A carriage return (alone or before `\n`) becomes a line end, as the text meant it;
/// other C0 and C1 controls and DEL are dropped.
pub fn keyboard_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            '\n' | '\t' => out.push(c),
            // `char::is_control` is exactly Unicode's Cc: C0, DEL and C1.
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `text` as it comes out of a tmux format unchanged: for the arguments tmux format-expands
/// (`-c`, the `pipe-pane` command, `display-message`), where `#(…)` would run a shell
/// command and `#h` would become the host name. tmux turns `##` into `#`, except that a run
/// of `#` before `[` (a style, `#[…]`) is copied as it is: such a run is left alone.
pub fn format_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(at) = rest.find('#') {
        out.push_str(&rest[..at]);
        let run = rest[at..].len() - rest[at..].trim_start_matches('#').len();
        let after = &rest[at + run..];
        let hashes = if after.starts_with('[') { run } else { 2 * run };
        out.extend(std::iter::repeat_n('#', hashes));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// One argument of a tmux command line as tmux will read it: an argument ending in `;` ends
/// the command there (the rest of the line becomes another command), so a value's last `;` is
/// escaped as `\;`, which tmux turns back into `;`. A lone `;` is a command separator.
pub(crate) fn command_argument(arg: &std::ffi::OsStr) -> std::ffi::OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = arg.as_bytes();
    match bytes.split_last() {
        Some((b';', rest)) if !rest.is_empty() => {
            let mut escaped = rest.to_vec();
            escaped.extend_from_slice(b"\\;");
            std::ffi::OsString::from_vec(escaped)
        }
        _ => arg.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_escape_sequence_survives() {
        let hostile = "title\x1b]0;pwned\x07 end\x1b[201~\r!touch /tmp/x\r\n\u{9b}31m\u{7f}\x00";
        let clean = keyboard_text(hostile);
        assert!(
            !clean
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
        assert_eq!(clean, "title]0;pwned end[201~\n!touch /tmp/x\n31m");
    }

    #[test]
    fn ordinary_text_is_unchanged() {
        let text = "Current task: été → ok\n\tindented\nlast";
        assert_eq!(keyboard_text(text), text);
    }

    #[test]
    fn formats_and_separators_are_escaped() {
        assert_eq!(format_literal("/a/#(touch x)/#h"), "/a/##(touch x)/##h");
        assert_eq!(format_literal("#{a}##b#"), "##{a}####b##");
        assert_eq!(format_literal("x#[bold]##[y"), "x#[bold]##[y");
        let arg = |s: &str| command_argument(s.as_ref()).into_string().unwrap();
        assert_eq!(arg("/srv/work;"), "/srv/work\\;");
        assert_eq!(arg("a\\;"), "a\\\\;");
        assert_eq!(arg(";"), ";");
        assert_eq!(arg("a;b"), "a;b");
    }
}
