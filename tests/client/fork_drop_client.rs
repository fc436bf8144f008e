//! A forked child that drops the Rust client and handles it inherited leaves the parent's
//! control connection alone (no `shutdown(2)` of the socket both share) and its owner's deque
//! lease too (no detach request).
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.
//! - The parent's connection must be the same link afterwards: a request succeeds without a
//!   reconnect, and its handles keep their slot.

use xtcq_testkit::*;

#[test]
fn a_child_dropping_an_inherited_client_leaves_the_parents_connection_up() {
    let d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let thief = client.attach_thief("q").unwrap();
    let owner = client.attach_owner("q").unwrap();
    let slot = client.process_slot();
    let cell = std::cell::Cell::new(Some((client, thief, owner)));

    let code = in_forked_child(|| {
        drop(cell.take());
        0
    });
    assert_eq!(code, 0, "the child failed");

    let (client, thief, owner) = cell.take().expect("the parent's client");
    // In shared memory first: the lease word says whether the child's drop detached it.
    owner.push(b"owner's").expect("the parent's owner still holds its deque lease");
    client.ping().expect("the parent's connection still answers after the child dropped its copy");
    assert_eq!(client.reconnects(), 0, "the parent's link was cut and re-established");
    assert!(client.is_connected());
    assert_eq!(client.process_slot(), slot);
    let inj = client.attach_injector("q").unwrap();
    inj.push(b"after").unwrap();
    thief.steal().unwrap().expect("the job pushed after the child's drop").ack().unwrap();
    thief.steal().unwrap().expect("the owner's job").ack().unwrap();
    owner.detach().expect("the parent gives its lease back itself");
}
