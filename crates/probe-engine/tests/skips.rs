//! The rule the suite is held to: nothing skips. A fixture test run without its peer (here
//! blackbox_exporter, kept off `PATH`) fails under `CI`; outside it, it says `SKIPPED`, naming
//! itself, and `scripts/skips`, which `scripts/test` ends with, fails the run on that line.
//! Only a missing IPv6 loopback passes it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use probe_testkit::blackbox_or_skip;

/// A fixture test: blackbox_exporter starts and listens.
#[test]
fn blackbox_exporter_starts() {
    let Some(exporter) = blackbox_or_skip("modules: {}\n") else {
        return;
    };
    assert_ne!(exporter.addr().port(), 0);
}

/// This test binary running only [`blackbox_exporter_starts`], with no tool on `PATH`, and
/// `CI` set or not; what it printed, and what it wrote to its `PROBE_SKIPS` file (its own, not
/// the suite's: this skip is on purpose).
fn without_the_exporter(ci: bool) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let skips = dir.path().join("skips");
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "blackbox_exporter_starts", "--nocapture"])
        .env("PATH", "/nonexistent")
        .env("PROBE_SKIPS", &skips)
        .env_remove("CI");
    if ci {
        command.env("CI", "true");
    }
    let output = command.output().unwrap();
    (output, std::fs::read_to_string(&skips).unwrap_or_default())
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn skips_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/skips")
}

/// `scripts/skips` on a log of `text`: its exit code and what it printed.
fn judge(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    std::fs::write(&log, text).unwrap();
    let output = Command::new("bash")
        .arg(skips_script())
        .arg(&log)
        .output()
        .unwrap();
    (output.status.code(), self::text(&output))
}

#[test]
fn a_fixture_test_without_its_peer_fails_under_ci_and_fails_the_suite_outside_it() {
    // Under CI, the test itself fails, saying what it lacked, and writes no skip.
    let (under_ci, skipped) = without_the_exporter(true);
    assert_eq!(skipped, "");
    assert!(!under_ci.status.success(), "{}", text(&under_ci));
    assert!(
        text(&under_ci).contains("CI must run this test")
            && text(&under_ci).contains("blackbox_exporter is not installed"),
        "{}",
        text(&under_ci)
    );

    // Outside CI it passes, saying SKIPPED with its name, on its standard error and in the
    // `PROBE_SKIPS` file that `scripts/test` hands the judge; the judge fails the run on it.
    let (outside, skipped) = without_the_exporter(false);
    assert!(outside.status.success(), "{}", text(&outside));
    let line = "SKIPPED: blackbox_exporter_starts: blackbox_exporter is not installed";
    assert!(text(&outside).contains(line), "{}", text(&outside));
    assert!(
        skipped.starts_with(line) && skipped.lines().count() == 1,
        "{skipped}"
    );
    let (code, said) = judge(&skipped);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.trim_end()
            .ends_with("SKIPPED: blackbox_exporter_starts: blackbox_exporter is not installed"),
        "the skip is the last thing printed: {said}"
    );

    // A missing IPv6 loopback is the one skip that passes; no skip at all passes too.
    let (code, said) = judge("SKIPPED: ipv6_loopback_succeeds: no IPv6 loopback on this machine\n");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("1 skipped"), "{said}");
    let (code, said) = judge("test result: ok. 3 passed\n");
    assert_eq!((code, said.trim()), (Some(0), "scripts/skips: 0 skipped"));
}
