//! Property: whatever bytes a broken or hostile process writes over a segment — its header
//! and queue table, its deque indices and slots, its overflow rings, its job records — a
//! fresh attach and every operation on the result return a value or an error. Nothing
//! panics, reads out of bounds or spins forever.
//!
//! Each case creates a small segment, queues jobs (some claimed, some acked, some in the
//! overflow ring), drops every mapping, writes random bytes and words at random offsets of
//! one region through the file, then attaches afresh and runs every operation in bounded
//! loops (corruption may make a queue look non-empty or full forever) under
//! `catch_unwind`, on a watchdog thread so that a hang fails the case instead of the run.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use proptest::prelude::*;
use xtcq_shm::layout::{compute_regions, RegionOffsets};
use xtcq_shm::{
    ClaimedJob, Flavor, Injector, JobHandle, Owner, QueueSpec, Segment, SegmentConfig, State, StateWord,
    Steal, Thief, NO_HOLDER,
};

const CONFIG: SegmentConfig = SegmentConfig {
    queues: 2,
    deques_per_queue: 2,
    deque_capacity: 8,
    job_records: 32,
    // Payloads past the 64-byte inline area go to blocks (layout 6): 8 of 128 B, 16 of 256 B.
    payload_bytes: 200,
    process_slots: 4,
    overflow_capacity: 8,
    inline_bytes: 0,
    payload_blocks: {
        let mut b = [0u32; xtcq_shm::layout::payload::PAYLOAD_CLASSES];
        b[0] = 8;
        b[1] = 16;
        b
    },
    keys: 0,
};

/// A payload of `tag i`, some longer than the inline area (so they go to blocks).
fn body(tag: &str, i: usize) -> Vec<u8> {
    let mut b = format!("{tag} {i}").into_bytes();
    b.resize(b.len().max([8, 70, 130, 200][i % 4]), b'.');
    b
}

const HEADER_LEN: u64 = 384;
const QUEUE_ENTRY: u64 = 384;
const DEQUE_HEADER: u64 = 256;
const OVERFLOW_HEADER: u64 = 256;
const RECORD_HEADER: u64 = 64;

/// Bounds on every loop below: corruption can make a queue look non-empty forever.
const MAX_STEALS: usize = 48;

fn regions() -> RegionOffsets {
    compute_regions(&CONFIG).unwrap()
}

fn spec(name: &str, flavor: Flavor, max_attempts: u32) -> QueueSpec {
    QueueSpec {
        name: name.into(),
        flavor,
        deques: 2,
        capacity: 8,
        max_attempts,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    }
}

/// The region a case scribbles on.
#[derive(Clone, Copy, Debug)]
enum Region {
    /// Segment header (descriptor, ready word) and the queue table.
    Header,
    /// Deque headers (top, bottom, lease) and slots.
    Deques,
    /// Overflow ring positions and cells.
    Overflow,
    /// Job record state words, header fields and payloads.
    Records,
    /// Payload block owner words, block bytes, and the block references in records.
    Blocks,
}

/// One write: bytes at an absolute offset.
#[derive(Clone, Debug)]
struct Write {
    offset: u64,
    bytes: Vec<u8>,
}

/// A word a correct program might have written somewhere, so that corruption also reaches
/// the states behind the cheap checks (a valid-looking handle, state word, index, position).
fn plausible_word() -> impl Strategy<Value = u64> {
    let state = prop_oneof![
        Just(State::Free),
        Just(State::Filling),
        Just(State::Queued),
        Just(State::Claimed),
        Just(State::Dead),
        Just(State::Writing)
    ];
    prop_oneof![
        any::<u64>(),
        0u64..64,
        (0u32..4, 0u32..40).prop_map(|(generation, index)| JobHandle { index, generation }.to_word()),
        (0u32..4, state, prop_oneof![Just(NO_HOLDER), 0u32..8])
            .prop_map(|(g, s, h)| StateWord::pack(g, s, h).0),
        (0u64..40).prop_map(|v| v.wrapping_sub(20)),
        Just(u64::MAX),
        Just(i64::MAX as u64),
        Just(i64::MIN as u64),
        // Overflow cells: lap << 32 | FULL_BIT | index.
        (0u64..4, any::<bool>(), 0u64..40).prop_map(|(lap, full, i)| lap << 32 | (full as u64) << 31 | i),
    ]
}

