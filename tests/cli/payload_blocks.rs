//! Red team 3, end to end: payload blocks through the real `xtcq` and `xtcqd`.
//!
//! - Every class boundary (inline area and one past it, each class size and one past it, the
//!   largest payload and one past it) through `xtcq push` from argv and from stdin: each
//!   round-trips through `xtcq steal` byte for byte, one past the largest is refused saying
//!   so, and `xtcq check` finds no block held once all are taken.
//! - A stdin line that never ends is refused once it is longer than the largest payload, not
//!   read into memory whole first.
//! - Operator flags: a class table past what the segment may be is refused with a message;
//!   `--inline-bytes 0` works (every non-empty payload in a block); the keys in a config
//!   file; a restart with other block flags is refused naming the field.
//! - Garbage written into a queued job's block reference: `xtcq check` says which record,
//!   and the daemon keeps serving the other jobs.
//! - A segment larger than its tmpfs is refused at once, naming the flags.
//! - A push that finds its class dry waits, naming the class, and goes through when another
//!   process acks a job of that class.
//! - A delayed large job keeps its block through the daemon's sweeps.
//! - A dead letter whose block reference is garbage is listed, re-queued and purged without
//!   harm to the daemon or the other dead letter, and its block is swept once it is gone.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::*;

/// 100 bytes inline (a 128-byte area); two blocks of each size from 256 B to 64 KiB.
fn daemon() -> Daemon {
    Daemon::builder()
        .flags(large_payload_segment(100, "256=2,512=2,1KiB=2,2KiB=2,4KiB=2,8KiB=2,16KiB=2,32KiB=2,64KiB=2"))
        .start()
}

/// Printable, no newline or NUL, different per length.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|k| b'!' + ((k * 13 + len) % 90) as u8).collect()
}

fn sizes() -> Vec<usize> {
    let mut v = vec![1, 127, 128, 129];
    for k in 1..=9 {
        let s = 128usize << k;
        v.extend([s - 1, s, s + 1]);
    }
    v.retain(|&n| n <= 65536);
    v.dedup();
    v
}

fn steal_one(d: &Daemon) -> Vec<u8> {
    let o = d.run(&["steal", "q", "-0"]);
    let out = o.stdout.clone();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    out.strip_suffix(b"\0").expect("a NUL-ended job").to_vec()
}

fn held_line(d: &Daemon) -> String {
    let o = d.run(&["check"]);
    let out = ok(&o);
    assert!(out.contains("consistent"), "{out}");
    out.lines().find(|l| l.contains("payload blocks")).unwrap_or_default().to_string()
}

#[test]
fn every_class_boundary_round_trips_through_argv_and_stdin() {
    let d = daemon();
    ok(&d.run(&["create", "q", "--deques", "1"]));
    for n in sizes() {
        let p = payload(n);
        let arg = String::from_utf8(p.clone()).expect("ascii");
        ok(&d.run(&["push", "q", &arg]));
        assert!(steal_one(&d) == p, "argv: {n} bytes came back different");
        ok(&d.run_in(&["push", "q", "-0"], &p));
        assert!(steal_one(&d) == p, "stdin: {n} bytes came back different");
        ok(&d.run_in(&["push", "q"], &[p.as_slice(), b"\n"].concat()));
        assert!(steal_one(&d) == p, "stdin lines: {n} bytes came back different");
    }
    let big = String::from_utf8(payload(65537)).expect("ascii");
    for o in [d.run(&["push", "q", &big]), d.run_in(&["push", "q", "-0"], big.as_bytes())] {
        assert_ne!(code(&o), 0);
        assert!(stderr(&o).contains("payload too large") && stderr(&o).contains("65536"), "{}", stderr(&o));
    }
    assert!(held_line(&d).contains("0 held of 18"), "{}", held_line(&d));
}

