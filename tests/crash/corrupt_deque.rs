//! A deque whose indices an attached process scribbled (its `bottom` far past `top`) hands
//! out stale slots forever: a consumer must end with an error, not spin.

use std::sync::atomic::Ordering;
use xtcq_testkit::*;

#[test]
fn a_scribbled_deque_makes_steal_fail_not_spin() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--deques", "2", "--capacity", "64"]));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("segment");
    let q = seg.queue_by_name("q").expect("queue").index;
    for deque in 0..2 {
        let h = seg.deque_header(q, deque).expect("deque");
        h.bottom.store(h.top.load(Ordering::Relaxed) + (1 << 50), Ordering::Relaxed);
    }
    for args in [&["steal", "q", "--count", "5"][..], &["steal", "q", "--wait", "--timeout", "30s"][..]] {
        let o = d.run(args);
        let e = stderr(&o);
        assert_ne!(code(&o), 0, "{args:?}: {e}");
        assert!(e.contains("look corrupt"), "{args:?}: {e}");
    }
}
