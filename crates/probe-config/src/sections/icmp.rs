//! The `icmp` section of a target: raw schema and its mapping onto [`IcmpSpec`].
//!
//! The limits are the library's ([`MAX_COUNT`], [`MAX_SIZE`]) and so are the messages
//! ([`InvalidIcmp`]); this module puts each at the value it is about.

use probe::tier::icmp::{IcmpDegradedIf, IcmpHost, IcmpSpec, InvalidIcmp, MAX_COUNT, MAX_SIZE};
use serde::Deserialize;

use super::schedule::duration;
use crate::yaml::node::{Diags, Sp};

#[derive(Deserialize)]
#[serde(rename = "icmp", deny_unknown_fields)]
pub(crate) struct RawIcmp {
    host: Sp<String>,
    count: Option<Sp<u32>>,
    size: Option<Sp<u64>>,
    degraded_if: Option<Sp<RawDegradedIf>>,
}

#[derive(Deserialize)]
#[serde(rename = "degraded_if", deny_unknown_fields)]
struct RawDegradedIf {
    loss_over: Option<Sp<f64>>,
    latency_over: Option<Sp<String>>,
}

/// Maps a raw `icmp` section onto a spec, reporting every invalid value.
pub(crate) fn parse(raw: RawIcmp, diags: &mut Diags) -> Option<IcmpSpec> {
    let host = raw
        .host
        .value
        .trim()
        .parse::<IcmpHost>()
        .map_err(|e| diags.push((raw.host.pos, e.to_string())));
    let count = match &raw.count {
        None => Ok(1),
        Some(c) if (1..=u32::from(MAX_COUNT)).contains(&c.value) => Ok(c.value),
        Some(c) => {
            diags.push((c.pos, InvalidIcmp::Count(c.value).to_string()));
            Err(())
        }
    };
    let size = match &raw.size {
        None => Ok(None),
        Some(s) => match usize::try_from(s.value).ok().filter(|v| *v <= MAX_SIZE) {
            Some(size) => Ok(Some(size)),
            None => {
                let shown = usize::try_from(s.value).unwrap_or(usize::MAX);
                diags.push((s.pos, InvalidIcmp::Size(shown).to_string()));
                Err(())
            }
        },
    };
    let degraded_if = raw.degraded_if.map_or(Ok(IcmpDegradedIf::default()), |d| {
        degraded_if(d.value, count, diags)
    });

    let mut spec = IcmpSpec::echo(host.ok()?);
    // Every value was checked above, each at its place: the builders agree.
    spec = spec.with_count(count.ok()?).ok()?;
    if let Some(size) = size.ok()? {
        spec = spec.with_size(size).ok()?;
    }
    spec.with_degraded_if(degraded_if.ok()?).ok()
}

fn degraded_if(
    raw: RawDegradedIf,
    count: Result<u32, ()>,
    diags: &mut Diags,
) -> Result<IcmpDegradedIf, ()> {
    let latency = duration(raw.latency_over.as_ref(), "latency_over", true, diags);
    let loss = match raw.loss_over {
        None => Ok(None),
        Some(loss) if !(0.0..1.0).contains(&loss.value) => {
            diags.push((loss.pos, InvalidIcmp::LossOver(loss.value).to_string()));
            Err(())
        }
        // With an invalid count, whether it is 1 is unknown: that error was reported.
        Some(loss) if count == Ok(1) => {
            diags.push((loss.key, InvalidIcmp::LossNeedsCount.to_string()));
            Err(())
        }
        Some(loss) => Ok(Some(loss.value)),
    };
    if latency.is_invalid() {
        return Err(());
    }
    Ok(IcmpDegradedIf {
        loss_over: loss?,
        latency_over: latency.value(),
    })
}
