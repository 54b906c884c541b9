//! ARCHITECTURE.md's rules about imports, checked over the sources:
//!
//! - the library's modules are listed in the map in the order they may use each other: each uses
//!   only modules listed above it, so a reader can learn the library top-down and no layer
//!   reaches back up;
//! - in every crate, at every folder level, no modules import each other in a cycle.
//!
//! A reference is any path through `crate::` or `super::` in code (comments are skipped): a
//! `use`, a qualified call or an intra-doc link in an attribute all count, since each ties the
//! modules together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A module's path within its crate: `["engine", "effects"]`; a folder's `mod.rs` is the folder.
type ModPath = Vec<String>;

/// Every `.rs` file under `src`, by its module path.
fn modules(src: &Path) -> BTreeMap<ModPath, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: ModPath = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts, std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The code of `text` without `//` comments (doc comments included).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string literal (a URL) ends the line early: harmless here, since
            // only paths are looked for.
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths `text` (the code of module `me`) refers to.
fn references(text: &str, me: &ModPath) -> BTreeSet<ModPath> {
    let ident = r"[A-Za-z_][A-Za-z0-9_]*";
    let crate_path = regex::Regex::new(&format!(
        r"\bcrate::((?:{ident}::)*(?:{ident}|\{{[^;]*?\}}))"
    ))
    .unwrap();
    let super_path =
        regex::Regex::new(&format!(r"\b((?:super::)+)({ident}|\{{[^;]*?\}})")).unwrap();
    let word = regex::Regex::new(ident).unwrap();
    let text = code(text);
    let mut out = BTreeSet::new();
    for m in crate_path.captures_iter(&text) {
        let body = &m[1];
        match body.split_once('{') {
            Some((head, rest)) => {
                let head: ModPath = head
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                for item in rest.replace('}', " ").split([',', ' ', '\n']) {
                    let mut path = head.clone();
                    path.extend(
                        item.split("::")
                            .filter(|p| !p.is_empty() && *p != "self")
                            .map(str::to_owned),
                    );
                    out.insert(path);
                }
            }
            None => {
                out.insert(body.split("::").map(str::to_owned).collect());
            }
        }
    }
    for m in super_path.captures_iter(&text) {
        let ups = m[1].matches("super::").count();
        let base: ModPath = me[..me.len().saturating_sub(ups)].to_vec();
        for name in word.find_iter(&m[2]).map(|w| w.as_str()) {
            if name != "self" {
                let mut path = base.clone();
                path.push(name.to_owned());
                out.insert(path);
            }
        }
    }
    out
}

/// The edges between sibling modules: `a -> b` where code under `a` refers to something under
/// `b`, and both are children of the same folder.
fn sibling_edges(src: &Path) -> BTreeSet<(ModPath, ModPath)> {
    let mods = modules(src);
    let mut edges = BTreeSet::new();
    for (me, text) in &mods {
        for reference in references(text, me) {
            // The longest prefix of the reference that is a module.
            let Some(target) = (1..=reference.len())
                .rev()
                .map(|k| reference[..k].to_vec())
                .find(|p| mods.contains_key(p))
            else {
                continue;
            };
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            // A module and its own ancestor or descendant are one subtree, not siblings.
            if common == me.len() || common == target.len() {
                continue;
            }
            edges.insert((me[..=common].to_vec(), target[..=common].to_vec()));
        }
    }
    edges
}

/// A cycle in `edges`, if there is one, as the modules along it.
fn cycle(edges: &BTreeSet<(ModPath, ModPath)>) -> Option<Vec<ModPath>> {
    let mut next: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    // Depth first, with the path kept: a node met again on the path closes a cycle.
    fn visit<'a>(
        node: &'a ModPath,
        next: &BTreeMap<&'a ModPath, Vec<&'a ModPath>>,
        path: &mut Vec<&'a ModPath>,
        done: &mut BTreeSet<&'a ModPath>,
    ) -> Option<Vec<ModPath>> {
        if let Some(i) = path.iter().position(|p| *p == node) {
            return Some(path[i..].iter().map(|p| (*p).clone()).collect());
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for child in next.get(node).into_iter().flatten() {
            if let Some(found) = visit(child, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for node in next.keys() {
        if let Some(found) = visit(node, &next, &mut Vec::new(), &mut done) {
            return Some(found);
        }
    }
    None
}

#[test]
fn no_crate_has_an_import_cycle_at_any_folder_level() {
    let crates = std::fs::read_dir(root().join("crates")).unwrap();
    let mut checked = 0;
    for entry in crates {
        let src = entry.unwrap().path().join("src");
        let edges = sibling_edges(&src);
        checked += edges.len();
        if let Some(cycle) = cycle(&edges) {
            let names: Vec<String> = cycle.iter().map(|p| p.join("::")).collect();
            panic!("{}: import cycle: {}", src.display(), names.join(" -> "));
        }
    }
    assert!(
        checked >= 100,
        "only {checked} edges found: the reader is broken"
    );
}

/// The library's top-level modules in the order ARCHITECTURE.md lists them.
fn mapped_order() -> Vec<String> {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = map
        .split("## The library, folder by folder")
        .nth(1)
        .expect("ARCHITECTURE.md maps the library")
        .split("\n## ")
        .next()
        .unwrap();
    let entry = regex::Regex::new(r"(?m)^- `([a-z_]+)(?:/|\.rs)`").unwrap();
    entry
        .captures_iter(section)
        .map(|c| c[1].to_owned())
        .filter(|name| name != "lib")
        .collect()
}

#[test]
fn each_library_module_uses_only_those_the_map_lists_above_it() {
    let src = root().join("crates/probe/src");
    let order = mapped_order();
    let on_disk: BTreeSet<String> = modules(&src)
        .into_keys()
        .filter_map(|p| p.first().cloned())
        .collect();
    let mapped: BTreeSet<String> = order.iter().cloned().collect();
    assert_eq!(
        mapped, on_disk,
        "ARCHITECTURE.md's library map and crates/probe/src differ"
    );
    let rank: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let mut upward = Vec::new();
    for (from, to) in sibling_edges(&src) {
        if from.len() != 1 {
            continue;
        }
        if rank[from[0].as_str()] < rank[to[0].as_str()] {
            upward.push(format!("{} uses {}", from[0], to[0]));
        }
    }
    assert!(
        upward.is_empty(),
        "modules that use one the map lists below them: {upward:?}"
    );
}
