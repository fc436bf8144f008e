//! The arena of job records in the segment: allocation, payload copy in and out.
//!
//! A payload of at most the inline area's size is copied into the record; a larger one into
//! a payload block ([`super::blocks`]) taken while the record is `Filling`, whose reference
//! the record keeps in the first 8 bytes of its inline area. Whether a payload is inline is
//! told by its length alone, so a reader needs no other field.
//!
//! Allocation is a scan for a `Free` record from a per-process cursor, taking the first one
//! whose `Free -> Filling` CAS succeeds: no free list (whose links a dying or hostile process
//! could break) and no global lock. Records are freed roughly in the order they were
//! allocated, so the record after the cursor is usually free and the scan is short; a full
//! arena costs one pass and returns [`ArenaFull`].
//!
//! Payload bytes are copied with plain (non-atomic) copies. That is data-race free for a
//! correct program because the state word hands a record's payload from one holder to the
//! next: the filler writes while `Filling(me)` and publishes with a Release store; a consumer
//! reads only after its Acquire claim CAS, while `Claimed(me)`. The length is read from the
//! segment and checked against the record's area before any copy, and a block reference is
//! decoded against the layout and its owner word checked, so a corrupted length or
//! reference can never make us read outside the record or its block.

use core::marker::PhantomData;

use crate::layout::{RecordHeader, RECORD_HEADER_SIZE};
use crate::record::blocks::{owner_word, BlockRef, BlocksFull, PayloadBlocks};
use crate::record::state::{JobHandle, RecordState};
use crate::sync::{AtomicU64, Ordering};

/// Every record was in use during a full scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("all {0} job records are in use; consume some jobs or create the segment with more records")]
pub struct ArenaFull(pub u32);

/// A record's payload length field is larger than the segment's largest payload, or the
/// block it names is out of range, not held by it, or smaller than the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("record {index} claims a {len}-byte payload but holds at most {max}: the segment is corrupt")]
pub struct BadPayloadLen {
    /// Record index.
    pub index: u32,
    /// Length found.
    pub len: u32,
    /// The most it could hold there (0 for a block reference that names no block it holds).
    pub max: u32,
}

/// Why a payload could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// No free block of the class the payload needs (nor a larger one).
    #[error(transparent)]
    BlocksFull(#[from] BlocksFull),
    /// Longer than the segment's largest payload, or a record out of range.
    #[error(transparent)]
    Bad(#[from] BadPayloadLen),
}

/// The block a record's job holds, as read while the job was held: given back with
/// [`RecordArena::release_block`] after the transition that frees the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldBlock {
    /// The block.
    pub block: BlockRef,
    /// Its owner word as read.
    pub owner: u64,
}

/// The records region of a mapped segment, with the payload blocks its records may hold.
#[derive(Clone, Copy, Debug)]
pub struct RecordArena<'a> {
    base: *mut u8,
    count: u32,
    stride: usize,
    /// Bytes of each record's inline area.
    inline_cap: u32,
    /// The largest payload the segment takes (`payload_bytes`).
    max_payload: u32,
    blocks: PayloadBlocks<'a>,
    _segment: PhantomData<&'a ()>,
}

// SAFETY: the arena only hands out `&RecordHeader` (atomics) and copies payload bytes
// under the state-word protocol described above; the pointer is into a MAP_SHARED mapping
// that outlives `'a`.
unsafe impl Send for RecordArena<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for RecordArena<'_> {}

impl<'a> RecordArena<'a> {
    /// # Safety
    /// `base` points at `count` records of `stride` bytes (header then an inline area of
    /// `inline_cap` bytes, `stride >= RECORD_HEADER_SIZE + inline_cap`, and `inline_cap >= 8`
    /// when `blocks` has any), 64-aligned, valid for `'a`.
    pub(crate) unsafe fn new(
        base: *mut u8,
        count: u32,
        stride: usize,
        inline_cap: u32,
        max_payload: u32,
        blocks: PayloadBlocks<'a>,
    ) -> Self {
        debug_assert!(stride >= RECORD_HEADER_SIZE + inline_cap as usize);
        debug_assert!(blocks.total() == 0 || inline_cap >= 8);
        Self { base, count, stride, inline_cap, max_payload, blocks, _segment: PhantomData }
    }

