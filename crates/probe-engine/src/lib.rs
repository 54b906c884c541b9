//! The probe-engine daemon as a library: the health API, history, alerts, the importers and the
//! wiring between them, the `probe` engine and the configuration `probe-config` compiles. The
//! binary (`main.rs`) adds only flags, logging and signals.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod adhoc;
pub mod alerts;
pub mod api;
pub mod blackbox;
pub mod daemon;
pub mod history;
pub mod import;
pub mod limits;
pub mod persist;
mod systemd;
pub mod topology;
pub mod watch;
pub mod web;
