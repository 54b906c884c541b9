//! Values that are one of a few words (`type`, `transport`, `rcode`, `starttls`, `addresses`):
//! read in any case, reported at the value with a suggestion or the list.

use super::diagnostics::{did_you_mean, quote};
use super::node::{Diags, Sp};

/// One of `names`, in any case: the canonical name; otherwise an error at the value (an unknown
/// `what` for `field`), with a suggestion or the list. For every key whose value is one of a
/// few words (`type`, `transport`, `rcode`, `starttls`, `addresses`).
#[allow(
    clippy::result_unit_err,
    reason = "the error is in `diags` already: `Err` only says there is no value"
)]
pub fn one_of(
    raw: &Sp<String>,
    what: &str,
    field: &str,
    names: impl IntoIterator<Item = &'static str> + Clone,
    diags: &mut Diags,
) -> Result<&'static str, ()> {
    let text = raw.value.trim();
    if let Some(known) = names
        .clone()
        .into_iter()
        .find(|n| n.eq_ignore_ascii_case(text))
    {
        return Ok(known);
    }
    let all: Vec<&str> = names.clone().into_iter().collect();
    let hint = match did_you_mean(text, names) {
        Some(best) => format!(", did you mean {best:?}?"),
        None => format!("; expected one of {}", all.join(", ")),
    };
    diags.push((
        raw.pos,
        format!("unknown {what} {} for {field:?}{hint}", quote(&raw.value)),
    ));
    Err(())
}
