//! The metrics the engine emits, described once: names follow Prometheus conventions, and where
//! blackbox_exporter already names a concept (`probe_success`, `probe_duration_seconds`) its name
//! is kept, so existing alerts keep working.

/// Registers descriptions and units of every metric the library emits.
///
/// Call it once after installing a `metrics` recorder, so exporters can print `# HELP` lines.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        "probe_success",
        "Whether the latest probe of the target succeeded (1) or failed (0)."
    );
    describe_histogram!(
        "probe_duration_seconds",
        Unit::Seconds,
        "How long probe runs took."
    );
    describe_gauge!(
        "probe_target_up",
        "Whether the target's verdict is UP (1) or not (0)."
    );
    describe_counter!(
        "probe_state_transitions_total",
        "Verdict changes of the target, by from and to state."
    );
    describe_counter!(
        "probe_failures_total",
        "Failed probe runs, by closed failure reason."
    );
    describe_histogram!(
        "probe_scheduler_lag_seconds",
        Unit::Seconds,
        "Delay between a run's planned and actual start."
    );
    describe_gauge!("probe_in_flight", "Probe runs in progress.");
    describe_gauge!(
        "probe_health_score",
        "Dependency-graph health score of the target or group in [0, 1]; NaN while unknown."
    );
    describe_gauge!(
        "probe_dependency_down",
        "Whether a critical dependency of the target or group is DOWN (1) or not (0)."
    );
    describe_counter!(
        "probe_signals_total",
        "Business signals recognised in probe replies, by target and signal."
    );
    describe_gauge!(
        "probe_self_health_multiplier",
        "The engine's local health multiplier: 0 when it keeps time; timeouts scale by 1 + it."
    );
    describe_counter!(
        "probe_verdicts_deferred_total",
        "Probe failures not counted towards DOWN because the engine itself ran late, or its \
         resolver was out."
    );
    describe_gauge!(
        "probe_resolver_up",
        "Whether the engine's resolver works (1) or is out (0): trouble for most recent names."
    );
    describe_counter!(
        "probe_resolver_outages_total",
        "Outages of the engine's resolver: DNS failures are not counted against targets meanwhile."
    );
    describe_counter!(
        "probe_http_stale_connection_retries_total",
        "HTTP probe requests sent again on a fresh connection because a reused kept-alive one \
         closed before the reply."
    );
    describe_counter!(
        "probe_dns_stale_answers_total",
        "Probe runs that used a name's last good answer because the resolver had trouble."
    );

    describe_counter!(
        "probe_ejections_total",
        "Ejections of the target from its pool by real traffic, by rule (reason)."
    );
    describe_gauge!(
        "probe_ejected",
        "Whether the target is out of its pool (1) or serving (0)."
    );
    describe_gauge!(
        "probe_target_weight",
        "The target's share of its pool's traffic in [0, 1]: 0 while ejected, ramping up after."
    );
    describe_gauge!(
        "probe_circuit_state",
        "The target's circuit: 0 closed, 1 open, 2 half-open, 3 forced open, 4 disabled."
    );
    describe_counter!(
        "probe_active_skipped_total",
        "Active probe runs skipped because real traffic proved the target healthy."
    );
}
