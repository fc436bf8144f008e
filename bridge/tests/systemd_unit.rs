//! `systemd/xtcq-bridge.service` passes `systemd-analyze verify` (skipped, loudly, where
//! systemd-analyze is not installed; `.ci/run` installs it) and keeps what a clean stop needs.

use std::path::Path;
use std::process::Command;

fn units() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd")
}

fn verify(text: &str) -> Option<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("xtcq-bridge.service");
    // verify insists that ExecStart's binary exists, and finds the xtcqd.service it requires
    // beside it.
    std::fs::write(&copy, text.replace("/usr/local/bin/xtcq-bridge", "/bin/true")).expect("write unit copy");
    let daemon = std::fs::read_to_string(units().join("xtcqd.service")).expect("read xtcqd.service");
    std::fs::write(dir.path().join("xtcqd.service"), daemon.replace("/usr/local/bin/xtcqd", "/bin/true"))
        .expect("write xtcqd.service copy");
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
fn bridge_unit_verifies_clean() {
    let text =
        std::fs::read_to_string(units().join("xtcq-bridge.service")).expect("read xtcq-bridge.service");
    for needed in
        ["KillSignal=SIGTERM", "TimeoutStopSec=75s", "XTCQ_SOCKET=/run/xtcq/xtcqd.sock", "Group=xtcq"]
    {
        assert!(text.contains(needed), "xtcq-bridge.service lost `{needed}`");
    }
    let Some(msg) = verify(&text) else {
        eprintln!("SKIPPED: systemd-analyze not installed (apt-get install systemd)");
        return;
    };
    assert!(msg.trim().is_empty(), "systemd-analyze verify xtcq-bridge.service:\n{msg}");
    let broken = verify(&text.replace("Type=exec", "Type=bogus")).expect("tool present");
    assert!(!broken.trim().is_empty(), "systemd-analyze did not notice a bad Type=");
}
