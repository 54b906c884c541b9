//! What `deploy/` ships, held to the daemon it deploys: the systemd unit passes
//! `systemd-analyze verify` and starts the daemon with flags it has, and the daemon speaks the
//! unit's `Type=notify` protocol (READY, WATCHDOG, STOPPING) to a socket the test listens on, as
//! systemd would.

mod support;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{BIN, Daemon, closed_port, write_targets};

fn unit() -> (PathBuf, String) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd/probe-engine.service");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

#[test]
fn the_unit_passes_systemd_analyze_verify_with_flags_the_daemon_has() {
    let (_, text) = unit();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/probe-engine"));
    assert_eq!(words.next(), Some("run"));
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let flags: Vec<&str> = words.filter(|w| w.starts_with("--")).collect();
    assert!(flags.len() >= 4, "{exec}");
    for flag in flags {
        assert!(
            help.contains(&format!("{flag} ")),
            "{flag} of ExecStart is not a flag of `probe-engine run`"
        );
    }

    // Verified with ExecStart on the binary under test: verify checks that it is executable.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("probe-engine.service");
    std::fs::write(&copy, text.replace("/usr/local/bin/probe-engine", BIN)).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze (scripts/setup installs the systemd package)");
    let said = String::from_utf8_lossy(&verify.stderr);
    // verify warns of unknown keys and bad values but still exits 0: both must be clean.
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");

    // The check itself catches a misspelt key.
    std::fs::write(
        &copy,
        text.replace("WatchdogSec=", "WatchdogSecs=")
            .replace("/usr/local/bin/probe-engine", BIN),
    )
    .unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&verify.stderr).contains("Unknown key 'WatchdogSecs'"),
        "a misspelt key went unnoticed"
    );
}

/// What the daemon sent to the notify socket, one datagram at a time.
fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 1024];
    let n = socket
        .recv(&mut buf)
        .expect("nothing sent to the notify socket");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_daemon_says_ready_pings_the_watchdog_and_says_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&sock).unwrap();
    socket.set_read_timeout(Some(support::WAIT)).unwrap();
    write_targets(dir.path(), &[("db", closed_port())]);
    // systemd names the process the watchdog is for (WATCHDOG_PID): a shell that sets it to
    // its own pid and then becomes the daemon, keeping that pid.
    let mut command = Command::new("sh");
    command
        .args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", BIN])
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--drain-delay",
            "1s",
            "--config",
        ])
        .arg(dir.path())
        .env("NOTIFY_SOCKET", &sock)
        .env("WATCHDOG_USEC", "200000");
    let mut daemon = Daemon::launch(command);
    let ready = next(&socket);
    assert_eq!(
        ready,
        format!("READY=1\nSTATUS=serving on {}\n", daemon.addr),
        "the first notification"
    );
    // Pings at half the period: several within a second.
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(next(&socket), "WATCHDOG=1\n");
    }
    socket.set_read_timeout(Some(support::WAIT)).unwrap();
    daemon.signal("-TERM");
    loop {
        let said = next(&socket);
        if said != "WATCHDOG=1\n" {
            assert_eq!(said, "STOPPING=1\nSTATUS=draining\n");
            break;
        }
    }
    assert!(daemon.wait_exit().success());
}
