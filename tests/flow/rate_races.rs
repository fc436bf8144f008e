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
/// start at once. Each look takes a token and gives it back; when two looks overlap, the
/// first one's give-back finds the bucket moved and its token stays spent, so looks alone
/// drain the burst down to one job an hour.
#[test]
#[ignore = "known break: consumers looking at an empty rated queue spend its burst (give-backs lost in races)"]
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