    /// Number of records.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// `len() == 0` (never, for a valid segment).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The largest payload a record takes (inline or in a block).
    pub fn payload_capacity(&self) -> u32 {
        self.max_payload
    }

    /// Payload bytes a record holds inline; larger payloads go to a block.
    pub fn inline_capacity(&self) -> u32 {
        self.inline_cap
    }

    /// The payload blocks.
    pub fn blocks(&self) -> &PayloadBlocks<'a> {
        &self.blocks
    }

    /// Record `index`'s header, `None` when out of range.
    #[inline]
    pub fn header(&self, index: u32) -> Option<&'a RecordHeader> {
        if index >= self.count {
            return None;
        }
        // SAFETY: index < count, so the header lies inside the region (see `new`).
        Some(unsafe { &*(self.base.add(index as usize * self.stride) as *const RecordHeader) })
    }

    /// Record `index`'s state word, `None` when out of range.
    #[inline]
    pub fn state(&self, index: u32) -> Option<RecordState<'a>> {
        self.header(index).map(|h| RecordState(&h.state))
    }

    /// The word in record `index`'s inline area that names its block (meaningful only for a
    /// payload longer than the inline area); `None` out of range or without blocks.
    fn block_ref_word(&self, index: u32) -> Option<&'a AtomicU64> {
        let h = self.header(index)?;
        (self.inline_cap >= 8).then_some(())?;
        // SAFETY: the inline area starts RECORD_HEADER_SIZE (64) past the header, so it is
        // 8-aligned, and holds at least 8 bytes (checked above).
        Some(unsafe {
            &*((h as *const RecordHeader as *const u8).add(RECORD_HEADER_SIZE) as *const AtomicU64)
        })
    }

    /// Whether `h` names its record's current generation: only such a handle can still
    /// claim the record. A leftover of an earlier generation (a job indexed twice, then
    /// given back, which moves the generation on) references nothing.
    #[inline]
    pub fn is_current(&self, h: JobHandle) -> bool {
        self.state(h.index).is_some_and(|st| st.load().generation() == h.generation)
    }

    /// Finds a free record and moves it to `Filling(me)`, scanning from `*cursor`, which is
    /// left just past the record taken. Returns `(index, generation)`.
    pub fn allocate(&self, me: u32, cursor: &mut u32) -> Result<(u32, u32), ArenaFull> {
        let n = self.count;
        // Wrapped by comparison, not `%`: a division costs more than the rest of a short scan.
        let next = |i: u32| if i + 1 >= n { 0 } else { i + 1 };
        let mut i = if *cursor < n { *cursor } else { 0 };
        for _ in 0..n {
            // `header` cannot fail for i < n.
            let Some(st) = self.state(i) else { break };
            if let Ok(g) = st.begin_fill(me) {
                *cursor = next(i);
                return Ok((i, g));
            }
            i = next(i);
        }
        Err(ArenaFull(n))
    }

    /// Starts the transfers of record `index`'s header (for writing: a claim CAS follows)
    /// and its payload's first line, so that they overlap. Out of range: nothing.
    #[inline]
    pub fn prefetch_for_claim(&self, index: u32) {
        if index < self.count {
            // In range, as in `header`; a prefetch of any address is harmless anyway.
            let p = self.base.wrapping_add(index as usize * self.stride);
            crate::prefetch::for_write(p);
            if self.inline_cap > 0 {
                crate::prefetch::for_read(p.wrapping_add(RECORD_HEADER_SIZE));
            }
        }
    }

    /// Starts the transfers of record `index`'s header and its payload's first line, both
    /// for writing: a producer that will take it next (its allocation CAS, then the payload
    /// and header stores) meets them in cache rather than missing on each in turn. Out of
    /// range: nothing.
    #[inline]
    pub fn prefetch_for_fill(&self, index: u32) {
        if index < self.count {
            // In range, as in `header`; a prefetch of any address is harmless anyway.
            let p = self.base.wrapping_add(index as usize * self.stride);
            crate::prefetch::for_write(p);
            if self.inline_cap > 0 {
                crate::prefetch::for_write(p.wrapping_add(RECORD_HEADER_SIZE));
            }
        }
    }

    /// Writes the payload of a record the caller holds in `Filling` at `generation`: inline,
    /// or into a block taken for it (scanning from `*block_cursor`). On error nothing is
    /// held (a block taken is given back).
    ///
    /// # Safety
    /// The caller holds record `index` in `Filling` (its `begin_fill` succeeded and nothing
    /// moved it since), so no other process of a correct program touches its payload.
    pub unsafe fn write_payload(
        &self,
        index: u32,
        generation: u32,
        payload: &[u8],
        block_cursor: &mut u32,
    ) -> Result<(), WriteError> {
        let len = payload.len();
        let bad = BadPayloadLen { index, len: len.min(u32::MAX as usize) as u32, max: self.max_payload };
        let h = self.header(index).ok_or(bad)?;
        if len > self.max_payload as usize {
            return Err(bad.into());
        }
        let dst = if len <= self.inline_cap as usize {
            (h as *const RecordHeader as *mut u8).wrapping_add(RECORD_HEADER_SIZE)
        } else {
            let class = crate::layout::payload::class_for(len).ok_or(bad)?;
            let owner = owner_word(index, generation);
            let b = self.blocks.allocate(class, len, owner, block_cursor)?;
            crate::fail_point!("block.after_alloc");
            let Some(r) = self.block_ref_word(index) else {
                self.blocks.release(b, owner);
                return Err(bad.into());
            };
            // Relaxed: published with the payload by the Release of `publish`.
            r.store(b.to_word(), Ordering::Relaxed);
            self.blocks.data(b).0
        };
        // SAFETY: `dst` is the inline area (len <= inline_cap) or the block just taken (len <=
        // its class size); exclusive per the contract (the block is ours by its owner CAS).
        unsafe { copy_bytes(payload.as_ptr(), dst, len) };
        // Relaxed: published with the payload by the Release of `publish`.
        h.payload_len.store(len as u32, Ordering::Relaxed);
        Ok(())
    }

    /// Where record `index`'s payload of `len` bytes lies, every part checked: `len` at most
    /// the largest payload; inline when it fits the inline area, else in the block its
    /// reference names, which must be in range, held by this record and large enough.
    pub fn payload_at(&self, index: u32, len: u32) -> Result<*const u8, BadPayloadLen> {
        let h = self.header(index).ok_or(BadPayloadLen { index, len, max: 0 })?;
        if len > self.max_payload {
            return Err(BadPayloadLen { index, len, max: self.max_payload });
        }
        if len <= self.inline_cap {
            return Ok((h as *const RecordHeader as *const u8).wrapping_add(RECORD_HEADER_SIZE));
        }
        let b = self.held_block(index).ok_or(BadPayloadLen { index, len, max: 0 })?;
        let (p, size) = self.blocks.data(b.block);
        if len > size {
            return Err(BadPayloadLen { index, len, max: size });
        }
        Ok(p)
    }

    /// The block record `index`'s job holds, read from its length, its reference and the
    /// block's owner word (which must name this record); `None` for an inline payload or a
    /// reference that names no block this record holds. Read it while the job is held (or
    /// its state word cannot change unseen), before the transition that frees the record.
    pub fn held_block(&self, index: u32) -> Option<HeldBlock> {
        let len = self.header(index)?.payload_len.load(Ordering::Relaxed);
        if len <= self.inline_cap {
            return None;
        }
        let block = self.blocks.decode(self.block_ref_word(index)?.load(Ordering::Relaxed))?;
        let owner = self.blocks.owner(block).load(Ordering::Acquire);
        (owner as u32 == index && owner != 0).then_some(HeldBlock { block, owner })
    }

    /// Gives back the block a freed record's job held (see [`held_block`](Self::held_block)).
    pub fn release_block(&self, held: Option<HeldBlock>) {
        if let Some(b) = held {
            self.blocks.release(b.block, b.owner);
        }
    }

    /// Appends the payload of a record the caller holds in `Claimed` to `out`.
    ///
    /// # Safety
    /// The caller holds record `index` in `Claimed` (its claim succeeded), so no process of a
    /// correct program writes its payload meanwhile.
    #[inline]
    pub unsafe fn read_payload(&self, index: u32, out: &mut Vec<u8>) -> Result<(), BadPayloadLen> {
        let h = self.header(index).ok_or(BadPayloadLen { index, len: 0, max: 0 })?;
        let len = h.payload_len.load(Ordering::Relaxed);
        let src = self.payload_at(index, len)?;
        out.reserve(len as usize);
        // SAFETY: `payload_at` checked that `len` bytes from `src` lie in the record's inline
        // area or its block; `out` has room for `len` more bytes; exclusive per the contract.
        unsafe {
            copy_bytes(src, out.as_mut_ptr().add(out.len()), len as usize);
            out.set_len(out.len() + len as usize);
        }
        Ok(())
    }

    /// A racy copy of record `index`'s payload (no holder excludes writers: the caller
    /// re-checks the state word after it): `None` when its length or block is bad.
    pub fn copy_payload_racy(&self, index: u32) -> Option<Vec<u8>> {
        let len = self.header(index)?.payload_len.load(Ordering::Relaxed);
        let src = self.payload_at(index, len).ok()?;
        // SAFETY: `payload_at` checked the range; volatile because nothing excludes writers.
        Some((0..len as usize).map(|k| unsafe { core::ptr::read_volatile(src.add(k)) }).collect())
    }
}

