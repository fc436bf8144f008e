//! `check`: walks a segment and verifies every invariant the algorithms keep, reporting what
//! it finds rather than stopping at the first problem. `xtcq check` and the crash tests use it.
//!
//! Verified (the header and region layout were already validated by `Segment::attach`):
//! - every queue-table entry's state is free, creating, active or deleting; a free entry
//!   (never used, or deleted) has no deque lease and all of its deque indices and overflow
//!   ring positions at 0 (a delete resets them), so a queue created there starts empty;
//! - every active queue's descriptor decodes;
//! - per deque: `top <= bottom + 1` (a pop in flight may leave `bottom` one below `top`)
//!   and `bottom - top <= capacity`; every slot in `[top, bottom)` holds a well-formed handle
//!   of an existing record; a deque lease names an existing process slot;
//! - per overflow ring: `head <= tail <= head + capacity`; every full cell in `[head, tail)`
//!   names an existing record;
//! - per record: the state decodes; `Filling` and `Claimed` name a registered (active or
//!   recovering) process slot; `Free`, `Queued`, `Dead` and `Delayed` name none; the payload
//!   length fits the record; a `Delayed` record has a due time; a `Queued`, `Claimed`, `Dead`
//!   or `Delayed` record belongs to an active queue (a `Free`
//!   or `Filling` record's queue field is left from an earlier job, and may name a free or
//!   deleted entry);
//! - the payload blocks, see `blocks`: every job longer than its inline area holds the block
//!   it names, and every held block belongs to a live job;
//! - with `quiescent` (no process is attached, e.g. after every client exited): no record is
//!   `Filling` or `Claimed`, and every `Queued` record is referenced by a deque or a ring.
//!
//! The walk reads racy snapshots; on a live segment only `quiescent = false` is meaningful.

mod blocks;
pub use blocks::BlockCounts;

use crate::deque::DequeRef;
use crate::layout::lease_holder;
use crate::layout::{
    PROCESS_ACTIVE, PROCESS_RECOVERING, QUEUE_ACTIVE, QUEUE_CREATING, QUEUE_DELETING, QUEUE_FREE,
};
use crate::overflow::OverflowRef;
use crate::record::state::{JobHandle, State, NO_HOLDER};
use crate::segment::{QueueInfo, Segment};
use crate::sync::Ordering;

/// Counts of records by state, and how much was looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckCounts {
    /// Active queues.
    pub queues: u32,
    /// Deques of active queues.
    pub deques: u32,
    /// Handles in deques.
    pub deque_handles: u64,
    /// Indices in overflow rings.
    pub ring_indices: u64,
    /// Records per state: free, filling, queued, claimed, dead, delayed.
    pub free: u32,
    /// See `free`.
    pub filling: u32,
    /// See `free`.
    pub queued: u32,
    /// See `free`.
    pub claimed: u32,
    /// See `free`.
    pub dead: u32,
    /// See `free`.
    pub delayed: u32,
    /// Active or recovering process slots.
    pub processes: u32,
    /// Payload blocks, and how many are held.
    pub blocks: BlockCounts,
}

/// What [`check_segment`] found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// One line per violated invariant.
    pub problems: Vec<String>,
    /// What was seen.
    pub counts: CheckCounts,
}

