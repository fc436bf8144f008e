//! Payloads that fit (layout 6): small payloads inline in the record, larger ones in
//! size-classed blocks. Round trips of every size, a class running out (a clear error, no job
//! lost, a larger class taken first), blocks given back by ack, purge and queue delete, a
//! hostile process's block references and owner words (errors, never a panic or a read out
//! of range), and the memory a queued job costs.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use xtcq_shm::check::check_segment;
use xtcq_shm::layout::payload::{class_size, PAYLOAD_CLASSES};
use xtcq_shm::layout::RECORD_HEADER_SIZE;
use xtcq_shm::{Flavor, JobError, Owner, PushError, QueueSpec, Segment, SegmentConfig, Thief};

// testkit's block lists (std only): this package cannot link testkit (testkit links this
// crate, through the client), so it includes the file by path.
#[allow(dead_code)] // only `block_counts` is used here
#[path = "../../testkit/src/scribble.rs"]
mod scribble;

fn blocks(list: &[(u32, u32)]) -> [u32; PAYLOAD_CLASSES] {
    scribble::block_counts(list, class_size)
}

/// Small records, and a few blocks of 256 B, 4 KiB and 64 KiB.
fn config() -> SegmentConfig {
    SegmentConfig {
        queues: 2,
        deques_per_queue: 2,
        deque_capacity: 64,
        job_records: 128,
        payload_bytes: 65536,
        process_slots: 8,
        overflow_capacity: 64,
        inline_bytes: 64,
        payload_blocks: blocks(&[(256, 4), (4096, 4), (65536, 2)]),
        keys: 0,
    }
}

struct Live {
    _dir: tempfile::TempDir,
    seg: Arc<Segment>,
    q: xtcq_shm::QueueInfo,
}

fn live(c: &SegmentConfig) -> Live {
    let dir = tempfile::tempdir().unwrap();
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), c, 0o600).unwrap());
    let spec = QueueSpec {
        name: "q".into(),
        flavor: Flavor::Fifo,
        deques: 2,
        capacity: 64,
        max_attempts: 1,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).unwrap();
    Live { _dir: dir, seg, q }
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|k| (k as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

fn held(seg: &Segment) -> usize {
    seg.records().blocks().held().count()
}

#[test]
fn every_size_round_trips_and_acks_give_the_blocks_back() {
    let l = live(&config());
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).unwrap();
    let thief = Thief::new(l.seg.clone(), &l.q, 2).unwrap();
    let sizes = [0usize, 1, 16, 64, 65, 200, 256, 257, 4000, 4096, 4097, 65536];
    for (i, &n) in sizes.iter().enumerate() {
        owner.push(&payload(n, i as u8)).unwrap();
    }
    assert_eq!(held(&l.seg), sizes.iter().filter(|&&n| n > 64).count());
    assert!(check_segment(&l.seg, false).is_consistent());
    for (i, &n) in sizes.iter().enumerate() {
        let j = thief.steal().unwrap().unwrap();
        assert_eq!(j.payload().unwrap(), payload(n, i as u8), "size {n}");
        j.ack().unwrap();
    }
    assert_eq!(held(&l.seg), 0, "every ack gave its block back");
    let r = check_segment(&l.seg, true);
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!((r.counts.blocks.total, r.counts.blocks.held), (10, 0));
}

#[test]
fn a_full_class_falls_back_to_a_larger_one_then_says_which_flag_to_raise() {
    let l = live(&config());
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).unwrap();
    // 4 blocks of 256 B, then the 4 KiB ones, then the 64 KiB ones: 10 in all.
    for i in 0..10 {
        owner.push(&payload(100, i)).unwrap();
    }
    let e = owner.push(&payload(100, 99)).unwrap_err();
    match &e {
        PushError::BlocksFull(f) => assert_eq!((f.len, f.size, f.blocks), (100, 256, 4)),
        e => panic!("{e:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("100-byte payload") && msg.contains("4 blocks of 256 bytes"), "{msg}");
    assert!(msg.contains("--payload-blocks 256=COUNT"), "{msg}");
    // No record was kept by the refused push, and small payloads still go (inline).
    let r = check_segment(&l.seg, false);
    assert_eq!((r.counts.queued, r.counts.filling), (10, 0));
    owner.push(b"small").unwrap();
    // Each job is still whole, and the blocks come back.
    let thief = Thief::new(l.seg.clone(), &l.q, 2).unwrap();
    for i in 0..10 {
        let j = thief.steal().unwrap().unwrap();
        assert_eq!(j.payload().unwrap(), payload(100, i));
        j.ack().unwrap();
    }
    assert_eq!(thief.steal().unwrap().unwrap().payload().unwrap(), b"small");
    assert_eq!(held(&l.seg), 0);
}

#[test]
fn larger_than_the_largest_payload_is_too_large() {
    let l = live(&config());
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).unwrap();
    let e = owner.push(&payload(65537, 0)).unwrap_err();
    assert!(matches!(e, PushError::PayloadTooLarge { len: 65537, max: 65536 }), "{e:?}");
    assert!(e.to_string().contains("--payload-bytes"), "{e}");
    assert_eq!(held(&l.seg), 0);
}

