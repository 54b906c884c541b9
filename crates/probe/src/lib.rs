//! probe (in progress)
pub mod backoff;
pub mod outcome;
pub mod target;
