//! What a reply must hold, for the sections that read one (`tcp`, `udp`): `expect` or
//! `expect_regex`; and regexes compiled under one limit, their errors in words, for every
//! section that takes a regex.

use probe::tier::reply::ReplyExpect;

use super::diagnostics::quote;
use super::node::{Diags, Sp};

/// Limit on a compiled regex, so a hostile pattern cannot take the daemon's memory.
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

/// A regular expression over bytes, compiled under the size limit; an invalid one is reported
/// at its value, naming the key it was given for.
pub(super) fn bytes_regex(
    raw: &Sp<String>,
    key: &str,
    diags: &mut Diags,
) -> Result<regex::bytes::Regex, ()> {
    regex::bytes::RegexBuilder::new(&raw.value)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            diags.push((
                raw.pos,
                format!(
                    "invalid regex {} for {key:?}: {}",
                    quote(&raw.value),
                    regex_message(&e)
                ),
            ));
        })
}

/// The one line of a regex syntax error that says what is wrong (the others draw a caret).
pub(super) fn regex_message(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map_or_else(
            || text.split_whitespace().collect::<Vec<_>>().join(" "),
            str::to_owned,
        )
}
