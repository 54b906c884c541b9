//! `import blackbox`: a `blackbox.yml` and the targets Prometheus scrapes it with, as our probes
//! YAML, one target per (module, target).
//!
//! Targets come from a `--targets` file, which is either
//! - a `file_sd` list (JSON or YAML) of `{targets: [...], labels: {...}}` groups: a group's
//!   module is its `__param_module` label (what Prometheus sends as `module=`), else its
//!   `module` label (what the usual relabelling copies there), else `http_2xx`, the exporter's
//!   own default; the schedule is Prometheus' default (every minute, 10 s to answer); or
//! - a `prometheus.yml`: each job with `metrics_path: /probe` is a blackbox job, its module a
//!   group's `__param_module` label, else the first of the job's `params.module`, else as above;
//!   its targets those of `static_configs` and of the files its `file_sd_configs` name (relative
//!   to the file; globs are not expanded), its schedule its `scrape_interval` and
//!   `scrape_timeout` (or `global`'s, or Prometheus'). The usual relabelling (the target
//!   address as `__param_target`) is assumed; other `relabel_configs` are not read.
//!
//! Without `--targets` there is nothing to probe: the output is an empty `targets` list that
//! names, in comments, each module and whether it can be imported, so that the file is checked
//! all the same.
//!
//! Ids are `MODULE-TARGET` made of `[a-z0-9._-]` (the target without its scheme, every other
//! character a `-`), cut to the longest id with a hash of the whole when longer, and `-2`, `-3`
//! after a clash, in input order: the same input gives the same ids. Entries keep the input's
//! order; a (module, target) pair given twice is one entry.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use probe::TargetId;
use serde::{Deserialize, Serialize};

use super::Printed;
use crate::blackbox::{self, Blackbox, Entry, Schedule};
use probe_config::yaml::{
    Entries, Kind, Node, OneOrMany, Pos, Sp, collect, file_error, located, one_line, read_file,
    syntax_error, value_of, yaml_options,
};
use probe_config::{ConfigError, ConfigErrors};

/// The module the exporter probes with when a query names none.
const DEFAULT_MODULE: &str = "http_2xx";

/// Imports `blackbox` (a `blackbox.yml`) with the targets of `targets`, if given.
///
/// # Errors
/// Every problem of either file that makes it unreadable or invalid, located.
pub fn import(blackbox: &Path, targets: Option<&Path>) -> Result<Printed, ConfigErrors> {
    let config = blackbox::load(blackbox)?;
    let jobs = match targets {
        Some(path) => Some(read_targets(path)?),
        None => None,
    };
    let mut skipped = Vec::new();
    for module in &config.modules {
        if let Err(refusals) = &module.module {
            for refusal in &refusals.0 {
                skipped.push(format!("module {:?}: {refusal}", module.name));
            }
        }
    }
    let header = format!(
        "# Imported from {} by `probe-engine import blackbox`.\n",
        one_line(&blackbox.display().to_string())
    );
    let Some(jobs) = jobs else {
        return Ok(Printed {
            yaml: format!("{header}{}targets: []\n", modules_summary(&config)),
            notes: skipped,
        });
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut ids: HashSet<String> = HashSet::new();
    skipped.extend(jobs.skipped);
    for target in jobs.targets {
        if !seen.insert((target.module.clone(), target.address.clone())) {
            continue;
        }
        let what = format!("target {:?} (module {:?})", target.address, target.module);
        let module = match config.module(&target.module).map(|m| &m.module) {
            None => {
                skipped.push(format!("{what}: blackbox.yml has no such module"));
                continue;
            }
            Some(Err(_)) => {
                skipped.push(format!("{what}: the module is refused, see above"));
                continue;
            }
            Some(Ok(module)) => module,
        };
        let id = unique_id(&target.module, &target.address, &mut ids);
        match module.entry(&target.address, &id, target.schedule) {
            Ok(entry) => {
                // What the daemon would refuse is refused here, so the output always loads.
                let dir = config.file.parent().unwrap_or(Path::new(""));
                match entry.compile(dir) {
                    Ok(_) => entries.push(entry),
                    Err(why) => {
                        ids.remove(&id);
                        skipped.push(format!("{what}: {}", one_line(&why)));
                    }
                }
            }
            Err(why) => {
                ids.remove(&id);
                skipped.push(format!("{what}: {}", one_line(&why)));
            }
        }
    }
    #[derive(Serialize)]
    struct Document<'a> {
        targets: &'a [Entry],
    }
    let body = if entries.is_empty() {
        "targets: []\n".to_owned()
    } else {
        serde_saphyr::to_string(&Document { targets: &entries })
            .map_err(|e| file_error(blackbox, format!("cannot write the probes YAML: {e}")))?
    };
    Ok(Printed {
        yaml: format!("{header}{body}"),
        notes: skipped,
    })
}

