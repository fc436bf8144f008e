//! `xtcq limits QUEUE --max-records ... --max-dead ...`: the limits of a queue that exists can
//! change (before, only `create` set them, and the daemon's cap warning pointed there). Real
//! xtcqd, real `xtcq` processes.

use std::time::Duration;
use xtcq_testkit::*;

fn quota(d: &Daemon, q: &str) -> serde_json::Value {
    let s = d.stats();
    let all = s["queues"].as_array().cloned().unwrap_or_default();
    let entry =
        all.into_iter().find(|x| x["info"]["name"] == q).unwrap_or_else(|| panic!("no queue {q} in {s}"));
    entry["quota"].clone()
}

#[test]
fn limits_change_what_is_given_and_keep_the_rest() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-dead", "7"]));
    let line = ok(&d.run(&["limits", "q", "--max-records", "50%"]));
    assert!(line.contains("dead letters capped at 7"), "the cap stays when not given: {line}");
    let records = d.stats()["segment"]["job_records"].as_u64().expect("job_records");
    assert_eq!(quota(&d, "q")["max_records"].as_u64(), Some(records.div_ceil(2)));
    ok(&d.run(&["limits", "q", "--max-dead", "0"]));
    let q = quota(&d, "q");
    assert_eq!((q["max_dead"].as_u64(), q["max_records"].as_u64()), (Some(0), Some(records.div_ceil(2))));
}

#[test]
fn a_lowered_cap_drops_the_oldest_dead_letters_at_the_next_scan() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    ok(&d.run(&["push", "q", "a", "b", "c", "d"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief("q").expect("attach");
    while let Some(j) = t.steal().expect("steal") {
        j.fail("boom").expect("fail");
    }
    ok(&d.run(&["limits", "q", "--max-dead", "1"]));
    wait_until(Duration::from_secs(30), "the scan to apply the new cap", || {
        quota(&d, "q")["dead_dropped"].as_u64() == Some(3)
    });
    assert_eq!(d.stats()["records"]["dead"].as_u64(), Some(1));
}

#[test]
fn limits_without_a_limit_or_for_no_queue_or_past_the_segment_are_refused() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let o = d.run(&["limits", "q"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-records") && stderr(&o).contains("--max-dead"), "{}", stderr(&o));
    let o = d.run(&["limits", "nosuch", "--max-dead", "3"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("nosuch"), "{}", stderr(&o));
    let o = d.run(&["limits", "q", "--max-records", "4294967295"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("records"), "{}", stderr(&o));
    assert_eq!(quota(&d, "q")["max_records"].as_u64(), Some(0), "a refused quota was set");
}