#[test]
fn an_endless_stdin_line_is_refused_at_the_largest_payload_not_buffered_whole() {
    let d = daemon();
    ok(&d.run(&["create", "q", "--deques", "1"]));
    let mut child = d
        .xtcq()
        .args(["push", "q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xtcq push");
    let mut stdin = child.stdin.take().expect("stdin");
    // 64 MiB of one line: a 1000-times too large payload. A push that reads it whole before
    // looking at its length takes it all; one that stops past the largest closes the pipe.
    const CAP: usize = 64 << 20;
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'a'; 64 << 10];
        let mut written = 0;
        while written < CAP {
            match stdin.write(&chunk) {
                Ok(n) => written += n,
                Err(_) => break,
            }
        }
        written
    });
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr");
    let st = wait_timeout(&mut child, Duration::from_secs(120)).expect("xtcq push did not exit");
    let written = writer.join().expect("writer");
    assert!(!st.success(), "an endless line was pushed: {err}");
    assert!(err.contains("too large") && err.contains("65536"), "{err}");
    assert!(written < CAP, "xtcq push read all {written} bytes of one line before refusing it");
    assert!(held_line(&d).contains("0 held"), "{}", held_line(&d));
}

#[test]
fn a_class_table_past_the_largest_segment_is_refused_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 70000 blocks of 16 MiB: 1.1 TiB, past the 1 TiB a segment may be. Refused before any
    // file is sized.
    let o = run_bounded(
        xtcqd()
            .arg("--socket")
            .arg(dir.path().join("s.sock"))
            .arg("--segment")
            .arg(dir.path().join("seg"))
            .args(["--payload-bytes", "16777216", "--payload-blocks", "16MiB=70000"]),
        None,
    );
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    let e = stderr(&o);
    // Says the limit once, and which flag made it so large.
    assert!(e.contains("1099511627776 bytes") && e.contains("--payload-blocks"), "{e}");
    assert_eq!(e.matches("would be larger than").count(), 1, "said twice: {e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(!dir.path().join("seg").exists(), "a refused segment left its file behind");
}

/// `--inline-bytes 0` still keeps a record's inline area of 64 bytes (the flag is rounded up to a
/// line): every payload size, inline or in a block, comes back whole.
#[test]
fn inline_bytes_0_rounds_up_and_every_payload_size_comes_back_whole() {
    let d = Daemon::start_with(&[
        "--records",
        "64",
        "--inline-bytes",
        "0",
        "--payload-bytes",
        "448",
        "--queues",
        "1",
        "--process-slots",
        "8",
    ]);
    ok(&d.run(&["create", "q", "--deques", "1"]));
    for n in [1usize, 8, 63, 64, 65, 127, 128, 129, 448] {
        let p = payload(n);
        ok(&d.run_in(&["push", "q", "-0"], &p));
        assert!(steal_one(&d) == p, "{n} bytes came back different");
    }
    // An empty job: one NUL-ended record on stdin.
    ok(&d.run_in(&["push", "q", "-0"], b"\0"));
    assert_eq!(steal_one(&d), b"");
    assert!(held_line(&d).contains("0 held"), "{}", held_line(&d));
}

#[test]
fn config_file_keys_set_the_blocks_and_a_restart_with_other_block_flags_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("xtcqd.toml");
    std::fs::write(
        &conf,
        "records = 64\nqueues = 1\nprocess-slots = 8\npayload-bytes = 4096\ninline-bytes = 0\n\
         payload-blocks = \"4KiB=3\"\n",
    )
    .expect("config");
    let mut d = Daemon::builder().daemon_defaults().flags([OsStr::new("--config"), conf.as_os_str()]).start();
    ok(&d.run(&["create", "q", "--deques", "1"]));
    for i in 0..3 {
        ok(&d.run_in(&["push", "q", "-0"], &payload(4000 + i)));
    }
    // 200 bytes: past the 64-byte inline area (inline 0 rounds up to a line).
    let o = d.run_in(&["push", "q", "-0", "--timeout", "0s"], &payload(200));
    assert_ne!(code(&o), 0, "a fourth block-sized push with 3 blocks of 4 KiB");
    assert!(stderr(&o).contains("3 blocks of 4096 bytes"), "{}", stderr(&o));
    d.kill();
    let (st, log) = run_daemon_once(
        &d.socket,
        &d.segment,
        &["--records", "64", "--queues", "1", "--process-slots", "8", "--payload-blocks", "4KiB=4"],
    );
    assert!(!st.success(), "a restart with other block flags adopted the segment: {log}");
    assert!(log.contains("payload_blocks[4KiB]") && log.contains('3') && log.contains('4'), "{log}");
    // The same flags as the file: adopted, the three jobs still there.
    d.restart_with(&[OsStr::new("--config"), conf.as_os_str()], |_| {});
    for i in 0..3 {
        assert!(steal_one(&d) == payload(4000 + i), "job {i} after the restart");
    }
    assert!(held_line(&d).contains("0 held of 3"), "{}", held_line(&d));
}