/// A comment naming each module and whether it can be imported.
fn modules_summary(config: &Blackbox) -> String {
    let mut text = String::from("# No --targets: give them to import each module's targets.\n");
    for module in &config.modules {
        // The name is quoted, its control characters escaped: a comment stays one line.
        let line = match &module.module {
            Ok(m) => format!(
                "# module {:?} ({}): importable",
                module.name,
                m.prober.as_str()
            ),
            Err(_) => format!("# module {:?}: refused (see stderr)", module.name),
        };
        text.push_str(&one_line(&line));
        text.push('\n');
    }
    text
}

/// A target of a blackbox job: its address, module and schedule.
#[derive(Debug)]
struct Target {
    address: String,
    module: String,
    schedule: Schedule,
}

/// What a targets file gave.
#[derive(Debug, Default)]
struct Jobs {
    targets: Vec<Target>,
    skipped: Vec<String>,
}

/// `MODULE-TARGET` in `[a-z0-9._-]`, unique among `taken`.
fn unique_id(module: &str, target: &str, taken: &mut HashSet<String>) -> String {
    let target = target.split_once("://").map_or(target, |(_, rest)| rest);
    let mut id = String::new();
    for c in format!("{module}-{target}")
        .chars()
        .flat_map(char::to_lowercase)
    {
        let c = if matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-') {
            c
        } else {
            '-'
        };
        if !(c == '-' && id.ends_with('-')) {
            id.push(c);
        }
    }
    let mut id = id.trim_matches('-').to_owned();
    if id.is_empty() {
        id = "target".to_owned();
    }
    // Room for a hash (17) and a clash suffix (up to 6).
    const ROOM: usize = TargetId::MAX_LEN - 24;
    if id.len() > ROOM {
        let hash = fnv1a(id.as_bytes());
        id.truncate(ROOM);
        id = format!("{}-{hash:016x}", id.trim_end_matches('-'));
    }
    let mut candidate = id.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{id}-{n}");
        n += 1;
    }
    candidate
}

/// FNV-1a, 64 bits: a hash that stays the same across builds and platforms, as ids must.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One `file_sd` group.
#[derive(Deserialize)]
#[serde(rename = "target group", deny_unknown_fields)]
struct RawGroup {
    targets: Vec<Sp<String>>,
    labels: Option<Entries<String>>,
}

/// What we read of a `prometheus.yml`; every other key is left alone.
#[derive(Deserialize)]
#[serde(rename = "prometheus.yml")]
struct RawPrometheus {
    global: Option<RawTiming>,
    scrape_configs: Option<Vec<Sp<RawJob>>>,
}

#[derive(Deserialize)]
#[serde(rename = "global")]
struct RawTiming {
    scrape_interval: Option<Sp<String>>,
    scrape_timeout: Option<Sp<String>>,
}

#[derive(Deserialize)]
#[serde(rename = "scrape_config")]
struct RawJob {
    job_name: Option<Sp<String>>,
    metrics_path: Option<Sp<String>>,
    params: Option<Entries<OneOrMany<Sp<String>>>>,
    scrape_interval: Option<Sp<String>>,
    scrape_timeout: Option<Sp<String>>,
    static_configs: Option<Vec<Sp<RawGroup>>>,
    file_sd_configs: Option<Vec<Sp<RawFileSd>>>,
}

