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
//! - with `quiescent` (no process is attached, e.g. after every client exited): no record is
//!   `Filling` or `Claimed`, and every `Queued` record is referenced by a deque or a ring.
//!
//! The walk reads racy snapshots; on a live segment only `quiescent = false` is meaningful.

use crate::layout::lease_holder;
use crate::layout::{
    PROCESS_ACTIVE, PROCESS_RECOVERING, QUEUE_ACTIVE, QUEUE_CREATING, QUEUE_DELETING, QUEUE_FREE,
};
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

/// At most this many problem lines are kept (a corrupt segment can have millions).
const MAX_PROBLEMS: usize = 200;

impl CheckReport {
    /// Records one problem, up to [`MAX_PROBLEMS`], then one line saying more were cut.
    fn problem(&mut self, m: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(m);
        } else if self.problems.len() == MAX_PROBLEMS {
            self.problems.push("... more problems not listed".into());
        }
    }
}

/// Walks `seg`; see the module docs. At most `MAX_PROBLEMS` lines are kept.
pub fn check_segment(seg: &Segment, quiescent: bool) -> CheckReport {
    let mut r = CheckReport::default();
    let live_slot = live_slots(seg, &mut r);
    check_queue_table(seg, &mut r);
    let mut referenced = vec![false; seg.records().len() as usize];
    let mut active_queue = vec![false; seg.config().queues as usize];
    for q in seg.queues() {
        let q = match q {
            Ok(q) => q,
            Err(e) => {
                r.problem(format!("queue table: {e}"));
                continue;
            }
        };
        active_queue[q.index as usize] = true;
        r.counts.queues += 1;
        for d in 0..q.spec.deques {
            check_deque(seg, &q, d, &mut referenced, &mut r);
        }
        check_overflow(seg, &q, &mut referenced, &mut r);
    }
    let facts =
        Facts { live_slot: &live_slot, active_queue: &active_queue, referenced: &referenced, quiescent };
    check_records(seg, &facts, &mut r);
    r
}

/// Which process slots are attached (active or being recovered), counted in `r`.
fn live_slots(seg: &Segment, r: &mut CheckReport) -> Vec<bool> {
    let mut live_slot = vec![false; seg.config().process_slots as usize];
    for (s, live) in live_slot.iter_mut().enumerate() {
        if let Some(p) = seg.process_slot(s as u32) {
            let st = p.state.load(Ordering::Acquire);
            *live = st == PROCESS_ACTIVE || st == PROCESS_RECOVERING;
            r.counts.processes += *live as u32;
        }
    }
    live_slot
}

/// Every queue-table entry's state is known, and a free entry is as a new segment has it.
fn check_queue_table(seg: &Segment, r: &mut CheckReport) {
    for index in 0..seg.config().queues {
        match seg.queue_state(index) {
            // Transient while a daemon creates or deletes a queue; a `DELETING` left by a
            // daemon that died is finished by the next one when it adopts the segment.
            Some(QUEUE_ACTIVE | QUEUE_CREATING | QUEUE_DELETING) | None => {}
            Some(QUEUE_FREE) => {
                let mut found = Vec::new();
                check_free_entry(seg, index, &mut |m| found.push(m));
                // A create (and attach, push) racing this walk on a live segment is not a
                // problem: report only what an entry that stayed free shows.
                if seg.queue_state(index) == Some(QUEUE_FREE) {
                    for m in found {
                        r.problem(m);
                    }
                }
            }
            Some(other) => r.problem(format!("queue-table entry {index}: unknown state {other}")),
        }
    }
}

/// Deque `d` of `q`: indices in order, no more handles than it holds, a lease naming a real
/// slot, every handle in range; marks the current records it references.
fn check_deque(seg: &Segment, q: &QueueInfo, d: u32, referenced: &mut [bool], r: &mut CheckReport) {
    let name = &q.spec.name;
    let dq = match seg.deque(q, d) {
        Ok(dq) => dq,
        Err(e) => {
            r.problem(format!("queue {name} deque {d}: {e}"));
            return;
        }
    };
    r.counts.deques += 1;
    let (top, bottom) = dq.indices();
    let cap = dq.capacity() as i64;
    if top > bottom.saturating_add(1) {
        r.problem(format!("queue {name} deque {d}: top {top} > bottom {bottom} + 1"));
    }
    if bottom.saturating_sub(top) > cap {
        r.problem(format!("queue {name} deque {d}: {} handles > capacity {cap}", bottom.saturating_sub(top)));
    }
    if let Some(h) = seg.deque_header(q.index, d) {
        if let Some(s) = lease_holder(h.lease.load(Ordering::Acquire)) {
            if s >= seg.config().process_slots {
                r.problem(format!("queue {name} deque {d}: lease names slot {s}"));
            }
        }
    }
    let records = seg.records();
    for k in 0..bottom.saturating_sub(top).clamp(0, cap) {
        let w = dq.slot_value(top.wrapping_add(k));
        r.counts.deque_handles += 1;
        match JobHandle::from_word(w) {
            Some(h) if h.index < records.len() => {
                // A stale handle (see `is_current`) must not make an unreachable job
                // look referenced.
                if records.is_current(h) {
                    referenced[h.index as usize] = true;
                }
            }
            _ => {
                r.problem(format!("queue {name} deque {d} index {}: bad handle {w:#x}", top.wrapping_add(k)))
            }
        }
    }
}

