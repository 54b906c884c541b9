//! `addresses: first | any | all`, the key of every section that connects to a host (`tcp`,
//! `http`, `grpc`, `tls`).

use probe::target::Addresses;

use super::diagnostics::{did_you_mean, quote};
use super::node::{Diags, Sp};

/// The policy `raw` names (`first` when absent); `Err` once reported.
pub(super) fn parse(raw: Option<&Sp<String>>, diags: &mut Diags) -> Result<Addresses, ()> {
    let Some(raw) = raw else {
        return Ok(Addresses::First);
    };
    let name = raw.value.trim();
    if let Some(known) = Addresses::ALL.into_iter().find(|a| a.as_str() == name) {
        return Ok(known);
    }
    let names = Addresses::ALL.map(Addresses::as_str);
    let hint = match did_you_mean(name, names) {
        Some(best) => format!(", did you mean {best:?}?"),
        None => r#"; expected "first", "any" or "all""#.to_owned(),
    };
    diags.push((
        raw.pos,
        format!(
            "unknown policy {} for \"addresses\"{hint}",
            quote(&raw.value)
        ),
    ));
    Err(())
}
