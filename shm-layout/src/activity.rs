//! What the daemon compares from one scan to the next to tell whether jobs can have moved,
//! so that an idle segment costs no walk of its records, whatever their number.
//!
//! Every job transition of a process that keeps the protocol moves one of these words, at
//! most a few instructions after it:
//! - a push counts `Pushed` in its slot's metrics block before it indexes the job (so a
//!   producer stopped between the two still shows), and the index moves a deque's `bottom`
//!   or an overflow ring's `tail`;
//! - a steal moves `top` (before its claim), an overflow pop `head`; the claim counts
//!   `Claimed` right after its CAS, before its deadline is stored;
//! - an ack counts `Acked` after its CAS (a batch when it settles); a nack or fail counts
//!   while it holds the record, before it re-queues and indexes the job;
//! - the daemon's own changes (recoveries, deletes, dead-letter actions) are known to it.
//!
//! A snapshot is those words for the active queues and the registered process slots, read
//! in a fixed order: the queue table's state words; per active queue the `top` and `bottom`
//! of each of its deques and its ring's `head` and `tail`; per registered slot its metrics
//! block of each active queue. Its size depends on the queues, deques and
//! processes, not on the records.
//!
//! What it cannot see: a process stopped for good inside those few instructions (between a
//! claim CAS and its count, inside a batch claim's loop, between an ack and its count). The
//! daemon's periodic full walk (a much longer interval) finds what such a process left.
//! Nothing here is trusted: a word another process scribbles on only makes the daemon walk
//! the records more often.

use crate::segment::Segment;
use crate::sync::Ordering;

/// Writes the snapshot of `seg` for the registered process slots `slots` into `out`
/// (cleared first). Compare two snapshots with `==`.
pub fn snapshot(seg: &Segment, slots: &[u32], out: &mut Vec<u64>) {
    out.clear();
    let c = seg.config();
    for q in 0..c.queues {
        let state = seg.queue_state(q).unwrap_or(0);
        out.push(u64::from(state));
        let Ok(info) = seg.queue(q) else { continue };
        for d in 0..info.spec.level_deques().min(c.deques_per_queue) {
            if let Some(h) = seg.deque_header(q, d) {
                out.push(h.top.load(Ordering::Acquire) as u64);
                out.push(h.bottom.load(Ordering::Acquire) as u64);
            }
        }
        for ring in seg.overflow_rings(q) {
            let (head, tail) = ring.positions();
            out.extend([head, tail]);
        }
        let Some(blocks) = seg.metrics_blocks(q) else { continue };
        for &s in slots.iter().filter(|&&s| s < c.process_slots) {
            let Some(b) = blocks.get(s as usize) else { continue };
            // Acquire: a scan that sees a count sees what the count followed, where the
            // counting process ordered it so (the daemon walks once more anyway).
            out.extend(b.counters.iter().map(|w| w.load(Ordering::Acquire)));
        }
    }
}