/// The overflow ring of `q`: positions in order and within capacity, every full cell a
/// record in range; marks the records it references.
fn check_overflow(seg: &Segment, q: &QueueInfo, referenced: &mut [bool], r: &mut CheckReport) {
    let name = &q.spec.name;
    let Some(ring) = seg.overflow(q.index) else { return };
    let (head, tail) = ring.positions();
    let cap = ring.capacity() as u64;
    if tail < head || tail - head > cap {
        r.problem(format!("queue {name} overflow ring: head {head} tail {tail} capacity {cap}"));
    }
    for k in 0..tail.saturating_sub(head).min(cap) {
        // A cell not (yet) full for its lap is a push in flight; nothing to check.
        if let Some(i) = ring.index_at(head + k) {
            r.counts.ring_indices += 1;
            match referenced.get_mut(i as usize) {
                Some(s) => *s = true,
                None => {
                    r.problem(format!("queue {name} overflow position {}: record {i} out of range", head + k))
                }
            }
        }
    }
}

/// What the walk of the queues learnt, for the walk of the records.
struct Facts<'a> {
    live_slot: &'a [bool],
    active_queue: &'a [bool],
    referenced: &'a [bool],
    quiescent: bool,
}

/// Every record: a decodable state word, counted; a holder exactly where its state has one,
/// and an attached one; a nonzero generation; and past `Filling`, a payload length within
/// the record, an active queue, a due time if delayed, and (quiescent) a reference if queued.
fn check_records(seg: &Segment, f: &Facts<'_>, r: &mut CheckReport) {
    let records = seg.records();
    let slots = seg.config().process_slots;
    for i in 0..records.len() {
        let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
        let w = st.load();
        let holder = w.holder();
        let Some(state) = w.state() else {
            r.problem(format!("record {i}: undecodable state word {:#x}", w.0));
            continue;
        };
        count_state(&mut r.counts, state);
        match state {
            State::Filling | State::Claimed | State::Writing => {
                if holder == NO_HOLDER || holder >= slots {
                    r.problem(format!("record {i}: {state:?} with holder {holder}, not a process slot"));
                } else if !f.live_slot[holder as usize] {
                    r.problem(format!(
                        "record {i}: {state:?} by process slot {holder}, which is not attached"
                    ));
                }
                if f.quiescent {
                    r.problem(format!("record {i}: {state:?} by slot {holder} with no process attached"));
                }
            }
            _ if holder != NO_HOLDER => r.problem(format!("record {i}: {state:?} names holder {holder}")),
            _ => {}
        }
        if w.generation() == 0 {
            r.problem(format!("record {i}: generation 0"));
        }
        if state == State::Free || state == State::Filling {
            continue;
        }
        let len = hdr.payload_len.load(Ordering::Relaxed);
        if len > records.payload_capacity() {
            r.problem(format!("record {i}: payload length {len} > {}", records.payload_capacity()));
        }
        let q = hdr.queue.load(Ordering::Relaxed);
        if !f.active_queue.get(q as usize).copied().unwrap_or(false) {
            r.problem(format!("record {i}: {state:?} in queue {q}, which is not an active queue"));
        }
        // A delayed job's due time is its `enqueued_ns`, written before it became Delayed;
        // 0 is never one (a push stores at least 1).
        if state == State::Delayed && hdr.enqueued_ns.load(Ordering::Relaxed) == 0 {
            r.problem(format!("record {i}: Delayed with no due time"));
        }
        if f.quiescent && state == State::Queued && !f.referenced[i as usize] {
            r.problem(format!("record {i}: Queued but no deque or overflow ring references it"));
        }
    }
}

/// Adds a record in `state` to its count.
fn count_state(c: &mut CheckCounts, state: State) {
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
