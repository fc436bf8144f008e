//! The arena of job records in the segment: allocation, payload copy in and out.
//!
//! Allocation is a scan for a `Free` record from a per-process cursor, taking the first one
//! whose `Free -> Filling` CAS succeeds: no free list (whose links a dying or hostile process
//! could break) and no global lock. Records are freed roughly in the order they were
//! allocated, so the record after the cursor is usually free and the scan is short; a full
//! arena costs one pass and returns [`ArenaFull`].
//!
//! Payload bytes are copied with plain (non-atomic) copies. That is data-race free for a
//! correct program because the state word hands a record's payload from one holder to the
//! next: the filler writes while `Filling(me)` and publishes with a Release CAS; a consumer
//! reads only after its Acquire claim CAS, while `Claimed(me)`. The length is read from the
//! segment and checked against the record's area before any copy, so a corrupted length can
//! never make us read outside the record.

use core::marker::PhantomData;

use crate::layout::{RecordHeader, RECORD_HEADER_SIZE};
use crate::record::state::{JobHandle, RecordState};
use crate::sync::Ordering;

/// Every record was in use during a full scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("all {0} job records are in use; consume some jobs or create the segment with more records")]
pub struct ArenaFull(pub u32);

/// A record's payload length field is larger than its area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("record {index} claims a {len}-byte payload but holds at most {max}: the segment is corrupt")]
pub struct BadPayloadLen {
    /// Record index.
    pub index: u32,
    /// Length found.
    pub len: u32,
    /// Area size.
    pub max: u32,
}

/// The records region of a mapped segment.
#[derive(Clone, Copy, Debug)]
pub struct RecordArena<'a> {
    base: *mut u8,
    count: u32,
    stride: usize,
    payload_cap: u32,
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
    /// `base` points at `count` records of `stride` bytes (header then `payload_cap` bytes,
    /// `stride >= RECORD_HEADER_SIZE + payload_cap`), 64-aligned, valid for `'a`.
    pub(crate) unsafe fn new(base: *mut u8, count: u32, stride: usize, payload_cap: u32) -> Self {
        debug_assert!(stride >= RECORD_HEADER_SIZE + payload_cap as usize);
        Self { base, count, stride, payload_cap, _segment: PhantomData }
    }

    /// Number of records.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// `len() == 0` (never, for a valid segment).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Payload bytes per record.
    pub fn payload_capacity(&self) -> u32 {
        self.payload_cap
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
        let start = *cursor % n;
        for k in 0..n {
            let i = (start + k) % n;
            // `header` cannot fail for i < n.
            let Some(st) = self.state(i) else { break };
            if let Ok(g) = st.begin_fill(me) {
                *cursor = (i + 1) % n;
                return Ok((i, g));
            }
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
            if self.payload_cap > 0 {
                crate::prefetch::for_read(p.wrapping_add(RECORD_HEADER_SIZE));
            }
        }
    }

    /// Writes the payload of a record the caller holds in `Filling`.
    ///
    /// # Safety
    /// The caller holds record `index` in `Filling` (its `begin_fill` succeeded and nothing
    /// moved it since), so no other process of a correct program touches its payload.
    pub unsafe fn write_payload(&self, index: u32, payload: &[u8]) -> Result<(), BadPayloadLen> {
        let h = self.header(index).ok_or(BadPayloadLen { index, len: payload.len() as u32, max: 0 })?;
        if payload.len() > self.payload_cap as usize {
            return Err(BadPayloadLen {
                index,
                len: payload.len().min(u32::MAX as usize) as u32,
                max: self.payload_cap,
            });
        }
        // SAFETY: the payload area starts RECORD_HEADER_SIZE past the header and holds
        // payload_cap >= payload.len() bytes; exclusive per the contract.
        unsafe {
            core::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                (h as *const RecordHeader as *mut u8).add(RECORD_HEADER_SIZE),
                payload.len(),
            );
        }
        // Relaxed: published with the payload by the Release of `publish`.
        h.payload_len.store(payload.len() as u32, Ordering::Relaxed);
        Ok(())
    }

    /// Appends the payload of a record the caller holds in `Claimed` to `out`.
    ///
    /// # Safety
    /// The caller holds record `index` in `Claimed` (its claim succeeded), so no process of a
    /// correct program writes its payload meanwhile.
    pub unsafe fn read_payload(&self, index: u32, out: &mut Vec<u8>) -> Result<(), BadPayloadLen> {
        let h = self.header(index).ok_or(BadPayloadLen { index, len: 0, max: 0 })?;
        let len = h.payload_len.load(Ordering::Relaxed);
        if len > self.payload_cap {
            return Err(BadPayloadLen { index, len, max: self.payload_cap });
        }
        out.reserve(len as usize);
        // SAFETY: len <= payload_cap, so the source range is inside the record; `out` has
        // room for `len` more bytes; exclusive per the contract.
        unsafe {
            let src = (h as *const RecordHeader as *const u8).add(RECORD_HEADER_SIZE);
            core::ptr::copy_nonoverlapping(src, out.as_mut_ptr().add(out.len()), len as usize);
            out.set_len(out.len() + len as usize);
        }
        Ok(())
    }
}
