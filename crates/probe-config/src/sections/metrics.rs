//! The top-level `metrics` section: what `/metrics` keeps per target.
//!
//! ```yaml
//! metrics:                          # optional, in one file at most
//!   per_target_histograms: false    # default true
//! ```
//!
//! Each target's own duration histogram (`probe_duration_seconds{target}`) costs 128 bytes per
//! target and 17 lines per target in every scrape. A fleet of a hundred thousand targets may do
//! without: `probe_fleet_duration_seconds{kind}` keeps every run's duration either way. A
//! reload that changes the section takes effect at once; turning histograms off frees them.

use serde::Deserialize;

use crate::yaml::node::{Diags, Node, Sp, collect};

#[derive(Deserialize)]
#[serde(rename = "metrics", deny_unknown_fields)]
struct RawMetrics {
    per_target_histograms: Option<Sp<bool>>,
}

/// What the `metrics` section says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Whether each target keeps a histogram of its own durations.
    pub per_target_histograms: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            per_target_histograms: true,
        }
    }
}

/// The `metrics` section; `None` when invalid (every problem reported).
pub(crate) fn parse(node: &Node, src: &str, diags: &mut Diags) -> Option<MetricsConfig> {
    let (raw, structural) = collect::<RawMetrics>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    Some(MetricsConfig {
        per_target_histograms: raw.per_target_histograms.is_none_or(|on| on.value),
    })
}
