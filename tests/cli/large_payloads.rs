//! Payloads that fit, end to end: a real `xtcqd` whose records keep 64 bytes inline and whose
//! segment has a few 4 KiB and 64 KiB blocks carries 64 KiB jobs from real `xtcq push`
//! processes to real `xtcq steal` processes and through the Rust client, each whole and once;
//! a push when the 64 KiB blocks are all held fails, saying which flag to raise, and loses
//! nothing; `xtcq check` finds the segment consistent with no block held once drained.

use xtcq_testkit::*;

/// Small records (64 bytes inline), 8 blocks of 4 KiB and 3 of 64 KiB.
fn daemon() -> Daemon {
    Daemon::builder().flags(large_payload_segment(64, "4KiB=8,64KiB=3")).start()
}

/// Job `i`'s payload of `len` bytes: printable, no newline or NUL, and different per job.
fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| b'a' + ((i * 7 + k) % 26) as u8).collect()
}

fn join0(jobs: &[Vec<u8>]) -> Vec<u8> {
    jobs.join(&0u8)
}

#[test]
fn jobs_of_64_kib_go_through_push_and_steal_processes_whole_and_once() {
    let d = daemon();
    ok(&d.run(&["create", "big", "--deques", "1"]));
    let sizes = [65536, 10, 4096, 65000, 64, 65, 3000, 65536];
    let jobs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| payload(i, n)).collect();
    ok(&d.run_in(&["push", "big", "-0"], &join0(&jobs)));
    let o = d.run(&["check"]);
    assert!(ok(&o).contains("consistent"), "{}", stdout(&o));

    // A fourth job of 64 KiB finds the three blocks held (and no larger class): refused.
    let fourth = payload(99, 65536);
    let o = d.run_in(&["push", "big", "-0", "--timeout", "0s"], &fourth);
    assert_ne!(code(&o), 0, "a push with every 64 KiB block held succeeded");
    let e = stderr(&o);
    assert!(e.contains("3 blocks of 65536 bytes") && e.contains("--payload-blocks 65536=COUNT"), "{e}");

    // Two steal processes, then the client: every job once, byte for byte.
    let mut got: Vec<Vec<u8>> = Vec::new();
    for _ in 0..2 {
        let o = d.run(&["steal", "big", "-0", "-n", "3"]);
        got.extend(o.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()).map(<[u8]>::to_vec));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief("big").expect("attach");
    while let Some(j) = t.steal().expect("steal") {
        got.push(j.payload().expect("payload"));
        j.ack().expect("ack");
    }
    let (mut want, mut have) = (jobs.clone(), got);
    want.sort();
    have.sort();
    assert_eq!(have.len(), want.len(), "jobs lost or doubled");
    assert!(have == want, "a payload came out different");

    // The blocks came back: three 64 KiB pushes go again, through the client too.
    let inj = c.attach_injector("big").expect("injector");
    for i in 0..3 {
        inj.push(&payload(200 + i, 65536)).expect("push 64 KiB");
    }
    for _ in 0..3 {
        let j = t.steal().expect("steal").expect("a job");
        assert_eq!(j.payload().expect("payload").len(), 65536);
        j.ack().expect("ack");
    }
    drop((t, inj, c));
    let o = d.run(&["check"]);
    let out = ok(&o);
    assert!(out.contains("consistent") && out.contains("payload blocks: 0 held of 11"), "{out}");
}

#[test]
fn bad_payload_block_flags_are_refused_with_what_to_write() {
    for (flags, want) in [
        (&["--payload-blocks", "3000=4"][..], "not a block size"),
        (&["--payload-blocks", "4KiB"][..], "SIZE=COUNT"),
        (&["--payload-bytes", "65536", "--payload-blocks", "4KiB=4"][..], "--payload-blocks SIZE=COUNT"),
        (
            &["--payload-blocks", "128=10", "--payload-blocks", "256=4,128=2"][..],
            "128-byte blocks are given twice",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = run_bounded(
            xtcqd()
                .args(["--socket"])
                .arg(dir.path().join("s.sock"))
                .args(["--segment"])
                .arg(dir.path().join("seg"))
                .args(flags),
            None,
        );
        assert_ne!(code(&o), 0, "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{flags:?}: {}", stderr(&o));
    }
}
