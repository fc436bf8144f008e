//! `check` of the payload block region (layout version 6):
//! - every owner word names a record in range;
//! - a job whose payload is longer than its record's inline area names, in that area, a
//!   block in range, held by it, and large enough for the length;
//! - every held block is held by a live record, in the incarnation that took it: one that is
//!   not (an *orphan*: its holder died between freeing the record and giving the block back,
//!   or while filling it) is reported when a second look, after the record walk, still sees
//!   it so (the window between an ack and its block's release is a few instructions). The
//!   daemon's sweep frees such blocks at its next scan.

use crate::record::blocks::is_live_owner;
use crate::segment::Segment;
use crate::sync::Ordering;

/// Blocks counted by the walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCounts {
    /// Blocks in all classes.
    pub total: u64,
    /// Blocks held (owner word not 0).
    pub held: u64,
}

/// The owner-word checks (see the module docs); `problem` gets one line per finding.
pub(super) fn check_blocks(seg: &Segment, problem: &mut dyn FnMut(String)) -> BlockCounts {
    let records = seg.records();
    let blocks = records.blocks();
    let mut counts = BlockCounts { total: blocks.total(), held: 0 };
    let mut suspects = Vec::new();
    for (b, w) in blocks.held() {
        counts.held += 1;
        let size = crate::layout::payload::class_size(b.class);
        if w as u32 >= records.len() {
            problem(format!("payload block {}/{size} B: owner word {w:#x} names no record", b.index));
        } else if !is_live_owner(&records, w) {
            suspects.push((b, w));
        }
    }
    for (b, w) in suspects {
        // A second look: still held by the same word, and its record still moved on.
        if blocks.owner(b).load(Ordering::Acquire) == w && !is_live_owner(&records, w) {
            problem(format!(
                "payload block {}/{} B: held by record {} (filled at generation {}), which has \
                 moved on: held by no live job (the daemon's sweep frees it)",
                b.index,
                crate::layout::payload::class_size(b.class),
                w as u32,
                w >> 32
            ));
        }
    }
    counts
}

/// The block of record `i`, a job (not free or filling) whose payload is longer than the
/// inline area: it must name a block it holds, large enough.
pub(super) fn check_record_block(seg: &Segment, i: u32, len: u32, problem: &mut dyn FnMut(String)) {
    let records = seg.records();
    if len <= records.inline_capacity() || len > records.payload_capacity() {
        return;
    }
    match records.held_block(i) {
        None => {
            problem(format!("record {i}: a {len}-byte payload, but its inline area names no block it holds"))
        }
        Some(h) => {
            let size = crate::layout::payload::class_size(h.block.class);
            if len > size {
                problem(format!("record {i}: a {len}-byte payload in a block of {size} bytes"));
            }
        }
    }
}
