//! What a reply must hold, for the sections that read one (`tcp`, `udp`): `expect` or
//! `expect_regex`; and regex errors in words, for every section that takes a regex.

use probe::tier::reply::ReplyExpect;

use super::diagnostics::quote;
use super::node::{Diags, Sp};

/// Limit on a compiled `expect_regex`, so a hostile pattern cannot take the daemon's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// `expect` or `expect_regex` (at most one) as what a reply must hold, for the sections that
/// read a reply (`tcp`, `udp`).
pub(super) fn reply_expect(
    expect: Option<Sp<String>>,
    expect_regex: Option<Sp<String>>,
    diags: &mut Diags,
) -> Result<Option<ReplyExpect>, ()> {
    match (expect, expect_regex) {
        (Some(_), Some(regex)) => {
            diags.push((
                regex.key,
                r#""expect" and "expect_regex" are mutually exclusive: keep only one"#.to_owned(),
            ));
            Err(())
        }
        (Some(text), None) => Ok(Some(ReplyExpect::Contains(text.value.into_bytes()))),
        (None, Some(regex)) => {
            bytes_regex(&regex, "expect_regex", diags).map(|re| Some(ReplyExpect::Regex(re)))
        }
        (None, None) => Ok(None),
    }
}

/// A regex written at `raw` for `field`, compiled within the size limit; an error at the value.
pub(crate) fn regex(raw: &Sp<String>, field: &str, diags: &mut Diags) -> Result<regex::Regex, ()> {
    regex::RegexBuilder::new(&raw.value)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            diags.push((
                raw.pos,
                format!(
                    "invalid regex {} for {field:?}: {}",
                    quote(&raw.value),
                    regex_message(&e)
                ),
            ));
        })
}

/// [`regex`], over bytes (a reply's body or a TCP line need not be UTF-8).
pub(crate) fn bytes_regex(
    raw: &Sp<String>,
    field: &str,
    diags: &mut Diags,
) -> Result<regex::bytes::Regex, ()> {
    regex::bytes::RegexBuilder::new(&raw.value)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            diags.push((
                raw.pos,
                format!(
                    "invalid regex {} for {field:?}: {}",
                    quote(&raw.value),
                    regex_message(&e)
                ),
            ));
        })
}

/// The one line of a regex syntax error that says what is wrong (the others draw a caret).
pub(crate) fn regex_message(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map_or_else(
            || text.split_whitespace().collect::<Vec<_>>().join(" "),
            str::to_owned,
        )
}
