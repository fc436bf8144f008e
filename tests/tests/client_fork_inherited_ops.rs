//! Every operation of a client or handle inherited across `fork()` fails in the child with
//! `Error::Forked` and does nothing in shared memory, as the C API's `XTCQ_E_FORKED`.
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.
//! - The child reports which operations were not refused as bits of its exit code; the
//!   request goes last, with a short timeout, as before the fix it waited for an answer
//!   the parent's reader thread took.

use std::cell::Cell;
use std::time::Duration;

use xtcq_client::{Client, ConnectOptions, Error, JobBatch};
use xtcq_testkit::*;

fn forked<T>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Forked))
}

#[test]
fn inherited_handles_refuse_every_operation_in_the_child() {
    let d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    let opts = ConnectOptions {
        socket: Some(d.socket.clone()),
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let client = Client::connect_with(opts).unwrap();
    let owner = client.attach_owner("q").unwrap();
    let inj = client.attach_injector("q").unwrap();
    let thief = client.attach_thief("q").unwrap();
    owner.push(b"parent's").unwrap();
    inj.push(b"parent's too").unwrap();
    let job = thief.steal().unwrap().expect("a job");
    let held = Cell::new(Some(job));

    let code = in_forked_child(|| {
        let job = held.take().expect("the child's copy");
        let mut batch = JobBatch::new();
        let refused = [
            forked(owner.push(b"child's")),
            forked(owner.push_batch(&[b"child's".as_slice()])),
            forked(owner.pop()),
            forked(inj.push(b"child's")),
            forked(thief.steal()),
            forked(thief.steal_into(8, &mut batch)),
            forked(job.payload()),
            forked(job.ack()),
            forked(client.ping()),
        ];
        refused.iter().enumerate().filter(|(_, r)| !**r).fold(0, |code, (i, _)| code | 1 << i)
    });
    assert_eq!(code, 0, "bits of the operations the child was not refused (see the list in the test)");

    // Nothing the child tried happened: the parent still holds its job, and the queue holds
    // exactly the parent's other job.
    let job = held.take().expect("the parent's job");
    job.ack().expect("the parent still holds its job");
    client.ping().expect("the parent's connection answers");
    let j = thief.steal().unwrap().expect("the parent's other job");
    assert!(j.payload().unwrap().starts_with(b"parent's"), "{:?}", j.payload());
    j.ack().unwrap();
    assert!(thief.steal().unwrap().is_none(), "the child pushed a job");
    let s = d.stats();
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["info"]["name"] == "q").expect("queue");
    assert_eq!(q["metrics"]["pushed"].as_u64(), Some(2), "{}", q["metrics"]);
}