/// Either raw bytes (1 to 11, any alignment) at `offset`, or one plausible little-endian word
/// at `offset` rounded down to 8.
fn write_at(offset: impl Strategy<Value = u64> + Clone + 'static) -> BoxedStrategy<Write> {
    prop_oneof![
        (offset.clone(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(offset, bytes)| Write { offset, bytes }),
        (offset, plausible_word())
            .prop_map(|(offset, w)| Write { offset: offset & !7, bytes: w.to_le_bytes().to_vec() }),
    ]
    .boxed()
}

fn writes(region: Region) -> BoxedStrategy<Vec<Write>> {
    let r = regions();
    let n_deques = (CONFIG.queues * CONFIG.deques_per_queue) as u64;
    let one = match region {
        Region::Header => {
            let table = r.queue_table;
            let table_end = r.deques;
            let entry_fields = (0..CONFIG.queues as u64, prop_oneof![0u64..96, 128u64..136, 256u64..264])
                .prop_map(move |(q, off)| table + q * QUEUE_ENTRY + off);
            write_at(prop_oneof![
                // The descriptor's fields (magic, version, sizes, config, regions).
                0u64..232,
                // Anywhere in the header, ready word included.
                0u64..HEADER_LEN,
                256u64..264,
                entry_fields,
                table..table_end,
            ])
        }
        Region::Deques => {
            let (base, stride) = (r.deques, r.deque_stride);
            let cap = CONFIG.deque_capacity as u64;
            let word = (
                0..n_deques,
                prop_oneof![Just(0u64), Just(8), Just(128), (0..cap).prop_map(|k| DEQUE_HEADER + 8 * k)],
            )
                .prop_map(move |(d, off)| base + d * stride + off);
            let anywhere =
                (0..n_deques, 0..DEQUE_HEADER + 8 * cap).prop_map(move |(d, off)| base + d * stride + off);
            write_at(prop_oneof![3 => word, 1 => anywhere])
        }
        Region::Overflow => {
            let (base, stride) = (r.overflow, r.overflow_stride);
            let cap = CONFIG.overflow_capacity as u64;
            let word = (
                0..CONFIG.queues as u64,
                prop_oneof![Just(0u64), Just(128), (0..cap).prop_map(|k| 256 + 8 * k)],
            )
                .prop_map(move |(q, off)| base + q * stride + off);
            let anywhere = (0..CONFIG.queues as u64, 0..OVERFLOW_HEADER + 8 * cap)
                .prop_map(move |(q, off)| base + q * stride + off);
            write_at(prop_oneof![3 => word, 1 => anywhere])
        }
        Region::Records => {
            let (base, stride) = (r.records, r.record_stride);
            let n = CONFIG.job_records as u64;
            // State word, payload length, queue, attempts, flags; the whole header; anywhere.
            let field = (0..n, prop_oneof![Just(0u64), Just(8), Just(12), Just(16), Just(20)])
                .prop_map(move |(i, off)| base + i * stride + off);
            let header = (0..n, 0..RECORD_HEADER).prop_map(move |(i, off)| base + i * stride + off);
            let anywhere = (0..n * stride).prop_map(move |off| base + off);
            write_at(prop_oneof![4 => field, 2 => header, 1 => anywhere])
        }
        Region::Blocks => {
            let (base, stride) = (r.records, r.record_stride);
            let n = CONFIG.job_records as u64;
            // The reference word in each record's inline area, and its payload length.
            let refs =
                (0..n, prop_oneof![Just(64u64), Just(8)]).prop_map(move |(i, off)| base + i * stride + off);
            let (blocks, table) = (r.blocks, 24u64);
            let owners = (0..table).prop_map(move |k| blocks + 8 * k);
            let anywhere = (0..r.processes - r.blocks).prop_map(move |off| blocks + off);
            write_at(prop_oneof![3 => refs, 3 => owners, 1 => anywhere])
        }
    };
    prop::collection::vec(one, 1..10).boxed()
}

/// How the segment looks before the scribbling.
#[derive(Clone, Debug)]
struct Setup {
    flavor: Flavor,
    /// Jobs the owner of deque 0 pushes (beyond 8 they go to the overflow ring).
    owner_jobs: usize,
    /// Jobs the owner of deque 1 pushes.
    other_jobs: usize,
    /// Jobs an injector pushes to the overflow ring.
    injected: usize,
    /// Jobs then stolen and acked.
    acked: usize,
    /// Jobs then stolen and left claimed (as a live consumer would).
    held: usize,
    /// Jobs pushed to the second queue.
    second: usize,
    max_attempts: u32,
}

fn setups() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(Flavor::Lifo), Just(Flavor::Fifo)],
        0usize..12,
        0usize..6,
        0usize..4,
        0usize..6,
        0usize..3,
        0usize..3,
        0u32..3,
    )
        .prop_map(|(flavor, owner_jobs, other_jobs, injected, acked, held, second, max_attempts)| {
            Setup { flavor, owner_jobs, other_jobs, injected, acked, held, second, max_attempts }
        })
}

