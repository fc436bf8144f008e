//! The payload blocks: out-of-line room for payloads larger than a record's inline area, in
//! size classes (see `layout::payload`).
//!
//! Rules kept:
//! - Each block has one owner word: `0` free, else `generation << 32 | record`, the record
//!   that holds it and the generation that record was filled at (its birth, never 0). Taking
//!   a block is one CAS `0 -> owner` on that word, made while the record is `Filling(g, me)`;
//!   giving it back is one CAS `owner -> 0` from the exact word the freer read. No free list
//!   (whose links a dying or hostile process could break) and no lock: allocation scans a
//!   class from a per-process cursor, as the record arena does.
//! - A block belongs to one incarnation of its record (from `Free -> Filling(g)` to the next
//!   transition back to `Free`): the record's payload is read only while that incarnation is
//!   held, and the block is given back after the transition that ends it (ack, withdraw,
//!   purge), never before, so a job that recovery re-queues still has its payload.
//! - A process that dies between the two leaves a block whose record has moved on: an
//!   *orphan*. [`PayloadBlocks::sweep`] frees every block whose record is not in the
//!   incarnation its owner word names (`Free`, `Filling` at another generation, or a job of
//!   another birth). It only ever frees blocks no live incarnation can use, so it may run at
//!   any time, beside every other process; recovery and the daemon's scan run it.
//! - Nothing read from the segment is trusted: a block reference is decoded and range-checked
//!   against the validated layout before any address is formed from it.

use core::marker::PhantomData;

use crate::layout::payload::{class_size, BlockLayout, PAYLOAD_CLASSES};
pub use crate::record::block_owner::owner_word;
use crate::record::block_owner::{give_back, is_live, take};
use crate::sync::{AtomicU64, Ordering};

/// One block: its class and its index within the class (both checked against the layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// Size class (`128 << class` bytes).
    pub class: usize,
    /// Index within the class.
    pub index: u32,
}

impl BlockRef {
    /// The word a record keeps in its inline area: `(class + 1) << 32 | index`.
    pub const fn to_word(self) -> u64 {
        ((self.class as u64) + 1) << 32 | self.index as u64
    }
}

/// No block of the class a payload needs, nor of any larger class, was free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no free payload block for a {len}-byte payload: all {blocks} blocks of {size} bytes (and of \
     every larger class) are in use (`xtcq stats` shows them per size); consume some jobs, or \
     create the segment with more (xtcqd --payload-blocks {size}=COUNT)"
)]
pub struct BlocksFull {
    /// The payload's length.
    pub len: usize,
    /// Block size of the class it needed.
    pub size: u32,
    /// Blocks that class has.
    pub blocks: u32,
}

/// The block region of a mapped segment.
#[derive(Clone, Copy, Debug)]
pub struct PayloadBlocks<'a> {
    region: *mut u8,
    layout: &'a BlockLayout,
    _segment: PhantomData<&'a ()>,
}

// SAFETY: as for `RecordArena`: owner words are atomics, and block bytes are copied only
// under the record state protocol; the pointer is into a MAP_SHARED mapping living for 'a.
unsafe impl Send for PayloadBlocks<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for PayloadBlocks<'_> {}

impl<'a> PayloadBlocks<'a> {
    /// # Safety
    /// `region` points at a block region laid out as `layout` says (owner table, then each
    /// class's blocks), 64-aligned and valid for `'a`.
    pub(crate) unsafe fn new(region: *mut u8, layout: &'a BlockLayout) -> Self {
        Self { region, layout, _segment: PhantomData }
    }

    /// Blocks of class `k` (0 for a class out of range).
    pub fn count(&self, class: usize) -> u32 {
        self.layout.counts.get(class).copied().unwrap_or(0)
    }

    /// Blocks in all classes.
    pub fn total(&self) -> u64 {
        self.layout.total
    }

    /// The block a record's reference word names, `None` unless class and index are in range.
    pub fn decode(&self, word: u64) -> Option<BlockRef> {
        let class = ((word >> 32) as usize).checked_sub(1)?;
        let index = word as u32;
        (class < PAYLOAD_CLASSES && index < self.count(class)).then_some(BlockRef { class, index })
    }

