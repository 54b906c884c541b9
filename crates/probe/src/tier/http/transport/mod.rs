//! How an HTTP check reaches the target: the pooled transport (one reqwest client per probe,
//! connections reused, a stale kept-alive one retried on a fresh connection) and the one-shot
//! transport (`fresh_connection`: one connection per check, closed with a reset), over the
//! engine's resolver.

pub(crate) mod client;
pub(crate) mod dns;
pub(crate) mod exchange;
pub(crate) mod fresh;
pub(crate) mod wire;
