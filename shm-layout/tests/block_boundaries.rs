//! Red team 3, engine level: payload blocks (layout 6) and the batch path under attack.
//!
//! - Every class boundary (inline area, inline + 1, each class size and one past it, the
//!   largest payload and one past it) round-trips byte for byte through an owner push and an
//!   overflow-ring push, and no block is held once every job is acked.
//! - A class run dry while jobs are acked: the error names the class and the flag, no job is
//!   lost, and pushes go again once blocks come back.
//! - A claimed batch of large payloads, acked with `ack_all`, gives every block back.
//! - A hostile thread scribbles over owner words, block references, payload lengths and
//!   inline areas while an owner and two thieves work: nobody panics or reads out of range,
//!   no job is claimed twice, `check_segment` reports the damage, and once the scribbler stops
//!   and every job is drained the sweep leaves no orphan.
//! - A forged class table in the segment header (same region sizes, other classes) makes a
//!   later attacher lay blocks over live jobs' blocks: ignored (the engine alone has nothing
//!   to compare with; clients check the daemon's digest), see docs/src/guarantees/crashes.md.
//! - A batch steal with a limit of 0 claims nothing (it used to claim one job).
//! - A memfd segment larger than the host's memory and swap is refused before any page is
//!   taken.

use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use xtcq_shm::check::check_segment;
use xtcq_shm::layout::payload::{class_size, PAYLOAD_CLASSES};
use xtcq_shm::layout::{SegmentConfig as Cfg, SegmentDescriptor, RECORD_HEADER_SIZE};
use xtcq_shm::{ClaimedBatch, Flavor, Injector, Owner, PushError, QueueSpec, Segment, SegmentConfig, Thief};

// xorshift64*, the one harness's: this package cannot link testkit (testkit links this
// crate, through the client), so it includes testkit's file by path.
#[allow(dead_code)] // `below` is not used here
#[path = "../../testkit/src/rng.rs"]
mod rng;
use rng::Rng;

// testkit's block lists (std only): this package cannot link testkit (testkit links this
// crate, through the client), so it includes the file by path.
#[allow(dead_code)] // only `block_counts` is used here
#[path = "../../testkit/src/scribble.rs"]
mod scribble;

fn blocks(list: &[(u32, u32)]) -> [u32; PAYLOAD_CLASSES] {
    scribble::block_counts(list, class_size)
}

fn config(inline_bytes: u32, payload_bytes: u32, list: &[(u32, u32)]) -> SegmentConfig {
    SegmentConfig {
        queues: 2,
        deques_per_queue: 2,
        deque_capacity: 128,
        job_records: 256,
        payload_bytes,
        process_slots: 8,
        overflow_capacity: 256,
        inline_bytes,
        payload_blocks: blocks(list),
        keys: 0,
    }
}

struct Live {
    dir: tempfile::TempDir,
    seg: Arc<Segment>,
    q: xtcq_shm::QueueInfo,
}

fn live(c: &SegmentConfig, max_attempts: u32) -> Live {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), c, 0o600).expect("create"));
    let spec = QueueSpec {
        name: "q".into(),
        flavor: Flavor::Fifo,
        deques: 2,
        capacity: 128,
        max_attempts,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    Live { dir, seg, q }
}

fn payload(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|k| (k as u64).wrapping_mul(31).wrapping_add(seed.wrapping_mul(131)) as u8).collect()
}

fn held(seg: &Segment) -> usize {
    seg.records().blocks().held().count()
}

