//! `GET /v1/targets`'s query: which targets (`scope`, `state`, `group`, `kind`, `match`,
//! `owner`) and which page of them (`limit`, `cursor`).
//!
//! Pages are cut by id: the listing is sorted by id, and a cursor is the last id of the page
//! before, so the next page starts at the first id after it whatever came or went in between.
//! A walk with a cursor sees every target that stays listed throughout exactly once, and never
//! one twice, which an offset cannot promise while targets are added and removed.

use std::collections::{HashMap, HashSet};

use probe::engine::{Engine, Listed, TargetStatus};
use probe::graph::{GraphView, NodeKind};
use probe::{HealthState, ProbeSpec, TargetId};

/// The parameters `GET /v1/targets` takes.
const PARAMETERS: [&str; 8] = [
    "scope", "state", "group", "kind", "match", "owner", "limit", "cursor",
];

/// A parsed query of `GET /v1/targets`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Filter {
    /// Every target of the cluster (`scope=cluster`), not only those this member probes.
    cluster: bool,
    states: Option<Vec<HealthState>>,
    group: Option<TargetId>,
    kind: Option<&'static str>,
    matching: Option<String>,
    owner: Option<String>,
    limit: Option<usize>,
    cursor: Option<TargetId>,
}

impl Filter {
    /// Reads the query's parameters; `in_cluster` says whether this daemon is in a cluster
    /// (`scope=cluster` and `owner` need one). Every problem is a sentence naming the parameter.
    pub(super) fn parse(pairs: &[(String, String)], in_cluster: bool) -> Result<Self, String> {
        let mut given: HashMap<&str, &str> = HashMap::new();
        for (name, value) in pairs {
            if !PARAMETERS.contains(&name.as_str()) {
                return Err(format!(
                    "unknown parameter {name:?}: expected one of {}",
                    PARAMETERS.join(", ")
                ));
            }
            if given.insert(name, value).is_some() {
                return Err(format!(
                    "{name} is given twice: give it once, with values separated by commas"
                ));
            }
        }
        let cluster = match given.get("scope").copied() {
            None | Some("local") => false,
            Some("cluster") if in_cluster => true,
            Some("cluster") => {
                return Err(
                    "scope=cluster needs a cluster: this daemon's config has no cluster section"
                        .to_owned(),
                );
            }
            Some(other) => {
                return Err(format!(
                    "unknown scope {other:?}: expected local or cluster"
                ));
            }
        };
        let mut filter = Self {
            cluster,
            ..Self::default()
        };
        if let Some(&states) = given.get("state") {
            filter.states = Some(
                states
                    .split(',')
                    .map(|word| {
                        HealthState::ALL
                            .into_iter()
                            .find(|s| s.as_str().eq_ignore_ascii_case(word.trim()))
                            .ok_or_else(|| {
                                format!(
                                    "unknown state {word:?} in state: expected {}",
                                    HealthState::ALL.map(HealthState::as_str).join(", ")
                                )
                            })
                    })
                    .collect::<Result<_, _>>()?,
            );
        }
        if let Some(&group) = given.get("group") {
            filter.group = Some(TargetId::new(group).map_err(|e| format!("group {group:?}: {e}"))?);
        }
        if let Some(&kind) = given.get("kind") {
            filter.kind = Some(
                ProbeSpec::KINDS
                    .into_iter()
                    .find(|k| *k == kind)
                    .ok_or_else(|| {
                        format!(
                            "unknown kind {kind:?}: expected {}",
                            ProbeSpec::KINDS.join(", ")
                        )
                    })?,
            );
        }
        if let Some(&text) = given.get("match") {
            if text.is_empty() {
                return Err("match is empty: give part of an id".to_owned());
            }
            filter.matching = Some(text.to_owned());
        }
        if let Some(&owner) = given.get("owner") {
            if !in_cluster {
                return Err(
                    "owner needs a cluster: this daemon's config has no cluster section".to_owned(),
                );
            }
            filter.owner = Some(owner.to_owned());
        }
        if let Some(&limit) = given.get("limit") {
            filter.limit = Some(
                limit
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .ok_or_else(|| {
                        format!("limit {limit:?} is not a whole number of at least 1")
                    })?,
            );
        }
        if let Some(&cursor) = given.get("cursor") {
            filter.cursor = Some(
                TargetId::new(cursor)
                    .map_err(|e| format!("cursor {cursor:?} is not a next value: {e}"))?,
            );
        }
        Ok(filter)
    }

