//! How a test that cannot run here says so: a `SKIPPED: <why>` line that `scripts/test`
//! counts, or a failure under `CI`, where nothing may skip. The one skip allowed everywhere is
//! a machine without an IPv6 loopback ([`skipped_without_ipv6`]), which no package installs;
//! `scripts/skips` fails the suite on any other.

use std::io::Write as _;

/// Says that the calling test cannot run here, and why, as a `SKIPPED: <why>` line written
/// straight to the process's standard error (the harness captures what a passing test prints,
/// and a skip must show), and appended to the file `PROBE_SKIPS` names, when it does:
/// `scripts/test` runs every test in a process of its own whose output is kept only when it
/// fails, and reads the skips from that file. The line names the test: the harness runs each
/// on a thread of its name.
fn skipped(why: &str) {
    let thread = std::thread::current();
    let line = format!("SKIPPED: {}: {why}\n", thread.name().unwrap_or("a test"));
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("PROBE_SKIPS") {
        // One write of one line to a file opened for appending: lines of tests that skip at
        // the same moment do not interleave.
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = appended {
            let _ = writeln!(std::io::stderr(), "PROBE_SKIPS: {e}");
        }
    }
}

/// Says the calling test was skipped (a `SKIPPED` line), for a test whose needs
/// `scripts/setup` installs: under `CI` (which runs that set-up as root) a skip would mean the
/// test silently stopped running, so it fails instead.
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

/// The skip of the calling test on a machine without an IPv6 loopback (a container's network,
/// often): the one `scripts/skips` lets pass, by this wording.
pub fn skipped_without_ipv6() {
    skipped("no IPv6 loopback on this machine");
}
