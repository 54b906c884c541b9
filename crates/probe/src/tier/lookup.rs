//! A target's host name looked up for one run, the same way by every tier: through the engine's
//! resolver ([`crate::tier::resolve`]), with resolver trouble kept in the run's remarks (the engine
//! defers such failures while the resolver itself is out) and a name that does not resolve
//! failing as `dns`.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::time::Instant;

use crate::outcome::{Failure, FailureReason, Remarks};
use crate::tier::resolve::{LookupError, Names};

/// The addresses of `host`, in the resolver's order (never empty), looked up by `deadline`.
pub(crate) async fn addresses(
    names: &Names,
    host: &str,
    deadline: Instant,
    remarks: &mut Remarks,
) -> Result<Arc<[IpAddr]>, Failure> {
    match names.lookup(host, deadline).await {
        Ok(resolved) => {
            remarks.dns_trouble = resolved.stale;
            Ok(resolved.addrs)
        }
        Err(e) => {
            if let LookupError::Trouble(trouble) = &e {
                remarks.dns_trouble = Some(trouble.clone());
            }
            Err(Failure::new(FailureReason::Dns, e))
        }
    }
}