/// Every boundary a payload can sit on for `c`, the last one past the largest payload.
fn boundaries(c: &SegmentConfig, inline_area: usize) -> Vec<usize> {
    let mut v = vec![0, 1, inline_area - 1, inline_area, inline_area + 1];
    for k in 0..PAYLOAD_CLASSES {
        let s = class_size(k) as usize;
        if s > inline_area && s <= c.payload_bytes as usize {
            v.extend([s - 1, s, s + 1]);
        }
    }
    v.extend([c.payload_bytes as usize, c.payload_bytes as usize + 1]);
    v.retain(|&n| n <= c.payload_bytes as usize + 1);
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn every_class_boundary_round_trips_through_owner_and_injector_and_leaks_nothing() {
    // inline_bytes 100: a 128-byte inline area (rounded to a line); classes 256 B .. 64 KiB.
    let list: Vec<(u32, u32)> = (1..=9).map(|k| (class_size(k), 4)).collect();
    let c = config(100, 65536, &list);
    let l = live(&c, 3);
    let inline = l.seg.records().inline_capacity() as usize;
    assert_eq!(inline, 128);
    let sizes = boundaries(&c, inline);
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).expect("owner");
    let inj = Injector::new(l.seg.clone(), &l.q, 2).expect("injector");
    let thief = Thief::new(l.seg.clone(), &l.q, 3).expect("thief");
    for (i, &n) in sizes.iter().enumerate() {
        let p = payload(n, i as u64);
        for how in ["owner", "injector"] {
            let r = if how == "owner" { owner.push(&p) } else { inj.push(&p) };
            if n > c.payload_bytes as usize {
                assert!(matches!(r, Err(PushError::PayloadTooLarge { .. })), "{how} {n}: {r:?}");
                continue;
            }
            r.unwrap_or_else(|e| panic!("{how} push of {n} bytes: {e}"));
            let j = thief.steal().expect("steal").expect("the job just pushed");
            assert_eq!(j.payload().expect("payload"), p, "{how}: {n} bytes came back different");
            j.ack().expect("ack");
            assert_eq!(held(&l.seg), 0, "{how}: the {n}-byte job's block was not given back");
        }
    }
    let r = check_segment(&l.seg, false);
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!(r.counts.blocks.held, 0);
}

#[test]
fn a_dry_class_names_itself_loses_nothing_and_recovers_when_another_thread_acks() {
    let c = config(64, 4096, &[(4096, 3)]);
    let l = live(&c, 3);
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).expect("owner");
    for i in 0..3 {
        owner.push(&payload(4096, i)).expect("push");
    }
    let fourth = payload(3000, 9);
    let e = owner.push(&fourth).expect_err("a fourth 3000-byte job with 3 blocks of 4 KiB");
    let msg = e.to_string();
    assert!(msg.contains("3 blocks of 4096 bytes") && msg.contains("--payload-blocks 4096=COUNT"), "{msg}");
    assert_eq!(fourth, payload(3000, 9), "the caller's payload is untouched");
    let r = check_segment(&l.seg, false);
    assert_eq!((r.counts.queued, r.counts.filling, r.counts.blocks.held), (3, 0, 3), "{:?}", r.problems);
    // Another thread acks one; the push goes again.
    let seg = l.seg.clone();
    let q = l.q.clone();
    std::thread::spawn(move || {
        let t = Thief::new(seg, &q, 4).expect("thief");
        let j = t.steal().expect("steal").expect("a job");
        assert_eq!(j.payload().expect("payload"), payload(4096, 0));
        j.ack().expect("ack");
    })
    .join()
    .expect("acker");
    owner.push(&fourth).expect("a push once a block came back");
    let thief = Thief::new(l.seg.clone(), &l.q, 3).expect("thief");
    let mut got = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        got.push(j.payload().expect("payload"));
        j.ack().expect("ack");
    }
    assert_eq!(got, vec![payload(4096, 1), payload(4096, 2), fourth]);
    assert_eq!(held(&l.seg), 0);
}

