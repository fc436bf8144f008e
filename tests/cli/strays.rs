//! A nack that meets a full overflow ring must not strand its job: `xtcq check` (plain, on a
//! live daemon) reports a queued job nothing indexes, and the daemon indexes it again once
//! the ring has room, so a long-lived consumer gets it.

use std::time::Duration;
use xtcq_testkit::*;

#[test]
fn a_nack_into_a_full_ring_is_reported_by_check_and_re_indexed_by_the_daemon() {
    let mut flags = SMALL_SEGMENT.to_vec();
    let at = flags.iter().position(|f| *f == "--overflow-capacity").expect("flag") + 1;
    flags[at] = "4";
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--deques", "1", "--capacity", "2"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let inj = c.attach_injector("q").expect("injector");
    for p in ["a", "b", "c", "d"] {
        inj.push(p.as_bytes()).expect("push");
    }
    let thief = c.attach_thief("q").expect("thief");
    let a = thief.steal().expect("steal").expect("a job");
    assert_eq!(a.payload().expect("payload"), b"a");
    // The ring fills again behind the claimed job; its nack finds no room.
    inj.push(b"e").expect("push e");
    let _ = a.nack();
    let o = d.run(&["check"]);
    let out = stdout(&o);
    assert!(
        out.contains("INCONSISTENT") && out.contains("no deque or overflow ring has referenced it"),
        "check must report the stranded job: {out}"
    );
    assert_ne!(code(&o), 0, "{out}");
    // Once the ring has room the daemon puts it back; a consumer that keeps waiting gets it.
    let mut got = Vec::new();
    while got.len() < 5 {
        let j = thief.steal_wait(Some(Duration::from_secs(10))).expect("steal").unwrap_or_else(|| {
            panic!("only {got:?} came back; the nacked job was stranded: {}", d.log_text())
        });
        got.push((String::from_utf8(j.payload().expect("payload")).expect("utf8"), j.attempts()));
        j.ack().expect("ack");
    }
    got.sort();
    assert_eq!(got[0], ("a".to_string(), 1), "{got:?}");
    assert_eq!(got.len(), 5, "{got:?}");
    let o = d.run(&["check"]);
    assert!(stdout(&o).contains("consistent") && code(&o) == 0, "{}", stdout(&o));
}
