//! Fuzzing on the stable toolchain, for every test binary that fuzzes a parser: structured
//! generation with proptest (documents built from a schema's own words, then mutated byte by
//! byte), for a bounded time per target, over two fixed seeds and one random seed that is
//! printed.
//!
//! A failing input is shrunk and printed; add it under the target's corpus folder
//! (`tests/fuzz/<target>/` of the crate that fuzzes it) and it is run before the generated ones
//! forever after. `PROBE_FUZZ_SEED=0x...` replays the random seed of a failed run;
//! `PROBE_FUZZ_SECONDS` changes the time per seed (default 4).

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tokio::time::Instant;

/// The seeds every run uses, besides a random one.
const FIXED_SEEDS: [u64; 2] = [0x5eed_0001, 0x00c0_ffee];

/// A check: `Err` says what does not hold for the input.
pub type Check = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// Runs `check` on the regression cases of `target` (the files of `corpus/<target>/`), then on inputs from `strategy` for a
/// bounded time per seed. A panic is a failure; so is an input that takes more than 2 s
/// (a hang). The first failure is shrunk and reported with its seed. Fewer than `min_inputs`
/// checked (for the default 4 s a seed; in proportion to `PROBE_FUZZ_SECONDS`) is a failure
/// too: a machine too slow to fuzz must not pass by checking a handful.
/// `strategy` builds the generator on the fuzzing thread (proptest's boxed strategies stay on
/// the thread that made them).
pub fn fuzz(
    corpus: &Path,
    target: &str,
    min_inputs: u64,
    strategy: impl FnOnce() -> BoxedStrategy<Vec<u8>> + Send + 'static,
    check: Check,
) {
    let per_seed = std::env::var("PROBE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(4), Duration::from_secs_f64);
    let random = std::env::var("PROBE_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            use std::hash::{BuildHasher, Hasher};
            // A fresh random state per process: a random seed without a dependency for it.
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
    let seeds: Vec<u64> = FIXED_SEEDS.into_iter().chain([random]).collect();
    println!(
        "fuzz {target}: seeds {:#x}, {:#x} and {random:#x} (replay: PROBE_FUZZ_SEED={random:#x}), \
         {per_seed:?} each",
        FIXED_SEEDS[0], FIXED_SEEDS[1]
    );
    // The input being checked, for the watchdog to show if it never returns.
    let current = Arc::new(Mutex::new(Vec::new()));
    let (done, finished) = mpsc::channel();
    let worker = {
        let current = current.clone();
        let corpus = corpus.join(target);
        std::thread::spawn(move || {
            let result = run_all(&corpus, &strategy(), &check, &seeds, per_seed, &current);
            let _ = done.send(result);
        })
    };
    let budget = per_seed * 3 + Duration::from_secs(60);
    match finished.recv_timeout(budget) {
        Ok(Ok(cases)) => {
            println!("fuzz {target}: {cases} inputs, no failure");
            let _ = worker.join();
            let min = (min_inputs as f64 * per_seed.as_secs_f64() / 4.0) as u64;
            assert!(
                cases >= min,
                "fuzz {target}: only {cases} inputs checked, under the {min} a run must check"
            );
        }
        Ok(Err(failure)) => panic!("fuzz {target}: {failure}"),
        Err(_) => {
            let input = current.lock().map(|i| shown(&i)).unwrap_or_default();
            panic!("fuzz {target}: no verdict within {budget:?}: a hang, on {input}");
        }
    }
}

/// Longer than this for one input is a hang.
const HANG: Duration = Duration::from_secs(2);

fn run_all(
    corpus: &Path,
    strategy: &BoxedStrategy<Vec<u8>>,
    check: &Check,
    seeds: &[u64],
    per_seed: Duration,
    current: &Mutex<Vec<u8>>,
) -> Result<u64, String> {
    let guarded = |input: &[u8]| -> Result<(), String> {
        if let Ok(mut c) = current.lock() {
            c.clear();
            c.extend_from_slice(input);
        }
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(AssertUnwindSafe(|| check(input))).unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                Err(format!("panicked: {message}"))
            });
        match outcome {
            Ok(()) if started.elapsed() > HANG => {
                Err(format!("took {:?}, a hang", started.elapsed()))
            }
            other => other,
        }
    };
    let mut cases = 0;
    for (path, input) in regressions(corpus) {
        guarded(&input).map_err(|e| format!("regression case {}: {e}", path.display()))?;
        cases += 1;
    }
    for &seed in seeds {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(
            Config {
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
        );
        let deadline = Instant::now() + per_seed;
        while Instant::now() < deadline {
            let mut tree = strategy
                .new_tree(&mut runner)
                .map_err(|e| format!("generating: {e}"))?;
            cases += 1;
            let Err(first) = guarded(&tree.current()) else {
                continue;
            };
            // Shrink: keep simplifying while the simpler input still fails.
            let (mut failing, mut error) = (tree.current(), first);
            for _ in 0..10_000 {
                if !tree.simplify() {
                    break;
                }
                match guarded(&tree.current()) {
                    Err(e) => (failing, error) = (tree.current(), e),
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
            return Err(format!(
                "seed {seed:#x}: {error}\n  on {}\n  add it as a file under {}",
                shown(&failing),
                corpus.display()
            ));
        }
    }
    Ok(cases)
}

/// An input as a Rust byte string, so that it can be pasted into a file or a test.
fn shown(input: &[u8]) -> String {
    format!("b\"{}\"", input.escape_ascii())
}

/// The regression cases in `corpus`, in name order.
fn regressions(corpus: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(dir) = std::fs::read_dir(corpus) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = dir.filter_map(|e| Some(e.ok()?.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|path| Some((path.clone(), std::fs::read(&path).ok()?)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Generation: documents from a schema's words, then byte mutations.

/// Scalars: valid values of many keys, edge cases and junk.
#[rustfmt::skip]
pub const SCALARS: &[&str] = &[
    "1s", "0s", "-1s", "500ms", "99999999h", "1.5", "-3", "0", "1", "18446744073709551616",
    "1e308", "NaN", ".inf", "true", "false", "null", "~", "\"\"", "''", "a", "db", "a.b-c_d",
    "UPPER", "127.0.0.1:80", "[::1]:80", "localhost:0", "http://127.0.0.1:1/health",
    "https://[::1]:8443/x?y=z", "ftp://x", "2xx", "5XX", "600", "$.status", "$[\"a\"][0]", "$..x",
    "\"${HOME}\"", "\"${UNSET_VAR_FOR_FUZZ}\"", "\"$$\"", "GET", "POST", "reset", "graceful",
    "group", "high", "0.5", "1.0000001", "\"\\u0000\"", "\"é💥\"", "&a x", "*a", "!!binary aGk=",
    "!tag x", "|", ">", "- ", "{", "}", "[", "]", "#", ": ", "? ", "14d", "smtp", "postgres", "all", "any",
    "5GiB", "1MB", "400d", "\"postgres://pe@127.0.0.1:1/h\"",
];

/// A YAML value tree, rendered in block or flow style.
#[derive(Clone, Debug)]
enum Yaml {
    Scalar(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    fn render(&self, out: &mut String, indent: usize, flow: bool) {
        match self {
            Self::Scalar(s) => out.push_str(s),
            Self::Seq(items) if flow || items.is_empty() => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.render(out, indent, true);
                }
                out.push(']');
            }
            Self::Map(entries) if flow || entries.is_empty() => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let _ = write!(out, "{k}: ");
                    v.render(out, indent, true);
                }
                out.push('}');
            }
            Self::Seq(items) => {
                for item in items {
                    let _ = write!(out, "\n{:indent$}- ", "");
                    item.render(out, indent + 2, false);
                }
            }
            Self::Map(entries) => {
                for (k, v) in entries {
                    let _ = write!(out, "\n{:indent$}{k}: ", "");
                    v.render(out, indent + 2, false);
                }
            }
        }
    }
}

fn yaml_tree(keys: &'static [&'static str]) -> impl Strategy<Value = Yaml> {
    let leaf = prop_oneof![
        4 => proptest::sample::select(SCALARS).prop_map(|s| Yaml::Scalar(s.to_owned())),
        1 => "[ -~]{0,12}".prop_map(Yaml::Scalar),
    ];
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Yaml::Seq),
            proptest::collection::vec(
                (
                    proptest::sample::select(keys).prop_map(str::to_owned),
                    inner
                ),
                0..6
            )
            .prop_map(Yaml::Map),
        ]
    })
}

