//! A small, documented subset of JSONPath: enough to point at one value in a health document.
//!
//! Health endpoints answer with small JSON documents (`{"status": "UP", "checks": [...]}`), and a
//! condition needs to name one value in them, not to query. So the grammar is deliberately
//! minimal, with no wildcards, filters, slices or recursive descent, so that a path always names
//! at most one value and evaluating it costs a few lookups:
//!
//! ```text
//! path    = "$" segment*
//! segment = "." name              ; name: one or more of A-Z a-z 0-9 _ -
//!         | "[" quoted "]"        ; any field name: "..." with \" and \\ escapes
//!         | "[" index "]"         ; array index: 0, 1, ... (no sign)
//! ```
//!
//! Examples: `$` (the whole document), `$.status`, `$.checks[0].state`, `$["db.primary"].ok`.
//! Paths are parsed once, when the configuration is loaded, so a typo is a configuration error
//! rather than a probe that can never pass.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// One step of a [`JsonPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// An object member, by name.
    Field(String),
    /// An array element, by 0-based index.
    Index(usize),
}

/// A parsed path into a JSON document: see the [module docs](self) for the grammar.
///
/// Compares by its segments, so `$.a` and `$["a"]` are equal; displays in the canonical form
/// (`.name` where the name allows it, `["..."]` otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath {
    segments: Vec<Segment>,
}

/// Why a string is not a valid [`JsonPath`]. `at` is the 0-based character offset of the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidJsonPath {
    /// Every path starts at the document root.
    #[error("JSON path must start with \"$\"")]
    NoRoot,
    /// A character that cannot start or continue a segment.
    #[error("unexpected {ch:?} at offset {at} of JSON path; expected .name, [\"name\"] or [index]")]
    Unexpected {
        /// The offending character.
        ch: char,
        /// Its character offset.
        at: usize,
    },
    /// `.` not followed by a name.
    #[error("empty field name at offset {at} of JSON path; use [\"...\"] for unusual names")]
    EmptyName {
        /// The offset of the `.`.
        at: usize,
    },
    /// A bracket or quote that is never closed.
    #[error("unterminated {what} at offset {at} of JSON path")]
    Unterminated {
        /// `[` or `"`.
        what: &'static str,
        /// Where it was opened.
        at: usize,
    },
    /// An index that is not a plain non-negative integer.
    #[error("invalid array index {text:?} at offset {at} of JSON path")]
    BadIndex {
        /// The text between the brackets.
        text: String,
        /// Where it starts.
        at: usize,
    },
}

/// The characters allowed in a `.name` segment.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl JsonPath {
    /// The path to the whole document, `$`.
    pub fn root() -> Self {
        Self {
            segments: Vec::new(),
        }
    }

    /// The segments after `$`.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The value the path names in `doc`, if there is one.
    ///
    /// A field of a non-object or an index of a non-array is simply absent: the document does not
    /// have the shape the condition expects, which the caller reports as a missing value.
    pub fn find<'a>(&self, doc: &'a Value) -> Option<&'a Value> {
        self.segments
            .iter()
            .try_fold(doc, |value, segment| match segment {
                Segment::Field(name) => value.as_object()?.get(name),
                Segment::Index(index) => value.as_array()?.get(*index),
            })
    }
}

impl FromStr for JsonPath {
    type Err = InvalidJsonPath;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let chars: Vec<char> = s.chars().collect();
        if chars.first() != Some(&'$') {
            return Err(InvalidJsonPath::NoRoot);
        }
        let mut segments = Vec::new();
        let mut i = 1;
        while let Some(&c) = chars.get(i) {
            match c {
                '.' => {
                    let start = i + 1;
                    let end = chars[start..]
                        .iter()
                        .position(|c| !is_name_char(*c))
                        .map_or(chars.len(), |n| start + n);
                    if end == start {
                        return Err(InvalidJsonPath::EmptyName { at: i });
                    }
                    segments.push(Segment::Field(chars[start..end].iter().collect()));
                    i = end;
                }
                '[' if chars.get(i + 1) == Some(&'"') => {
                    let (name, next) = quoted(&chars, i + 1)?;
                    if chars.get(next) != Some(&']') {
                        return Err(InvalidJsonPath::Unterminated { what: "[", at: i });
                    }
                    segments.push(Segment::Field(name));
                    i = next + 1;
                }
                '[' => {
                    let start = i + 1;
                    let close = chars[start..]
                        .iter()
                        .position(|c| *c == ']')
                        .map(|n| start + n)
                        .ok_or(InvalidJsonPath::Unterminated { what: "[", at: i })?;
                    let text: String = chars[start..close].iter().collect();
                    // `usize::from_str` accepts a leading `+`; an index is digits only.
                    let index = text
                        .chars()
                        .all(|c| c.is_ascii_digit())
                        .then(|| text.parse::<usize>().ok())
                        .flatten()
                        .ok_or_else(|| InvalidJsonPath::BadIndex {
                            text: text.clone(),
                            at: start,
                        })?;
                    segments.push(Segment::Index(index));
                    i = close + 1;
                }
                ch => return Err(InvalidJsonPath::Unexpected { ch, at: i }),
            }
        }
        Ok(Self { segments })
    }
}