fn prepare(path: &Path, s: &Setup) {
    let seg = Arc::new(Segment::create(path, &CONFIG, 0o600).unwrap());
    let q = seg.create_queue(&spec("q", s.flavor, s.max_attempts)).unwrap();
    let q2 = seg.create_queue(&spec("second", Flavor::Fifo, 0)).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 1).unwrap();
    let other = Owner::new(seg.clone(), &q, 1, 3).unwrap();
    let inj = Injector::new(seg.clone(), &q, 4).unwrap();
    let second = Owner::new(seg.clone(), &q2, 0, 5).unwrap();
    for i in 0..s.owner_jobs {
        owner.push(&body("owner", i)).unwrap();
    }
    for i in 0..s.other_jobs {
        other.push(&body("other", i)).unwrap();
    }
    for i in 0..s.injected {
        // The ring may be full of the owner's spill already.
        let _ = inj.push(&body("injected", i));
    }
    for i in 0..s.second {
        // The blocks may be taken already (24 in all).
        let _ = second.push(&body("second", i));
    }
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    for _ in 0..s.acked {
        if let Some(j) = thief.steal().unwrap() {
            j.ack().unwrap();
        }
    }
    for _ in 0..s.held {
        if let Some(j) = thief.steal().unwrap() {
            // Left Claimed(2) in the segment, as a consumer in the middle of a job.
            std::mem::forget(j);
        }
    }
}

fn scribble(path: &Path, writes: &[Write]) {
    let f = File::options().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    for w in writes {
        let end = (w.offset + w.bytes.len() as u64).min(len);
        if w.offset < end {
            f.write_all_at(&w.bytes[..(end - w.offset) as usize], w.offset).unwrap();
        }
    }
}

/// Does everything a consumer does with a job; `k` picks how it ends.
fn finish(j: ClaimedJob<'_>, k: usize, cap: usize) {
    let _ = j.payload().map(|p| assert!(p.len() <= cap));
    let mut buf = Vec::new();
    let _ = j.read_payload(&mut buf);
    let _ = (j.handle(), j.attempts(), j.enqueued_ns(), j.lease_deadline_ns());
    let _ = format!("{j:?}");
    match k % 5 {
        0 => drop(j.ack()),
        1 => drop(j.nack()),
        2 => drop(j.fail("corrupt segment test")),
        3 => {
            let _ = j.extend_lease(Duration::from_secs(60));
            drop(j.ack());
        }
        _ => drop(j), // nacked on drop
    }
}

fn thief_ops(t: &Thief, cap: usize) {
    let _ = (t.len(), t.is_empty(), t.queue().spec.name.len());
    let deques = t.queue().spec.deques;
    let mut k = 0;
    for d in 0..=deques {
        for _ in 0..4 {
            match t.steal_from(d) {
                Steal::Success(j) => finish(j, k, cap),
                Steal::Retry => {}
                Steal::Empty => break,
            }
            k += 1;
        }
        let mut out = Vec::new();
        for limit in [1, 3, 200] {
            let _ = t.steal_batch_from(d, limit, &mut out);
        }
        for j in out {
            finish(j, k, cap);
            k += 1;
        }
    }
    for _ in 0..8 {
        match t.steal_overflow() {
            Ok(Some(j)) => finish(j, k, cap),
            Ok(None) | Err(_) => break,
        }
        k += 1;
    }
    for _ in 0..MAX_STEALS {
        match t.steal() {
            Ok(Some(j)) => finish(j, k, cap),
            Ok(None) => break,
            // A corrupt ring stays corrupt; try a few more times anyway.
            Err(e) => assert!(!e.to_string().is_empty()),
        }
        k += 1;
    }
    let _ = t.clone().steal().map(|j| j.map(|j| finish(j, 0, cap)));
}

