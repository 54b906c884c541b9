//! How problems are told: [`ConfigError`] (`FILE:LINE:COL: message`) and [`ConfigErrors`], and
//! the helpers every message goes through: did-you-mean suggestions, quoting user text, keeping a
//! message on one bounded line.
//!
//! In one place so that every module words its problems the same way, and so that a hostile
//! value (a huge key, a control character) is tamed once for all of them.

use std::path::{Path, PathBuf};

/// A 1-based line and column in the source text (read from the YAML in `node`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// 1-based line; 0 when unknown.
    pub line: u64,
    /// 1-based column; 0 when unknown.
    pub column: u64,
}

impl Pos {
    /// A file-level position: no line or column applies.
    pub const NONE: Self = Self { line: 0, column: 0 };
}

/// One configuration problem, located so that an editor or a person can jump to it.
///
/// Displays as `FILE:LINE:COL: message`, the format editors and CI annotations understand. Lines
/// and columns are 1-based; both are 0 for problems with the file as a whole (unreadable, empty
/// directory), which display as `FILE: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or directory) the problem is in.
    pub file: PathBuf,
    /// 1-based line of the offending key or value; 0 when the whole file is concerned.
    pub line: u64,
    /// 1-based column of the offending key or value; 0 when the whole file is concerned.
    pub column: u64,
    /// What is wrong, on one line, naming the field.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// A problem at `pos` in `file`, its message kept to one bounded line.
    pub fn at(file: &Path, pos: Pos, message: &str) -> Self {
        Self {
            file: file.to_path_buf(),
            line: pos.line,
            column: pos.column,
            message: one_line(message),
        }
    }
}

/// Every problem of one file, in the order of their positions.
pub fn located(file: &Path, mut diags: Vec<(Pos, String)>) -> ConfigErrors {
    diags.sort_by_key(|(pos, _)| *pos);
    ConfigErrors(
        diags
            .iter()
            .map(|(pos, message)| ConfigError::at(file, *pos, message))
            .collect(),
    )
}

/// Every problem found while loading, so that one run shows all of them.
///
/// Displays one [`ConfigError`] per line. Never empty. Errors are ordered by file (in load order),
/// then by position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_lines(.0))]
pub struct ConfigErrors(pub Vec<ConfigError>);

fn display_lines(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

/// One error about a file (or directory) as a whole.
pub fn file_error(file: &Path, message: String) -> ConfigErrors {
    ConfigErrors(vec![ConfigError {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        message: one_line(&message),
    }])
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    if word.chars().count() > 64 {
        return None;
    }
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.chars().count() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Edit distance counting insertions, deletions, substitutions and swaps of adjacent characters
/// (the usual typos), case-insensitively: the optimal string alignment distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // d[i][j]: distance between the first i chars of a and the first j chars of b.
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A user-supplied string for a message: quoted, escaped and shortened.
pub fn quote(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// Keeps a message on one line (the output is one error per line) and bounded in length.
pub fn one_line(message: &str) -> String {
    const MAX: usize = 1000;
    let mut out = String::with_capacity(message.len().min(MAX));
    for c in message.chars() {
        if out.len() >= MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_common_typos_only() {
        let keys = ["interval", "timeout", "send", "id", "tcp"];
        assert_eq!(did_you_mean("intervall", keys), Some("interval"));
        assert_eq!(did_you_mean("Timeout", keys), Some("timeout"));
        assert_eq!(did_you_mean("sned", keys), Some("send"));
        assert_eq!(did_you_mean("ip", keys), Some("id"));
        assert_eq!(did_you_mean("http", keys), None);
        assert_eq!(did_you_mean("colour", keys), None);
        assert_eq!(did_you_mean(&"x".repeat(10_000), keys), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("ab", "ba"), 1);
    }

    #[test]
    fn messages_are_single_bounded_lines() {
        assert_eq!(one_line("a\nb\tc"), "a\\nb\\tc");
        assert!(one_line(&"é".repeat(5_000)).len() < 1_100);
        assert_eq!(quote("a\"b"), r#""a\"b""#);
        assert!(quote(&"ü".repeat(500)).ends_with("\"..."));
    }
}