#[test]
fn garbage_in_a_block_reference_is_named_by_check_and_the_daemon_serves_on() {
    let d = daemon();
    ok(&d.run(&["create", "q", "--deques", "1"]));
    ok(&d.run_in(&["push", "q", "-0"], &payload(5000)));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let records = seg.records();
    let i = (0..records.len()).find(|&i| records.held_block(i).is_some()).expect("the job's record");
    let hdr_off = seg.descriptor().regions.records + u64::from(i) * seg.descriptor().regions.record_stride;
    let ref_off = hdr_off + xtcq_shm::layout::RECORD_HEADER_SIZE as u64;
    scribble::write_at(&d.segment, ref_off, &u64::MAX.to_ne_bytes());
    let o = d.run(&["check"]);
    assert_ne!(code(&o), 0, "check found nothing: {}", stdout(&o));
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(out.contains(&format!("record {i}")) && out.contains("names no block"), "{out}");
    // The damaged job fails to read; the daemon serves the next one whole.
    ok(&d.run_in(&["push", "q", "-0"], &payload(3000)));
    let o = d.run(&["steal", "q", "-0"]);
    assert_ne!(code(&o), 0, "a job whose reference is garbage was read: {}", stdout(&o));
    assert!(stderr(&o).contains("corrupt"), "{}", stderr(&o));
    assert!(steal_one(&d) == payload(3000), "the next job came back different");
    assert!(d.run(&["stats"]).status.success(), "the daemon stopped serving");
}

/// The total size of the file system holding `dir` when it is a tmpfs, else `None`.
fn tmpfs_size(dir: &std::path::Path) -> Option<u64> {
    let s = rustix::fs::statfs(dir).ok()?;
    // TMPFS_MAGIC: only there is a too-large fallocate refused before any page is taken
    // (a disk file system would fill itself first).
    (s.f_type as i64 == 0x0102_1994).then(|| s.f_blocks as u64 * s.f_bsize as u64)
}

#[test]
fn a_segment_larger_than_its_tmpfs_is_refused_at_once_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(size) = tmpfs_size(dir.path()) else {
        xtcq_testkit::skipped(&format!("{} is not on a tmpfs", dir.path().display()));
        return;
    };
    // Blocks of 16 MiB worth the whole tmpfs and 1 GiB more (under the 1 TiB limit).
    let count = size / (16 << 20) + 64;
    if count * (16 << 20) >= 1 << 40 {
        xtcq_testkit::skipped(&format!("a tmpfs of {size} bytes"));
        return;
    }
    let blocks = format!("16MiB={count}");
    let o = run_bounded(
        xtcqd()
            .arg("--socket")
            .arg(dir.path().join("s.sock"))
            .arg("--segment")
            .arg(dir.path().join("seg"))
            .args(["--payload-bytes", "16777216", "--payload-blocks", &blocks]),
        None,
    );
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("not enough space") && e.contains("--payload-blocks"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(!dir.path().join("seg").exists(), "a refused segment left its file behind");
}

#[test]
fn a_delayed_large_job_keeps_its_block_through_the_daemons_sweeps() {
    // One 8 KiB block; the daemon scans (and sweeps) every 20 ms while the job waits.
    let d = Daemon::start_with(&[
        "--records",
        "64",
        "--queues",
        "1",
        "--process-slots",
        "8",
        "--inline-bytes",
        "64",
        "--payload-bytes",
        "8192",
        "--payload-blocks",
        "8KiB=1",
        "--lease-scan-interval",
        "20ms",
    ]);
    ok(&d.run(&["create", "q", "--deques", "1"]));
    let a = payload(8000);
    ok(&d.run_in(&["push", "q", "-0", "--delay", "1s"], &a));
    std::thread::sleep(Duration::from_millis(300));
    // Had a sweep taken the delayed job's block for an orphan, this push would get it.
    let o = d.run_in(&["push", "q", "-0", "--timeout", "0s"], &payload(5000));
    assert_ne!(code(&o), 0, "a second 8 KiB-class push found the delayed job's block free");
    assert!(stderr(&o).contains("1 blocks of 8192 bytes"), "{}", stderr(&o));
    let o = d.run(&["steal", "q", "-0", "--timeout", "20s"]);
    assert!(
        o.stdout == [a.as_slice(), b"\0"].concat(),
        "the delayed job came back different: {}",
        stderr(&o)
    );
    assert!(held_line(&d).contains("0 held of 1"), "{}", held_line(&d));
}

