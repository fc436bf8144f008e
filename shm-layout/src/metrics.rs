//! Running totals per queue, kept in the segment's metrics region so that they survive a
//! daemon restart and cost no system call to keep.
//!
//! - Each queue has `process_slots + 2` blocks: one per process slot, written only by the
//!   process holding that slot (on lines no other process writes), where its threads
//!   `fetch_add`; then [`DAEMON`] (the daemon's own events: lease expiries, recoveries,
//!   dead letters it makes); then [`BASELINE`] (what the per-slot blocks held when the queue
//!   was last deleted).
//! - A count is one uncontended `lock xadd` on a line only this process writes; a job's
//!   three (push, claim, ack) cost about 4 ns of a 42 ns one-thread push + pop + ack pair.
//!   Counting without the locked instruction (one handle and thread at a time) bought no
//!   user-level figure 5% and needed a registry and fork hooks: it went.
//! - A slot's block belongs to the slot, not to the process: the next process given the slot
//!   adds to what its predecessor left. So a process that detaches or dies needs no fold,
//!   and a daemon killed at any point can neither lose nor double-count its totals.
//! - A queue's total is `sum(slots) + daemon - baseline`. Deleting a queue sets the baseline
//!   to the slots' sum and zeroes the daemon block (both idempotent), so a queue created
//!   anew in that entry starts from zero.
//! - Nothing read from the region is trusted: sums saturate, a baseline above the sum reads
//!   as zero; garbage gives wrong figures, never a panic.

use crate::layout::{MetricsBlock, METRIC_COUNTERS};
use crate::segment::Segment;
use crate::sync::Ordering;

/// A running total in a [`MetricsBlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// Jobs pushed (published, delayed ones included).
    Pushed = 0,
    /// Claims (steals and pops that won a job).
    Claimed = 1,
    /// Jobs acked.
    Acked = 2,
    /// Jobs given back by `nack` (no reason).
    Nacked = 3,
    /// Jobs given back by `fail` (with a reason).
    Failed = 4,
    /// Jobs that became dead letters (by a consumer or by the daemon).
    Dead = 5,
    /// Claims the daemon revoked because their lease ran out.
    LeaseExpiries = 6,
    /// Claims of dead processes the daemon gave back.
    Recovered = 7,
    /// Jobs cancelled (queued, delayed or running), by the daemon. Layout version 9.
    Cancelled = 8,
}

/// Every counter, in block order.
pub const COUNTERS: [Counter; METRIC_COUNTERS] = [
    Counter::Pushed,
    Counter::Claimed,
    Counter::Acked,
    Counter::Nacked,
    Counter::Failed,
    Counter::Dead,
    Counter::LeaseExpiries,
    Counter::Recovered,
    Counter::Cancelled,
];

/// The block index, after the per-slot blocks, of the daemon's own totals.
pub const DAEMON: u32 = 0;
/// The block index, after the daemon's block, of the reset baseline.
pub const BASELINE: u32 = 1;

/// A queue's totals, summed on read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals(pub [u64; METRIC_COUNTERS]);

impl Totals {
    /// One counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }
}

/// Adds one to `c` of `block`: the hot path's one extra instruction. `None` (no block: a
/// slot index outside the table) counts nothing.
#[inline]
pub fn bump(block: Option<&MetricsBlock>, c: Counter) {
    if let Some(b) = block {
        b.counters[c as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Adds `n` to `c` of `block`.
#[inline]
pub fn add(block: Option<&MetricsBlock>, c: Counter, n: u64) {
    if let Some(b) = block {
        b.counters[c as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// A block's totals.
fn read(b: &MetricsBlock) -> [u64; METRIC_COUNTERS] {
    core::array::from_fn(|i| b.counters[i].load(Ordering::Relaxed))
}

impl Segment {
    /// The metrics blocks of queue-table entry `queue`: one per process slot, then the
    /// daemon's, then the baseline. `None` for an entry out of range.
    pub fn metrics_blocks(&self, queue: u32) -> Option<&[MetricsBlock]> {
        let c = self.config();
        // A segment older than version 6 opened read-only has no metrics region where this
        // build looks for one; versions 6 and 7 differ from this one only in a queue's control line.
        if queue >= c.queues || self.descriptor().layout_version < 6 {
            return None;
        }
        let per_queue = c.process_slots as usize + 2;
        let off = self.descriptor().regions.metrics
            + queue as u64 * per_queue as u64 * core::mem::size_of::<MetricsBlock>() as u64;
        // SAFETY: queue < queues; the metrics region holds `queues * (process_slots + 2)`
        // blocks of 128 bytes inside the validated mapping, 128-aligned; atomics only.
        Some(unsafe { self.slice_at(off, per_queue) })
    }

    /// The block process slot `slot` writes for `queue`.
    pub fn slot_metrics(&self, queue: u32, slot: u32) -> Option<&MetricsBlock> {
        let blocks = self.metrics_blocks(queue)?;
        blocks.get(slot as usize).filter(|_| slot < self.config().process_slots)
    }

    /// The daemon's own block for `queue`.
    pub fn daemon_metrics(&self, queue: u32) -> Option<&MetricsBlock> {
        self.metrics_blocks(queue)?.get((self.config().process_slots + DAEMON) as usize)
    }

    /// The running totals of queue-table entry `queue` (zeros for an entry out of range).
    pub fn queue_totals(&self, queue: u32) -> Totals {
        let Some(blocks) = self.metrics_blocks(queue) else { return Totals::default() };
        let slots = self.config().process_slots as usize;
        let mut sum = [0u64; METRIC_COUNTERS];
        for b in &blocks[..=slots] {
            for (s, v) in sum.iter_mut().zip(read(b)) {
                *s = s.saturating_add(v);
            }
        }
        let base = read(&blocks[slots + 1]);
        Totals(core::array::from_fn(|i| sum[i].saturating_sub(base[i])))
    }

    /// Resets the totals of `queue` to zero (for a delete): the baseline becomes the slots'
    /// sum and the daemon block zero. Idempotent, so a delete a crash interrupted can redo it.
    pub fn reset_queue_metrics(&self, queue: u32) {
        let Some(blocks) = self.metrics_blocks(queue) else { return };
        let slots = self.config().process_slots as usize;
        let mut sum = [0u64; METRIC_COUNTERS];
        for b in &blocks[..slots] {
            for (s, v) in sum.iter_mut().zip(read(b)) {
                *s = s.saturating_add(v);
            }
        }
        for (i, s) in sum.into_iter().enumerate() {
            blocks[slots + 1].counters[i].store(s, Ordering::Relaxed);
            blocks[slots].counters[i].store(0, Ordering::Relaxed);
        }
    }
}
