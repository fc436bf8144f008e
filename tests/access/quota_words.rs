//! Red-team pass on the exact record quota: a process attached to the segment (as every
//! allowed user's may be) writes garbage into a queue's `held` count and its quota words.
//! What must hold: nobody panics or hangs, no job is lost, the daemon's scan puts the
//! words back, and the per-user share is counted from the daemon's own record of the
//! quotas it set, not from words any attached process can rewrite. Real xtcqd, real `xtcq`.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use xtcq_testkit::*;

const SCAN: [&str; 2] = ["--lease-scan-interval", "20ms"];

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    SMALL_SEGMENT.iter().copied().chain(SCAN).chain(extra.iter().copied()).collect()
}

fn lines(from: usize, to: usize) -> String {
    (from..to).map(|i| format!("{i}\n")).collect()
}

/// The segment's limit words of queue `name`, as an attached process sees them.
fn limits<'a>(seg: &'a xtcq_shm::Segment, name: &str) -> (u32, &'a xtcq_shm::layout::QueueLimits) {
    let q = seg.queue_by_name(name).expect("the queue");
    (q.index, seg.queue_limits(q.index).expect("its limits"))
}

/// Pushes one job at a time into `q` until a push is refused; how many went in.
fn push_until_refused(d: &Daemon, q: &str, most: usize) -> usize {
    for i in 0..most {
        let o = d.run(&["push", q, "--timeout", "50ms", &format!("more{i}")]);
        if !o.status.success() {
            assert!(stderr(&o).contains("quota"), "refused for another reason: {}", stderr(&o));
            return i;
        }
    }
    most
}

/// A garbage held count, too high (every push refused) or zero (pushes past the quota), is
/// put right by the daemon's next quiet walk: the quota holds again, no job is lost.
#[test]
fn a_garbage_held_count_is_put_right_by_the_scan() {
    let d = Daemon::builder().flags(flags(&[])).start();
    ok(&d.run(&["create", "q", "--max-records", "10"]));
    ok(&d.run_in(&["push", "q"], lines(0, 4).as_bytes()));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let (index, l) = limits(&seg, "q");
    assert_eq!(seg.held(index), 4);
    for garbage in [0xdead_beef_ffff_fff0u64, 0x1234_5678_0000_0000, u64::MAX] {
        l.held.store(garbage, Ordering::Relaxed);
        wait_until(Duration::from_secs(30), "the scan to put the held count right", || seg.held(index) == 4);
    }
    assert_eq!(push_until_refused(&d, "q", 20), 6, "the quota of 10 with 4 held: {}", d.log_text());
    assert_eq!(d.drain("q").len(), 10, "a job was lost");
    ok(&d.run(&["check"]));
}

/// An attached process rewrites a queue's quota: to 0 ("none", so its pushes take every
/// record) or to 1 (another queue's pushes starve). Before, nothing put the words back:
/// the daemon's scan counted `held` but trusted `max_records` for ever. The scan now writes
/// back the quota the daemon set, and logs it.
#[test]
fn a_rewritten_quota_is_put_back_by_the_scan() {
    let d = Daemon::builder().flags(flags(&[])).start();
    ok(&d.run(&["create", "mine", "--max-records", "10"]));
    ok(&d.run(&["create", "theirs", "--max-records", "20", "--max-attempts", "1"]));
    ok(&d.run_in(&["push", "mine"], lines(0, 3).as_bytes()));
    // Three dead letters of theirs, which a cap rewritten to 1 would drop.
    ok(&d.run_in(&["push", "theirs"], lines(0, 3).as_bytes()));
    let c = d.client();
    let t = c.attach_thief("theirs").expect("attach");
    while let Some(j) = t.steal().expect("steal") {
        j.fail("boom").expect("fail");
    }
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let (_, mine) = limits(&seg, "mine");
    let (_, theirs) = limits(&seg, "theirs");
    mine.max_records.store(0, Ordering::Relaxed);
    theirs.max_records.store(1, Ordering::Relaxed);
    theirs.max_dead.store(1, Ordering::Relaxed);
    wait_until(Duration::from_secs(30), "the scan to put both quotas back", || {
        (mine.max_records.load(Ordering::Relaxed), theirs.max_records.load(Ordering::Relaxed)) == (10, 20)
    });
    assert_ne!(theirs.max_dead.load(Ordering::Relaxed), 1, "the dead-letter cap was left rewritten");
    let dead: serde_json::Value =
        serde_json::from_str(&ok(&d.run(&["dead", "theirs", "--json"]))).expect("json");
    assert_eq!(dead.as_array().map(Vec::len), Some(3), "dead letters dropped by a rewritten cap: {dead}");
    assert!(d.log_text().contains("written back"), "the log says so: {}", d.log_text());
    // The count kept while "mine" had no quota is right again once the scan walks.
    wait_until(Duration::from_secs(30), "a quiet walk", || seg.held(limits(&seg, "mine").0) == 3);
    assert_eq!(push_until_refused(&d, "mine", 20), 7);
    assert_eq!(push_until_refused(&d, "theirs", 30), 17);
    ok(&d.run(&["check"]));
}

/// A limited user rewrites her own queue's quota word down to 1 and then asks the daemon for
/// the rest of her share on another queue. Before, the share was summed from the segment's
/// words, so she got it: 50 + 99 records of a 100-record share. It is summed from the
/// daemon's own record of the quotas it set.
#[test]
fn the_records_share_is_not_counted_from_words_an_attached_process_writes() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqq{tag}");
    let alice = SystemUser::create(&format!("xtcqqa{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut f = flags(&["--group", &group, "--allow-uid", &alice.user]);
    f.extend(["--queues-per-uid", "2", "--records-per-uid", "100"]);
    let d = Daemon::builder().in_dir(dir).flags(f).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let run = |args: &[&str]| {
        let mut c: Command = d.xtcq();
        c.args(args).uid(alice.id("-u")).gid(alice.id("-g"));
        run_bounded(&mut c, None)
    };
    ok(&run(&["create", "a1"]));
    ok(&run(&["create", "a2"]));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    limits(&seg, "a1").1.max_records.store(1, Ordering::Relaxed);
    let o = run(&["limits", "a2", "--max-records", "99"]);
    assert_eq!(code(&o), 4, "a quota past the share was granted: {} {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("--records-per-uid 100"), "{}", stderr(&o));
}