fn owner_ops(o: &Owner, cap: usize) {
    let _ = (o.len(), o.is_empty(), o.deque().len(), o.queue().index, o.segment().config().queues);
    for i in 0..12u32 {
        match o.push(&i.to_le_bytes()) {
            Ok(h) => assert!(h.index < o.segment().config().job_records),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    let _ = o.push(&vec![0u8; cap + 1]).unwrap_err();
    for k in 0..MAX_STEALS {
        let r = if k % 2 == 0 { o.pop() } else { o.take() };
        match r {
            Ok(Some(j)) => finish(j, k, cap),
            Ok(None) => break,
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// Attaches afresh and runs every operation, bounded.
fn exercise(path: &Path) {
    let seg = match Segment::attach(path) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let c = *seg.config();
    let cap = c.payload_bytes as usize;
    // A rewritten header can still be self-consistent (e.g. a few more process slots fit
    // the same page), but never one that does not lay out.
    assert!(c.validate().is_ok(), "attach accepted an invalid configuration {c:?}");
    for i in 0..=c.queues {
        let _ = seg.queue(i);
    }
    let _ = seg.queue_by_name("q");
    let _ = seg.queue_by_name("second");
    let _ = seg.queue_by_name("nope");
    for info in seg.queues().into_iter().flatten() {
        // A thief first, before any owner repairs the deques' indices.
        if let Ok(t) = Thief::new(seg.clone(), &info, 2) {
            thief_ops(&t, cap);
        }
        for d in 0..=info.spec.deques {
            if let Ok(o) = Owner::new(seg.clone(), &info, d, 1 + d) {
                owner_ops(&o, cap);
            }
        }
        if let Ok(inj) = Injector::new(seg.clone(), &info, 4) {
            for i in 0..4u32 {
                let _ = inj.push(&i.to_le_bytes());
            }
        }
        if let Ok(t) = Thief::new(seg.clone(), &info, 6) {
            thief_ops(&t, cap);
        }
    }
    // A second fresh mapping after all that still attaches or refuses cleanly.
    let _ = Segment::attach(path).map(|s| s.queues().len());
}

/// Runs one case on a watchdog thread: a panic or a hang fails the property.
fn run_case(setup: Setup, writes: Vec<Write>) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let what = format!("{setup:?}");
    std::thread::spawn(move || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        prepare(&path, &setup);
        scribble(&path, &writes);
        let r = catch_unwind(AssertUnwindSafe(|| exercise(&path)));
        let _ = tx.send(r.map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        }));
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(msg)) => Err(TestCaseError::fail(format!("panicked on a corrupt segment: {msg} ({what})"))),
        Err(_) => Err(TestCaseError::fail(format!("an operation did not return within 10 s ({what})"))),
    }
}

/// 256 per property (about a second in all in debug); `PROPTEST_CASES` for a soak.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

fn config() -> ProptestConfig {
    // A hang costs the watchdog's 10 s per shrink step: cap shrinking by time too.
    ProptestConfig {
        cases: cases(),
        max_shrink_iters: 256,
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn corrupt_header_and_queue_table(setup in setups(), w in writes(Region::Header)) {
        run_case(setup, w)?;
    }

    #[test]
    fn corrupt_deque_indices_and_slots(setup in setups(), w in writes(Region::Deques)) {
        run_case(setup, w)?;
    }

    #[test]
    fn corrupt_overflow_positions_and_cells(setup in setups(), w in writes(Region::Overflow)) {
        run_case(setup, w)?;
    }

    #[test]
    fn corrupt_record_states_and_headers(setup in setups(), w in writes(Region::Records)) {
        run_case(setup, w)?;
    }

    #[test]
    fn corrupt_payload_blocks_and_references(setup in setups(), w in writes(Region::Blocks)) {
        run_case(setup, w)?;
    }

    #[test]
    fn corrupt_anything(
        setup in setups(),
        w in (writes(Region::Header), writes(Region::Deques), writes(Region::Overflow), writes(Region::Records))
    ) {
        let (a, b, c, d) = w;
        // Mostly leave the header alone, so that the rest gets exercised after attach.
        let mut all = if a.len() % 4 == 0 { a } else { Vec::new() };
        all.extend(b.into_iter().chain(c).chain(d));
        run_case(setup, all)?;
    }
}

/// The header strategy does reach attach errors and the others do reach a live segment
/// (a guard against a strategy that silently tests nothing).
#[test]
fn strategies_reach_both_outcomes() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut refused, mut attached) = (0, 0);
    for _ in 0..64 {
        let w = writes(Region::Header).new_tree(&mut runner).unwrap().current();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        prepare(&path, &setups().new_tree(&mut runner).unwrap().current());
        scribble(&path, &w);
        match Segment::attach(&path) {
            Ok(_) => attached += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(refused > 0 && attached > 0, "refused {refused}, attached {attached}");
    let mut live_with_queue = 0;
    for region in [Region::Deques, Region::Overflow, Region::Records, Region::Blocks] {
        let w = writes(region).new_tree(&mut runner).unwrap().current();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        prepare(&path, &setups().new_tree(&mut runner).unwrap().current());
        scribble(&path, &w);
        let seg = Segment::attach(&path).unwrap();
        live_with_queue += seg.queue_by_name("q").is_ok() as usize;
    }
    assert_eq!(live_with_queue, 4);
}
