//! The unit files in `systemd/` pass `systemd-analyze verify` (skipped, loudly, where
//! systemd-analyze is not installed; `.ci/run` installs it), and keep the settings the daemon
//! depends on.

use std::path::{Path, PathBuf};
use std::process::Command;

fn unit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd")
}

/// A unit's text with its binaries pointed at one that exists (verify insists on it).
fn with_true_binaries(text: &str) -> String {
    text.replace("/usr/local/bin/xtcq-bridge", "/bin/true").replace("/usr/local/bin/xtcqd", "/bin/true")
}

/// Runs `systemd-analyze verify` on a copy of `unit` (with xtcqd.service beside it, which the
/// bridge's unit requires); returns what it printed, or `None` when the tool is missing.
fn verify(name: &str, text: &str) -> Option<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join(name);
    std::fs::write(&copy, with_true_binaries(text)).expect("write unit copy");
    if name != "xtcqd.service" {
        let daemon = std::fs::read_to_string(unit_dir().join("xtcqd.service")).expect("read xtcqd.service");
        std::fs::write(dir.path().join("xtcqd.service"), with_true_binaries(&daemon))
            .expect("write xtcqd.service");
    }
    let out = match Command::new("systemd-analyze").arg("verify").arg(&copy).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("running systemd-analyze: {e}"),
    };
    let mut msg = String::from_utf8_lossy(&out.stdout).into_owned();
    msg.push_str(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() && msg.is_empty() {
        msg = format!("systemd-analyze exited with {}", out.status);
    }
    Some(msg)
}

#[test]
fn service_unit_verifies_clean() {
    let text = std::fs::read_to_string(unit_dir().join("xtcqd.service")).expect("read xtcqd.service");
    for needed in [
        "Type=notify",
        "RuntimeDirectory=xtcq",
        "RemoveIPC=no",
        "ReadWritePaths=/dev/shm",
        "--socket /run/xtcq/",
        "StateDirectory=xtcq",
        "--state /var/lib/xtcq/",
    ] {
        assert!(text.contains(needed), "xtcqd.service lost `{needed}`");
    }
    assert!(!text.contains("PrivateDevices=yes"), "PrivateDevices would hide the clients' /dev/shm");
    let Some(msg) = verify("xtcqd.service", &text) else {
        xtcq_testkit::skipped("systemd-analyze not installed (apt-get install systemd)");
        return;
    };
    assert!(msg.trim().is_empty(), "systemd-analyze verify xtcqd.service:\n{msg}");
    // The check can fail: a broken copy must draw a complaint.
    let broken = verify("xtcqd.service", &text.replace("Type=notify", "Type=bogus")).expect("tool present");
    assert!(!broken.trim().is_empty(), "systemd-analyze did not notice a bad Type=");
}

#[test]
fn bridge_unit_verifies_clean() {
    let text =
        std::fs::read_to_string(unit_dir().join("xtcq-bridge.service")).expect("read xtcq-bridge.service");
    for needed in
        ["KillSignal=SIGTERM", "TimeoutStopSec=75s", "XTCQ_SOCKET=/run/xtcq/xtcqd.sock", "Group=xtcq"]
    {
        assert!(text.contains(needed), "xtcq-bridge.service lost `{needed}`");
    }
    let Some(msg) = verify("xtcq-bridge.service", &text) else {
        xtcq_testkit::skipped("systemd-analyze not installed (apt-get install systemd)");
        return;
    };
    assert!(msg.trim().is_empty(), "systemd-analyze verify xtcq-bridge.service:\n{msg}");
    let broken =
        verify("xtcq-bridge.service", &text.replace("Type=exec", "Type=bogus")).expect("tool present");
    assert!(!broken.trim().is_empty(), "systemd-analyze did not notice a bad Type=");
}

#[test]
fn sysusers_entry_names_the_service_user() {
    let text = std::fs::read_to_string(unit_dir().join("xtcq.sysusers.conf")).expect("read sysusers");
    assert!(text.lines().any(|l| l.starts_with("u xtcq ")));
    assert!(text.lines().any(|l| l.starts_with("g xtcq ")));
}