#[test]
fn nack_dead_letter_purge_and_delete_keep_or_free_the_block() {
    let l = live(&config());
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).unwrap();
    let thief = Thief::new(l.seg.clone(), &l.q, 2).unwrap();
    owner.push(&payload(5000, 1)).unwrap();
    // max_attempts 1: the nack makes it a dead letter, which keeps its payload.
    thief.steal().unwrap().unwrap().fail("no").unwrap();
    let dead = xtcq_shm::dead_letter::dead_letters(&l.seg, l.q.index);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, payload(5000, 1));
    assert_eq!(held(&l.seg), 1);
    xtcq_shm::dead_letter::purge_dead(&l.seg, dead[0].handle).unwrap();
    assert_eq!(held(&l.seg), 0, "a purge gives the block back");
    // A queue deleted with jobs in it gives their blocks back too.
    owner.push(&payload(300, 2)).unwrap();
    owner.push(&payload(40000, 3)).unwrap();
    assert_eq!(held(&l.seg), 2);
    drop((owner, thief));
    l.seg.delete_queue_at(l.q.index, true).unwrap();
    assert_eq!(held(&l.seg), 0, "a delete gives the blocks back");
    assert!(check_segment(&l.seg, true).is_consistent());
}

/// The record's inline area (its first 8 bytes name the block) and the block's owner word.
fn ref_word(seg: &Segment, index: u32) -> &std::sync::atomic::AtomicU64 {
    let h = seg.records().header(index).unwrap();
    // SAFETY: the inline area follows the 64-byte header and holds at least 8 bytes here.
    unsafe { &*((h as *const _ as *const u8).add(RECORD_HEADER_SIZE) as *const std::sync::atomic::AtomicU64) }
}

#[test]
fn hostile_references_owner_words_and_lengths_are_errors() {
    let l = live(&config());
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).unwrap();
    let thief = Thief::new(l.seg.clone(), &l.q, 2).unwrap();
    owner.push(&payload(3000, 5)).unwrap();
    owner.push(&payload(3000, 6)).unwrap();
    let j = thief.steal().unwrap().unwrap();
    let i = j.handle().index;
    let good = ref_word(&l.seg, i).load(Ordering::Relaxed);
    let hdr = l.seg.records().header(i).unwrap();
    let bad_refs = [0u64, u64::MAX, 19 << 32, 6 << 32 | 4, 6 << 32 | u32::MAX as u64, 1 << 32, 10 << 32 | 2];
    for bad in bad_refs {
        ref_word(&l.seg, i).store(bad, Ordering::Relaxed);
        let mut buf = b"keep".to_vec();
        match j.read_payload(&mut buf) {
            Err(JobError::BadPayload(e)) => assert!(e.to_string().contains("corrupt"), "{e}"),
            r => panic!("reference {bad:#x}: {r:?}"),
        }
        assert_eq!(buf, b"keep");
        assert!(!check_segment(&l.seg, false).is_consistent(), "check sees reference {bad:#x}");
    }
    // A reference to a block the other job holds: its owner word names another record.
    let records = l.seg.records();
    let other = (0..records.len()).filter(|&k| k != i).find_map(|k| records.held_block(k)).unwrap();
    ref_word(&l.seg, i).store(other.block.to_word(), Ordering::Relaxed);
    assert!(j.payload().is_err(), "a block another record holds is not ours to read");
    ref_word(&l.seg, i).store(good, Ordering::Relaxed);
    // A length past the block, then past the largest payload.
    for len in [4097, 65537, u32::MAX] {
        hdr.payload_len.store(len, Ordering::Relaxed);
        assert!(matches!(j.payload(), Err(JobError::BadPayload(_))), "length {len}");
    }
    hdr.payload_len.store(3000, Ordering::Relaxed);
    assert_eq!(j.payload().unwrap(), payload(3000, 5));
    // An owner word naming no record, or a record that moved on: check reports, the sweep frees.
    let b = l.seg.records().held_block(i).unwrap();
    let blocks = *records.blocks();
    let spare = xtcq_shm::record::blocks::BlockRef { class: 9, index: 1 };
    blocks.owner(spare).store(u64::from(u32::MAX) | 7 << 32, Ordering::Relaxed);
    let r = check_segment(&l.seg, false);
    assert!(r.problems.iter().any(|p| p.contains("names no record")), "{:?}", r.problems);
    assert_eq!(xtcq_shm::recovery::sweep_blocks(&l.seg), 1);
    assert_eq!(blocks.owner(b.block).load(Ordering::Relaxed), b.owner, "a live job's block stays");
    j.ack().unwrap();
    let j = thief.steal().unwrap().unwrap();
    assert_eq!(j.payload().unwrap(), payload(3000, 6));
    j.ack().unwrap();
    assert_eq!(held(&l.seg), 0);
    assert!(check_segment(&l.seg, true).is_consistent());
}

