//! The probe tiers: how one check of a target is done.
//!
//! - [`Probe`] (in `probe`): the one trait every tier implements, and an embedder's custom check;
//! - [`ProbeSpec`] (in `spec`): which tier probes a target, with that tier's spec;
//! - [`build`]: the probe a spec describes;
//! - [`addresses`]: every address of a name probed (`addresses: any | all`);
//! - [`tcp`]: the TCP connect tier;
//! - [`http`]: the HTTP tier, judged by conditions;
//! - [`tls`]: the TLS certificate tier, and the TLS trust and handshake facts the tiers that
//!   speak TLS share.
//! - [`grpc`]: the gRPC tier, `grpc.health.v1` checks;
//! - [`dns`]: the DNS tier, one question to one server.
//! - [`icmp`]: the ICMP echo (ping) tier;
//! - [`udp`]: the UDP tier: a datagram out, a reply back;
//! - [`reply`]: what a reply must hold, shared by the TCP and UDP tiers;
//! - [`resolve`]: the engine's one DNS resolver, which every tier that looks a name up shares.
//!
//! A new probe kind is a folder here with its spec and its `Probe`, a `ProbeSpec` variant and an
//! arm in `build`: the engine above knows only the trait.

pub mod addresses;
pub(crate) mod build;
pub mod dns;
pub mod grpc;
pub mod http;
pub mod icmp;
pub(crate) mod lookup;
pub(crate) mod probe;
pub mod reply;
pub mod resolve;
pub(crate) mod spec;
pub mod tcp;
pub mod tls;
pub mod udp;

pub use build::build;
pub use probe::Probe;
pub use spec::{CustomProbe, ProbeSpec};
