//! Name resolution for one HTTP probe, through the engine's resolver ([`crate::tier::resolve`]), for
//! both transports: reqwest calls it through its [`Resolve`] trait, `fresh` directly.
//!
//! reqwest's resolver hook knows nothing of the check that caused the lookup, so the check's
//! deadline goes in, and what the lookup had to work around comes out, through this probe's own
//! slot: [`ProbeDns::begin`] before the exchange, [`ProbeDns::finish`] after. The engine never
//! runs two checks of one target at once; an embedder that does may see a remark on the wrong
//! one of them, never a wrong verdict.

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tokio::time::Instant;

use crate::outcome::DnsTrouble;
use crate::tier::resolve::{LookupError, Names};

/// A name that did not resolve: the error the HTTP stack carries, recognised by
/// `client::classify` as `dns`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct DnsError(LookupError);

/// One probe's view of the resolver; see the module docs.
#[derive(Debug)]
pub(crate) struct ProbeDns {
    names: Names,
    slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The running check's deadline; `None` between checks (a lookup then gets the time
    /// reqwest gives it).
    deadline: Option<Instant>,
    trouble: Option<DnsTrouble>,
}

impl ProbeDns {
    pub(crate) fn new(names: Names) -> Arc<Self> {
        Arc::new(Self {
            names,
            slot: Mutex::default(),
        })
    }

    /// A check starts: its lookups end by `deadline`.
    pub(crate) fn begin(&self, deadline: Instant) {
        *self.slot.lock() = Slot {
            deadline: Some(deadline),
            trouble: None,
        };
    }

    /// The check ended: the resolver trouble it met, if any.
    pub(crate) fn finish(&self) -> Option<DnsTrouble> {
        let mut slot = self.slot.lock();
        slot.deadline = None;
        slot.trouble.take()
    }

    /// Resolves `host` for a connection to `port`.
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, DnsError> {
        // Without a check's deadline (a lookup outside `begin`/`finish`), the resolver's own
        // timeouts bound it; a minute is only the backstop.
        let deadline = self
            .slot
            .lock()
            .deadline
            .unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(60));
        let outcome = self.names.lookup(host, deadline).await;
        let trouble = match &outcome {
            Ok(resolved) => resolved.stale.clone(),
            Err(LookupError::Trouble(trouble)) => Some(trouble.clone()),
            Err(LookupError::NotFound { .. }) => None,
        };
        if trouble.is_some() {
            self.slot.lock().trouble = trouble;
        }
        let resolved = outcome.map_err(DnsError)?;
        Ok(resolved
            .addrs
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect())
    }
}

/// The adapter reqwest is given.
pub(crate) struct Reqwest(pub(crate) Arc<ProbeDns>);

impl Resolve for Reqwest {
    fn resolve(&self, name: Name) -> Resolving {
        let dns = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match dns.resolve(&host, 0).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(e) => Err(e.into()),
            }
        })
    }
}
