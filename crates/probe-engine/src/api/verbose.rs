//! `/readyz` and `/livez` with `?verbose` and `?exclude=NAME`, as kube-apiserver answers them:
//! one line per check, `[+]name ok` or `[-]name failed: reason`, then `readyz check passed` or
//! `readyz check failed`.
//!
//! Readiness's checks are the gate's own (`gate`: serving, not shutting down) and the engine's:
//! under a readiness policy, each required node; without one, every target, which passes while
//! it is UP, DEGRADED or in MAINTENANCE. An excluded check does not count toward the verdict,
//! so an operator can take one target out of a load balancer's decision for a while; naming a
//! check that does not exist leaves the verdict alone and says so, as kube-apiserver does.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::shared::ApiState;

/// A readiness or liveness query: whether to list the checks, and which to leave out.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Query {
    verbose: bool,
    exclude: BTreeSet<String>,
}

impl Query {
    /// Reads `verbose` (any value, or none) and `exclude` (repeated for several checks).
    pub(super) fn parse(pairs: &[(String, String)]) -> Result<Self, String> {
        let mut query = Self::default();
        for (name, value) in pairs {
            match name.as_str() {
                "verbose" => query.verbose = true,
                "exclude" if value.is_empty() => {
                    return Err("exclude is empty: name a check".to_owned());
                }
                "exclude" => {
                    query.exclude.insert(value.clone());
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}: expected verbose or exclude"
                    ));
                }
            }
        }
        Ok(query)
    }

    /// Whether the answer differs from the plain one: a list, or a verdict with checks left
    /// out.
    pub(super) fn is_plain(&self) -> bool {
        !self.verbose && self.exclude.is_empty()
    }
}

/// One check: its name, and why it fails (`None` when it passes).
type Check = (String, Option<String>);

/// Readiness's checks, in the order they are listed: the gate's, then the engine's.
fn readiness_checks(state: &ApiState) -> Vec<Check> {
    let mut checks = vec![("gate".to_owned(), state.gate.serving().reason)];
    match state.engine.readiness().checks {
        Some(nodes) => checks.extend(
            nodes
                .iter()
                .map(|c| (c.node.to_string(), c.failure.clone())),
        ),
        None => checks.extend(state.engine.listing().iter().map(|s| {
            let failure = (!s.state.counts_as_ready()).then(|| s.state.as_str().to_owned());
            (s.id.to_string(), failure)
        })),
    }
    checks
}

/// An endpoint's words: its name in a verbose verdict, and its plain answer's.
struct Endpoint {
    name: &'static str,
    passed: &'static str,
    failed: &'static str,
}

const READYZ: Endpoint = Endpoint {
    name: "readyz",
    passed: "ready",
    failed: "not ready",
};

const LIVEZ: Endpoint = Endpoint {
    name: "livez",
    passed: "ok",
    failed: "not alive",
};

/// `/readyz`'s answer to a query that is not plain.
pub(super) fn readyz(state: &ApiState, query: &Query) -> Response {
    answer(&READYZ, readiness_checks(state), query)
}

/// `/livez`'s: its one check is the gate's liveness (not stopped, startup within its deadline,
/// no task stuck).
pub(super) fn livez(state: &ApiState, query: &Query) -> Response {
    answer(
        &LIVEZ,
        vec![("gate".to_owned(), state.gate.liveness().reason)],
        query,
    )
}

fn answer(endpoint: &Endpoint, checks: Vec<Check>, query: &Query) -> Response {
    let mut text = String::new();
    let mut failing = Vec::new();
    for (name, failure) in &checks {
        if query.exclude.contains(name) {
            if query.verbose {
                text.push_str(&format!("[+]{name} excluded: ok\n"));
            }
            continue;
        }
        match failure {
            None if query.verbose => text.push_str(&format!("[+]{name} ok\n")),
            None => {}
            Some(why) => {
                if query.verbose {
                    text.push_str(&format!("[-]{name} failed: {why}\n"));
                }
                failing.push(format!("{name}: {why}"));
            }
        }
    }
    let unknown: Vec<&str> = query
        .exclude
        .iter()
        .filter(|name| !checks.iter().any(|(n, _)| n == *name))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        text.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            unknown.join(", ")
        ));
    }
    if failing.is_empty() {
        if query.verbose {
            text.push_str(&format!("{} check passed\n", endpoint.name));
        } else {
            text.push_str(&format!("{}\n", endpoint.passed));
        }
        (StatusCode::OK, text).into_response()
    } else {
        if query.verbose {
            text.push_str(&format!("{} check failed\n", endpoint.name));
        } else {
            text.push_str(&format!("{}: {}\n", endpoint.failed, failing.join("; ")));
        }
        (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(verbose: bool, exclude: &[&str]) -> Query {
        Query {
            verbose,
            exclude: exclude.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    async fn text(response: Response) -> (StatusCode, String) {
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn checks() -> Vec<Check> {
        vec![
            ("gate".to_owned(), None),
            ("db".to_owned(), Some("DOWN".to_owned())),
            ("web".to_owned(), None),
        ]
    }

    #[tokio::test]
    async fn verbose_lists_every_check_and_the_verdict() {
        assert_eq!(
            text(answer(&READYZ, checks(), &query(true, &[]))).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "[+]gate ok\n[-]db failed: DOWN\n[+]web ok\nreadyz check failed\n".to_owned()
            )
        );
        assert_eq!(
            text(answer(&READYZ, checks(), &query(true, &["db", "nope"]))).await,
            (
                StatusCode::OK,
                "[+]gate ok\n[+]db excluded: ok\n[+]web ok\n\
                 warn: some health checks cannot be excluded: no matches for nope\n\
                 readyz check passed\n"
                    .to_owned()
            )
        );
        assert_eq!(
            text(answer(&READYZ, checks(), &query(false, &["web"]))).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: db: DOWN\n".to_owned()
            )
        );
    }

    #[test]
    fn the_query_is_read_strictly() {
        let pairs = |q: &[(&str, &str)]| -> Vec<(String, String)> {
            q.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(
            Query::parse(&pairs(&[
                ("verbose", ""),
                ("exclude", "a"),
                ("exclude", "b")
            ])),
            Ok(query(true, &["a", "b"]))
        );
        assert!(Query::parse(&pairs(&[])).unwrap().is_plain());
        assert_eq!(
            Query::parse(&pairs(&[("verbos", "")])),
            Err("unknown parameter \"verbos\": expected verbose or exclude".to_owned())
        );
        assert_eq!(
            Query::parse(&pairs(&[("exclude", "")])),
            Err("exclude is empty: name a check".to_owned())
        );
    }
}
