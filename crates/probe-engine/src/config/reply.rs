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
        (None, Some(regex)) => regex::bytes::RegexBuilder::new(&regex.value)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map(|re| Some(ReplyExpect::Regex(re)))
            .map_err(|e| {
                diags.push((
                    regex.pos,
                    format!(
                        "invalid regex {} for \"expect_regex\": {}",
                        quote(&regex.value),
                        regex_message(&e)
                    ),
                ));
            }),
        (None, None) => Ok(None),
    }
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
