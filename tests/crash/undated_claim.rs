//! A consumer stopped between its claim CAS and storing the lease deadline (fail point
//! `claim.after_cas`, armed to sleep as a SIGSTOP would) must not hold the job forever: the
//! daemon's lease scan expires a claim without a deadline one lease after it first saw it.

use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "undated";

#[test]
fn child_main() {
    child_entry(run_role);
}

fn run_role(role: &str) -> Result<(), Error> {
    let c = Client::connect(None)?;
    let thief = c.attach_thief(QUEUE)?;
    match role {
        // Claims one job; the fail point stalls it right after the claim CAS.
        "claim" => {
            let j = thief.steal_wait(Some(Duration::from_secs(10)))?;
            out(format_args!("claimed {:?}", j.map(|j| j.attempts())));
            hold();
            Ok(())
        }
        r => Err(Error::Corrupt(format!("unknown role {r}"))),
    }
}

#[test]
fn a_claim_stalled_before_its_deadline_is_re_queued_after_one_lease() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--lease-scan-interval", "20ms"]).start();
    let c = d.client();
    let mut p = QueueParams::new(QUEUE);
    p.deques = 1;
    p.capacity = 64;
    p.flavor = Flavor::Fifo;
    p.lease_ms = 300;
    c.create_queue(&p).unwrap();
    c.attach_injector(QUEUE).unwrap().push(b"J").unwrap();
    let env = [("XTCQ_FAILPOINTS", "claim.after_cas=sleep:600000".to_string())];
    let mut stalled = spawn_role(module_path!(), "claim", &d.socket, &env);
    // Wait until it holds the job (claimed, no deadline).
    let seg = c.segment().unwrap();
    let held = eventually(Duration::from_secs(10), || {
        (0..seg.records().len()).find(|&i| {
            seg.records().state(i).is_some_and(|s| s.load().state() == Some(xtcq_shm::State::Claimed))
        })
    });
    let i = held.expect("the stalled consumer never claimed the job");
    let deadline = seg.records().header(i).unwrap().deadline_ns.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(deadline, 0, "stalled before storing its deadline");
    let t0 = Instant::now();
    let thief = c.attach_thief(QUEUE).unwrap();
    let j = thief
        .steal_wait(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("the job comes back one lease (300 ms) after the scan first saw its undated claim");
    assert_eq!(j.payload().unwrap(), b"J");
    assert_eq!(j.attempts(), 1, "the stalled attempt is counted");
    assert!(t0.elapsed() >= Duration::from_millis(250), "taken back before one lease: {:?}", t0.elapsed());
    j.ack().unwrap();
    stalled.kill9();
    eprintln!("undated claim re-queued {:?} after it was seen", t0.elapsed());
}
