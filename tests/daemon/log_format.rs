//! `xtcqd --log-format json`: every log line is one JSON object with its timestamp, level
//! and the event's fields at the top level; the default stays text.

use xtcq_testkit::*;

use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn json_logs_are_one_object_per_line_with_the_fields_at_the_top() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--log-format", "json"]).start();
    d.client().create_queue(&xtcq_client::QueueParams::new("q")).expect("create");
    assert!(d.stop().success());
    let text = d.log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{text}")))
        .collect();
    assert!(!lines.is_empty(), "no log");
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string() && l["message"].is_string(), "{l}");
    }
    let ready = lines.iter().find(|l| l["message"] == "xtcqd ready").unwrap_or_else(|| panic!("{text}"));
    assert_eq!(ready["socket"], d.socket.display().to_string(), "{ready}");
    assert!(lines.iter().any(|l| l["message"] == "queue created" && l["queue"] == "q"), "{text}");

    // The default is the text form, not JSON.
    let mut t = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    assert!(t.stop().success());
    let first = t.log_text().lines().next().unwrap_or_default().to_string();
    assert!(serde_json::from_str::<serde_json::Value>(&first).is_err() && first.contains("INFO"), "{first}");
    let bad = xtcqd().args(["--log-format", "xml"]).output().expect("xtcqd");
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// A daemon whose log cannot be written (stderr on a full disk, here `/dev/full`) keeps
/// serving and stops cleanly: tracing reported its own write failure with `eprintln!`,
/// which panicked on the same full stderr and ended the daemon (exit 101) at its first line.
#[test]
fn a_daemon_whose_stderr_is_full_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, segment) = (dir.path().join("d.sock"), dir.path().join("segment"));
    let mut child = spawn_daemon(&socket, &segment, Path::new("/dev/full"), MEDIUM_SEGMENT, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("xtcqd with stderr on /dev/full exited: {st}");
        }
        assert!(Instant::now() < deadline, "xtcqd with stderr on /dev/full never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
    c.create_queue(&xtcq_client::QueueParams::new("q")).expect("create");
    let owner = c.attach_owner("q").expect("owner");
    owner.push(b"job").expect("push");
    let thief = c.attach_thief("q").expect("thief");
    let job = thief.steal().expect("steal").expect("a job");
    assert_eq!(job.payload().expect("payload"), b"job");
    job.ack().expect("ack");
    drop((thief, owner, c));
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let st = child.wait().expect("wait");
    assert_eq!(st.code(), Some(0), "xtcqd with stderr on /dev/full: {st}");
}
