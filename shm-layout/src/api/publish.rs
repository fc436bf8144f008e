//! The steps of a push that every producer shares: a record allocated, bound to its key if
//! it has one, filled and published, counted, then indexed in a ring when no deque takes it.
//!
//! - A record is published (`-> Queued` or `-> Delayed`, Release) before its handle is
//!   indexed anywhere: a consumer that finds the handle finds a whole job.
//! - A push that fails after allocating gives everything back (record, block, quota, key)
//!   before it returns; one that fails after publishing, withdraws the job
//!   ([`unindexed`]).
//! - A crash between any two steps leaves the record in a state recovery can read.

use std::cell::Cell;

use super::{PushError, QueueCtx};
use crate::keys::Key;
use crate::overflow::RingError;
use crate::record::arena::WriteError;
use crate::record::state::{JobHandle, State};
use crate::segment::{coarse_monotonic_ns, Held, QueueInfo, Segment};
use crate::sync::Ordering;

/// Where a producer's next scans for a free record and a free payload block start: just past
/// what it took last, so that the next one is usually free. Spread over the arena by slot.
pub(super) struct Cursors {
    pub(super) record: Cell<u32>,
    pub(super) block: Cell<u32>,
    /// The batch each push joins (`Owner::set_batch`).
    pub(super) batch: Cell<Option<crate::batch::BatchRef>>,
}

impl Cursors {
    pub(super) fn new(me: u32, seg: &Segment) -> Self {
        let start = me.wrapping_mul(0x9E37_79B9);
        Cursors {
            record: Cell::new(start % seg.config().job_records),
            block: Cell::new(start),
            batch: Cell::new(None),
        }
    }
}

/// When a published job joins the line, kept in the record's `enqueued_ns`.
#[derive(Clone, Copy)]
pub(super) enum Joins {
    /// Now: `Queued`, enqueued at this (coarse CLOCK_MONOTONIC) time.
    Now(u64),
    /// At its due time (CLOCK_MONOTONIC ns): `Delayed` until then.
    Due(u64),
}

/// Allocates, fills and publishes a record at `priority`; returns its handle (not yet
/// indexed).
pub(super) fn publish(
    ctx: &QueueCtx<'_>,
    me: u32,
    cursor: &Cursors,
    payload: &[u8],
    priority: u32,
) -> Result<JobHandle, PushError> {
    publish_at(ctx, me, cursor, payload, Joins::Now(coarse_monotonic_ns()), priority, ())
}

/// Refuses a priority past the queue's levels.
pub(super) fn check_priority(info: &QueueInfo, priority: u32) -> Result<(), PushError> {
    if priority >= info.spec.levels.max(1) {
        return Err(level_error(info, priority));
    }
    Ok(())
}

pub(super) fn level_error(info: &QueueInfo, priority: u32) -> PushError {
    let levels = info.spec.levels.max(1);
    PushError::Priority { queue: info.spec.name.clone(), priority, levels, last: levels - 1 }
}

/// Fills a record and publishes it: `Queued` or `Delayed`, as `joins` says; within the
/// queue's record quota, if it has one; holding `key`, if given. Counted as pushed before
/// the caller indexes it, so that a producer stopped in between still shows (`activity`).
pub(super) fn publish_at(
    ctx: &QueueCtx<'_>,
    me: u32,
    cursor: &Cursors,
    payload: &[u8],
    joins: Joins,
    priority: u32,
    key: impl KeyOf,
) -> Result<JobHandle, PushError> {
    let h = publish_uncounted(ctx, me, cursor, payload, joins, priority, key)?;
    ctx.count(me, crate::metrics::Counter::Pushed);
    if matches!(joins, Joins::Due(_)) {
        crate::fail_point!("delay.after_publish");
    } else {
        crate::fail_point!("publish.before_index");
    }
    Ok(h)
}

/// [`publish_at`] without the count, for a caller that counts a run of jobs once
/// ([`Injector::push_many`]).
pub(super) fn publish_uncounted(
    ctx: &QueueCtx<'_>,
    me: u32,
    cursor: &Cursors,
    payload: &[u8],
    joins: Joins,
    priority: u32,
    key: impl KeyOf,
) -> Result<JobHandle, PushError> {
    let max = ctx.records.payload_capacity();
    if payload.len() > max as usize {
        return Err(PushError::PayloadTooLarge { len: payload.len(), max });
    }
    let limited = take_quota(ctx)?;
    let published = fill_and_publish(ctx, me, cursor, payload, joins, priority, key);
    if published.is_err() && limited {
        Held::give(ctx.limits);
    }
    published
}

