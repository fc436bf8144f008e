//! Red-team pass on the rate limit (`--max-rate`, `--burst`): the bucket's promises under
//! what users do besides claiming. The same limit set again (a config tool run on a timer)
//! must not refill the bucket, which would let a whole burst more start; consumers that
//! look at an empty queue must not spend the burst that a quiet spell promises.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xtcq_testkit::*;

/// `xtcq limits q --max-rate 1/h --burst 2` run twice: the second run changes nothing, so
/// the two jobs of the burst are all that may start this hour. Before, every set wrote a
/// full bucket, and each run of the same command let two more start.
#[test]
fn the_same_limit_set_again_keeps_its_bucket() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-rate", "1/h", "--burst", "2"]));
    ok(&d.run_in(&["push", "q"], b"a\nb\nc\nd\ne\n"));
    let c = d.client();
    let thief = c.attach_thief("q").expect("thief");
    for _ in 0..2 {
        thief.steal().expect("steal").expect("a job of the burst").ack().expect("ack");
    }
    assert!(thief.steal().expect("steal").is_none(), "a third job an hour early");
    for _ in 0..3 {
        let out = ok(&d.run(&["limits", "q", "--max-rate", "1/h", "--burst", "2"]));
        assert!(out.contains("rate:     at most 1/h, burst 2"), "{out}");
        assert!(
            thief.steal().expect("steal").is_none(),
            "the same limit set again let a job start an hour early"
        );
    }
    // Over the wire too.
    c.set_max_rate("q", xtcq_proto::RateLimit { interval_ns: 3_600_000_000_000, burst: 2 }).expect("set");
    assert!(thief.steal().expect("steal").is_none(), "set again through the client");
    // A different limit is a new one, and lifting it lets everything through.
    ok(&d.run(&["limits", "q", "--max-rate", "none"]));
    let rest: Vec<_> = std::iter::from_fn(|| thief.steal().expect("steal")).collect();
    assert_eq!(rest.len(), 3, "the jobs left once the limit is lifted");
}