#[test]
fn a_claimed_batch_of_large_payloads_gives_every_block_back() {
    let c = config(64, 65536, &[(4096, 40), (65536, 8)]);
    let l = live(&c, 3);
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).expect("owner");
    let want: Vec<Vec<u8>> =
        (0..40).map(|i| payload(if i % 5 == 0 { 65536 } else { 4097 - i }, i as u64)).collect();
    for p in &want {
        owner.push(p).expect("push");
    }
    let thief = Thief::new(l.seg.clone(), &l.q, 3).expect("thief");
    let mut batch = ClaimedBatch::new();
    let mut got = Vec::new();
    loop {
        let n = thief.steal_batch_claimed(16, &mut batch).expect("batch");
        if n == 0 {
            break;
        }
        for i in 0..batch.len() {
            let mut b = Vec::new();
            batch.read_payload(i, &mut b).expect("payload");
            got.push(b);
        }
        assert_eq!(batch.ack_all().expect("ack_all"), n);
    }
    got.sort();
    let mut want = want;
    want.sort();
    assert!(got == want, "jobs lost, doubled or changed");
    assert_eq!(held(&l.seg), 0, "ack_all left blocks held");
}

/// The first 8 bytes of record `i`'s inline area (a block reference for a large payload).
fn ref_word(seg: &Segment, i: u32) -> &AtomicU64 {
    let h = seg.records().header(i).expect("record");
    // SAFETY: the inline area follows the 64-byte header, 8-aligned, at least 8 bytes here.
    unsafe { &*((h as *const _ as *const u8).add(RECORD_HEADER_SIZE) as *const AtomicU64) }
}

/// One garbage write into the block machinery of `seg`.
fn scribble(seg: &Segment, rng: &mut Rng) {
    let records = seg.records();
    let blocks = records.blocks();
    let i = (rng.next_u64() % records.len() as u64) as u32;
    let garbage = match rng.next_u64() % 4 {
        0 => rng.next_u64(),
        1 => rng.next_u64() & 0xff,
        2 => ((rng.next_u64() % 20) << 32) | (rng.next_u64() % 64),
        _ => u64::MAX,
    };
    match rng.next_u64() % 4 {
        0 => {
            let k = (rng.next_u64() % PAYLOAD_CLASSES as u64) as usize;
            if blocks.count(k) > 0 {
                let b = xtcq_shm::record::blocks::BlockRef {
                    class: k,
                    index: (rng.next_u64() % blocks.count(k) as u64) as u32,
                };
                blocks.owner(b).store(garbage, Ordering::Relaxed);
            }
        }
        1 => ref_word(seg, i).store(garbage, Ordering::Relaxed),
        2 => {
            let h = records.header(i).expect("record");
            h.payload_len.store(garbage as u32, Ordering::Relaxed);
        }
        _ => {
            let h = records.header(i).expect("record");
            // A word further into the inline area.
            let w =
                unsafe { &*((h as *const _ as *const u8).add(RECORD_HEADER_SIZE + 8) as *const AtomicU64) };
            w.store(garbage, Ordering::Relaxed);
        }
    }
}

