//! The documentation cannot drift from the daemon: `README.md` and every page of `docs/` are
//! read here and held to the real binary and its sources.
//!
//! - Every fenced block says what it is, and every YAML block is accepted by what reads that
//!   kind of file: a probes file by `probe-engine check`, a Prometheus config by `promtool`.
//! - Every route of the router has a section in `docs/api.md`, and every section names a route
//!   the running daemon answers (not with its "no such path" or "method not allowed").
//! - The `GET /metrics` table lists exactly the families the daemon can export.
//! - Every relative link leads to a file, and every `#anchor` to a heading there.
//!
//! Rust blocks are compiled and run as doctests of the `probe` crate, which includes every page.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};
use support::{BIN, Daemon, declared_routes, prom};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `README.md` and every page of `docs/`, by path from the root.
fn pages() -> BTreeMap<String, String> {
    let mut pages = BTreeMap::new();
    let mut read = |relative: String| {
        let text = std::fs::read_to_string(root().join(&relative))
            .unwrap_or_else(|e| panic!("{relative}: {e}"));
        pages.insert(relative, text);
    };
    read("README.md".to_owned());
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            read(format!("docs/{name}"));
        }
    }
    pages
}

/// A fenced code block: where it starts, its info string and its text.
struct Block {
    at: String,
    info: String,
    text: String,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

fn blocks(page: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => "(indented)".to_owned(),
                };
                open = Some(Block {
                    at: format!("{page}:{}", line_of(text, range.start)),
                    info,
                    text: String::new(),
                });
            }
            Event::Text(t) => {
                if let Some(block) = open.as_mut() {
                    block.text.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
            _ => {}
        }
    }
    blocks
}

/// Every block of every page.
fn all_blocks() -> Vec<Block> {
    pages()
        .iter()
        .flat_map(|(page, text)| blocks(page, text))
        .collect()
}

/// What a block's info string may say. An untagged block would be compiled as Rust by
/// rustdoc, and an untagged YAML block would escape the checks below.
const KINDS: &[&str] = &[
    "yaml",
    "yaml targets",
    "yaml prometheus",
    "yaml web",
    "yaml fragment",
    "json",
    "sh",
    "text",
    "rust",
    "rust,no_run",
];

#[test]
fn every_block_says_what_it_is() {
    let mut wrong = Vec::new();
    for block in all_blocks() {
        if !KINDS.contains(&block.info.as_str()) {
            wrong.push(format!("{}: ```{}", block.at, block.info));
        }
    }
    assert!(
        wrong.is_empty(),
        "blocks whose info string is none of {KINDS:?}:\n{}",
        wrong.join("\n")
    );
}

/// The environment the documented files refer to (`${VAR}` credentials, `HOSTNAME` as a
/// member's name), so that `check` judges their keys, not the test's environment.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("ORDERS_TOKEN", "t0ken"),
    ("PAYMENTS_TOKEN", "t0ken"),
    ("AM_PASSWORD", "secret"),
    ("HOOK_TOKEN", "t0ken"),
    ("ETCD_PASSWORD", "secret"),
    ("HOSTNAME", "probe-a"),
];

/// A directory holding `file` and the CA files the documented files name beside it.
fn beside_cas(file: &str, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ca = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap()
        .pem();
    for name in ["ca.pem", "internal-ca.pem"] {
        std::fs::write(dir.path().join(name), &ca).unwrap();
    }
    std::fs::write(dir.path().join(file), text).unwrap();
    dir
}

