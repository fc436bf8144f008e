//! Red-team pass on the quota words and dumps: a queue's record quota rewritten in the
//! segment (by any attached process) to more than the segment's records went into the
//! dump as it was, and every import of that dump into a segment of the same size was then
//! refused whole, naming the quota: the jobs of every queue in it waited for someone to edit
//! the file. A quota past the records is no quota beyond "all of them", so it is dumped as
//! that. Real xtcqd, real `xtcq export` and `xtcq import`.

use std::sync::atomic::Ordering;

use xtcq_testkit::*;

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    SMALL_SEGMENT
        .iter()
        .copied()
        .chain(["--lease-scan-interval", "1h"])
        .chain(extra.iter().copied())
        .collect()
}

#[test]
fn a_quota_word_past_the_records_does_not_make_the_dump_unimportable() {
    let d = Daemon::builder().flags(flags(&[])).start();
    ok(&d.run(&["create", "q", "--max-records", "10"]));
    ok(&d.run(&["create", "other"]));
    ok(&d.run(&["push", "q", "a", "b", "c"]));
    ok(&d.run(&["push", "other", "x"]));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let q = seg.queue_by_name("q").expect("q");
    seg.queue_limits(q.index).expect("limits").max_records.store(u32::MAX, Ordering::Relaxed);
    let dump = d.dir().join("live.dump");
    ok(&d.run(&["export", dump.to_str().expect("utf-8")]));

    let fresh = Daemon::builder().flags(flags(&[])).start();
    let o = fresh.run(&["import", dump.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 0, "the dump was refused: {}", stderr(&o));
    let mut got = fresh.drain("q");
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    assert_eq!(fresh.drain("other"), ["x"]);
}
