//! A small reader of the Prometheus text exposition format: series (name and labels) to value,
//! with each family's `# TYPE`.

use std::collections::{BTreeMap, BTreeSet};

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub samples: Vec<Sample>,
    /// `# TYPE` by family name.
    pub types: BTreeMap<String, String>,
    /// `# HELP` by family name.
    pub help: BTreeMap<String, String>,
}

impl Metrics {
    /// Parses an exposition; panics on a line it cannot read.
    pub fn parse(text: &str) -> Self {
        let mut metrics = Self::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE line");
                metrics.types.insert(name.to_owned(), kind.to_owned());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                metrics.help.insert(name.to_owned(), help.to_owned());
            } else if line.starts_with('#') {
                continue;
            } else {
                metrics.samples.push(parse_sample(line));
            }
        }
        metrics
    }

    /// The value of the series with exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Like [`get`](Self::get), with the series' absence in the panic message.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| {
            let have: Vec<_> = self.series(name).collect();
            panic!("no series {name}{labels:?}; {name} has {have:?}")
        })
    }

    /// Every sample of `name`.
    pub fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The samples of `name` whose labels include these.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.series(name).filter(move |s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The sum of the samples of `name` whose labels include these (0 when there are none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The label names of every series of `name` (which must exist).
    pub fn label_names(&self, name: &str) -> Vec<Vec<String>> {
        let mut names: Vec<Vec<String>> = self
            .series(name)
            .map(|s| s.labels.keys().cloned().collect())
            .collect();
        assert!(!names.is_empty(), "no series {name}");
        names.dedup();
        names
    }

    /// A histogram's buckets (`le` -> cumulative count, ordered by bound), `_count` and `_sum`
    /// for the series with these other labels; checks that the buckets are cumulative and that
    /// `+Inf` equals `_count`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Histogram {
        assert_eq!(self.types.get(name).map(String::as_str), Some("histogram"));
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = self
            .matching(&bucket, labels)
            .filter(|s| s.labels.len() == labels.len() + 1)
            .map(|s| (parse_value(&s.labels["le"]), s.value))
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(!buckets.is_empty(), "no buckets of {name}{labels:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name} buckets are not cumulative: {buckets:?}"
        );
        let count = self.value(&format!("{name}_count"), labels);
        let sum = self.value(&format!("{name}_sum"), labels);
        let last = buckets.last().unwrap();
        assert!(last.0.is_infinite(), "{name} has no +Inf bucket");
        assert_eq!(last.1, count, "{name}: +Inf bucket and _count differ");
        Histogram {
            buckets,
            count,
            sum,
        }
    }
}

/// Asserts that `ours` is the answer blackbox_exporter gave (`theirs`) to the same `/probe`:
/// the same families, each with the same help, type and label sets, and the same values except
/// for timings, which no two runs share, and the `client_specific` families, whose values the
/// server makes depend on the client.
pub fn assert_same_probe_series(what: &str, ours: &str, theirs: &str, client_specific: &[&str]) {
    let (o, t) = (Metrics::parse(ours), Metrics::parse(theirs));
    let context = || format!("{what}\n--- ours:\n{ours}\n--- theirs:\n{theirs}");
    assert_eq!(
        o.types.keys().collect::<Vec<_>>(),
        t.types.keys().collect::<Vec<_>>(),
        "families differ: {}",
        context()
    );
    assert_eq!(o.types, t.types, "types differ: {}", context());
    assert_eq!(o.help, t.help, "help texts differ: {}", context());
    let timing = |name: &str| {
        name == "probe_duration_seconds"
            || name == "probe_dns_lookup_time_seconds"
            || name.ends_with("_duration_seconds")
            || client_specific.contains(&name)
    };
    let keyed = |m: &Metrics| -> BTreeMap<(String, Vec<(String, String)>), f64> {
        m.samples
            .iter()
            .map(|s| {
                let labels = s.labels.clone().into_iter().collect();
                let value = if timing(&s.name) { 0.0 } else { s.value };
                ((s.name.clone(), labels), value)
            })
            .collect()
    };
    let (ko, kt) = (keyed(&o), keyed(&t));
    assert_eq!(
        ko.keys().collect::<Vec<_>>(),
        kt.keys().collect::<Vec<_>>(),
        "series differ: {}",
        context()
    );
    for (key, value) in &ko {
        assert_eq!(Some(value), kt.get(key), "{key:?}: {}", context());
    }
}

#[derive(Clone, Debug)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
}

fn parse_value(text: &str) -> f64 {
    match text {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        other => other
            .parse()
            .unwrap_or_else(|e| panic!("bad value {other:?}: {e}")),
    }
}

/// `name{k="v",...} value [timestamp]`.
fn parse_sample(line: &str) -> Sample {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("bad sample line {line:?}"));
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let mut end = None;
        loop {
            // A label name up to `=`, or the closing brace.
            while chars.next_if(|(_, c)| *c == ',' || *c == ' ').is_some() {}
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
            let mut value = String::new();
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => panic!("bad escape in {line:?}"),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
        }
        let end = end.unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
        rest = &inner[end + 1..];
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(
        fields
            .next()
            .unwrap_or_else(|| panic!("no value: {line:?}")),
    );
    Sample {
        name,
        labels,
        value,
    }
}

/// Every family `/metrics` can hold: the library's, the etcd source's and the daemon's
/// process-wide ones (as described to the recorder) and the per-target ones.
pub fn exportable_families() -> BTreeSet<String> {
    let described = Described::default();
    metrics::with_local_recorder(&described, probe_engine::daemon::describe_metrics);
    let mut names = described.0.into_inner().unwrap();
    names.extend(probe::engine::target_metric_families().map(|(name, _, _)| name.to_owned()));
    names
}

/// A recorder that keeps the names it is told about.
#[derive(Default)]
struct Described(std::sync::Mutex<BTreeSet<String>>);

impl Described {
    fn keep(&self, key: metrics::KeyName) {
        self.0.lock().unwrap().insert(key.as_str().to_owned());
    }
}

impl metrics::Recorder for Described {
    fn describe_counter(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.keep(key);
    }
    fn describe_gauge(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.keep(key);
    }
    fn describe_histogram(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.keep(key);
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}