/// Four consumers keep looking at an empty queue limited to 1/h with a burst of 8 (as
/// consumers woken together do: a resume, a limit set, a herd of pushes). None of them
/// starts a job, so after the looks the whole burst must still be there: 8 jobs pushed now
/// start at once. (A look that took a token and gave it back could find the bucket moved by
/// another look and leave its token spent, so looks alone drained the burst: a look at an
/// empty queue takes none.)
#[test]
fn looks_at_an_empty_queue_do_not_spend_the_burst() {
    const BURST: usize = 8;
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-rate", "1/h", "--burst", &BURST.to_string()]));
    let stop = Arc::new(AtomicBool::new(false));
    let lookers: Vec<_> = (0..4)
        .map(|_| {
            let socket = d.socket.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
                let t = c.attach_thief("q").expect("thief");
                let mut looks = 0u64;
                while !stop.load(Ordering::Relaxed) || looks < 50_000 {
                    assert!(t.steal().expect("steal").is_none(), "a job from an empty queue");
                    looks += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for l in lookers {
        l.join().expect("looker");
    }
    let input: String = (0..BURST).map(|i| format!("j{i}\n")).collect();
    ok(&d.run_in(&["push", "q"], input.as_bytes()));
    let c = d.client();
    let thief = c.attach_thief("q").expect("thief");
    let mut got = 0;
    while let Some(j) = thief.steal().expect("steal") {
        j.ack().expect("ack");
        got += 1;
    }
    assert_eq!(got, BURST, "the burst after a quiet spell in which no job started");
}

/// The words of queue `name`'s control line that a hostile attached process rewrites.
fn flow_words<'a>(
    seg: &'a xtcq_shm::Segment,
    name: &str,
) -> (&'a xtcq_shm::layout::RateWords, &'a std::sync::atomic::AtomicU32) {
    let q = seg.queue_by_name(name).expect("the queue");
    (seg.rate_words(q.index).expect("rate words"), seg.flow_word(q.index).expect("flow word"))
}

/// An attached process writes garbage into one queue's rate words and flow word (a rate
/// no flag makes: slower than a day, a burst of none, then the most of everything). That
/// queue's consumers may stop or run free; the daemon, `stats`, `ls`, `/metrics` and every
/// other queue keep working, and an export (which reads the words) can still be imported,
/// with the other queue's jobs. Before, the dump carried the garbage rate, the importer
/// refused it, and with it every queue's jobs.
#[test]
fn garbage_in_one_queues_rate_words_reaches_no_other_queue_nor_an_export() {
    let flags = [SMALL_SEGMENT, &METRICS_ON_ANY_PORT[..]].concat();
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "hit", "--max-rate", "10/s"]));
    ok(&d.run(&["create", "other"]));
    ok(&d.run_in(&["push", "hit"], b"h1\nh2\n"));
    ok(&d.run_in(&["push", "other"], b"o1\no2\no3\n"));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let (rate, flow) = flow_words(&seg, "hit");
    let c = d.client();
    let hit = c.attach_thief("hit").expect("thief");
    let garbage: [(u64, u32, u64, u32); 4] = [
        (u64::MAX, 0, u64::MAX, 0xffff_ffff),
        (0, u32::MAX, 0, 2),
        (1, 1, u64::MAX - 1, 2),
        (86_400_000_000_001, 0, 12345, 0xffff_fffe),
    ];
    for (interval, burst, theoretical, bits) in garbage {
        rate.interval_ns.store(interval, Ordering::Relaxed);
        rate.burst.store(burst, Ordering::Relaxed);
        rate.theoretical.store(theoretical, Ordering::Relaxed);
        flow.store(bits, Ordering::SeqCst);
        // Its own consumers: whatever they find, no panic, no hang.
        let _ = hit.steal().expect("steal");
        let _ = hit.steal_wait(Some(Duration::from_millis(50))).expect("steal_wait");
        let _ = scrape_metrics(&d.metrics_addr());
        ok(&d.run(&["stats"]));
        ok(&d.run(&["ls"]));
    }
    // A rate no flag makes, left in the words for the export.
    rate.interval_ns.store(u64::MAX, Ordering::Relaxed);
    rate.burst.store(0, Ordering::Relaxed);
    flow.store(2, Ordering::SeqCst);
    let dump = d.dir().join("dump.jsonl");
    ok(&d.run(&["export", dump.to_str().expect("utf-8 path")]));
    let e = Daemon::start();
    let o = e.run(&["import", dump.to_str().expect("utf-8 path")]);
    assert_eq!(code(&o), 0, "one queue's garbage refused the whole import: {}{}", stdout(&o), stderr(&o));
    let mut others = e.drain("other");
    others.sort();
    assert_eq!(others, ["o1", "o2", "o3"], "the other queue's jobs, imported");
    // The daemon that saw the garbage still serves the other queue.
    let mut others = d.drain("other");
    others.sort();
    assert_eq!(others, ["o1", "o2", "o3"]);
    ok(&d.run(&["check"]));
}

/// Odd values for `--max-rate` and `--burst`: each refused with exit 2 naming the flag,
/// never a panic, on `create` as on `limits`.
#[test]
fn odd_rates_and_bursts_are_refused_naming_the_flag() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let rates = [
        "1e10/s",
        "1e-300/s",
        "nan/s",
        "/s",
        "5/",
        "5/S",
        "NONE",
        "",
        " ",
        "5//s",
        "0x10/s",
        "1/0",
        "-0/s",
        "18446744073709551616/h",
        "5/s/",
        "٥/s",
    ];
    for bad in rates {
        for cmd in [&["limits", "q"][..], &["create", "r"][..]] {
            let o = d.run(&[cmd, &["--max-rate", bad][..]].concat());
            assert_eq!(code(&o), 2, "{cmd:?} --max-rate {bad:?}: {}{}", stdout(&o), stderr(&o));
            assert!(stderr(&o).contains("--max-rate"), "{bad:?}: {}", stderr(&o));
            assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        }
    }
    for bad in ["1048577", "4294967296", "1.5", "", "+", "1e3", "18446744073709551616"] {
        let o = d.run(&["limits", "q", "--max-rate", "5/s", "--burst", bad]);
        assert_eq!(code(&o), 2, "--burst {bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--burst"), "{bad:?}: {}", stderr(&o));
    }
    let o = d.run(&["limits", "q", "--max-rate", "none", "--burst", "3"]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!ok(&d.run(&["stats", "q"])).contains("rate:"), "nothing was set");
}