/// `probe-engine check` on `text` as a probes file; its stderr when it refuses.
fn check(text: &str) -> Result<(), String> {
    let dir = beside_cas("probes.yaml", text);
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(dir.path().join("probes.yaml"))
        .envs(ENVIRONMENT.iter().copied())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A `yaml targets` block as the probes file it belongs in.
fn under_targets(text: &str) -> String {
    let mut file = String::from("targets:\n");
    for line in text.lines() {
        file.push_str("  ");
        file.push_str(line);
        file.push('\n');
    }
    file
}

#[test]
fn every_probes_file_shown_is_accepted_by_check() {
    let mut refused = Vec::new();
    let mut checked = 0;
    for block in all_blocks() {
        let file = match block.info.as_str() {
            "yaml" => block.text.clone(),
            "yaml targets" => under_targets(&block.text),
            _ => continue,
        };
        checked += 1;
        if let Err(why) = check(&file) {
            refused.push(format!("{} (```{}):\n{why}", block.at, block.info));
        }
    }
    assert!(checked >= 15, "only {checked} probes files in the docs");
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// Every web config shown, checked by `check --web-config` beside the files it names (a server
/// certificate and key, and a CA for client certificates, made for the test).
#[tokio::test]
async fn every_web_config_shown_is_accepted_by_check() {
    let blocks: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.info == "yaml web")
        .collect();
    assert!(!blocks.is_empty(), "no web config in the docs");
    for block in blocks {
        let dir = beside_cas("web.yml", &block.text);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("server.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        std::fs::copy(dir.path().join("ca.pem"), dir.path().join("clients-ca.crt")).unwrap();
        let out = Command::new(BIN)
            .args(["check", "--config"])
            .arg(root().join("probes"))
            .arg("--web-config")
            .arg(dir.path().join("web.yml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}:\n{}",
            block.at,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("ok: web config: TLS, basic auth"),
            "{}",
            block.at
        );
    }
}

/// A block marked `fragment` is only an excerpt of someone else's file (a pod spec, an
/// Alertmanager route): it must still be YAML, and stay the exception.
#[test]
fn fragments_are_yaml_and_few() {
    let fragments: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.info == "yaml fragment")
        .collect();
    for block in &fragments {
        if let Err(e) = serde_saphyr::from_str::<serde_json::Value>(&block.text) {
            panic!("{}: not YAML: {e}", block.at);
        }
    }
    assert!(
        fragments.len() <= 3,
        "more excerpts than the three of other tools' files: {:?}",
        fragments.iter().map(|b| &b.at).collect::<Vec<_>>()
    );
}

#[test]
fn every_prometheus_config_shown_is_accepted_by_promtool() {
    let mut checked = 0;
    for block in all_blocks()
        .into_iter()
        .filter(|b| b.info == "yaml prometheus")
    {
        let dir = beside_cas("prometheus.yml", &block.text);
        let out = Command::new("promtool")
            .args(["check", "config", "--syntax-only"])
            .arg(dir.path().join("prometheus.yml"))
            .output()
            .expect("promtool (scripts/setup installs the prometheus package)");
        assert!(
            out.status.success(),
            "{}: promtool refuses it:\n{}{}",
            block.at,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 1, "no Prometheus config in the docs");
}

/// The routes `docs/api.md` has a section for: each `### `METHOD /path`` heading.
fn documented_routes() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/api.md")).unwrap();
    headings(&text)
        .into_iter()
        .filter(|(level, _)| *level == HeadingLevel::H3)
        .filter_map(|(_, title)| {
            let (method, path) = title.split_once(' ')?;
            ["GET", "POST", "PUT", "DELETE", "PATCH"]
                .contains(&method)
                .then(|| format!("{method} {path}"))
        })
        .collect()
}

#[test]
fn every_route_has_a_section_and_every_section_a_route() {
    let declared = declared_routes();
    let documented = documented_routes();
    assert!(
        declared.len() >= 30,
        "the router's routes not found: {declared:?}"
    );
    let undocumented: Vec<_> = declared.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&declared).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes without a section in docs/api.md: {undocumented:?}\n\
         sections in docs/api.md without a route: {unrouted:?}"
    );
}

/// The daemon itself answers every documented route: with whatever the request deserves (it
/// has no body, no token), but not with the router's own "no such path" or "method not
/// allowed". A source reading alone could not tell a route the router drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_answers_every_documented_route() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("probes.yaml"),
        "targets:\n  - id: a\n    tcp: { address: 127.0.0.1:1 }\n",
    )
    .unwrap();
    let blackbox = dir.path().join("blackbox.yml");
    std::fs::write(&blackbox, "modules:\n  tcp_connect:\n    prober: tcp\n").unwrap();
    let daemon = Daemon::start_with(
        &dir.path().join("probes.yaml"),
        &["--blackbox-config", blackbox.to_str().unwrap()],
    );
    let mut missing = Vec::new();
    for route in documented_routes() {
        let (method, path) = route.split_once(' ').unwrap();
        // `/v1/events` and `/status/events` are streams: only a 404 or 405's body is read.
        let response = daemon
            .http
            .request(
                method.parse().unwrap(),
                daemon.url(&path.replace("{id}", "a")),
            )
            .send()
            .await
            .unwrap();
        let status = response.status();
        let fallback = match status.as_u16() {
            404 | 405 => {
                let body = response.text().await.unwrap_or_default();
                body.contains("no such path") || body.contains("method not allowed")
            }
            _ => false,
        };
        if fallback {
            missing.push(format!("{route}: {status}"));
        }
    }
    assert!(missing.is_empty(), "documented, not routed: {missing:?}");
}

