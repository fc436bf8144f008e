//! Where payloads live (layout version 6): a small inline area in each record, and an
//! out-of-line region of size-classed blocks for the larger ones.
//!
//! - Class `k` holds blocks of `MIN_BLOCK << k` bytes (128 B .. 16 MiB), each class a fixed
//!   array of `SegmentConfig::payload_blocks[k]` blocks ([`AUTO_BLOCKS`]: a default derived
//!   from the record count, see [`resolved_blocks`]).
//! - The block region is one table of owner words (8 bytes a block, every class back to back,
//!   then rounded to a line) followed by each class's blocks, in class order.
//! - A payload of at most `inline_bytes` bytes is copied into its record; a larger one into a
//!   block, whose `(class, index)` the record keeps in the first 8 bytes of its inline area.
//!   So a record's inline area is at least 8 bytes whenever the segment has blocks.
//! - Everything here is computed from the configuration alone, so creator and attacher agree.

use super::{round_up, ConfigError, SegmentConfig};

/// Size classes of payload blocks.
pub const PAYLOAD_CLASSES: usize = 18;

/// log2 of the smallest block (128 bytes).
pub const MIN_BLOCK_SHIFT: u32 = 7;

/// The largest block, and the largest payload a segment can take (16 MiB).
pub const MAX_BLOCK: u32 = 1 << (MIN_BLOCK_SHIFT + PAYLOAD_CLASSES as u32 - 1);

/// `payload_blocks[k]` value meaning "the default for this class" (see [`resolved_blocks`]).
pub const AUTO_BLOCKS: u32 = u32::MAX;

/// Most blocks one class may have.
pub const MAX_CLASS_BLOCKS: u32 = 1 << 30;

/// Bytes a default class may take at most (its blocks times their size): 8 MiB.
pub const AUTO_CLASS_BYTES: u64 = 8 << 20;

/// Bytes of the inline area that name the block of an out-of-line payload.
pub const BLOCK_REF_BYTES: u32 = 8;

/// Bytes in a block of class `k`.
pub const fn class_size(k: usize) -> u32 {
    1 << (MIN_BLOCK_SHIFT + k as u32)
}

/// The smallest class whose blocks hold `len` bytes; `None` past [`MAX_BLOCK`].
pub fn class_for(len: usize) -> Option<usize> {
    (0..PAYLOAD_CLASSES).find(|&k| class_size(k) as usize >= len)
}

/// The classes a default gives blocks to: from the first whose blocks are larger than the
/// inline area to the first that holds `payload_bytes`.
fn auto_range(c: &SegmentConfig) -> core::ops::Range<usize> {
    if c.payload_bytes <= c.inline_bytes {
        return 0..0;
    }
    let first = class_for(c.inline_bytes as usize + 1).unwrap_or(PAYLOAD_CLASSES);
    let last = class_for(c.payload_bytes as usize).map_or(PAYLOAD_CLASSES, |k| k + 1);
    first..last.max(first)
}

/// The block count of every class: the configured one, or for an [`AUTO_BLOCKS`] class in
/// the default range (see `auto_range`) a quarter of the records, at most
/// [`AUTO_CLASS_BYTES`] worth and at least one block; 0 for an automatic class outside it.
pub fn resolved_blocks(c: &SegmentConfig) -> [u32; PAYLOAD_CLASSES] {
    let range = auto_range(c);
    let mut out = [0u32; PAYLOAD_CLASSES];
    for (k, n) in out.iter_mut().enumerate() {
        *n = match c.payload_blocks[k] {
            AUTO_BLOCKS if range.contains(&k) => {
                let by_bytes = (AUTO_CLASS_BYTES / class_size(k) as u64).max(1);
                (c.job_records as u64 / 4).clamp(1, by_bytes) as u32
            }
            AUTO_BLOCKS => 0,
            n => n,
        };
    }
    out
}