#[test]
fn a_block_whose_record_moved_on_is_reported_and_swept() {
    let l = live(&config());
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).unwrap();
    let thief = Thief::new(l.seg.clone(), &l.q, 2).unwrap();
    owner.push(&payload(1000, 1)).unwrap();
    let j = thief.steal().unwrap().unwrap();
    let b = l.seg.records().held_block(j.handle().index).unwrap();
    j.ack().unwrap();
    // As an acker killed between its ack and the block's release would leave it.
    l.seg.records().blocks().owner(b.block).store(b.owner, Ordering::Relaxed);
    let r = check_segment(&l.seg, true);
    assert!(r.problems.iter().any(|p| p.contains("held by no live job")), "{:?}", r.problems);
    assert_eq!(xtcq_shm::recovery::sweep_blocks(&l.seg), 1);
    assert!(check_segment(&l.seg, true).is_consistent());
}

/// Bytes per queued job: a segment with 1024 more records (and, with `block`, 1024 more
/// blocks of that size) less the same segment without them. `block` `None` with
/// `inline_bytes` 65536 is the layout-5 way (every record holds the largest payload); else
/// the segment also has one 64 KiB block, so that it takes 64 KiB payloads.
fn bytes_per_job(inline_bytes: u32, payload_bytes: u32, block: Option<u32>) -> u64 {
    let make = |n: u32| {
        let mut list = vec![];
        if inline_bytes < payload_bytes {
            list.push((65536, 1 + if block == Some(65536) { n } else { 0 }));
        }
        if let Some(s) = block.filter(|&s| s != 65536) {
            list.push((s, n));
        }
        let c = SegmentConfig {
            job_records: 1024 + n,
            payload_bytes,
            inline_bytes,
            payload_blocks: blocks(&list),
            keys: 0,
            ..SegmentConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("seg");
        drop(Segment::create(&p, &c, 0o600).unwrap());
        std::fs::metadata(&p).unwrap().len()
    };
    (make(1024) - make(0)) / 1024
}

/// The table the book's sizing page shows (`tests/fixtures/memory-per-job.md`): before, every
/// record sized for the largest payload (here 64 KiB, all inline, as layout 5 did); after,
/// 64-byte inline areas and a block of the payload's class.
#[test]
fn memory_per_queued_job_is_as_the_book_says() {
    let before = bytes_per_job(65536, 65536, None);
    assert_eq!(before, 65608);
    let after: Vec<u64> = [(16, None), (256, Some(256)), (4096, Some(4096)), (65536, Some(65536))]
        .iter()
        .map(|&(_, b)| bytes_per_job(64, 65536, b))
        .collect();
    assert_eq!(after, [136, 400, 4240, 65680]);
    let table = include_str!("fixtures/memory-per-job.md");
    for row in [
        "| 16 B | 65,608 | 136 |",
        "| 256 B | 65,608 | 400 |",
        "| 4 KiB | 65,608 | 4,240 |",
        "| 64 KiB | 65,608 | 65,680 |",
    ] {
        assert!(table.contains(row), "tests/fixtures/memory-per-job.md lacks the row {row:?}");
    }
}
