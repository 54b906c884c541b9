//! How a test that cannot run here says so: a `SKIPPED: <why>` line that `scripts/test`
//! counts, or a failure under `CI`, where nothing may skip.

use std::io::Write as _;

/// Says that the calling test cannot run here, and why, as a `SKIPPED: <why>` line written
/// straight to the process's standard error: the test harness captures what a passing test
/// prints, and a skip must show (`scripts/test` counts these lines in its summary).
pub fn skipped(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// [`skipped`], for a test whose needs `scripts/setup` installs: under `CI` (which runs that
/// set-up as root) a skip would mean the test silently stopped running, so it fails instead.
///
/// # Panics
/// When `CI` is set.
pub fn skipped_outside_ci(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run this test (scripts/setup installs what it needs), but: {why}"
    );
    skipped(why);
}
