//! The daemon's private state file (`SOCKET.state`) also holds the record of the segment it
//! served, which older daemons kept in a file of their own (`SOCKET.segment`). A daemon
//! started over the older pair keeps what they described and still compares the segment; a
//! segment gone in a reboot (the record names another boot) is a warning, not an error.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use xtcq_testkit::{ok, Daemon, SMALL_SEGMENT};

fn with_suffix(socket: &Path, suffix: &str) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Turns the pair a stopped daemon of this build left beside `socket` into the pair an older
/// daemon left: the state file without the segment's record (its first line, the state,
/// without `served`; the journal after it kept), and that record in `SOCKET.segment`.
fn make_older_pair(socket: &Path, segment: &Path) {
    let state_path = with_suffix(socket, ".state");
    let text = std::fs::read_to_string(&state_path).expect("state file");
    let (first, journal) = text.split_once('\n').unwrap_or((&text, ""));
    let mut state: serde_json::Value = serde_json::from_str(first).expect("state parses");
    let served = state.as_object_mut().expect("an object").remove("served");
    assert!(served.is_some(), "this build records the segment in the state file: {first}");
    // Rewritten in place: the file keeps its owner-only mode.
    std::fs::write(&state_path, format!("{state}\n{journal}")).expect("rewrite the state file");
    let md = std::fs::metadata(segment).expect("segment");
    let record = format!("segment={}\ndev={}\nino={}\npid=1\n", segment.display(), md.dev(), md.ino());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(with_suffix(socket, ".segment"))
        .expect("create SOCKET.segment");
    std::io::Write::write_all(&mut f, record.as_bytes()).expect("write SOCKET.segment");
}

#[test]
fn a_daemon_restarted_over_the_older_pair_keeps_its_queues_and_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "job-1"]));
    ok(&d.run(&["push", "q", "job-2"]));
    assert!(d.stop().success(), "xtcqd stops cleanly");
    make_older_pair(&d.socket, &d.segment);

    let mut d2 = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    let s = d2.stats();
    assert_eq!(s["queues"][0]["info"]["name"], "q", "{s}");
    assert_eq!(s["queues"][0]["records"]["queued"], 2, "{s}");
    let log = d2.log_text();
    assert!(!log.contains("ERROR"), "the segment is the one the older pair names: {log}");
    // One file now: the record moved into the state file, the older file is gone.
    assert!(!with_suffix(&d2.socket, ".segment").exists(), "SOCKET.segment was not removed");
    assert!(d2.stop().success(), "xtcqd stops cleanly");
    let text = std::fs::read_to_string(with_suffix(&d2.socket, ".state")).expect("state file");
    assert!(text.lines().next().is_some_and(|l| l.contains("\"served\"")), "{text}");
}

#[test]
fn the_older_pair_still_tells_a_restarted_daemon_its_segment_is_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "job-1"]));
    assert!(d.stop().success(), "xtcqd stops cleanly");
    make_older_pair(&d.socket, &d.segment);
    std::fs::remove_file(&d.segment).expect("remove the segment");

    let d2 = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    let log = d2.log_text();
    assert!(log.contains("ERROR") && log.contains("was gone: every job queued in it is lost"), "{log}");
}

/// Rewrites the boot id in the segment record of the state file a stopped daemon left.
fn set_boot_id(socket: &Path, boot_id: &str) {
    let state_path = with_suffix(socket, ".state");
    let text = std::fs::read_to_string(&state_path).expect("state file");
    let (first, journal) = text.split_once('\n').unwrap_or((&text, ""));
    let mut state: serde_json::Value = serde_json::from_str(first).expect("state parses");
    let served = &mut state["served"];
    let now = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    assert_eq!(served["boot_id"].as_str(), Some(now.trim()), "the record names this boot: {first}");
    served["boot_id"] = serde_json::Value::from(boot_id);
    std::fs::write(&state_path, format!("{state}\n{journal}")).expect("rewrite the state file");
}

#[test]
fn a_segment_gone_in_a_reboot_is_a_warning_and_gone_without_one_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "job-1"]));
    assert!(d.stop().success(), "xtcqd stops cleanly");
    // As a reboot leaves it: the state file (kept in /var/lib) names another boot, and the
    // segment (in /dev/shm) is gone.
    set_boot_id(&d.socket, "00000000-0000-0000-0000-000000000000");
    std::fs::remove_file(&d.segment).expect("remove the segment");
    let mut d2 = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    let log = d2.log_text();
    assert!(!log.contains("ERROR"), "a reboot is no error: {log}");
    assert!(log.contains("WARN") && log.contains("the host restarted since the previous xtcqd"), "{log}");
    // The same loss within one boot is somebody's doing: said as an error.
    ok(&d2.run(&["create", "q"]));
    assert!(d2.stop().success(), "xtcqd stops cleanly");
    std::fs::remove_file(&d2.segment).expect("remove the segment");
    let d3 = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    let log = d3.log_text();
    assert!(log.contains("ERROR") && log.contains("was gone: every job queued in it is lost"), "{log}");
}
