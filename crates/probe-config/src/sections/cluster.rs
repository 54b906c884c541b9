//! The top-level `cluster` section, and the `replicas` and `quorum` keys of `defaults` and
//! targets.
//!
//! ```yaml
//! cluster:                        # optional, in one file at most
//!   etcd: { endpoints: [...] }    # the keys of topology.etcd; default: topology.etcd's
//!   prefix: /probe-engine/cluster/
//!   member: ${HOSTNAME}           # or --member NAME, which wins; unique, [a-z0-9._-]+
//!   lease_ttl: 5s                 # at least 2s
//!   replicas: 1                   # members that probe each target (default 1)
//!   quorum: 1                     # of those, how many must agree on UP or DOWN (default 1)
//! targets:
//!   - id: checkout
//!     http: { url: "http://127.0.0.1:8080/ready" }
//!     replicas: 3                 # per target (or in defaults), over the section's
//!     quorum: 2
//! ```
//!
//! The section is read at start; a reload that changes it is refused (the member would have to
//! leave and join again), while targets' `replicas` and `quorum` take effect on reload.

use std::num::NonZeroU8;
use std::time::Duration;

use probe::cluster::MemberId;
use probe::cluster::Replication;
use probe::tier::http::expand_env;
use probe_etcd::SourceConfig;
use serde::Deserialize;

use super::schedule::{Slot, duration};
use super::topology::{RawEtcd, etcd_config};
use crate::yaml::files::Source;
use crate::yaml::node::{Diags, Node, Pos, Sp, collect};

/// The cluster prefix when the section sets none.
pub const DEFAULT_PREFIX: &str = "/probe-engine/cluster/";

#[derive(Deserialize)]
#[serde(rename = "cluster", deny_unknown_fields)]
struct RawCluster {
    etcd: Option<Sp<RawEtcd>>,
    prefix: Option<Sp<String>>,
    member: Option<Sp<String>>,
    lease_ttl: Option<Sp<String>>,
    replicas: Option<Sp<u8>>,
    quorum: Option<Sp<u8>>,
}

/// What the `cluster` section says.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Where the cluster's keys are kept.
    pub etcd: SourceConfig,
    /// Their prefix, ending in `/`.
    pub prefix: String,
    /// This member's name, when the section gives one (`--member` wins).
    pub member: Option<MemberId>,
    /// How long a member that stops renewing stays in the set.
    pub lease_ttl: Duration,
    /// The replicas and quorum of targets that set none.
    pub replication: Replication,
}

/// The section as one file gives it: its etcd is `topology.etcd`'s when it has none of its own.
pub(crate) struct ParsedCluster {
    pub etcd: Option<SourceConfig>,
    pub key: Pos,
    pub rest: ClusterConfig,
}

/// The `cluster` section; `None` when invalid (every problem reported).
pub(crate) fn parse(
    node: &Node,
    src: &str,
    key: Pos,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<ParsedCluster> {
    let (raw, structural) = collect::<RawCluster>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    let before = diags.len();
    let etcd = raw.etcd.and_then(|etcd| etcd_config(etcd, source, diags));
    let prefix = match raw.prefix {
        None => DEFAULT_PREFIX.to_owned(),
        Some(prefix) if !prefix.value.ends_with('/') || prefix.value.len() < 2 => {
            diags.push((
                prefix.pos,
                "prefix must end in / and name a folder, such as /probe-engine/cluster/".to_owned(),
            ));
            String::new()
        }
        Some(prefix) => prefix.value,
    };
    let member = raw.member.and_then(|member| {
        let name = expand_env(&member.value, source.env)
            .map_err(|e| diags.push((member.pos, format!("in member: {e}"))))
            .ok()?;
        MemberId::new(name.trim())
            .map_err(|e| {
                diags.push((
                    member.pos,
                    format!("{e}; name this member with --member NAME instead"),
                ));
            })
            .ok()
    });
    let lease_ttl = match duration(raw.lease_ttl.as_ref(), "lease_ttl", true, diags) {
        Slot::Set { value, key } if value < Duration::from_secs(2) => {
            diags.push((
                key,
                "lease_ttl must be at least 2s: etcd counts leases in whole seconds".to_owned(),
            ));
            value
        }
        Slot::Set { value, .. } => value,
        Slot::Absent | Slot::Invalid => DEFAULT_LEASE_TTL,
    };
    let votes = Votes::parse(raw.replicas.as_ref(), raw.quorum.as_ref(), diags);
    let replication = votes
        .resolve(Replication::ONE, key)
        .map_err(|e| diags.push(e));
    if diags.len() != before {
        return None;
    }
    Some(ParsedCluster {
        etcd,
        key,
        rest: ClusterConfig {
            etcd: SourceConfig::new(Vec::<String>::new()),
            prefix,
            member,
            lease_ttl,
            replication: replication.ok()?,
        },
    })
}

/// How long a member stays in the set without renewing, by default.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

/// The `replicas` and `quorum` set in one place (a target, `defaults`, the section), each with
/// where it was set.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Votes {
    replicas: Option<(NonZeroU8, Pos)>,
    quorum: Option<(NonZeroU8, Pos)>,
}

impl Votes {
    /// Reads the two keys; zero is reported.
    pub fn parse(replicas: Option<&Sp<u8>>, quorum: Option<&Sp<u8>>, diags: &mut Diags) -> Self {
        let mut read = |raw: Option<&Sp<u8>>, name: &str| {
            let raw = raw?;
            let value = NonZeroU8::new(raw.value);
            if value.is_none() {
                diags.push((raw.pos, format!("{name} must be at least 1")));
            }
            Some((value?, raw.pos))
        };
        Self {
            replicas: read(replicas, "replicas"),
            quorum: read(quorum, "quorum"),
        }
    }

    /// These, each filled in from `defaults` where unset.
    pub fn or(self, defaults: Self) -> Self {
        Self {
            replicas: self.replicas.or(defaults.replicas),
            quorum: self.quorum.or(defaults.quorum),
        }
    }

    /// Whether either is set.
    pub fn is_set(self) -> bool {
        self.replicas.is_some() || self.quorum.is_some()
    }

    /// Where the first of them is set.
    pub fn at(self) -> Option<Pos> {
        self.replicas.or(self.quorum).map(|(_, pos)| pos)
    }

    /// The replication these give over `base` (the section's); a quorum above the replicas is
    /// reported at the quorum (or at `at` when neither is set here).
    pub fn resolve(self, base: Replication, at: Pos) -> Result<Replication, (Pos, String)> {
        let replicas = self
            .replicas
            .map_or(base_replicas(base), |(value, _)| value);
        let quorum = self.quorum.map_or(base_quorum(base), |(value, _)| value);
        Replication::new(replicas, quorum).map_err(|e| {
            let pos = self.quorum.or(self.replicas).map_or(at, |(_, pos)| pos);
            (pos, e.to_string())
        })
    }
}

fn base_replicas(base: Replication) -> NonZeroU8 {
    NonZeroU8::new(u8::try_from(base.replicas()).unwrap_or(u8::MAX)).unwrap_or(NonZeroU8::MIN)
}

fn base_quorum(base: Replication) -> NonZeroU8 {
    NonZeroU8::new(u8::try_from(base.quorum()).unwrap_or(u8::MAX)).unwrap_or(NonZeroU8::MIN)
}
