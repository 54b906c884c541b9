//! `addresses: first | any | all`, the key of every section that connects to a host (`tcp`,
//! `http`, `grpc`, `tls`).

use probe::Addresses;

use crate::yaml::node::{Diags, Sp};
use crate::yaml::words::one_of;

/// The policy `raw` names (`first` when absent); `Err` once reported.
pub(crate) fn parse(raw: Option<&Sp<String>>, diags: &mut Diags) -> Result<Addresses, ()> {
    let Some(raw) = raw else {
        return Ok(Addresses::First);
    };
    let name = one_of(
        raw,
        "policy",
        "addresses",
        Addresses::ALL.map(Addresses::as_str),
        diags,
    )?;
    Addresses::ALL
        .into_iter()
        .find(|a| a.as_str() == name)
        .ok_or(())
}