#[test]
fn garbage_in_owner_words_references_lengths_and_inline_areas_breaks_only_what_it_hits() {
    let c = config(64, 8192, &[(128, 16), (1024, 32), (8192, 16)]);
    let l = live(&c, 2);
    // The workers map the segment a second time, as another process would.
    let other = Arc::new(Segment::attach(&l.dir.path().join("seg")).expect("attach"));
    let stop = Arc::new(AtomicBool::new(false));
    let claimed = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    {
        let (seg, q, stop) = (other.clone(), l.q.clone(), stop.clone());
        workers.push(std::thread::spawn(move || {
            let owner = Owner::new(seg, &q, 0, 1).expect("owner");
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let _ = owner.push(&payload([10, 100, 900, 5000, 8192][i as usize % 5], i));
            }
        }));
    }
    for me in [2u32, 3] {
        let (seg, q, stop, claimed) = (other.clone(), l.q.clone(), stop.clone(), claimed.clone());
        workers.push(std::thread::spawn(move || {
            let thief = Thief::new(seg, &q, me).expect("thief");
            let mut batch = ClaimedBatch::new();
            while !stop.load(Ordering::Relaxed) {
                if me == 2 {
                    if let Ok(Some(j)) = thief.steal() {
                        claimed.lock().expect("lock").push(j.id());
                        let _ = j.payload();
                        let _ = j.ack();
                    }
                } else if thief.steal_batch_claimed(8, &mut batch).is_ok() {
                    for k in 0..batch.len() {
                        claimed.lock().expect("lock").push(batch.get(k).expect("job").id());
                        let _ = batch.read_payload(k, &mut Vec::new());
                    }
                    let _ = batch.ack_all();
                }
            }
        }));
    }
    let mut rng = Rng::new(0x5eed_0003);
    let mut reported = false;
    for round in 0..4000 {
        scribble(&l.seg, &mut rng);
        if round % 500 == 0 {
            reported |= !check_segment(&l.seg, false).is_consistent();
            xtcq_shm::recovery::sweep_blocks(&l.seg);
        }
        if round % 50 == 0 {
            std::thread::yield_now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker panicked on garbage");
    }
    assert!(reported, "check_segment never saw 4000 garbage writes");
    // A job's id is (record, birth): one claim per id and pushed job, except a job given back
    // by a failed ack is claimed again; a record whose state the garbage did not touch is
    // never claimed by two at once, which the claim CAS guarantees, so count only doubles
    // that the sequence of claims cannot explain: none allowed past two (max_attempts 2).
    let ids = claimed.lock().expect("lock").clone();
    let mut seen = std::collections::HashMap::new();
    for id in &ids {
        *seen.entry(*id).or_insert(0u32) += 1;
    }
    assert!(seen.values().all(|&n| n <= 2), "a job was claimed more than its attempts allow");
    let _unique: HashSet<_> = ids.iter().collect();
    // Drain what is left, then free every block no live job holds.
    let thief = Thief::new(l.seg.clone(), &l.q, 5).expect("thief");
    while let Ok(Some(j)) = thief.steal() {
        let _ = j.payload();
        let _ = j.ack();
    }
    xtcq_shm::dead_letter::dead_letters(&l.seg, l.q.index)
        .into_iter()
        .for_each(|d| drop(xtcq_shm::dead_letter::purge_dead(&l.seg, d.handle)));
    xtcq_shm::recovery::sweep_blocks(&l.seg);
    let r = check_segment(&l.seg, false);
    let orphans: Vec<_> = r.problems.iter().filter(|p| p.contains("held by no live job")).collect();
    assert!(orphans.is_empty(), "after the sweep: {orphans:?}");
}

/// Byte offset of the class table in the segment header.
fn class_table_offset() -> u64 {
    (core::mem::offset_of!(SegmentDescriptor, config) + core::mem::offset_of!(Cfg, payload_blocks)) as u64
}

