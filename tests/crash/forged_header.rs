//! Red team 3: a same-user process rewrites the class table in the segment header of a
//! running `xtcqd`, keeping every region's size (8 blocks of 128 B become 4 of 256 B), so
//! the header still validates. A process that maps the segment afterwards (`xtcq push`,
//! `xtcq check`, a new worker) must not lay the blocks out unlike the daemon and the
//! processes already attached: it would write its jobs over the blocks of live jobs. It is
//! refused, saying why, and the live jobs come out whole through an earlier mapping. The
//! daemon's scan then writes its validated header back, logging it.

use std::os::unix::fs::FileExt;

use xtcq_client::{Flavor, QueueParams};
use xtcq_shm::layout::payload::PAYLOAD_CLASSES;
use xtcq_shm::layout::{SegmentConfig, SegmentDescriptor};
use xtcq_testkit::*;

/// One queue of 64 records, payloads up to 128 bytes: 64 inline, the rest in one of 8
/// blocks of 128 bytes (the class table the tests forge).
const SEGMENT: &[&str] = &[
    "--queues",
    "1",
    "--records",
    "64",
    "--process-slots",
    "8",
    "--payload-bytes",
    "128",
    "--inline-bytes",
    "64",
    "--payload-blocks",
    "128=8",
];

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|k| b'a' + ((k as u8).wrapping_mul(7).wrapping_add(seed) % 26)).collect()
}

#[test]
fn a_forged_class_table_is_refused_by_later_attachers_and_live_jobs_stay_whole() {
    // Scans an hour apart: a scan writes the daemon's header back (the next test), and on a
    // loaded host one did so, 100 ms after the forgery, before `xtcq check` had attached.
    let d = Daemon::start_with(&[SEGMENT, &["--lease-scan-interval", "1h"]].concat());
    let c = d.client();
    let q = QueueParams {
        name: "q".into(),
        deques: 1,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    c.create_queue(&q).expect("create");
    let inj = c.attach_injector("q").expect("injector");
    for i in 0..8 {
        inj.push(&payload(100, i)).expect("push");
    }
    // Keep the jobs in blocks 4..7 queued; ack those in 0..3.
    let view = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let thief = c.attach_thief("q").expect("thief");
    let mut jobs = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        jobs.push(j);
    }
    assert_eq!(jobs.len(), 8);
    let mut kept = Vec::new();
    for j in jobs {
        let b = view.records().held_block(j.handle().index).expect("a block");
        if b.block.index < 4 {
            j.ack().expect("ack");
        } else {
            kept.push(j.payload().expect("payload"));
            j.release().expect("release");
        }
    }
    drop(view);
    // The forgery: no 128-byte blocks, 4 of 256 bytes (same owner table and data bytes).
    let mut forged = [0u32; PAYLOAD_CLASSES];
    forged[1] = 4;
    let at = core::mem::offset_of!(SegmentDescriptor, config)
        + core::mem::offset_of!(SegmentConfig, payload_blocks);
    scribble::write_at(&d.segment, at as u64, &scribble::u32_bytes(&forged));

    // Later attachers: refused, saying why.
    let o = d.run_in(
        &["push", "q"],
        &[payload(128, 50), b"\n".to_vec(), payload(128, 51), b"\n".to_vec()].concat(),
    );
    assert_ne!(code(&o), 0, "xtcq push used a forged header");
    assert!(stderr(&o).contains("not the one the daemon validated"), "{}", stderr(&o));
    let o = d.run(&["check"]);
    assert_ne!(code(&o), 0, "xtcq check found nothing: {}", stdout(&o));
    assert!(stderr(&o).contains("not the one the daemon validated"), "{}", stderr(&o));

    // The live jobs, through the mapping made before the forgery: whole.
    let mut after = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        after.push(j.payload().expect("payload"));
        j.ack().expect("ack");
    }
    kept.sort();
    after.sort();
    assert!(kept == after, "a live job's payload was overwritten");
}

#[test]
fn the_daemon_writes_its_validated_header_back_over_a_forged_one() {
    let d = Daemon::start_with(&[SEGMENT, &["--lease-scan-interval", "20ms"]].concat());
    ok(&d.run(&["create", "q", "--deques", "1"]));
    let at = (core::mem::offset_of!(SegmentDescriptor, config)
        + core::mem::offset_of!(SegmentConfig, payload_blocks)) as u64;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&d.segment).expect("open");
    let mut before = [0u8; 4 * PAYLOAD_CLASSES];
    f.read_exact_at(&mut before, at).expect("read");
    let mut forged = [0u32; PAYLOAD_CLASSES];
    forged[1] = 4;
    let bytes = scribble::u32_bytes(&forged);
    f.write_all_at(&bytes, at).expect("forge");
    // Within a few scans the header is the daemon's again: a file check (no daemon asked)
    // then lays the segment out as the daemon does.
    let restored = eventually(std::time::Duration::from_secs(10), || {
        let mut now = [0u8; 4 * PAYLOAD_CLASSES];
        f.read_exact_at(&mut now, at).ok()?;
        (now == before).then_some(())
    });
    assert!(restored.is_some(), "the forged class table stayed; daemon log:\n{}", d.log_text());
    assert!(d.log_text().contains("header was rewritten"), "{}", d.log_text());
    let seg = d.segment.to_str().expect("utf-8 path").to_string();
    let o = d.run(&["check", "--segment", &seg]);
    assert!(ok(&o).contains("payload blocks: 0 held of 8"), "{}", stdout(&o));
    ok(&d.run_in(&["push", "q"], &[payload(128, 1), b"\n".to_vec()].concat()));
}
