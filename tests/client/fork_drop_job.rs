//! A forked child that drops claimed jobs it inherited (a `Job`, an `OwnedJob`, a `JobBatch`)
//! does not give them back: the parent still holds them, acks them, and no other consumer
//! gets them (before, the child's drop nacked them and they could run twice at once).
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.

use std::cell::Cell;

use xtcq_client::JobBatch;
use xtcq_testkit::*;

#[test]
fn a_child_dropping_inherited_jobs_leaves_them_claimed_by_the_parent() {
    let d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let inj = client.attach_injector("q").unwrap();
    for p in [b"a", b"b", b"c"] {
        inj.push(p).unwrap();
    }
    let thief = client.attach_thief("q").unwrap();
    let job = thief.steal().unwrap().expect("job a");
    let owned = thief.steal().unwrap().expect("job b").into_owned();
    let mut batch = JobBatch::new();
    assert_eq!(thief.steal_into(8, &mut batch).unwrap(), 1, "job c");
    let held = Cell::new(Some((job, owned, batch)));

    let code = in_forked_child(|| {
        drop(held.take());
        0
    });
    assert_eq!(code, 0, "the child failed");

    // Nothing was given back: another consumer finds the queue empty.
    let other = d.client();
    let rival = other.attach_thief("q").unwrap();
    assert!(rival.steal().unwrap().is_none(), "a job the parent holds was re-queued by the child's drop");
    let (job, owned, mut batch) = held.take().expect("the parent's jobs");
    job.ack().expect("the parent still holds job a");
    owned.ack().expect("the parent still holds job b");
    assert_eq!(batch.ack_all().expect("the parent still holds job c"), 1);
    assert!(rival.steal().unwrap().is_none());
}