/// The families the `GET /metrics` section's table lists (a row may name several).
fn documented_families() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/api.md")).unwrap();
    let section = text
        .split("\n### `GET /metrics`")
        .nth(1)
        .expect("docs/api.md has a GET /metrics section");
    // Up to the next heading (a line `# HELP` inside the section's example is no heading).
    let section = section.split("\n##").next().unwrap();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .flat_map(|row| {
            let first = row.split(" |").next().unwrap();
            first
                .split(", ")
                .map(|name| name.trim_matches('`').to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_metrics_table_lists_exactly_what_the_daemon_can_export() {
    let exportable = prom::exportable_families();
    let documented = documented_families();
    assert!(exportable.len() >= 50, "{exportable:?}");
    let undocumented: Vec<_> = exportable.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&exportable).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "families missing from docs/api.md's GET /metrics table: {undocumented:?}\n\
         listed there but never exported: {unknown:?}"
    );
}

/// Whatever a running daemon writes to `/metrics` is a family the table lists: a series
/// recorded without a description would otherwise escape the list above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_holds_only_documented_families() {
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("probes.yaml"),
        format!(
            "defaults: {{ interval: 200ms, timeout: 100ms, rise: 1, fall: 1 }}\n\
             targets:\n\
             \x20 - id: up\n    tcp: {{ address: \"{}\" }}\n\
             \x20 - id: down\n    tcp: {{ address: 127.0.0.1:1 }}\n\
             \x20 - id: both\n    kind: group\n    depends_on: [{{ target: up }}, {{ target: down }}]\n",
            up.local_addr().unwrap()
        ),
    )
    .unwrap();
    let state = dir.path().join("state");
    let daemon = Daemon::start_with(
        &dir.path().join("probes.yaml"),
        &["--state-dir", state.to_str().unwrap()],
    );
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;
    let text = daemon.get("/metrics").await.text().await.unwrap();
    let documented = documented_families();
    let scraped: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(scraped.len() >= 15, "{text}");
    let undocumented: Vec<_> = scraped
        .iter()
        .filter(|name| !documented.contains(**name))
        .collect();
    assert!(
        undocumented.is_empty(),
        "scraped, not documented: {undocumented:?}"
    );
}

/// A page's headings, with their level and plain text.
fn headings(text: &str) -> Vec<(HeadingLevel, String)> {
    let mut headings = Vec::new();
    let mut open: Option<(HeadingLevel, String)> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => open = Some((level, String::new())),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, title)) = open.as_mut() {
                    title.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => headings.extend(open.take()),
            _ => {}
        }
    }
    headings
}

/// The anchors GitHub gives a page's headings: lowercased, punctuation dropped, spaces as
/// hyphens, and `-1`, `-2`, … after a repeated one.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut anchors = BTreeSet::new();
    for (_, title) in headings(text) {
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        anchors.insert(if *n == 0 { slug } else { format!("{slug}-{n}") });
        *n += 1;
    }
    anchors
}

#[test]
fn every_relative_link_resolves() {
    let pages = pages();
    let mut dead = Vec::new();
    let mut followed = 0;
    for (page, text) in &pages {
        let dir = Path::new(page).parent().unwrap();
        for (event, range) in Parser::new(text).into_offset_iter() {
            let target = match event {
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => dest_url,
                _ => continue,
            };
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            followed += 1;
            let at = format!("{page}:{}", line_of(text, range.start));
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_ref(), None),
            };
            let path = if file.is_empty() {
                PathBuf::from(page)
            } else {
                normalise(&dir.join(file))
            };
            let Ok(linked) = std::fs::metadata(root().join(&path)) else {
                dead.push(format!("{at}: {target}: no {}", path.display()));
                continue;
            };
            if let Some(anchor) = anchor {
                let content = pages.get(path.to_str().unwrap()).cloned().or_else(|| {
                    linked
                        .is_file()
                        .then(|| std::fs::read_to_string(root().join(&path)).ok())
                        .flatten()
                });
                if !content.is_some_and(|c| anchors(&c).contains(anchor)) {
                    dead.push(format!("{at}: {target}: no heading #{anchor}"));
                }
            }
        }
    }
    assert!(followed >= 50, "only {followed} relative links");
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

/// `a/../b` as `b`, so that a link's file is named as `pages()` names it.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The `probe` crate compiles the Rust blocks of the pages it includes as doctests: every page
/// must be one of them, or its examples would go unchecked.
#[test]
fn every_page_is_compiled_as_doctests() {
    let lib = std::fs::read_to_string(root().join("crates/probe/src/lib.rs")).unwrap();
    let missing: Vec<String> = pages()
        .into_keys()
        .filter(|page| !lib.contains(&format!("include_str!(\"../../../{page}\")")))
        .collect();
    assert!(
        missing.is_empty(),
        "pages whose Rust blocks no doctest compiles: {missing:?}"
    );
}