/// Copies `len` bytes from `src` to `dst`. A payload of 8 to 16 bytes (an id, a handle: the
/// common job) is two overlapping 8-byte moves instead of a call into `memcpy`, which costs
/// more than the copy at that size.
///
/// # Safety
/// As `core::ptr::copy_nonoverlapping(src, dst, len)`.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    if (8..=16).contains(&len) {
        // SAFETY: both ranges hold `len >= 8` bytes, so `[0, 8)` and `[len - 8, len)` lie in
        // them; unaligned moves, and the ranges do not overlap (the caller's contract).
        unsafe {
            let head = core::ptr::read_unaligned(src as *const u64);
            let tail = core::ptr::read_unaligned(src.add(len - 8) as *const u64);
            core::ptr::write_unaligned(dst as *mut u64, head);
            core::ptr::write_unaligned(dst.add(len - 8) as *mut u64, tail);
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

#[cfg(test)]
mod tests {
    use super::copy_bytes;

    /// Every length around the two-move path, at every misalignment, copies exactly `len`
    /// bytes and touches nothing past them.
    #[test]
    fn copy_bytes_copies_exactly_len_bytes() {
        let src: Vec<u8> = (1..=64).collect();
        for len in 0..=40 {
            for offset in 0..8 {
                let mut dst = vec![0u8; 64];
                // SAFETY: both buffers hold offset + len <= 48 bytes; they are distinct.
                unsafe { copy_bytes(src.as_ptr().add(offset), dst.as_mut_ptr().add(offset), len) };
                assert_eq!(
                    &dst[offset..offset + len],
                    &src[offset..offset + len],
                    "len {len} offset {offset}"
                );
                assert!(dst[..offset].iter().chain(&dst[offset + len..]).all(|&b| b == 0), "len {len}");
            }
        }
    }
}