    /// The page of the engine's targets (sorted by id) this query asks for, and the cursor of
    /// the page after it (`None` on the last page); `Err` names a `group` that is not one. The
    /// engine walks from the cursor and filters its shared copies, so a page or a narrow filter
    /// copies only what it shows.
    pub(super) fn page(
        &self,
        engine: &Engine,
        graph: &GraphView,
    ) -> Result<(Listed, Option<TargetId>), String> {
        let covered = match &self.group {
            Some(group) => match graph.status(group) {
                Some(node) if node.kind == NodeKind::Group => graph.covered(group),
                Some(_) => return Err(format!("{group} is a target, not a group")),
                None => return Err(format!("no group {group}")),
            },
            None => None,
        };
        let listed = engine.listing_where(self.cursor.as_ref(), self.limit, |status| {
            self.keeps(status, covered.as_ref())
        });
        let next = listed
            .more
            .then(|| listed.targets.last().map(|s| s.id.clone()))
            .flatten();
        Ok((listed, next))
    }

    fn keeps(&self, status: &TargetStatus, covered: Option<&HashSet<&TargetId>>) -> bool {
        let placement = status.placement.as_ref();
        (self.cluster || placement.is_none_or(|p| p.role.probes()))
            && self
                .states
                .as_ref()
                .is_none_or(|s| s.contains(&status.state))
            && covered.is_none_or(|c| c.contains(&status.id))
            && self.kind.is_none_or(|k| k == status.kind)
            && self
                .matching
                .as_ref()
                .is_none_or(|m| status.id.as_str().contains(m.as_str()))
            && self.owner.as_ref().is_none_or(|owner| {
                placement
                    .and_then(|p| p.owner())
                    .is_some_and(|o| o.as_str() == owner)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str, in_cluster: bool) -> Result<Filter, String> {
        let pairs: Vec<(String, String)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        Filter::parse(&pairs, in_cluster)
    }

    #[test]
    fn every_parameter_is_read() {
        let filter = parse(
            "scope=cluster&state=down,Degraded&group=shop&kind=http&match=db&owner=m1&limit=10&cursor=a-1",
            true,
        )
        .unwrap();
        assert_eq!(
            filter,
            Filter {
                cluster: true,
                states: Some(vec![HealthState::Down, HealthState::Degraded]),
                group: Some(TargetId::new("shop").unwrap()),
                kind: Some("http"),
                matching: Some("db".to_owned()),
                owner: Some("m1".to_owned()),
                limit: Some(10),
                cursor: Some(TargetId::new("a-1").unwrap()),
            }
        );
        assert_eq!(parse("", false).unwrap(), Filter::default());
    }

    #[test]
    fn each_refusal_names_the_parameter() {
        for (query, cluster, said) in [
            (
                "colour=red",
                false,
                "unknown parameter \"colour\": expected one of scope,",
            ),
            ("state=UP&state=DOWN", false, "state is given twice"),
            (
                "state=UP,SIDEWAYS",
                false,
                "unknown state \"SIDEWAYS\" in state: expected PROBING, UP,",
            ),
            (
                "kind=ftp",
                false,
                "unknown kind \"ftp\": expected tcp, http,",
            ),
            (
                "limit=0",
                false,
                "limit \"0\" is not a whole number of at least 1",
            ),
            ("limit=ten", false, "limit \"ten\" is not a whole number"),
            ("match=", false, "match is empty"),
            ("owner=m1", false, "owner needs a cluster"),
            ("scope=cluster", false, "scope=cluster needs a cluster"),
            ("scope=all", true, "unknown scope \"all\""),
            (
                "cursor=a%20b",
                false,
                "cursor \"a%20b\" is not a next value",
            ),
            ("group=", false, "group \"\":"),
        ] {
            let error = parse(query, cluster).expect_err(query);
            assert!(error.starts_with(said), "{query}: {error}");
        }
    }
}
