//! Small text helpers shared by every layer: shortening for one-line displays and prompts,
//! counted nouns, and finding the JSON object in an answer wrapped in prose; for the tests,
//! the crate's own source text.

use serde_json::Value;

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
    use super::counted;

    #[test]
    fn one_is_singular_and_zero_and_many_are_plural() {
        assert_eq!(counted(0, "agent"), "0 agents");
        assert_eq!(counted(1, "agent"), "1 agent");
        assert_eq!(counted(3, "agent"), "3 agents");
    }
}
