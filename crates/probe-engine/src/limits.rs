//! The process's descriptor limit, and what it leaves for probes.
//!
//! Every probe in flight holds a descriptor (a socket), and so do the API's connections, etcd,
//! the state directory, the logs and the runtime itself. A soft `RLIMIT_NOFILE` of 1,024
//! (systemd's default) under the default cap of 4,096 probes in flight would have probes fail
//! with `Too many open files`: the engine would not blame the targets (it retries such runs),
//! but it would probe less than it was asked to. So at start the daemon raises the soft limit
//! to the hard one, as Go's runtime does for every Go program, logs it, and caps
//! `max_in_flight` to what the limit leaves after [`reserve`]; the engine's own adaptive cap
//! handles whatever else runs the process short later.

use std::num::NonZeroUsize;

/// The descriptor limit after [`raise`], and the in-flight cap it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit now in force.
    pub limit: u64,
    /// `max_in_flight`, lowered if the limit leaves less.
    pub max_in_flight: NonZeroUsize,
}

/// Descriptors kept for everything but probes in flight: the API's connections, etcd, the
/// state directory, logs, the resolver and the runtime. A sixteenth of the limit, at least 64.
pub fn reserve(limit: u64) -> u64 {
    (limit / 16).max(64)
}

/// Raises the soft descriptor limit to the hard one (when it can) and caps `max_in_flight` to
/// what the limit leaves; logs both.
pub fn raise(max_in_flight: NonZeroUsize) -> Descriptors {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            let limit = soft_limit();
            tracing::warn!(error = %e, limit, "cannot raise the descriptor limit");
            limit
        }
    };
    let room = usize::try_from(limit.saturating_sub(reserve(limit))).unwrap_or(usize::MAX);
    let capped = NonZeroUsize::new(room.min(max_in_flight.get())).unwrap_or(NonZeroUsize::MIN);
    tracing::info!(limit, reserved = reserve(limit), "descriptor limit");
    if capped < max_in_flight {
        tracing::warn!(
            asked = max_in_flight.get(),
            max_in_flight = capped.get(),
            limit,
            "max_in_flight lowered: the descriptor limit leaves no room for more probes in flight"
        );
    }
    Descriptors {
        limit,
        max_in_flight: capped,
    }
}

/// The soft descriptor limit in force (`u64::MAX` when unlimited or unknown).
pub fn soft_limit() -> u64 {
    rlimit::Resource::NOFILE
        .get()
        .map_or(u64::MAX, |(soft, _)| soft)
}

/// The descriptors the process holds now: the entries of `/proc/self/fd` (the directory
/// handle read them through among them); `None` where there is no `/proc`.
pub fn open() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_grows_with_the_limit() {
        assert_eq!(reserve(128), 64);
        assert_eq!(reserve(1024), 64);
        assert_eq!(reserve(65_536), 4096);
    }
}