#[derive(Deserialize)]
#[serde(rename = "file_sd_config")]
struct RawFileSd {
    files: Vec<Sp<String>>,
}

/// Reads a targets file: a `file_sd` list or a `prometheus.yml`.
fn read_targets(path: &Path) -> Result<Jobs, ConfigErrors> {
    let text = read_file(path).map_err(|message| file_error(path, message))?;
    let mut diags = Vec::new();
    let mut jobs = Jobs::default();
    parse_targets(path, &text, &mut jobs, &mut diags);
    if diags.is_empty() {
        Ok(jobs)
    } else {
        Err(located(path, diags))
    }
}

fn parse_root(text: &str, diags: &mut Vec<(Pos, String)>) -> Option<Node> {
    match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) => Some(root),
        Ok(None) => {
            diags.push((Pos::NONE, "the file is empty".to_owned()));
            None
        }
        Err(e) => {
            diags.push(syntax_error(&e));
            None
        }
    }
}

fn parse_targets(path: &Path, text: &str, jobs: &mut Jobs, diags: &mut Vec<(Pos, String)>) {
    let Some(root) = parse_root(text, diags) else {
        return;
    };
    match &root.kind {
        Kind::Seq(_) => file_sd(&root, text, None, Schedule::default(), jobs, diags),
        Kind::Map(_) if value_of(&root, text, "scrape_configs").is_some() => {
            prometheus(path, &root, text, jobs, diags);
        }
        _ => diags.push((
            root.pos,
            "expected a file_sd list of {targets, labels} groups, or a prometheus.yml with \
             scrape_configs"
                .to_owned(),
        )),
    }
}

/// The groups of a `file_sd` list, with the job's module (if it names one) and schedule.
fn file_sd(
    root: &Node,
    text: &str,
    module: Option<&str>,
    schedule: Schedule,
    jobs: &mut Jobs,
    diags: &mut Vec<(Pos, String)>,
) {
    let Kind::Seq(items) = &root.kind else {
        diags.push((
            root.pos,
            "expected a list of {targets, labels} groups".to_owned(),
        ));
        return;
    };
    for item in items {
        let (group, errors) = collect::<RawGroup>(item, text);
        diags.extend(errors);
        if let Some(group) = group {
            add_group(group, module, schedule, jobs);
        }
    }
}

fn add_group(group: RawGroup, module: Option<&str>, schedule: Schedule, jobs: &mut Jobs) {
    let label = |name: &str| {
        group
            .labels
            .as_ref()
            .and_then(|l| l.0.iter().find(|(k, _)| k == name))
            .map(|(_, v)| v.value.clone())
    };
    // A target's `__param_` label overrides the job's `params`, as in Prometheus.
    let module = label("__param_module")
        .or_else(|| module.map(str::to_owned))
        .or_else(|| label("module"))
        .unwrap_or_else(|| DEFAULT_MODULE.to_owned());
    for target in group.targets {
        jobs.targets.push(Target {
            address: target.value.trim().to_owned(),
            module: module.clone(),
            schedule,
        });
    }
}

