//! What a reply must hold, for the sections that read one (`tcp`, `udp`): `expect` or
//! `expect_regex`, or a `conversation` (`tcp`, `tls`); and regexes compiled with their errors in
//! words, for every section that takes one.

use probe::tier::reply::ReplyExpect;
use probe::tier::tcp::Step;

use crate::yaml::diagnostics::quote;
use crate::yaml::node::{Diags, Sp};

/// Limit on a compiled `expect_regex`, so a hostile pattern cannot take the daemon's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// `expect` or `expect_regex` (at most one) as what a reply must hold, for the sections that
/// read a reply (`tcp`, `udp`).
pub(crate) fn reply_expect(
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
///
/// `Err` once the error is in `diags`, as every value reader of the configuration answers: the
/// caller only learns that there is no value, and the reader has said why.
#[allow(clippy::result_unit_err)]
pub fn regex(raw: &Sp<String>, field: &str, diags: &mut Diags) -> Result<regex::Regex, ()> {
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

/// [`regex()`], over bytes (a reply's body or a TCP line need not be UTF-8).
#[allow(clippy::result_unit_err)]
pub fn bytes_regex(
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
pub fn regex_message(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map_or_else(
            || text.split_whitespace().collect::<Vec<_>>().join(" "),
            str::to_owned,
        )
}

/// A `conversation`: its steps in order, each `expect_line` (a regex over each line read),
/// `send` or `reply` (sent with the groups of the last matched line filled in), for the sections that converse (`tcp`, `tls`); `with_exchange` says the section also
/// has `send`, `expect` or `expect_regex`, which a conversation replaces.
pub(crate) fn conversation(
    steps: Sp<Vec<Sp<RawStep>>>,
    with_exchange: bool,
    diags: &mut Diags,
) -> Result<Vec<Step>, ()> {
    if with_exchange {
        diags.push((
            steps.key,
            r#""conversation" replaces "send", "expect" and "expect_regex": keep only one"#
                .to_owned(),
        ));
        return Err(());
    }
    if steps.value.is_empty() {
        diags.push((
            steps.pos,
            "conversation is empty: give at least one step".to_owned(),
        ));
        return Err(());
    }
    let mut parsed = Vec::new();
    let mut ok = true;
    for step in steps.value {
        let RawStep {
            expect_line,
            send,
            reply,
        } = step.value;
        match (expect_line, send, reply) {
            (Some(line), None, None) => match bytes_regex(&line, "expect_line", diags) {
                Ok(re) => parsed.push(Step::ExpectLine(re)),
                Err(()) => ok = false,
            },
            (None, Some(send), None) => parsed.push(Step::Send(send.value.into_bytes())),
            (None, None, Some(reply)) => {
                if !parsed.iter().any(|s| matches!(s, Step::ExpectLine(_))) {
                    diags.push((
                        reply.key,
                        r#""reply" fills in groups of a matched line: put an "expect_line" before it"#
                            .to_owned(),
                    ));
                    ok = false;
                }
                parsed.push(Step::Reply(reply.value.into_bytes()));
            }
            _ => {
                diags.push((
                    step.pos,
                    r#"a conversation step has exactly one of "expect_line", "send" and "reply""#
                        .to_owned(),
                ));
                ok = false;
            }
        }
    }
    ok.then_some(parsed).ok_or(())
}

/// One step of a `tcp` section's `conversation`: exactly one of its keys.
#[derive(serde::Deserialize)]
#[serde(rename = "step", deny_unknown_fields)]
pub(crate) struct RawStep {
    pub(crate) expect_line: Option<Sp<String>>,
    pub(crate) send: Option<Sp<String>>,
    pub(crate) reply: Option<Sp<String>>,
}
