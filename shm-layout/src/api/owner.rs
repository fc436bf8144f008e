//! Producers: [`Owner`] (a process's own deque of a queue, spilling to the overflow ring when
//! full) and [`Injector`] (no deque: every push goes to the overflow ring).
//!
//! - A push allocates a record (`Free -> Filling(me)`), writes the payload and header, and
//!   publishes it (`-> Queued`, Release) before its handle is indexed anywhere: a consumer that
//!   finds the handle finds a whole job.
//! - The handle goes to the owner's deque, or to the overflow ring when the deque is full;
//!   then sleepers are woken, if any (`wait::notify`).
//! - A crash between any two steps leaves the record in a state recovery can read.
//!
//! The steps every push shares are in [`super::publish`].

use std::sync::Arc;

use super::publish::{
    check_priority, index_in_overflow, level_error, publish, publish_at, Cursors, Joins, Keyed,
};
use super::{extend, ClaimedJob, PushBatchError, PushError, QueueCtx};
use crate::deque::{DequeOwner, DequeRef};
use crate::keys::Key;
use crate::overflow::RingError;
use crate::record::state::JobHandle;
use crate::segment::{coarse_monotonic_ns, QueueError, QueueInfo, Segment};
use crate::sync::Ordering;

/// A producer's handle on its deque of one queue. `Send`, not `Sync`.
///
/// Over a segment file of its own (in a service, `xtcqd` creates the segment and hands out
/// the deque and the process slot):
///
/// ```
/// use std::sync::Arc;
/// use xtcq_shm::{Owner, QueueSpec, Segment, SegmentConfig};
/// let dir = tempfile::tempdir()?;
/// let config = SegmentConfig::small().with_queues(1, 1).with_records(64);
/// let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600)?);
/// let queue = seg.create_queue(&QueueSpec::new("jobs"))?;
/// let owner = Owner::new(seg, &queue, 0, 0)?; // deque 0, process slot 0
/// owner.push(b"first")?;
/// owner.push(b"second")?;
/// let job = owner.pop()?.expect("a job"); // LIFO: the newest first
/// assert_eq!(job.payload()?, b"second");
/// job.ack()?;
/// assert_eq!(owner.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Owner {
    // Field order: the views borrow from `seg` and are declared first, so they are dropped
    // first (they have no drop glue; this is belt and braces).
    deque: DequeOwner<'static>,
    /// Our deque at levels 1.. of a queue with several (`levels`); empty for one level.
    level_deques: Box<[DequeOwner<'static>]>,
    ctx: QueueCtx<'static>,
    info: QueueInfo,
    deque_index: u32,
    me: u32,
    cursor: Cursors,
    seg: Arc<Segment>,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("queue", &self.info.spec.name)
            .field("deque", &self.deque_index)
            .field("me", &self.me)
            .finish()
    }
}

