//! Descriptors of older layout versions, read for a read-only copy of their jobs
//! (`Segment::open_read_only`, `xtcq export`, `xtcqd --import-on-start`) and put in this
//! version's terms.
//!
//! - Version 5 had a 32-byte configuration (no inline size, no block counts: every record
//!   held the largest payload inline) and no block region offset; its regions are exactly
//!   those of a version-6 configuration whose inline area is the old payload size and whose
//!   classes have no blocks, which is what [`descriptor_of_v5`] makes of it.
//! - Version 4 had no metrics region either (see [`descriptor_of_v4`]).
//! - Versions 6 to 9 had no key table: their configuration ends before `keys`, so their
//!   regions start 8 bytes sooner ([`descriptor_of_v9`]); laid out with `keys` 0, their
//!   regions are this version's.
//! - Any bit pattern is a valid value of these types; the result is validated as a current
//!   descriptor would be.

use crate::layout::payload::PAYLOAD_CLASSES;
use crate::layout::{compute_regions, RegionOffsets, SegmentConfig, SegmentDescriptor, StructSizes};

/// A version-5 (and 4) segment configuration.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct ConfigV5 {
    queues: u32,
    deques_per_queue: u32,
    deque_capacity: u32,
    job_records: u32,
    payload_bytes: u32,
    process_slots: u32,
    overflow_capacity: u32,
    reserved: u32,
}

/// A version-6 to 9 segment configuration: this one without `keys`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct ConfigV9 {
    queues: u32,
    deques_per_queue: u32,
    deque_capacity: u32,
    job_records: u32,
    payload_bytes: u32,
    process_slots: u32,
    overflow_capacity: u32,
    inline_bytes: u32,
    payload_blocks: [u32; PAYLOAD_CLASSES],
}

/// A version-6 to 9 descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct DescriptorV9 {
    magic: [u8; 8],
    layout_version: u32,
    flags: u32,
    sizes: StructSizes,
    config: ConfigV9,
    regions: RegionOffsets,
    creator_pid: u32,
    creator_uid: u32,
    created_unix_ns: u64,
}

/// A version-6 to 9 descriptor in this version's terms: no key table.
pub(super) fn descriptor_of_v9(d: DescriptorV9) -> SegmentDescriptor {
    let c = d.config;
    SegmentDescriptor {
        magic: d.magic,
        layout_version: d.layout_version,
        flags: d.flags,
        sizes: d.sizes,
        config: SegmentConfig {
            queues: c.queues,
            deques_per_queue: c.deques_per_queue,
            deque_capacity: c.deque_capacity,
            job_records: c.job_records,
            payload_bytes: c.payload_bytes,
            process_slots: c.process_slots,
            overflow_capacity: c.overflow_capacity,
            inline_bytes: c.inline_bytes,
            payload_blocks: c.payload_blocks,
            keys: 0,
        },
        regions: d.regions,
        creator_pid: d.creator_pid,
        creator_uid: d.creator_uid,
        created_unix_ns: d.created_unix_ns,
    }
}

/// A version-5 region table (version 4: `metrics` holds the total length, see below).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct RegionsV5 {
    queue_table: u64,
    deques: u64,
    deque_stride: u64,
    overflow: u64,
    overflow_stride: u64,
    records: u64,
    record_stride: u64,
    processes: u64,
    metrics: u64,
    total_len: u64,
}

/// A version-5 (and 4) descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct DescriptorV5 {
    magic: [u8; 8],
    layout_version: u32,
    flags: u32,
    sizes: StructSizes,
    config: ConfigV5,
    regions: RegionsV5,
    creator_pid: u32,
    creator_uid: u32,
    created_unix_ns: u64,
}

/// A version-4 descriptor read as version 5, put back in its fields: version 5 inserted
/// `metrics` before `total_len`, so in a version-4 header that word holds the total length,
/// `total_len` holds the creator's pid and uid, and those two hold the creation time. A
/// version-4 segment has no metrics region: `metrics` is set to its end (an empty region),
/// and [`Segment::metrics_blocks`](crate::segment::Segment) refuses any segment of another
/// version.
fn descriptor_of_v4(d: DescriptorV5) -> DescriptorV5 {
    let mut v4 = d;
    let total_len = d.regions.metrics;
    v4.regions.metrics = total_len;
    v4.regions.total_len = total_len;
    v4.creator_pid = d.regions.total_len as u32;
    v4.creator_uid = (d.regions.total_len >> 32) as u32;
    v4.created_unix_ns = u64::from(d.creator_pid) | u64::from(d.creator_uid) << 32;
    v4
}

/// A version-5 (or 4) descriptor in this version's terms: every payload inline in a record
/// of the old size, no blocks, the block region empty where the records end.
pub(super) fn descriptor_of_v5(d: DescriptorV5) -> SegmentDescriptor {
    let d = if d.layout_version == 4 { descriptor_of_v4(d) } else { d };
    let c = d.config;
    let config = SegmentConfig {
        queues: c.queues,
        deques_per_queue: c.deques_per_queue,
        deque_capacity: c.deque_capacity,
        job_records: c.job_records,
        payload_bytes: c.payload_bytes,
        process_slots: c.process_slots,
        overflow_capacity: c.overflow_capacity,
        inline_bytes: c.payload_bytes,
        payload_blocks: [0; PAYLOAD_CLASSES],
        keys: 0,
    };
    let r = d.regions;
    // Where this version's layout of that configuration puts the (empty) block region; a
    // configuration that does not lay out is refused by the validation that follows.
    let blocks = compute_regions(&config).map_or(r.processes, |w| w.blocks);
    SegmentDescriptor {
        magic: d.magic,
        layout_version: d.layout_version,
        // The old `reserved` must have been zero, as the old build checked.
        flags: d.flags | c.reserved,
        sizes: d.sizes,
        config,
        regions: RegionOffsets {
            queue_table: r.queue_table,
            deques: r.deques,
            deque_stride: r.deque_stride,
            overflow: r.overflow,
            overflow_stride: r.overflow_stride,
            records: r.records,
            record_stride: r.record_stride,
            blocks,
            processes: r.processes,
            metrics: r.metrics,
            total_len: r.total_len,
        },
        creator_pid: d.creator_pid,
        creator_uid: d.creator_uid,
        created_unix_ns: d.created_unix_ns,
    }
}