/// The largest payload the configuration has room for: its inline area or its largest class
/// with blocks.
pub fn largest_place(c: &SegmentConfig) -> u32 {
    let blocks = resolved_blocks(c);
    let largest = (0..PAYLOAD_CLASSES).rev().find(|&k| blocks[k] > 0).map_or(0, class_size);
    largest.max(c.inline_bytes)
}

/// Checks the payload fields: counts in range, and room for a payload of `payload_bytes`.
pub(super) fn validate(c: &SegmentConfig) -> Result<(), ConfigError> {
    if c.inline_bytes > MAX_BLOCK {
        return Err(ConfigError::OutOfRange {
            field: "inline_bytes",
            value: c.inline_bytes as u64,
            min: 0,
            max: MAX_BLOCK as u64,
        });
    }
    for (k, &n) in c.payload_blocks.iter().enumerate() {
        if n != AUTO_BLOCKS && n > MAX_CLASS_BLOCKS {
            return Err(ConfigError::OutOfRange {
                field: CLASS_FIELDS[k],
                value: n as u64,
                min: 0,
                max: MAX_CLASS_BLOCKS as u64,
            });
        }
    }
    let room = largest_place(c);
    if c.payload_bytes > room {
        return Err(ConfigError::NoRoomForPayload { payload_bytes: c.payload_bytes, room });
    }
    Ok(())
}

/// Field names of the class counts, for messages.
pub const CLASS_FIELDS: [&str; PAYLOAD_CLASSES] = [
    "payload_blocks[128]",
    "payload_blocks[256]",
    "payload_blocks[512]",
    "payload_blocks[1KiB]",
    "payload_blocks[2KiB]",
    "payload_blocks[4KiB]",
    "payload_blocks[8KiB]",
    "payload_blocks[16KiB]",
    "payload_blocks[32KiB]",
    "payload_blocks[64KiB]",
    "payload_blocks[128KiB]",
    "payload_blocks[256KiB]",
    "payload_blocks[512KiB]",
    "payload_blocks[1MiB]",
    "payload_blocks[2MiB]",
    "payload_blocks[4MiB]",
    "payload_blocks[8MiB]",
    "payload_blocks[16MiB]",
];

/// The bytes of a record's inline area: `inline_bytes` rounded up to a line, and at least
/// [`BLOCK_REF_BYTES`] when the segment has blocks.
pub fn inline_area(c: &SegmentConfig) -> u64 {
    let has_blocks = resolved_blocks(c).iter().any(|&n| n > 0);
    let want = if has_blocks { c.inline_bytes.max(BLOCK_REF_BYTES) } else { c.inline_bytes };
    (want as u64).next_multiple_of(64)
}

/// Where the block region's parts are, from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    /// Blocks per class.
    pub counts: [u32; PAYLOAD_CLASSES],
    /// Owner-table index of each class's first block.
    pub first: [u64; PAYLOAD_CLASSES],
    /// Offset of each class's first block from the region's start.
    pub data: [u64; PAYLOAD_CLASSES],
    /// Blocks in all (owner words in the table).
    pub total: u64,
    /// Bytes of the whole region.
    pub len: u64,
}

/// Lays out the block region of `c`; `None` if it overflows 64 bits.
pub fn block_layout(c: &SegmentConfig) -> Option<BlockLayout> {
    let counts = resolved_blocks(c);
    let mut first = [0u64; PAYLOAD_CLASSES];
    let mut total = 0u64;
    for k in 0..PAYLOAD_CLASSES {
        first[k] = total;
        total = total.checked_add(counts[k] as u64)?;
    }
    let mut at = if total == 0 { 0 } else { round_up(total.checked_mul(8)?, 128)? };
    let mut data = [0u64; PAYLOAD_CLASSES];
    for k in 0..PAYLOAD_CLASSES {
        data[k] = at;
        at = at.checked_add((counts[k] as u64).checked_mul(class_size(k) as u64)?)?;
    }
    Some(BlockLayout { counts, first, data, total, len: at })
}