/// Allocates a record, binds `key` to it if given, fills it with `payload` and publishes it.
pub(super) fn fill_and_publish(
    ctx: &QueueCtx<'_>,
    me: u32,
    cursor: &Cursors,
    payload: &[u8],
    joins: Joins,
    priority: u32,
    key: impl KeyOf,
) -> Result<JobHandle, PushError> {
    let mut c = cursor.record.get();
    let (index, generation) = ctx.records.allocate(me, &mut c)?;
    cursor.record.set(c);
    crate::fail_point!("alloc.after_begin_fill");
    if let Some(batch) = cursor.batch.get() {
        // Before the payload: a batch that takes no more jobs leaves nothing to give back.
        if let Err(closed) = crate::batch::join(ctx.seg, index, generation, ctx.queue, batch) {
            if let Some(st) = ctx.records.state(index) {
                let _ = st.free_filling(generation, me);
            }
            return Err(closed.into());
        }
    }
    key.bind(ctx, me, JobHandle { index, generation })?;
    let hdr = ctx
        .records
        .header(index)
        .ok_or_else(|| PushError::Corrupt(format!("record {index} out of range")))?;
    let mut b = cursor.block.get();
    // SAFETY: `allocate` moved the record to Filling(me); we are its only writer.
    let written = unsafe { ctx.records.write_payload(index, generation, payload, &mut b) };
    cursor.block.set(b);
    if let Err(e) = written {
        // Nothing was published: the record goes back as recovery would free it. (A block
        // is not held: `write_payload` gives back what it took when it fails.)
        if let Some(st) = ctx.records.state(index) {
            let _ = st.free_filling(generation, me);
        }
        return Err(match e {
            WriteError::BlocksFull(full) => PushError::BlocksFull(full),
            WriteError::Bad(bad) => PushError::Corrupt(bad.to_string()),
        });
    }
    // Relaxed: published by the Release store in `publish` below.
    hdr.queue.store(ctx.queue, Ordering::Relaxed);
    hdr.attempts.store(0, Ordering::Relaxed);
    hdr.deadline_ns.store(0, Ordering::Relaxed);
    let (Joins::Now(t) | Joins::Due(t)) = joins;
    hdr.enqueued_ns.store(t, Ordering::Relaxed);
    // The birth generation (the job's stable id) and the priority, no last error yet.
    let birth = crate::JobId::of_push(JobHandle { index, generation }).birth;
    hdr.flags.store(
        birth << crate::record::state::BIRTH_SHIFT | crate::levels::priority_flags(priority),
        Ordering::Relaxed,
    );
    let st =
        ctx.records.state(index).ok_or_else(|| PushError::Corrupt(format!("record {index} out of range")))?;
    let published = match joins {
        Joins::Now(_) => st.publish(generation, me),
        Joins::Due(_) => st.publish_delayed(generation, me),
    };
    published.map_err(|c| {
        PushError::Corrupt(format!("record {index} changed while we were filling it (now {:#x})", c.found.0))
    })?;
    if let Some(batch) = cursor.batch.get() {
        crate::fail_point!("batch.before_count_pushed");
        crate::batch::count_pushed(ctx.seg, batch);
    }
    Ok(JobHandle { index, generation })
}

/// The key a push binds, if any: a type, so that a push without one is compiled with no
/// trace of keys (`()`), as it was before them.
pub(super) trait KeyOf: Copy {
    fn bind(self, ctx: &QueueCtx<'_>, me: u32, h: JobHandle) -> Result<(), PushError>;
}

/// No key.
impl KeyOf for () {
    #[inline(always)]
    fn bind(self, _: &QueueCtx<'_>, _: u32, _: JobHandle) -> Result<(), PushError> {
        Ok(())
    }
}

/// A key, and the segment whose key table it goes to (looked up per keyed push, so that a
/// handle without keys carries nothing of them).
#[derive(Clone, Copy)]
pub(super) struct Keyed<'a> {
    pub(super) key: Option<&'a Key>,
    pub(super) seg: &'a Segment,
}

