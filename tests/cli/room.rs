//! A producer that finds its queue full says so on stderr at once, keeps saying how long it
//! has waited, and goes on (saying so) once a consumer makes room; past `--timeout` it fails
//! naming how many jobs it pushed. Before, it went silent until the timeout.

use xtcq_testkit::*;

use std::io::{BufRead, BufReader, Write};

use std::process::Stdio;

/// More jobs than the test daemon's 4,096 records hold.
fn jobs(n: u32) -> Vec<u8> {
    (0..n).map(|i| format!("{i}\n")).collect::<String>().into_bytes()
}

#[test]
fn a_push_into_a_full_segment_keeps_saying_how_long_it_waited_then_says_how_far_it_got() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let o = d.run_in(&["push", "q", "--timeout", "2500ms"], &jobs(5000));
    let e = stderr(&o);
    assert_eq!(code(&o), 1, "{e}");
    let lines: Vec<&str> = e.lines().collect();
    assert!(lines[0].contains("queue full") && lines[0].contains("4096 job(s) pushed so far"), "{e}");
    assert!(lines[0].contains("waiting for room for up to 2s 500ms (--timeout)"), "{e}");
    assert!(lines[0].contains("xtcq work q"), "says what makes room: {e}");
    assert!(e.contains("still waiting for room in q: 1s of 2s 500ms"), "{e}");
    assert!(e.contains("still waiting for room in q: 2s of 2s 500ms"), "{e}");
    assert!(
        e.contains("still full after waiting 2s 500ms (--timeout); 4096 job(s) pushed, the rest not"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn a_waiting_producer_says_so_while_it_waits_and_goes_on_once_a_consumer_makes_room() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let mut producer = d
        .xtcq()
        .args(["produce", "q", "--timeout", "10m"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn produce");
    let mut stdin = producer.stdin.take().expect("stdin");
    stdin.write_all(&jobs(5000)).expect("write jobs");
    drop(stdin);
    // The first line comes while the producer is still waiting (its timeout is 10 minutes):
    // read from its live stderr, not after it exited (bounded: before, it said nothing).
    let err = BufReader::new(producer.stderr.take().expect("stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in err.lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    let Ok(first) = rx.recv_timeout(std::time::Duration::from_secs(60)) else {
        let _ = producer.kill();
        panic!("the waiting producer said nothing in 60 s");
    };
    assert!(first.contains("4096 job(s) pushed so far; waiting for room"), "{first}");
    assert!(producer.try_wait().expect("try_wait").is_none(), "the producer still waits");
    // A consumer makes room: the producer finishes, and says it went on.
    let o = d.run(&["steal", "q", "-n", "2000"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let st = wait_bounded(producer, std::time::Duration::from_secs(60), "produce");
    // The producer has exited: its stderr is at its end, and the reader thread ends.
    let rest: String = rx.iter().collect::<Vec<_>>().join("\n");
    let st = st.status;
    assert!(st.success(), "{first}{rest}");
    assert!(rest.contains("room in q again after"), "{first}{rest}");
    let s = d.stats();
    assert_eq!(s["queues"][0]["records"]["queued"], 3000, "{s}");
}
