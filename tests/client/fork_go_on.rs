//! Red team: a forked child that tries to go on with the Rust client handles it inherited
//! is refused (`Error::Forked`, as the C API's `XTCQ_E_FORKED`), and the parent's counts
//! stay exact while it churns. (Written when the client did not refuse them and the child
//! counted in the parent's slot; the engine test `counters_fork` still covers engine
//! handles, which are not refused, counting into the shared lane.)
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.
//! - The child only tries to steal and push, and leaves with `_exit` (`fork_child`).
//! - The parent bounds its wait for the child and kills it rather than hang (`wait_forked`).

use std::time::{Duration, Instant};

use xtcq_testkit::*;

/// Pushes, steals and acks until `until`; the jobs pushed.
fn churn(injector: &xtcq_client::InjectorHandle, thief: &xtcq_client::ThiefHandle, until: Instant) -> u64 {
    let mut pushed = 0;
    while Instant::now() < until {
        for _ in 0..32 {
            if injector.push(b"x").is_ok() {
                pushed += 1;
            }
            if let Some(j) = thief.steal().expect("steal") {
                j.ack().expect("ack");
            }
        }
    }
    pushed
}

#[test]
fn a_rust_client_forked_child_loses_no_count_of_its_parent() {
    let d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let injector = client.attach_injector("q").unwrap();
    let thief = client.attach_thief("q").unwrap();
    // Binds both handles' lanes to this thread.
    let bind = churn(&injector, &thief, Instant::now() + Duration::from_millis(20));

    // Refused, so it pushes nothing: exit 0 only if every try was refused (101: it panicked).
    let child = fork_child(|| {
        let refused = |_| {
            matches!(injector.push(b"x"), Err(xtcq_client::Error::Forked))
                && matches!(thief.steal(), Err(xtcq_client::Error::Forked))
        };
        i32::from(!(0..1000).all(refused))
    });
    let mine = churn(&injector, &thief, Instant::now() + Duration::from_millis(600));
    assert_eq!(wait_forked(child), 0, "the child panicked or was not refused");
    while let Some(j) = thief.steal().unwrap() {
        j.ack().unwrap();
    }
    let s = d.stats();
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["info"]["name"] == "q").expect("queue");
    let m = &q["metrics"];
    let pushed = m["pushed"].as_u64().unwrap();
    assert_eq!(pushed, bind + mine, "pushes made: {bind} + {mine} here, none in the child");
    assert_eq!([m["claimed"].as_u64(), m["acked"].as_u64()], [Some(pushed), Some(pushed)], "{m}");
}