impl Owner {
    /// Becomes the owner of deque `deque` of queue `queue` as process slot `me`.
    ///
    /// Exactly one owner per deque: across processes the daemon's lease guarantees it.
    /// Repairs `bottom` left by a dead previous owner.
    pub fn new(seg: Arc<Segment>, queue: &QueueInfo, deque: u32, me: u32) -> Result<Self, QueueError> {
        // SAFETY: every view below is stored in `Self` next to `seg` and only lent out with
        // lifetimes bounded by `&self`.
        let s = unsafe { extend(&seg) };
        let d = s.deque(queue, deque)?;
        let ctx = QueueCtx::for_handle(s, queue)?;
        if deque >= queue.spec.deques {
            let count = queue.spec.deques;
            return Err(QueueError::NoSuchDeque { queue: queue.spec.name.clone(), index: deque, count });
        }
        // Our deque at every level: each is repaired as the level-0 one is.
        let level_deques = (1..queue.spec.levels.max(1))
            .map(|level| s.deque(queue, level * queue.spec.deques + deque).map(DequeOwner::adopt))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            deque: DequeOwner::adopt(d),
            level_deques: level_deques.into(),
            ctx,
            info: queue.clone(),
            deque_index: deque,
            me,
            cursor: Cursors::new(me, s),
            seg,
        })
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// The queue.
    pub fn queue(&self) -> &QueueInfo {
        &self.info
    }

    /// The deque's shared view (what thieves steal from).
    pub fn deque(&self) -> DequeRef<'_> {
        self.deque.deque()
    }

    /// Handles in our deque, at every level.
    pub fn len(&self) -> usize {
        self.deque.len() + self.level_deques.iter().map(|d| d.len()).sum::<usize>()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes every later push join `batch` (`None`: no batch), until called again. A push
    /// into a batch that is sealed, or no longer this queue's, fails with
    /// [`PushError::BatchClosed`] and leaves nothing behind.
    pub fn set_batch(&self, batch: Option<crate::batch::BatchRef>) {
        self.cursor.batch.set(batch);
    }

    /// Queues a job with `payload` at priority 0 (the most urgent level). Goes to our deque,
    /// or to the overflow ring when the deque is full; wakes sleeping consumers if there are
    /// any.
    pub fn push(&self, payload: &[u8]) -> Result<JobHandle, PushError> {
        let h = publish(&self.ctx, self.me, &self.cursor, payload, 0)?;
        if self.deque.push(h.to_word()).is_err() {
            index_in_overflow(&self.ctx, h, 0, &self.info.spec.name)?;
        }
        self.ctx.mark(0);
        crate::wait::notify(self.ctx.wait);
        Ok(h)
    }

    /// Queues a job at `priority` (0 the most urgent, below the queue's `levels`): into our
    /// deque of that level, or its overflow ring when that is full.
    pub fn push_priority(&self, payload: &[u8], priority: u32) -> Result<JobHandle, PushError> {
        check_priority(&self.info, priority)?;
        let deque = match priority {
            0 => &self.deque,
            p => self.level_deques.get(p as usize - 1).ok_or_else(|| level_error(&self.info, p))?,
        };
        let h = publish(&self.ctx, self.me, &self.cursor, payload, priority)?;
        if deque.push(h.to_word()).is_err() {
            index_in_overflow(&self.ctx, h, priority, &self.info.spec.name)?;
        }
        self.ctx.mark(priority);
        crate::wait::notify(self.ctx.wait);
        Ok(h)
    }

    /// [`push`](Self::push) of a unique job (at priority 0): refused with
    /// [`KeyError::Duplicate`] while a job of the queue pushed with `key` is queued, delayed
    /// or running (see `keys`).
    ///
    /// [`KeyError::Duplicate`]: crate::keys::KeyError::Duplicate
    pub fn push_with_key(&self, payload: &[u8], key: &Key) -> Result<JobHandle, PushError> {
        let now = Joins::Now(coarse_monotonic_ns());
        let keyed = Keyed { key: Some(key), seg: &self.seg };
        let h = publish_at(&self.ctx, self.me, &self.cursor, payload, now, 0, keyed)?;
        if self.deque.push(h.to_word()).is_err() {
            index_in_overflow(&self.ctx, h, 0, &self.info.spec.name)?;
        }
        self.ctx.mark(0);
        crate::wait::notify(self.ctx.wait);
        Ok(h)
    }

    /// Queues up to [`MAX_BATCH`](crate::deque::MAX_BATCH) of `payloads` at once, as many as
    /// our deque has room for: each record filled and published as [`push`](Self::push)
    /// does, then all their handles put in the deque with one store of `bottom`, and one wake
    /// for the lot. Returns how many were queued, from the first; the rest (the deque was
    /// full, or there were more than the maximum) are the caller's, for `push` (which spills
    /// to the overflow ring) or a later batch.
    ///
    /// When one fails (records, blocks or the quota exhausted, a payload too large) those
    /// before it are queued and [`PushBatchError`] says how many.
    pub fn push_batch(&self, payloads: &[&[u8]]) -> Result<usize, PushBatchError> {
        let room = self.deque.room_up_to(payloads.len().min(crate::deque::MAX_BATCH));
        let mut words = [0u64; crate::deque::MAX_BATCH];
        let mut failed = None;
        let mut n = 0;
        // One clock read for the batch: its jobs join the line together.
        let now = Joins::Now(coarse_monotonic_ns());
        for p in &payloads[..room] {
            match publish_at(&self.ctx, self.me, &self.cursor, p, now, 0, ()) {
                Ok(h) => {
                    words[n] = h.to_word();
                    n += 1;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        // Room was counted first and only we push: every published handle fits.
        let pushed = self.deque.push_many(&words[..n]);
        debug_assert_eq!(pushed, n);
        if n > 0 {
            self.ctx.mark(0);
            crate::wait::notify(self.ctx.wait);
        }
        match failed {
            None => Ok(n),
            Some(error) => Err(PushBatchError { queued: n, error }),
        }
    }

    /// The next job in the queue's flavor order from our deque (newest first for LIFO,
    /// oldest first for FIFO), else from the overflow ring; claimed for us.
    // Inlined, as the rest of the job path (`claim`, `read_payload`, `ack`): returned
    // through memory, the ~40-byte result is written field by field and read back in 16-byte
    // loads, a store-forwarding stall that cost a third of a push+pop pair (benches/results/).
    // Always: the body is past what `#[inline]` alone gets inlined.
    #[inline(always)]
    pub fn pop(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        if !self.level_deques.is_empty() {
            return self.own_by_level(DequeOwner::pop);
        }
        self.ctx.gated(|| self.deque.is_empty() && self.ctx.overflow.is_empty(), || self.pop_open())
    }

    /// [`pop`](Self::pop) once the gate let it through.
    #[inline(always)]
    fn pop_open(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        // Only we push, so at most `capacity` handles can come out during one call; more
        // means corrupt indices (`bottom` far past `top`): stop walking garbage slots.
        for _ in 0..=self.deque.deque().capacity() {
            let Some(w) = self.deque.pop() else { break };
            if let Some(j) = self.ctx.claim_word(w, self.me) {
                return Ok(Some(j));
            }
        }
        self.ctx.pop_overflow(self.me)
    }

    /// The oldest job in our deque (FIFO, whatever the flavor), else from the overflow ring.
    #[inline(always)]
    pub fn take(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        if !self.level_deques.is_empty() {
            return self.own_by_level(DequeOwner::take);
        }
        self.ctx.gated(|| self.deque.is_empty() && self.ctx.overflow.is_empty(), || self.take_open())
    }

    /// [`take`](Self::take) once the gate let it through.
    #[inline(always)]
    fn take_open(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        // Bounded as in `pop`.
        for _ in 0..=self.deque.deque().capacity() {
            let Some(w) = self.deque.take() else { break };
            if let Some(j) = self.ctx.claim_word(w, self.me) {
                return Ok(Some(j));
            }
        }
        self.ctx.pop_overflow(self.me)
    }

    /// `pop` or `take` (as `next`) on a queue of several levels: our deque, then the ring,
    /// of each level from the most urgent.
    #[cold]
    fn own_by_level(
        &self,
        next: impl Fn(&DequeOwner<'static>) -> Option<u64>,
    ) -> Result<Option<ClaimedJob<'_>>, RingError> {
        self.ctx.gated(
            || self.is_empty() && self.ctx.overflow.is_empty(),
            || {
                let deques = std::iter::once(&self.deque).chain(self.level_deques.iter());
                for (level, d) in (0u32..).zip(deques) {
                    // Bounded as in `pop`.
                    for _ in 0..=d.deque().capacity() {
                        let Some(w) = next(d) else { break };
                        if let Some(j) = self.ctx.claim_word(w, self.me) {
                            return Ok(Some(j));
                        }
                    }
                    if let Some(j) = self.ctx.pop_ring(&self.ctx.ring(level)?, self.me)? {
                        return Ok(Some(j));
                    }
                }
                Ok(None)
            },
        )
    }
}

/// A producer without a deque: pushes go straight to the overflow ring. For one-shot pushes
/// (`xtcq push`) and for processes that only feed a queue now and then.
pub struct Injector {
    pub(super) ctx: QueueCtx<'static>,
    pub(super) info: QueueInfo,
    pub(super) me: u32,
    pub(super) cursor: Cursors,
    seg: Arc<Segment>,
}

impl Injector {
    /// An injector for `queue` as process slot `me`.
    pub fn new(seg: Arc<Segment>, queue: &QueueInfo, me: u32) -> Result<Self, QueueError> {
        // SAFETY: as in `Owner::new`.
        let s = unsafe { extend(&seg) };
        Ok(Self {
            ctx: QueueCtx::for_handle(s, queue)?,
            info: queue.clone(),
            me,
            cursor: Cursors::new(me, s),
            seg,
        })
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Makes every later push join `batch` (`None`: no batch), as [`Owner::set_batch`].
    pub fn set_batch(&self, batch: Option<crate::batch::BatchRef>) {
        self.cursor.batch.set(batch);
    }

    /// Queues a job in the overflow ring, at priority 0.
    pub fn push(&self, payload: &[u8]) -> Result<JobHandle, PushError> {
        self.push_priority(payload, 0)
    }

    /// Queues a job at `priority` (0 the most urgent, below the queue's `levels`) in the
    /// overflow ring of its level.
    pub fn push_priority(&self, payload: &[u8], priority: u32) -> Result<JobHandle, PushError> {
        check_priority(&self.info, priority)?;
        let h = publish(&self.ctx, self.me, &self.cursor, payload, priority)?;
        index_in_overflow(&self.ctx, h, priority, &self.info.spec.name)?;
        self.ctx.mark(priority);
        crate::wait::notify(self.ctx.wait);
        Ok(h)
    }

    /// Writes a job that no steal sees before `due_ns` (CLOCK_MONOTONIC ns, see
    /// [`monotonic_ns`](crate::segment::monotonic_ns)): the record is left `Delayed`, in no
    /// index. Tell the daemon its handle (it makes the job `Queued` once due); a daemon that
    /// is not told finds it by its record scan when it adopts the segment or recovers a dead
    /// process.
    pub fn push_delayed(&self, payload: &[u8], due_ns: u64) -> Result<JobHandle, PushError> {
        self.push_delayed_priority(payload, due_ns, 0)
    }

    /// [`push_delayed`](Self::push_delayed) at `priority`: the level it joins once due.
    pub fn push_delayed_priority(
        &self,
        payload: &[u8],
        due_ns: u64,
        priority: u32,
    ) -> Result<JobHandle, PushError> {
        check_priority(&self.info, priority)?;
        publish_at(&self.ctx, self.me, &self.cursor, payload, Joins::Due(due_ns.max(1)), priority, ())
    }

    /// [`push`](Self::push) with a key (see [`Owner::push_with_key`]), and, when `due_ns`
    /// is given, [`push_delayed`](Self::push_delayed): the key holds while the job waits.
    pub fn push_with_key(
        &self,
        payload: &[u8],
        key: &Key,
        due_ns: Option<u64>,
    ) -> Result<JobHandle, PushError> {
        let keyed = Keyed { key: Some(key), seg: &self.seg };
        match due_ns {
            Some(due) => {
                publish_at(&self.ctx, self.me, &self.cursor, payload, Joins::Due(due.max(1)), 0, keyed)
            }
            None => {
                let now = Joins::Now(coarse_monotonic_ns());
                let h = publish_at(&self.ctx, self.me, &self.cursor, payload, now, 0, keyed)?;
                index_in_overflow(&self.ctx, h, 0, &self.info.spec.name)?;
                self.ctx.mark(0);
                crate::wait::notify(self.ctx.wait);
                Ok(h)
            }
        }
    }

    /// Writes a job copied out of another segment ([`crate::transfer`]) with its attempts
    /// and last error: queued in the overflow ring, or a dead letter when `dead`. A push,
    /// then a claim and a give-back of our own unindexed record, so every step is one the
    /// recovery of a dead process knows. A queued job holds `key`, if given, unless a live
    /// job already does: then it comes in without it, rather than not at all.
    pub fn import(
        &self,
        payload: &[u8],
        attempts: u32,
        last_error: &str,
        dead: bool,
        priority: u32,
        key: Option<&Key>,
    ) -> Result<JobHandle, PushError> {
        // A priority past the queue's levels (a dump of a queue that had more) joins its
        // last level.
        let priority = crate::levels::level_of(priority, self.info.spec.levels);
        let now = || Joins::Now(coarse_monotonic_ns());
        let keyed = Keyed { key: key.filter(|_| !dead), seg: &self.seg };
        let h = match publish_at(&self.ctx, self.me, &self.cursor, payload, now(), priority, keyed) {
            Err(PushError::Key(crate::keys::KeyError::Duplicate { .. })) => {
                publish_at(&self.ctx, self.me, &self.cursor, payload, now(), priority, ())?
            }
            r => r?,
        };
        let corrupt = |what: &str| PushError::Corrupt(format!("record {} {what} while imported", h.index));
        let (Some(st), Some(hdr)) = (self.ctx.records.state(h.index), self.ctx.records.header(h.index))
        else {
            return Err(corrupt("out of range"));
        };
        // Unindexed, so no consumer can claim it first.
        st.claim(h.generation, self.me).map_err(|_| corrupt("was taken"))?;
        st.begin_write(h.generation, self.me).map_err(|_| corrupt("was taken"))?;
        // Relaxed: published by the Release of the CAS that leaves Writing.
        hdr.attempts.store(attempts, Ordering::Relaxed);
        if !last_error.is_empty() {
            crate::dead_letter::store_last_error(hdr, last_error);
        }
        let next =
            JobHandle { index: h.index, generation: crate::record::state::next_generation(h.generation) };
        if dead {
            st.dead_letter_written(h.generation, self.me).map_err(|_| corrupt("was taken"))?;
            return Ok(next);
        }
        st.requeue_written(h.generation, self.me).map_err(|_| corrupt("was taken"))?;
        index_in_overflow(&self.ctx, next, priority, &self.info.spec.name)?;
        self.ctx.mark(priority);
        crate::wait::notify(self.ctx.wait);
        Ok(next)
    }
}