/// A byte edit of a document; each position is taken modulo the length it meets.
#[derive(Clone, Debug)]
pub enum Edit {
    /// Inserts the byte at the position.
    Insert(usize, u8),
    /// Deletes up to this many bytes from the position.
    Delete(usize, usize),
    /// Repeats up to this many bytes from the position right after them.
    Duplicate(usize, usize),
}

/// `doc` with `edits` applied in turn.
pub fn apply_edits(mut doc: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = doc.len();
        match *edit {
            Edit::Insert(at, byte) => doc.insert(at % (len + 1), byte),
            Edit::Delete(at, n) if len > 0 => {
                let at = at % len;
                doc.drain(at..(at + n).min(len));
            }
            Edit::Duplicate(at, n) if len > 0 => {
                let at = at % len;
                let piece = doc[at..(at + n).min(len)].to_vec();
                doc.splice(at..at, piece);
            }
            Edit::Delete(..) | Edit::Duplicate(..) => {}
        }
    }
    doc
}

/// Up to five edits, their bytes mostly ones YAML and JSON give meaning to.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let byte = prop_oneof![
        proptest::sample::select(b":-[]{}#&*!|>'\"\n\t ,.$\\0".to_vec()),
        any::<u8>(),
    ];
    proptest::collection::vec(
        prop_oneof![
            (any::<usize>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
            (any::<usize>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
            (any::<usize>(), 1usize..40).prop_map(|(at, n)| Edit::Duplicate(at, n)),
        ],
        0..6,
    )
}

/// Documents: a generated tree (block or flow) whose mappings' keys come from `keys` (a
/// schema's words and a few near misses), or one of `seeds`, then a few byte edits.
pub fn documents_of(keys: &'static [&'static str], seeds: Vec<String>) -> BoxedStrategy<Vec<u8>> {
    let generated = (yaml_tree(keys), any::<bool>()).prop_map(|(tree, flow)| {
        let mut out = String::new();
        tree.render(&mut out, 0, flow);
        out.into_bytes()
    });
    let seeded = proptest::sample::select(seeds).prop_map(String::into_bytes);
    (prop_oneof![3 => generated, 2 => seeded], edits())
        .prop_map(|(doc, edits)| apply_edits(doc, &edits))
        .boxed()
}
