//! Diagnostics that point into a source file: `file:line:column`, the offending line, a hint.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// One problem found in a file, located by byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Option<Range<usize>>,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Option<Range<usize>>) -> Self {
        Diagnostic {
            message: message.into(),
            span,
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// All diagnostics for one file, with the text needed to show them.
#[derive(Debug, Clone)]
pub struct FileDiagnostics {
    pub file: PathBuf,
    pub source: String,
    pub diagnostics: Vec<Diagnostic>,
}

/// A diagnostic resolved to line and column, for `--json` output and tests.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Located {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl FileDiagnostics {
    pub fn located(&self) -> Vec<Located> {
        self.diagnostics
            .iter()
            .map(|d| {
                let (line, column) = d
                    .span
                    .as_ref()
                    .map(|s| line_col(&self.source, s.start))
                    .unwrap_or((1, 1));
                Located {
                    file: self.file.display().to_string(),
                    line,
                    column,
                    message: d.message.clone(),
                    hint: d.hint.clone(),
                }
            })
            .collect()
    }
}

impl fmt::Display for FileDiagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            render(f, &self.file, &self.source, d)?;
        }
        Ok(())
    }
}

impl std::error::Error for FileDiagnostics {}

fn render(f: &mut fmt::Formatter<'_>, file: &Path, source: &str, d: &Diagnostic) -> fmt::Result {
    writeln!(f, "error: {}", d.message)?;
    match &d.span {
        Some(span) => {
            let (line, column) = line_col(source, span.start);
            let text = source.lines().nth(line - 1).unwrap_or("");
            let gutter = line.to_string().len();
            writeln!(
                f,
                "{:gutter$}--> {}:{}:{}",
                "",
                file.display(),
                line,
                column
            )?;
            writeln!(f, "{:gutter$} |", "")?;
            writeln!(f, "{line} | {text}")?;
            let line_rest = text.chars().count().saturating_sub(column - 1).max(1);
            let width = source[span.start..span.end.min(source.len())]
                .lines()
                .next()
                .map(|s| s.chars().count())
                .unwrap_or(1)
                .clamp(1, line_rest);
            writeln!(
                f,
                "{:gutter$} | {:pad$}{}",
                "",
                "",
                "^".repeat(width),
                pad = column - 1
            )?;
            if let Some(hint) = &d.hint {
                writeln!(f, "{:gutter$} = hint: {hint}", "")?;
            }
        }
        None => {
            writeln!(f, "  --> {}", file.display())?;
            if let Some(hint) = &d.hint {
                writeln!(f, "  = hint: {hint}")?;
            }
        }
    }
    Ok(())
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = source[line_start..offset].chars().count() + 1;
    (line, column)
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        // Optimal string alignment: swapping two adjacent characters is one edit (`nmae`).
        .map(|c| (strsim::osa_distance(word, c), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The hint for a value that is not one of `candidates`: the likely typo's fix, or the list.
pub fn suggest(word: &str, candidates: &[&str]) -> String {
    match did_you_mean(word, candidates) {
        Some(s) => format!("did you mean `{s}`?"),
        None => format!("one of: {}", candidates.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let src = "a = 1\nbc = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 6), (2, 1));
        assert_eq!(line_col(src, 8), (2, 3));
    }

    #[test]
    fn suggests_close_keys_only() {
        let keys = ["silence", "runaway", "error_cascade"];
        assert_eq!(did_you_mean("silense", &keys), Some("silence"));
        assert_eq!(did_you_mean("error_cascde", &keys), Some("error_cascade"));
        assert_eq!(did_you_mean("banana", &keys), None);
        assert_eq!(did_you_mean("nmae", &["name", "state_dir"]), Some("name"));
    }

    #[test]
    fn renders_location_line_and_hint() {
        let fd = FileDiagnostics {
            file: "phoenix.toml".into(),
            source: "[thresholds]\nsilense = \"10m\"\n".into(),
            diagnostics: vec![
                Diagnostic::new("unknown key `silense`", Some(13..20))
                    .with_hint("did you mean `silence`?"),
            ],
        };
        let text = fd.to_string();
        assert!(text.contains("--> phoenix.toml:2:1"), "{text}");
        assert!(text.contains("2 | silense = \"10m\""), "{text}");
        assert!(text.contains("^^^^^^^"), "{text}");
        assert!(text.contains("hint: did you mean `silence`?"), "{text}");
    }
}
