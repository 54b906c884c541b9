//! The `probe_etcd_*` metrics, emitted through the `metrics` facade.
//!
//! Names follow `<namespace>_<name>_<unit>[_total]`; labels are low-cardinality closed sets.
//! The per-source [`Counters`](crate::Counters) in the status count the same events.

pub(crate) const UP: &str = "probe_etcd_up";
pub(crate) const REVISION: &str = "probe_etcd_revision";
pub(crate) const ENTRIES: &str = "probe_etcd_entries";
pub(crate) const RESYNCS: &str = "probe_etcd_resyncs_total";
pub(crate) const WATCH_RESTARTS: &str = "probe_etcd_watch_restarts_total";
pub(crate) const FAILURES: &str = "probe_etcd_failures_total";
pub(crate) const EVENTS: &str = "probe_etcd_watch_events_total";
pub(crate) const SNAPSHOTS: &str = "probe_etcd_snapshots_published_total";
/// Renewals of a cluster member's lease that failed (see `membership`).
pub(crate) const LEASE_RENEWAL_FAILURES: &str = "probe_cluster_lease_renewal_failures_total";
pub(crate) const CLUSTER_MEMBERS: &str = "probe_cluster_members";
pub(crate) const CLUSTER_OWNED: &str = "probe_cluster_owned_targets";
pub(crate) const CLUSTER_HANDOFFS: &str = "probe_cluster_handoffs_total";
pub(crate) const CLUSTER_WRITES: &str = "probe_cluster_state_writes_total";

/// Registers descriptions of every metric this crate emits.
///
/// Call it once after installing a `metrics` recorder, so exporters can print `# HELP` lines.
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        UP,
        "Whether the etcd sync is established (1) or not: starting, reconnecting or stopped (0)."
    );
    describe_gauge!(
        REVISION,
        "The etcd revision the synced content is known to be current at."
    );
    describe_gauge!(ENTRIES, "Keys under the watched etcd prefix.");
    describe_counter!(
        RESYNCS,
        "Full reads of the etcd prefix, by reason: initial, reconnect, periodic, compacted, \
         revision_went_back."
    );
    describe_counter!(
        WATCH_RESTARTS,
        "etcd watches that ended and were started again, by reason: compacted, \
         revision_went_back, canceled, closed, timeout, error."
    );
    describe_counter!(
        FAILURES,
        "Failed etcd sync sessions (each followed by a backoff), by failed operation: connect, \
         range, watch."
    );
    describe_counter!(EVENTS, "etcd watch events applied to the content.");
    describe_counter!(
        SNAPSHOTS,
        "Snapshots of the etcd content published (one per change)."
    );
    describe_counter!(
        LEASE_RENEWAL_FAILURES,
        "Renewals of this cluster member's etcd lease that failed or timed out."
    );
    describe_gauge!(
        CLUSTER_MEMBERS,
        "Members of the cluster as this member sees them."
    );
    describe_gauge!(
        CLUSTER_OWNED,
        "Targets this member owns: it decides them and exports their series."
    );
    describe_counter!(
        CLUSTER_HANDOFFS,
        "Targets handed over to this member by a change of the member set."
    );
    describe_counter!(
        CLUSTER_WRITES,
        "Verdicts and votes this member wrote to etcd."
    );
}
