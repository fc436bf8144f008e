//! What another process can do to the segment's file, against a running `xtcqd` and `xtcq`
//! processes: truncate it, unlink it, put another file at its path, or remove it between two
//! daemons. Neither the daemon nor a reader may die of it; each says what happened.
//! Every wait is bounded; every daemon is killed when its guard drops.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use xtcq_testkit::{ok, stderr, wait_bounded, Daemon, SMALL_SEGMENT};

/// What these tests ask of a daemon beyond the harness's guard.
trait Watched {
    fn assert_alive(&mut self);
    fn wait_log(&self, what: &str) -> String;
    fn shutdown(&mut self);
}

impl Watched for Daemon {
    /// Whether the daemon process still runs (it did not die of a signal).
    #[track_caller]
    fn assert_alive(&mut self) {
        let c = self.child.as_mut().expect("daemon");
        if let Some(st) = c.try_wait().expect("try_wait") {
            panic!("xtcqd died ({st}, signal {:?}): {}", st.signal(), self.log_text());
        }
    }

    /// Waits (at most 20 s) for `what` in the daemon's log.
    #[track_caller]
    fn wait_log(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let l = self.log_text();
            if l.contains(what) {
                return l;
            }
            assert!(Instant::now() < deadline, "no {what:?} in the log in 20 s: {l}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asks the daemon to stop and waits (at most 20 s) for it to exit.
    fn shutdown(&mut self) {
        ok(&self.run(&["shutdown"]));
        let c = self.child.take().expect("daemon");
        let o = wait_bounded(c, Duration::from_secs(20), "xtcqd after shutdown");
        assert!(o.status.success(), "{}: {}", o.status, self.log_text());
    }
}

/// A daemon with queue `q` holding one job, and a `steal --wait` consumer asleep on the
/// empty queue `idle`.
fn daemon_and_sleeping_consumer(dir: &Path) -> (Daemon, Child) {
    let d = Daemon::builder().at(dir).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["create", "idle"]));
    ok(&d.run(&["push", "q", "job-1"]));
    let consumer = d
        .xtcq()
        .args(["steal", "--wait", "idle"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the consumer");
    d.wait_attached(consumer.id());
    (d, consumer)
}

#[test]
fn truncating_the_segment_kills_neither_the_daemon_nor_a_waiting_consumer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut d, consumer) = daemon_and_sleeping_consumer(dir.path());
    std::fs::OpenOptions::new().write(true).open(&d.segment).expect("open").set_len(0).expect("truncate");

    // The consumer wakes (at most a wait slice later), takes the fault, and says why.
    let out = wait_bounded(consumer, Duration::from_secs(30), "the waiting consumer");
    assert_eq!(out.status.signal(), None, "the consumer died of a signal: {}", out.status);
    assert_eq!(out.status.code(), Some(1), "{}: {}", out.status, stderr(&out));
    assert!(stderr(&out).contains("was truncated by another process"), "{}", stderr(&out));

    // The daemon notices at its next scan, logs it, stays up and refuses new work.
    let log = d.wait_log("segment lost");
    assert!(log.contains("truncated"), "{log}");
    d.assert_alive();
    let o = d.run(&["push", "q", "job-2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("truncated") && stderr(&o).contains("refuses new work"), "{}", stderr(&o));
    // Its scans (lease expiry, the file check) go on over the lost pages without a crash.
    std::thread::sleep(Duration::from_millis(300));
    d.assert_alive();
    ok(&d.run(&["shutdown"]));
}

#[test]
fn an_unlinked_segment_is_noticed_and_new_work_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "job-1"]));
    std::fs::remove_file(&d.segment).expect("unlink the segment");

    let log = d.wait_log("segment lost");
    assert!(log.contains("ERROR") && log.contains("was unlinked"), "{log}");
    let o = d.run(&["push", "q", "job-2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("was unlinked") && stderr(&o).contains("refuses new work"), "{}", stderr(&o));
    d.assert_alive();
}

#[test]
fn a_segment_replaced_under_a_running_daemon_is_never_adopted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    // Another daemon's valid segment, with a queue of the same name, moved onto our path:
    // a new client of ours would map it and push where our daemon does not look.
    let other = tempfile::tempdir().expect("tempdir");
    let e = Daemon::builder().at(other.path()).flags(SMALL_SEGMENT).start();
    ok(&e.run(&["create", "q"]));
    std::fs::rename(&e.segment, &d.segment).expect("replace the segment");

    let log = d.wait_log("segment lost");
    assert!(log.contains("ERROR") && log.contains("now names another file"), "{log}");
    let o = d.run(&["push", "q", "job-1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("will not adopt it"), "{}", stderr(&o));
    d.assert_alive();
}

#[test]
fn a_daemon_restarted_where_its_segment_is_gone_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "job-1"]));
    d.shutdown();
    std::fs::remove_file(&d.segment).expect("remove the segment");

    let d2 = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    let log = d2.log_text();
    assert!(log.contains("ERROR") && log.contains("was gone: every job queued in it is lost"), "{log}");
    // It does serve, from a new segment.
    ok(&d2.run(&["create", "q"]));
}

#[test]
fn a_daemon_restarted_on_a_replaced_segment_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut d = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    ok(&d.run(&["create", "q"]));
    d.shutdown();
    let other = tempfile::tempdir().expect("tempdir");
    let mut e = Daemon::builder().at(other.path()).flags(SMALL_SEGMENT).start();
    e.shutdown();
    std::fs::rename(&e.segment, &d.segment).expect("replace the segment");

    let d2 = Daemon::builder().at(dir.path()).flags(SMALL_SEGMENT).start();
    let log = d2.log_text();
    assert!(log.contains("ERROR") && log.contains("is not the file the previous xtcqd"), "{log}");
}
