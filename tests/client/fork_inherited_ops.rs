//! Every operation of a client or handle inherited across `fork()` fails in the child with
//! `Error::Forked` and does nothing in shared memory, as the C API's `XTCQ_E_FORKED`.
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.
//! - The child names the operations it was not refused, and exits with their count; the
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
            ("owner.push", forked(owner.push(b"child's"))),
            ("owner.push_batch", forked(owner.push_batch(&[b"child's".as_slice()]))),
            ("owner.pop", forked(owner.pop())),
            ("injector.push", forked(inj.push(b"child's"))),
            ("thief.steal", forked(thief.steal())),
            ("thief.steal_into", forked(thief.steal_into(8, &mut batch))),
            ("job.payload", forked(job.payload())),
            ("job.ack", forked(job.ack())),
            ("client.ping", forked(client.ping())),
        ];
        let not_refused: Vec<&str> = refused.iter().filter(|(_, r)| !r).map(|(op, _)| *op).collect();
        if !not_refused.is_empty() {
            eprintln!("child: not refused with Error::Forked: {not_refused:?}");
        }
        not_refused.len() as i32
    });
    assert_eq!(code, 0, "operations the child was not refused (named on stderr)");

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