fn prometheus(
    path: &Path,
    root: &Node,
    text: &str,
    jobs: &mut Jobs,
    diags: &mut Vec<(Pos, String)>,
) {
    let (raw, errors) = collect::<RawPrometheus>(root, text);
    diags.extend(errors);
    let Some(raw) = raw else {
        return;
    };
    let global = timing(
        raw.global.as_ref().and_then(|g| g.scrape_interval.as_ref()),
        raw.global.as_ref().and_then(|g| g.scrape_timeout.as_ref()),
        Schedule::default(),
        diags,
    );
    let dir = path.parent().unwrap_or(Path::new(""));
    for job in raw.scrape_configs.unwrap_or_default() {
        let job = job.value;
        if job
            .metrics_path
            .as_ref()
            .is_none_or(|p| p.value.trim() != "/probe")
        {
            continue;
        }
        let name = job
            .job_name
            .as_ref()
            .map_or("", |n| n.value.as_str())
            .to_owned();
        let schedule = timing(
            job.scrape_interval.as_ref(),
            job.scrape_timeout.as_ref(),
            global,
            diags,
        );
        let module = job
            .params
            .as_ref()
            .and_then(|p| p.0.iter().find(|(k, _)| k == "module"))
            .and_then(|(_, v)| v.value.0.first())
            .map(|m| m.value.clone());
        for group in job.static_configs.unwrap_or_default() {
            add_group(group.value, module.as_deref(), schedule, jobs);
        }
        for sd in job.file_sd_configs.unwrap_or_default() {
            for file in sd.value.files {
                if file.value.contains(['*', '?', '[']) {
                    jobs.skipped.push(format!(
                        "job {name:?}: file_sd_configs file {:?} is a glob, which is not expanded: \
                         give it with --targets",
                        file.value
                    ));
                    continue;
                }
                let file_path: PathBuf = dir.join(file.value.trim());
                match read_file(&file_path) {
                    Ok(sd_text) => {
                        let mut sd_diags = Vec::new();
                        if let Some(sd_root) = parse_root(&sd_text, &mut sd_diags) {
                            file_sd(
                                &sd_root,
                                &sd_text,
                                module.as_deref(),
                                schedule,
                                jobs,
                                &mut sd_diags,
                            );
                        }
                        for (pos, message) in sd_diags {
                            let shown = ConfigError::at(&file_path, pos, &message);
                            diags.push((file.pos, format!("in {shown}")));
                        }
                    }
                    Err(why) => diags.push((file.pos, format!("{}: {why}", file_path.display()))),
                }
            }
        }
    }
}

/// A job's schedule: its own keys over `fallback`'s.
fn timing(
    interval: Option<&Sp<String>>,
    timeout: Option<&Sp<String>>,
    fallback: Schedule,
    diags: &mut Vec<(Pos, String)>,
) -> Schedule {
    let mut read = |raw: Option<&Sp<String>>, name: &str, default: Duration| match raw {
        None => default,
        Some(raw) => match prometheus_duration(&raw.value) {
            Some(d) if !d.is_zero() => d,
            _ => {
                diags.push((
                    raw.pos,
                    format!("invalid duration {:?} for {name:?}", raw.value),
                ));
                default
            }
        },
    };
    Schedule {
        interval: read(interval, "scrape_interval", fallback.interval),
        scrape_timeout: read(timeout, "scrape_timeout", fallback.scrape_timeout),
    }
}

/// A Prometheus duration: whole numbers with units, largest first (`1h30m`, `15s`, `500ms`).
fn prometheus_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let number: u64 = rest.get(..digits)?.parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let seconds = match rest.get(..unit_len)? {
            "ms" => {
                total += Duration::from_millis(number);
                rest = &rest[unit_len..];
                continue;
            }
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            "y" => 365 * 86_400,
            _ => return None,
        };
        total += Duration::from_secs(number.checked_mul(seconds)?);
        rest = &rest[unit_len..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_valid_and_unique() {
        let mut taken = HashSet::new();
        let a = unique_id("http_2xx", "http://127.0.0.1:8080/ok?x=1", &mut taken);
        assert_eq!(a, "http_2xx-127.0.0.1-8080-ok-x-1");
        assert_eq!(
            unique_id("http_2xx", "https://127.0.0.1:8080/ok?x=1", &mut taken),
            "http_2xx-127.0.0.1-8080-ok-x-1-2"
        );
        let long = unique_id("m", &"x".repeat(300), &mut taken);
        assert!(long.len() <= TargetId::MAX_LEN);
        assert!(TargetId::new(&long).is_ok());
        assert_eq!(long, unique_id("m", &"x".repeat(300), &mut HashSet::new()));
        assert!(TargetId::new(&unique_id("Ünïcode", "[::1]:53", &mut taken)).is_ok());
    }

    #[test]
    fn prometheus_durations() {
        assert_eq!(prometheus_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(
            prometheus_duration("1h30m"),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            prometheus_duration("500ms"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(prometheus_duration("1.5s"), None);
        assert_eq!(prometheus_duration("s"), None);
    }
}
