//! The workspace's test fixtures: the real peers the suite runs against (etcd, PostgreSQL,
//! Chromium, nginx, Alertmanager, Prometheus, blackbox_exporter, OpenSSL's `s_server`), real
//! network faults in network namespaces, and how a test says it was skipped.
//!
//! A crate of its own (`publish = false`), a dev-dependency of the crates whose tests use it and
//! a dependency of the benchmark harnesses (`probe-bench`): the product crates ship none of it,
//! nor its dependencies.
//!
//! [`etcd::TestEtcd`] is a throw-away etcd on loopback ports (a single member, a cluster, or
//! https), for the etcd source's and the cluster's tests.
//!
//! Loopback cannot lose a packet on purpose, and a listener that stops accepting is not a host
//! that vanished, so the tests of what the engine does under packet loss, blackholes and
//! partitions run against listeners in a network namespace of their own ([`Netns`]), reached
//! from the root namespace over a veth pair, with the faults written as nftables rules inside
//! that namespace. Everything it creates lives in that namespace and on that veth pair, and is
//! removed when the [`Netns`] is dropped (also when the test panics).
//!
//! It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip` (iproute2) and `nft` (nftables;
//! `scripts/setup` installs it). Without them [`Netns::new`] returns [`NetnsError::Skip`], and
//! [`netns_or_skip!`](crate::netns_or_skip) makes a test say `SKIPPED: <why>` and return (under
//! `CI`, where the suite must run in full, a skip fails the test instead).
//!
//! [`Postgres`] is a real PostgreSQL server of its own (a fresh cluster in a temporary directory,
//! on a free loopback port, run as the `postgres` user under root) for the history store's tests;
//! [`postgres_or_skip`] starts one or makes the test say it was skipped.
//!
//! [`Browser`] is a real headless Chromium driven over WebDriver through ChromeDriver, for the
//! status page's tests: what a browser shows of a page, with scripts on or off, its first paint
//! and a screenshot.
//!
//! [`Blackbox`] is a real blackbox_exporter started from a whole `blackbox.yml`, for the tests
//! that hold our verdicts side by side with the exporter's on the same server.
//!
//! [`OpensslServer`] is OpenSSL's `s_server`, a TLS server no one here wrote, presenting the
//! certificates a test made.
//!
//! [`Prometheus`] is a real Prometheus with a whole `prometheus.yml`, for what a scraper makes
//! of the daemon's endpoints.
//!
//! [`fuzz`] is the stable-toolchain fuzzing harness the parser tests share: a target's
//! regression cases, then proptest-generated documents over fixed and random seeds for a bounded
//! time, each checked for panics, hangs and a target's own rule, the first failure shrunk.
//!
//! [`LossModel`] is the binomial model those tests and the loss benchmark (`probe-bench loss`)
//! hold their counts against: false DOWNs, time without readiness, flapping and detection
//! bounds under independent probe failures.
//!
//! # Using it from a crate's tests
//! ```toml
//! [dev-dependencies]
//! probe-testkit.workspace = true
//! ```
//!
//! ```no_run
//! # async fn demo() {
//! use probe_testkit::AcceptServer;
//! let netns = probe_testkit::netns_or_skip!();
//! let server = AcceptServer::start(netns.tcp_listener().unwrap()).unwrap();
//! netns.loss_syn(3).unwrap(); // 3% of the SYNs into the namespace are dropped
//! // ... probe server.addr() from the root namespace ...
//! netns.blackhole_port(server.addr().port()).unwrap(); // connects now time out
//! # }
//! ```

mod alertmanager;
mod blackbox;
mod browser;
pub mod etcd;
pub mod fuzz;
mod model;
mod netns;
mod nginx;
mod openssl;
mod postgres;
mod prometheus;
mod skip;

pub use alertmanager::{Alertmanager, AlertmanagerError};
pub use blackbox::{Blackbox, BlackboxAnswer, BlackboxError, blackbox_or_skip, version_of};
pub use browser::{Browser, BrowserError};
pub use model::{LossModel, poisson_tail, poisson_upper};
pub use netns::{AcceptServer, Netns, NetnsError};
pub use nginx::{KeepAlive, Nginx, NginxError};
pub use openssl::{OpensslError, OpensslServer, openssl};
pub use postgres::{Postgres, PostgresError, postgres_or_skip};
pub use prometheus::{Prometheus, PrometheusError, prometheus_or_skip};
pub use skip::{skipped_outside_ci, skipped_without_ipv6};

/// `name` on `PATH`, or in `/usr/sbin` and `/sbin`, which a user's `PATH` may lack.
fn which(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
