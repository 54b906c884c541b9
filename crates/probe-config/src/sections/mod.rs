//! One module per section of a configuration document, each turning its raw, located part into
//! validated library or daemon types, and the parts several sections share: `schedule`
//! (intervals, timeouts, rise and fall), `reply` (what a reply must hold), `addresses` (which of
//! a name's addresses are probed).

pub(crate) mod addresses;
pub(crate) mod alerts;
pub(crate) mod cluster;
pub(crate) mod dns;
pub(crate) mod graph;
pub(crate) mod grpc;
pub(crate) mod history;
pub(crate) mod http;
pub(crate) mod icmp;
pub(crate) mod metrics;
pub(crate) mod passive;
pub(crate) mod reply;
pub(crate) mod resolver;
pub(crate) mod schedule;
pub(crate) mod tls;
pub(crate) mod topology;
pub(crate) mod udp;