    /// The owner word of `b` (a decoded, in-range reference).
    pub fn owner(&self, b: BlockRef) -> &'a AtomicU64 {
        let slot = self.layout.first[b.class] + b.index.min(self.count(b.class).saturating_sub(1)) as u64;
        // SAFETY: `b` is in range (decoded or allocated here; the `min` keeps a forged one in
        // range too), so the word lies in the owner table, which is 8-aligned.
        unsafe { &*(self.region.add(slot as usize * 8) as *const AtomicU64) }
    }

    /// The owner word at table position `slot` (every class back to back), for scans.
    fn owner_at(&self, slot: u64) -> Option<&'a AtomicU64> {
        // SAFETY: checked against the table's length.
        (slot < self.layout.total)
            .then(|| unsafe { &*(self.region.add(slot as usize * 8) as *const AtomicU64) })
    }

    /// The block at table position `slot`.
    fn at_slot(&self, slot: u64) -> Option<BlockRef> {
        let class =
            (0..PAYLOAD_CLASSES).rev().find(|&k| self.layout.first[k] <= slot && self.count(k) > 0)?;
        let index = slot - self.layout.first[class];
        (index < self.count(class) as u64).then_some(BlockRef { class, index: index as u32 })
    }

    /// The first byte of block `b` and its size.
    pub fn data(&self, b: BlockRef) -> (*mut u8, u32) {
        let size = class_size(b.class);
        let index = b.index.min(self.count(b.class).saturating_sub(1)) as u64;
        let off = self.layout.data[b.class] + index * size as u64;
        // In range: the region holds `count` blocks of `size` bytes from `data[class]`.
        (self.region.wrapping_add(off as usize), size)
    }

    /// Takes a free block of class `class` or, when that class is full, of a larger one, for
    /// `record` filled at `generation`; the scan of each class starts at `*cursor`, which is
    /// left just past the block taken. Acquire on success: the previous holder's reads of the
    /// block are done before we write it (pairs with the Release of [`release`](Self::release)).
    pub fn allocate(
        &self,
        class: usize,
        len: usize,
        owner: u64,
        cursor: &mut u32,
    ) -> Result<BlockRef, BlocksFull> {
        for k in class..PAYLOAD_CLASSES {
            let n = self.count(k);
            if n == 0 {
                continue;
            }
            let start = *cursor % n;
            for step in 0..n {
                let b = BlockRef { class: k, index: (start + step) % n };
                if take(self.owner(b), owner) {
                    *cursor = b.index.wrapping_add(1);
                    return Ok(b);
                }
            }
        }
        // Named: the smallest class that could have taken it (the one to raise), else the
        // class it needs, which has no blocks.
        let named = (class..PAYLOAD_CLASSES).find(|&k| self.count(k) > 0).unwrap_or(class);
        Err(BlocksFull { len, size: class_size(named), blocks: self.count(named) })
    }

    /// Gives `b` back if its owner word is still `owner` (what the freer read while it held
    /// the record). Release: our reads of the block come before the next allocator's writes.
    pub fn release(&self, b: BlockRef, owner: u64) -> bool {
        give_back(self.owner(b), owner)
    }

    /// Every held block: `(block, owner word)`.
    pub fn held(&self) -> impl Iterator<Item = (BlockRef, u64)> + '_ {
        (0..self.layout.total).filter_map(move |slot| {
            let w = self.owner_at(slot)?.load(Ordering::Acquire);
            (w != 0).then_some(())?;
            Some((self.at_slot(slot)?, w))
        })
    }

    /// Frees every orphan block (see the module docs): held by a record that is not in the
    /// incarnation the owner word names, or by no record at all. Returns how many.
    pub fn sweep(&self, records: &crate::record::arena::RecordArena<'_>) -> u32 {
        let mut freed = 0;
        for (b, w) in self.held() {
            if !is_live_owner(records, w) && give_back(self.owner(b), w) {
                freed += 1;
            }
        }
        freed
    }
}

/// Whether owner word `w` names a record in the incarnation it was filled at (see
/// [`is_live`]); `false` for a record out of range.
pub fn is_live_owner(records: &crate::record::arena::RecordArena<'_>, w: u64) -> bool {
    let (Some(st), Some(hdr)) = (records.state(w as u32), records.header(w as u32)) else { return false };
    // The state word first (Acquire): the birth was written while Filling, before the
    // publish we may see.
    let s = st.load();
    is_live(w, s, hdr.flags.load(Ordering::Relaxed))
}
