//! A forked child drops what it inherited, connects anew and works normally (attach, push,
//! steal, ack, a request), while the parent's connection and handles keep working.
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.

use std::cell::Cell;

use xtcq_client::Client;
use xtcq_testkit::*;

#[test]
fn a_child_that_connects_again_works_and_the_parent_keeps_working() {
    let d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let thief = client.attach_thief("q").unwrap();
    let slot = client.process_slot();
    let held = Cell::new(Some((client, thief)));
    let socket = d.socket.clone();

    let code = in_forked_child(|| {
        drop(held.take());
        let run = || -> Result<(), xtcq_client::Error> {
            let c = Client::connect(Some(&socket))?;
            c.attach_injector("q")?.push(b"child's")?;
            let t = c.attach_thief("q")?;
            let j = t.steal()?.ok_or(xtcq_client::Error::Corrupt("the child's job is not there".into()))?;
            assert_eq!(j.payload()?, b"child's");
            j.ack()?;
            c.ping()?;
            assert_ne!(c.process_slot(), slot, "the child took the parent's slot");
            Ok(())
        };
        match run() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("child: {e}");
                1
            }
        }
    });
    assert_eq!(code, 0, "the child's new client failed");

    let (client, thief) = held.take().expect("the parent's client");
    client.ping().expect("the parent's connection answers");
    assert_eq!(client.reconnects(), 0, "the parent's link was cut and re-established");
    client.attach_injector("q").unwrap().push(b"parent's").unwrap();
    let j = thief.steal().unwrap().expect("the parent's job");
    assert_eq!(j.payload().unwrap(), b"parent's");
    j.ack().unwrap();
}
