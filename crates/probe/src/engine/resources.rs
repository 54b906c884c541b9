//! The engine's own resource faults: out of descriptors, buffers, memory or local ports.
//!
//! A probe that cannot get a socket says nothing about its target: a box where something else
//! holds the descriptors, or a prober that opened too many slow connects at once, would
//! otherwise take healthy targets DOWN with `Too many open files`. So a run that meets one of
//! these errors ([`Exhausted`]) is not recorded as the target's result: the target keeps its
//! state and is tried again soon, with backoff (`runtime`), and the engine:
//! - counts it in `probe_engine_resource_errors_total{kind}`;
//! - logs a burst once, when it starts and when it is over ([`QUIET`] without one), not once a
//!   probe;
//! - counts it as a sign of its own ill health: the self-health multiplier rises, so timeouts
//!   meanwhile are deferred too (a starved prober's slow connects are not the targets' either);
//! - runs fewer probes at once while they last ([`Scheduler::resource_exhausted`]).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::health::self_health::SelfHealth;
use crate::outcome::Exhausted;
use crate::scheduler::Scheduler;

/// A burst is over after this long without a fault.
pub(crate) const QUIET: Duration = Duration::from_secs(5);

/// Counts, logs and answers the engine's resource faults; see the module doc.
pub(crate) struct Resources {
    scheduler: Scheduler,
    self_health: Option<Arc<SelfHealth>>,
    counters: [metrics::Counter; Exhausted::ALL.len()],
    burst: Mutex<Option<Burst>>,
}

struct Burst {
    started: Instant,
    last: Instant,
    /// Faults by kind, as [`Exhausted::ALL`] orders them.
    faults: [u64; Exhausted::ALL.len()],
}

fn index(kind: Exhausted) -> usize {
    Exhausted::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl Resources {
    pub fn new(scheduler: Scheduler, self_health: Option<Arc<SelfHealth>>) -> Self {
        Self {
            scheduler,
            self_health,
            counters: Exhausted::ALL.map(|kind| {
                metrics::counter!("probe_engine_resource_errors_total", "kind" => kind.as_str())
            }),
            burst: Mutex::new(None),
        }
    }

    /// A run met `kind` exhausted; `detail` is the error, for the log.
    pub fn fault(&self, kind: Exhausted, detail: &str) {
        self.counters[index(kind)].increment(1);
        self.scheduler.resource_exhausted();
        if let Some(health) = &self.self_health {
            // As a late wake-up would: a sign of the engine's own trouble.
            health.observe(Duration::MAX);
        }
        let now = Instant::now();
        let mut burst = self.burst.lock();
        let ended = burst.take_if(|b| now.saturating_duration_since(b.last) >= QUIET);
        let current = burst.get_or_insert_with(|| {
            tracing::warn!(
                kind = kind.as_str(),
                error = detail,
                in_flight_cap = self.scheduler.in_flight_cap(),
                "the engine ran out of a resource: the probes it failed are retried, not \
                 blamed on their targets"
            );
            Burst {
                started: now,
                last: now,
                faults: [0; Exhausted::ALL.len()],
            }
        });
        current.last = now;
        current.faults[index(kind)] += 1;
        drop(burst);
        if let Some(ended) = ended {
            ended.log_end();
        }
    }

    /// Ends a burst [`QUIET`] after its last fault (and logs it), until cancelled.
    pub async fn watch(self: Arc<Self>, cancel: CancellationToken) {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let now = Instant::now();
            let ended = self
                .burst
                .lock()
                .take_if(|b| now.saturating_duration_since(b.last) >= QUIET);
            if let Some(ended) = ended {
                ended.log_end();
            }
        }
    }
}

impl Burst {
    fn log_end(&self) {
        let faults: Vec<String> = Exhausted::ALL
            .iter()
            .zip(self.faults)
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| format!("{}: {n}", kind.as_str()))
            .collect();
        tracing::info!(
            faults = faults.join(", "),
            lasted = ?self.last.saturating_duration_since(self.started),
            "the engine has its resources again"
        );
    }
}