impl CheckReport {
    /// No problem found.
    pub fn is_consistent(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Walks `seg`; see the module docs. At most `MAX_PROBLEMS` lines are kept.
pub fn check_segment(seg: &Segment, quiescent: bool) -> CheckReport {
    let mut c = Checker::new(seg, quiescent);
    c.queue_table();
    for q in seg.queues() {
        match q {
            Ok(q) => c.queue(&q),
            Err(e) => c.problem(format!("queue table: {e}")),
        }
    }
    for i in 0..seg.records().len() {
        c.record(i);
    }
    let mut found = Vec::new();
    c.report.counts.blocks = blocks::check_blocks(seg, &mut |m| found.push(m));
    for m in found {
        c.problem(m);
    }
    c.report
}

/// The walk's state: what it found so far, and what later steps need from earlier ones.
struct Checker<'s> {
    seg: &'s Segment,
    cfg: crate::layout::SegmentConfig,
    quiescent: bool,
    report: CheckReport,
    /// Records some deque or overflow ring names (current handles only).
    referenced: Vec<bool>,
    /// Process slots attached or being recovered.
    live_slot: Vec<bool>,
    /// Queue-table entries with a queue in use.
    active_queue: Vec<bool>,
}

impl<'s> Checker<'s> {
    fn new(seg: &'s Segment, quiescent: bool) -> Checker<'s> {
        let cfg = *seg.config();
        let mut report = CheckReport::default();
        let mut live_slot = vec![false; cfg.process_slots as usize];
        for (s, live) in live_slot.iter_mut().enumerate() {
            if let Some(p) = seg.process_slot(s as u32) {
                let st = p.state.load(Ordering::Acquire);
                *live = st == PROCESS_ACTIVE || st == PROCESS_RECOVERING;
                report.counts.processes += *live as u32;
            }
        }
        Checker {
            seg,
            cfg,
            quiescent,
            report,
            referenced: vec![false; seg.records().len() as usize],
            live_slot,
            active_queue: vec![false; cfg.queues as usize],
        }
    }

    /// Records a problem; past [`MAX_PROBLEMS`] only says that there were more.
    fn problem(&mut self, m: String) {
        let problems = &mut self.report.problems;
        if problems.len() < MAX_PROBLEMS {
            problems.push(m);
        } else if problems.len() == MAX_PROBLEMS {
            problems.push("... more problems not listed".into());
        }
    }

    /// Every entry's state word is known, and a free entry is as a new segment has it.
    fn queue_table(&mut self) {
        for index in 0..self.cfg.queues {
            match self.seg.queue_state(index) {
                // Transient while a daemon creates or deletes a queue; a `DELETING` left by a
                // daemon that died is finished by the next one when it adopts the segment.
                Some(QUEUE_ACTIVE | QUEUE_CREATING | QUEUE_DELETING) | None => {}
                Some(QUEUE_FREE) => {
                    let mut found = Vec::new();
                    check_free_entry(self.seg, index, &mut |m| found.push(m));
                    // A create (and attach, push) racing this walk on a live segment is not a
                    // problem: report only what an entry that stayed free shows.
                    if self.seg.queue_state(index) == Some(QUEUE_FREE) {
                        for m in found {
                            self.problem(m);
                        }
                    }
                }
                Some(other) => self.problem(format!("queue-table entry {index}: unknown state {other}")),
            }
        }
    }

    /// An active queue: its deques' indices, leases and handles, and its overflow ring.
    fn queue(&mut self, q: &QueueInfo) {
        self.active_queue[q.index as usize] = true;
        self.report.counts.queues += 1;
        for d in 0..q.spec.level_deques() {
            match self.seg.deque(q, d) {
                Ok(dq) => self.deque(q, d, &dq),
                Err(e) => self.problem(format!("queue {} deque {d}: {e}", q.spec.name)),
            }
        }
        for ring in self.seg.overflow_rings(q.index) {
            self.overflow(q, &ring);
        }
    }

    fn deque(&mut self, q: &QueueInfo, d: u32, dq: &DequeRef<'_>) {
        let name = &q.spec.name;
        self.report.counts.deques += 1;
        // On a live deque thieves move `top` and the owner `bottom` between the loads: each
        // bound is checked against the `top` read on its side of `bottom` (see `span`).
        let (top, bottom, top_after) = dq.span();
        let cap = dq.capacity() as i64;
        if top > bottom.saturating_add(1) {
            self.problem(format!("queue {name} deque {d}: top {top} > bottom {bottom} + 1"));
        }
        if bottom.saturating_sub(top_after) > cap {
            self.problem(format!(
                "queue {name} deque {d}: {} handles > capacity {cap}",
                bottom.saturating_sub(top_after)
            ));
        }
        if let Some(h) = self.seg.deque_header(q.index, d) {
            if let Some(s) = lease_holder(h.lease.load(Ordering::Acquire)) {
                if s >= self.cfg.process_slots {
                    self.problem(format!("queue {name} deque {d}: lease names slot {s}"));
                }
            }
        }
        let records = self.seg.records();
        for k in 0..bottom.saturating_sub(top).clamp(0, cap) {
            let w = dq.slot_value(top.wrapping_add(k));
            self.report.counts.deque_handles += 1;
            match JobHandle::from_word(w) {
                Some(h) if h.index < records.len() => {
                    // A stale handle (see `is_current`) must not make an unreachable job
                    // look referenced.
                    if records.is_current(h) {
                        self.referenced[h.index as usize] = true;
                    }
                }
                _ => self.problem(format!(
                    "queue {name} deque {d} index {}: bad handle {w:#x}",
                    top.wrapping_add(k)
                )),
            }
        }
    }

    fn overflow(&mut self, q: &QueueInfo, ring: &OverflowRef<'_>) {
        let name = &q.spec.name;
        // On a live ring both ends move between the loads: each bound is checked against the
        // `head` read on its side of `tail` (see `span`), so that no crossing is reported
        // that did not happen.
        let (head, tail, head_after) = ring.span();
        let cap = ring.capacity() as u64;
        if tail < head || tail.saturating_sub(head_after) > cap {
            self.problem(format!("queue {name} overflow ring: head {head} tail {tail} capacity {cap}"));
        }
        // The jobs recovery counts as indexed too (`held`): a cell not (yet) full for its lap
        // is a push in flight, nothing to check; one full past `tail` is a push whose pusher
        // stopped before moving `tail`.
        for (pos, i) in ring.held(head, tail) {
            self.report.counts.ring_indices += 1;
            match self.referenced.get_mut(i as usize) {
                Some(s) => *s = true,
                None => {
                    self.problem(format!("queue {name} overflow position {pos}: record {i} out of range"))
                }
            }
        }
    }

    /// One record: a known state, a holder only where a state has one (and attached), a
    /// generation, and for a job in a queue its length, its queue and (quiescent) an index.
    fn record(&mut self, i: u32) {
        let records = self.seg.records();
        let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { return };
        let w = st.load();
        let Some(state) = w.state() else {
            self.problem(format!("record {i}: undecodable state word {:#x}", w.0));
            return;
        };
        self.count(state);
        self.holder(i, state, w.holder());
        if w.generation() == 0 {
            self.problem(format!("record {i}: generation 0"));
        }
        if state == State::Free || state == State::Filling {
            return;
        }
        let len = hdr.payload_len.load(Ordering::Relaxed);
        if len > records.payload_capacity() {
            self.problem(format!("record {i}: payload length {len} > {}", records.payload_capacity()));
        }
        let mut found = Vec::new();
        blocks::check_record_block(self.seg, i, len, &mut |m| found.push(m));
        for m in found {
            self.problem(m);
        }
        let q = hdr.queue.load(Ordering::Relaxed);
        if !self.active_queue.get(q as usize).copied().unwrap_or(false) {
            self.problem(format!("record {i}: {state:?} in queue {q}, which is not an active queue"));
        }
        // A delayed job's due time is its `enqueued_ns`, written before it became Delayed;
        // 0 is never one (a push stores at least 1).
        if state == State::Delayed && hdr.enqueued_ns.load(Ordering::Relaxed) == 0 {
            self.problem(format!("record {i}: Delayed with no due time"));
        }
        if self.quiescent && state == State::Queued && !self.referenced[i as usize] {
            self.problem(format!("record {i}: Queued but no deque or overflow ring references it"));
        }
    }

    fn count(&mut self, state: State) {
        let c = &mut self.report.counts;
        match state {
            State::Free => c.free += 1,
            State::Filling => c.filling += 1,
            State::Queued => c.queued += 1,
            // Writing is a claim whose holder is writing its header for a moment.
            State::Claimed | State::Writing => c.claimed += 1,
            State::Dead => c.dead += 1,
            State::Delayed => c.delayed += 1,
        }
    }

    /// A held state names an attached process slot (and none when quiescent); others none.
    fn holder(&mut self, i: u32, state: State, holder: u32) {
        match state {
            State::Filling | State::Claimed | State::Writing => {
                if holder == NO_HOLDER || holder >= self.cfg.process_slots {
                    self.problem(format!("record {i}: {state:?} with holder {holder}, not a process slot"));
                } else if !self.live_slot[holder as usize] {
                    self.problem(format!(
                        "record {i}: {state:?} by process slot {holder}, which is not attached"
                    ));
                }
                if self.quiescent {
                    self.problem(format!("record {i}: {state:?} by slot {holder} with no process attached"));
                }
            }
            _ if holder != NO_HOLDER => self.problem(format!("record {i}: {state:?} names holder {holder}")),
            _ => {}
        }
    }
}

/// The most problems a report lists.
const MAX_PROBLEMS: usize = 200;

/// A free queue-table entry is as a new segment has it: no deque leased, every deque and the
/// overflow ring at position 0 (slots and cells are not read: nothing reads them before a
/// push writes them, and a delete zeroes them too).
fn check_free_entry(seg: &Segment, index: u32, problem: &mut dyn FnMut(String)) {
    for d in 0..seg.config().deques_per_queue {
        let Some(h) = seg.deque_header(index, d) else { break };
        let lease = h.lease.load(Ordering::Acquire);
        let (top, bottom) = (h.top.load(Ordering::Acquire), h.bottom.load(Ordering::Acquire));
        if lease != 0 {
            problem(format!("free queue-table entry {index} deque {d}: leased ({lease:#x})"));
        }
        if top != 0 || bottom != 0 {
            problem(format!("free queue-table entry {index} deque {d}: top {top} bottom {bottom}, not 0"));
        }
    }
    if let Some(ring) = seg.overflow(index) {
        let (head, tail) = ring.positions();
        if head != 0 || tail != 0 {
            problem(format!("free queue-table entry {index} overflow ring: head {head} tail {tail}, not 0"));
        }
    }
}
