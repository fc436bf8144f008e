//! A digest of the validated segment descriptor, so that two processes can tell whether they
//! laid the segment out alike.
//!
//! - Every attacher validates the header it maps, but any process of the user may rewrite
//!   that header later; a class table forged with the same region sizes (e.g. 8 blocks of
//!   128 B instead of 4 of 256 B) passes validation, and a process attaching after it would
//!   lay blocks over the blocks of live jobs. The daemon sends the digest of the descriptor
//!   it validated in its hello, and the client refuses a mapping whose digest differs.
//! - Computed from the fields one by one (layout version, configuration, regions), never
//!   from the struct's bytes (padding), so builds of one layout version agree.
//! - FNV-1a, 64 bits: not a defence against a chosen collision (a process that can write the
//!   header can do worse), only against a header that changed.

use super::Segment;
use crate::layout::SegmentDescriptor;

impl Segment {
    /// The digest of this mapping's validated descriptor (see the module docs); equal in two
    /// processes exactly when their layouts of the segment agree.
    pub fn descriptor_digest(&self) -> u64 {
        digest_of(&self.desc)
    }

    /// Whether the descriptor in the mapped header differs from the validated copy; if so,
    /// writes the copy back (the daemon's scan: a header some process rewrote is the
    /// daemon's again within a scan, so that a process attaching later, even without asking
    /// the daemon, lays the segment out as everyone else does). Returns whether it wrote.
    /// Not for a mapping of [`open_read_only`](Segment::open_read_only), which a store
    /// faults (one of an older layout version is never written).
    pub fn restore_descriptor(&self) -> bool {
        if self.desc.layout_version != crate::layout::LAYOUT_VERSION {
            return false;
        }
        let base = self.map.as_mut_ptr();
        // SAFETY: the header lies at the start of every validated mapping; the descriptor is
        // plain integers, valid for any bits; volatile, as other processes may write it.
        let live = unsafe { core::ptr::read_volatile(base as *const SegmentDescriptor) };
        if digest_of(&live) == digest_of(&self.desc) && live.magic == self.desc.magic {
            return false;
        }
        // SAFETY: as above; a reader racing this write sees a mix, which its own validation
        // or the digest the daemon hands out refuses.
        unsafe { core::ptr::write_volatile(base as *mut SegmentDescriptor, self.desc) };
        true
    }
}

/// The digest of descriptor `d` (see the module docs).
fn digest_of(d: &SegmentDescriptor) -> u64 {
    let c = &d.config;
    let r = &d.regions;
    let words = [
        u64::from(d.layout_version),
        u64::from(c.queues),
        u64::from(c.deques_per_queue),
        u64::from(c.deque_capacity),
        u64::from(c.job_records),
        u64::from(c.payload_bytes),
        u64::from(c.process_slots),
        u64::from(c.overflow_capacity),
        u64::from(c.inline_bytes),
    ]
    .into_iter()
    .chain(c.payload_blocks.iter().map(|&n| u64::from(n)))
    .chain([
        u64::from(c.keys),
        r.queue_table,
        r.deques,
        r.deque_stride,
        r.overflow,
        r.overflow_stride,
        r.records,
        r.record_stride,
        r.blocks,
        r.processes,
        r.metrics,
        r.total_len,
    ]);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in words.flat_map(u64::to_le_bytes) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
