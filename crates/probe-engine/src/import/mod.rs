//! Importers: another tool's configuration as our probes YAML, printed for `probe-engine check`
//! and `run`, with what cannot be expressed said apart (`probe-engine import ...`).

pub mod blackbox;