/// Reads a `"..."` string starting at `open` (the quote); returns it and the index after it.
fn quoted(chars: &[char], open: usize) -> Result<(String, usize), InvalidJsonPath> {
    let mut out = String::new();
    let mut i = open + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(InvalidJsonPath::Unterminated {
                    what: "\"",
                    at: open,
                });
            }
            Some('"') => return Ok((out, i + 1)),
            Some('\\') => match chars.get(i + 1) {
                Some(c @ ('"' | '\\')) => {
                    out.push(*c);
                    i += 2;
                }
                Some(&ch) => return Err(InvalidJsonPath::Unexpected { ch, at: i + 1 }),
                None => {
                    return Err(InvalidJsonPath::Unterminated {
                        what: "\"",
                        at: open,
                    });
                }
            },
            Some(c) => {
                out.push(*c);
                i += 1;
            }
        }
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for segment in &self.segments {
            match segment {
                Segment::Field(name) if !name.is_empty() && name.chars().all(is_name_char) => {
                    write!(f, ".{name}")?;
                }
                Segment::Field(name) => {
                    f.write_str("[\"")?;
                    for c in name.chars() {
                        if matches!(c, '"' | '\\') {
                            f.write_str("\\")?;
                        }
                        write!(f, "{c}")?;
                    }
                    f.write_str("\"]")?;
                }
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(s: &str) -> JsonPath {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(path("$"), JsonPath::root());
        assert_eq!(
            path("$.checks[0].state").segments(),
            &[
                Segment::Field("checks".into()),
                Segment::Index(0),
                Segment::Field("state".into())
            ]
        );
        assert_eq!(path("$[\"a\"]"), path("$.a"));
        assert_eq!(
            path(r#"$["db.primary"]["q\"\\"]"#).segments(),
            &[
                Segment::Field("db.primary".into()),
                Segment::Field("q\"\\".into())
            ]
        );
    }

    #[test]
    fn displays_canonically_and_round_trips() {
        for text in [
            "$",
            "$.a.b_c-d[12]",
            r#"$["db.primary"].ok"#,
            r#"$["q\"\\"]"#,
            r#"$[""]"#,
        ] {
            assert_eq!(path(text).to_string(), text);
            assert_eq!(path(&path(text).to_string()), path(text));
        }
        assert_eq!(path(r#"$["a"]"#).to_string(), "$.a");
    }

    #[test]
    fn rejects_what_it_does_not_support() {
        let err = |s: &str| s.parse::<JsonPath>().unwrap_err();
        assert_eq!(err("status"), InvalidJsonPath::NoRoot);
        assert_eq!(err(""), InvalidJsonPath::NoRoot);
        assert_eq!(err("$."), InvalidJsonPath::EmptyName { at: 1 });
        assert_eq!(err("$.a..b"), InvalidJsonPath::EmptyName { at: 3 });
        assert_eq!(err("$.a b"), InvalidJsonPath::Unexpected { ch: ' ', at: 3 });
        assert_eq!(err("$a"), InvalidJsonPath::Unexpected { ch: 'a', at: 1 });
        assert_eq!(
            err("$[0"),
            InvalidJsonPath::Unterminated { what: "[", at: 1 }
        );
        assert_eq!(
            err("$[\"a"),
            InvalidJsonPath::Unterminated { what: "\"", at: 2 }
        );
        assert_eq!(
            err("$[\"a\""),
            InvalidJsonPath::Unterminated { what: "[", at: 1 }
        );
        assert!(matches!(err("$[-1]"), InvalidJsonPath::BadIndex { .. }));
        assert!(matches!(err("$[+1]"), InvalidJsonPath::BadIndex { .. }));
        assert!(matches!(err("$[*]"), InvalidJsonPath::BadIndex { .. }));
        assert!(matches!(err("$[]"), InvalidJsonPath::BadIndex { .. }));
        assert!(matches!(err("$..a"), InvalidJsonPath::EmptyName { .. }));
    }

    #[test]
    fn finds_values_or_nothing() {
        let doc = json!({"status": "UP", "checks": [{"ok": true}], "n": null, "a.b": 1});
        assert_eq!(path("$.status").find(&doc), Some(&json!("UP")));
        assert_eq!(path("$.checks[0].ok").find(&doc), Some(&json!(true)));
        assert_eq!(path("$.n").find(&doc), Some(&Value::Null));
        assert_eq!(path("$[\"a.b\"]").find(&doc), Some(&json!(1)));
        assert_eq!(path("$").find(&doc), Some(&doc));
        assert_eq!(path("$.missing").find(&doc), None);
        assert_eq!(path("$.checks[1]").find(&doc), None);
        assert_eq!(path("$.status.x").find(&doc), None);
        assert_eq!(path("$.checks.ok").find(&doc), None);
        assert_eq!(path("$[0]").find(&doc), None);
    }
}