#[test]
#[ignore = "engine alone: nothing to compare a forged header with; clients check the daemon's digest (guarantees/crashes.md)"]
fn a_forged_class_table_lets_a_later_attacher_overwrite_live_jobs() {
    // 8 blocks of 128 B: the same owner table (rounded to 128 bytes) and data bytes as 4 of 256 B.
    let c = config(64, 128, &[(128, 8)]);
    let l = live(&c, 3);
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).expect("owner");
    for i in 0..8 {
        owner.push(&payload(100, i)).expect("push");
    }
    // Ack the jobs in blocks 0..3, keep those in blocks 4..7.
    let thief = Thief::new(l.seg.clone(), &l.q, 3).expect("thief");
    let mut kept = Vec::new();
    let mut all = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        all.push(j);
    }
    assert_eq!(all.len(), 8);
    for j in all {
        let b = l.seg.records().held_block(j.handle().index).expect("a block");
        if b.block.index < 4 {
            j.ack().expect("ack");
        } else {
            kept.push((j.payload().expect("payload"), j.handle().index));
            j.release().expect("release");
        }
    }
    assert_eq!(kept.len(), 4);
    // A same-user process rewrites the class table: no 128 B blocks, 4 of 256 B.
    let forged = blocks(&[(256, 4)]);
    let bytes: Vec<u8> = forged.iter().flat_map(|n| n.to_ne_bytes()).collect();
    let f = std::fs::OpenOptions::new().write(true).open(l.dir.path().join("seg")).expect("open");
    f.write_all_at(&bytes, class_table_offset()).expect("forge");
    // A process attaching now (a new worker, `xtcq push`) either refuses the segment or
    // agrees with everyone else on where the blocks are.
    if let Ok(late) = Segment::attach(&l.dir.path().join("seg")) {
        let late = Arc::new(late);
        let q = late.queues().into_iter().find_map(Result::ok).expect("queue");
        let inj = Injector::new(late, &q, 5).expect("injector");
        for i in 0..4 {
            let _ = inj.push(&payload(128, 50 + i));
        }
    }
    let thief = Thief::new(l.seg.clone(), &l.q, 4).expect("thief");
    let mut after = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        if kept.iter().any(|(_, i)| *i == j.handle().index) {
            after.push(j.payload().expect("payload"));
        }
        j.ack().expect("ack");
    }
    let mut before: Vec<_> = kept.into_iter().map(|(p, _)| p).collect();
    before.sort();
    after.sort();
    assert!(before == after, "a live job's payload was overwritten by a later attacher's push");
}

#[test]
fn a_batch_of_limit_0_claims_nothing() {
    // max_attempts 1: a job claimed and dropped unsettled is nacked into a dead letter.
    let c = config(64, 4096, &[(4096, 4)]);
    let l = live(&c, 1);
    let owner = Owner::new(l.seg.clone(), &l.q, 0, 1).expect("owner");
    owner.push(&payload(3000, 1)).expect("push");
    let thief = Thief::new(l.seg.clone(), &l.q, 3).expect("thief");
    let mut batch = ClaimedBatch::new();
    assert_eq!(thief.steal_batch_claimed(0, &mut batch).expect("batch"), 0, "asked for none, got some");
    let mut out = Vec::new();
    assert!(matches!(thief.steal_batch_from(0, 0, &mut out), xtcq_shm::Steal::Empty), "steal_batch_from(0)");
    assert!(out.is_empty());
    drop((batch, out));
    let r = check_segment(&l.seg, false);
    assert_eq!((r.counts.queued, r.counts.dead), (1, 0), "the job is still queued, never attempted");
    let j = thief.steal().expect("steal").expect("the job");
    assert_eq!((j.attempts(), j.payload().expect("payload")), (0, payload(3000, 1)));
    j.ack().expect("ack");
}

/// `MemTotal + SwapTotal` in bytes, as `/proc/meminfo` says.
fn memory_and_swap() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let l = text.lines().find(|l| l.starts_with(key))?;
        l[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)) * 1024)
}

#[test]
fn a_memfd_segment_larger_than_memory_is_refused_before_any_page_is_taken() {
    // Not run against the code before its fix: there the fallocate took the host's memory.
    let Some(room) = memory_and_swap() else { return };
    let count = room / u64::from(class_size(17)) + 16;
    if count > u64::from(xtcq_shm::layout::payload::MAX_CLASS_BLOCKS) || count << 24 >= 1 << 40 {
        eprintln!("skipped: {room} bytes of memory and swap");
        return;
    }
    let mut c = config(64, 16 << 20, &[]);
    c.payload_blocks[17] = count as u32;
    let e = Segment::create_memfd("rt3", &c).expect_err("a memfd larger than memory and swap");
    let msg = format!("{e} ({})", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
    assert!(matches!(e, xtcq_shm::SegmentError::NoSpace { .. }), "{msg}");
    assert!(msg.contains("memory and swap") && msg.contains("--payload-blocks"), "{msg}");
}