#[test]
fn a_dead_letter_with_a_garbage_block_reference_is_listed_requeued_and_purged_safely() {
    let d = daemon();
    ok(&d.run(&["create", "q", "--deques", "1", "--max-attempts", "1"]));
    ok(&d.run_in(&["push", "q", "-0"], &payload(5000)));
    ok(&d.run_in(&["push", "q", "-0"], &payload(6000)));
    // Both fail once: dead letters, keeping their blocks.
    let c = d.client();
    let t = c.attach_thief("q").expect("thief");
    for _ in 0..2 {
        t.steal().expect("steal").expect("a job").fail("boom").expect("fail");
    }
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let records = seg.records();
    let i = (0..records.len())
        .find(|&i| {
            records.held_block(i).is_some()
                && records
                    .header(i)
                    .is_some_and(|h| h.payload_len.load(std::sync::atomic::Ordering::Relaxed) == 5000)
        })
        .expect("the 5000-byte dead letter");
    let off = seg.descriptor().regions.records
        + u64::from(i) * seg.descriptor().regions.record_stride
        + xtcq_shm::layout::RECORD_HEADER_SIZE as u64;
    scribble::write_at(&d.segment, off, &(6u64 << 32 | 1).to_ne_bytes());
    // Listing, re-queueing and purging go on; the daemon serves on.
    let o = d.run(&["dead", "q", "--json"]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    ok(&d.run(&["dead", "q", "--requeue"]));
    let mut got = Vec::new();
    for _ in 0..2 {
        let o = d.run(&["steal", "q", "-0"]);
        got.push((code(&o), o.stdout.len()));
    }
    got.sort();
    assert_eq!(got[0], (0, 6001), "the intact job came back whole: {got:?}");
    assert_ne!(got[1].0, 0, "the job whose reference is garbage was read: {got:?}");
    ok(&d.run(&["dead", "q", "--purge"]));
    assert!(d.run(&["stats"]).status.success(), "the daemon stopped serving:\n{}", d.log_text());
    // Once the damaged job is gone, the sweep frees its block too.
    let r = eventually(Duration::from_secs(10), || {
        let r = c.check_with_strays(false, Duration::ZERO).ok()?;
        (r.counts.blocks.held == 0).then_some(r)
    });
    assert!(r.is_some(), "blocks still held: {}", held_line(&d));
}

#[test]
fn a_push_waiting_for_a_block_goes_through_when_another_process_acks() {
    let d = daemon();
    ok(&d.run(&["create", "q", "--deques", "1"]));
    let (a, b, third) = (payload(65536), payload(65535), payload(40000));
    ok(&d.run_in(&["push", "q", "-0"], &a));
    ok(&d.run_in(&["push", "q", "-0"], &b));
    // Both 64 KiB blocks held (no larger class): the third push waits for room.
    let mut child = d
        .xtcq()
        .args(["push", "q", "-0", "--timeout", "60s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xtcq push");
    child.stdin.take().expect("stdin").write_all(&third).expect("write");
    let mut err = child.stderr.take().expect("stderr");
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&said).contains("waiting for room") {
        assert_eq!(err.read(&mut byte).expect("stderr"), 1, "push ended: {}", String::from_utf8_lossy(&said));
        said.push(byte[0]);
    }
    let s = String::from_utf8_lossy(&said).to_string();
    assert!(s.contains("2 blocks of 65536 bytes"), "{s}");
    // Another process takes (and acks) the oldest: the waiting push goes through.
    assert!(steal_one(&d) == a, "the first job came back different");
    let st = wait_timeout(&mut child, Duration::from_secs(60)).expect("the waiting push never ended");
    let mut rest = String::new();
    err.read_to_string(&mut rest).expect("stderr");
    assert!(st.success(), "{s}{rest}");
    assert!(steal_one(&d) == b, "the second job came back different");
    assert!(steal_one(&d) == third, "the waiting job came back different");
    assert!(held_line(&d).contains("0 held"), "{}", held_line(&d));
}