impl KeyOf for Keyed<'_> {
    fn bind(self, ctx: &QueueCtx<'_>, me: u32, h: JobHandle) -> Result<(), PushError> {
        self.key.map_or(Ok(()), |k| bind_key(ctx, self.seg, me, k, h))
    }
}

/// Binds `key` to the job being pushed as `h` (its record `Filling(me)`), before its payload
/// is written: from here the key holds while the record is live, so a push killed at any
/// later point leaves a record recovery frees, and the key with it. Refused: the record goes
/// back as recovery would free it.
#[cold]
pub(super) fn bind_key(
    ctx: &QueueCtx<'_>,
    seg: &Segment,
    me: u32,
    key: &Key,
    h: JobHandle,
) -> Result<(), PushError> {
    let bound = seg.key_table().bind(ctx.queue, key, crate::JobId::of_push(h), me);
    crate::fail_point!("key.after_bind");
    if let Err(e) = bound {
        if let Some(st) = ctx.records.state(h.index) {
            let _ = st.free_filling(h.generation, me);
        }
        return Err(PushError::Key(e));
    }
    Ok(())
}

/// Takes a record from the queue's quota, if it has one (whether it did); refuses the push
/// when its jobs already hold all of it. A queue without a quota pays one load of a line
/// only the daemon writes; one with a quota pays a CAS on a shared line, here and at the
/// ack, for a count that is exact (`segment::quota::Held`).
#[inline]
pub(super) fn take_quota(ctx: &QueueCtx<'_>) -> Result<bool, PushError> {
    let max = ctx.limits.max_records.load(Ordering::Relaxed);
    if max == 0 {
        return Ok(false);
    }
    Held::take(ctx.limits, max).map_err(|used| PushError::QuotaFull { used, max })?;
    Ok(true)
}

/// Puts a published record in the overflow ring of `level`; withdraws it if the ring is
/// full, so the push fails cleanly rather than leaving an unindexed job behind.
pub(super) fn index_in_overflow(
    ctx: &QueueCtx<'_>,
    h: JobHandle,
    level: u32,
    queue: &str,
) -> Result<(), PushError> {
    let ring = ctx.ring(level).map_err(|e| PushError::Corrupt(e.to_string()))?;
    index_in_ring(ctx, ring, h, queue)
}

/// [`index_in_overflow`] into `ring`, resolved by the caller (once for many pushes).
pub(super) fn index_in_ring(
    ctx: &QueueCtx<'_>,
    ring: crate::overflow::OverflowRef<'_>,
    h: JobHandle,
    queue: &str,
) -> Result<(), PushError> {
    ring.push(h.index).map_err(|e| unindexed(ctx, ring, h, queue, e))
}

/// A published job that `ring` could not take (`e`): withdrawn (its record, block and quota
/// given back), so the push fails cleanly; the push's error.
pub(super) fn unindexed(
    ctx: &QueueCtx<'_>,
    ring: crate::overflow::OverflowRef<'_>,
    h: JobHandle,
    queue: &str,
    e: RingError,
) -> PushError {
    // The block and the batch are read before the withdraw frees the record (its batch
    // reference names the batch only while the job is live), and given back after.
    let block = ctx.records.held_block(h.index);
    let st = ctx.records.state(h.index);
    let batch = st.and_then(|st| crate::batch::batch_of(ctx.seg, h.index, st.load()));
    let withdrawn = st.map(|st| st.withdraw(h.generation, State::Queued).is_ok()).unwrap_or(false);
    if withdrawn {
        ctx.records.release_block(block);
        Held::give_if_limited(ctx.limits);
        if let Some(b) = batch {
            crate::batch::uncount_pushed(ctx.seg, b);
        }
    }
    match e {
        RingError::Full if withdrawn => {
            PushError::QueueFull { queue: queue.to_string(), overflow: ring.capacity() }
        }
        RingError::Full => {
            PushError::Corrupt(format!("queue {queue} is full and job {h} could not be withdrawn"))
        }
        RingError::Corrupt(m) => PushError::Corrupt(m),
    }
}
