//! A forked child that drops the Rust client it inherited leaves the parent's control
//! connection alone (no `shutdown(2)` of the socket both share).
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
    let slot = client.process_slot();
    let cell = std::cell::Cell::new(Some((client, thief)));

    let code = in_forked_child(|| {
        drop(cell.take());
        0
    });
    assert_eq!(code, 0, "the child failed");

    let (client, thief) = cell.take().expect("the parent's client");
    client.ping().expect("the parent's connection still answers after the child dropped its copy");
    assert_eq!(client.reconnects(), 0, "the parent's link was cut and re-established");
    assert!(client.is_connected());
    assert_eq!(client.process_slot(), slot);
    let inj = client.attach_injector("q").unwrap();
    inj.push(b"after").unwrap();
    thief.steal().unwrap().expect("the job pushed after the child's drop").ack().unwrap();
}
