//! The typed API the client crate builds on: [`Owner`] (push a payload, pop or take a claimed
//! job), [`Thief`] (steal claimed jobs), [`ClaimedJob`] (payload, ack, nack).
//!
//! A push is: allocate a record (`Free -> Filling(me)`), write the payload, publish
//! (`-> Queued`), index the handle in the owner's deque or, when that is full, in the queue's
//! overflow ring, then wake sleepers if any. A steal or pop takes a handle from an index and
//! claims the record (`Queued -> Claimed(me)`); a handle whose claim fails (stale generation,
//! or claimed by someone else via a duplicate) is skipped. A crash between any two steps
//! leaves a record in a state recovery can read (see `record::state`).

use std::cell::Cell;
use std::sync::atomic::AtomicU32 as StdAtomicU32;
use std::sync::Arc;
use std::time::Instant;

use crate::deque::{DequeOwner, DequeRef, Steal, MAX_BATCH};
use crate::layout::WaitWord;
use crate::overflow::{OverflowRef, RingError};
use crate::record::arena::{ArenaFull, BadPayloadLen, RecordArena};
use crate::record::state::{next_generation, JobHandle, State};
use crate::segment::{coarse_monotonic_ns, monotonic_ns, QueueError, QueueInfo, Segment};
use crate::sync::Ordering;

mod owned;
pub use owned::OwnedJob;

/// Why a push failed. The job was not queued.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Payload bigger than a record holds.
    #[error("payload too large: {len} > {max} bytes")]
    PayloadTooLarge {
        /// Given.
        len: usize,
        /// Record payload area.
        max: u32,
    },
    /// No free record.
    #[error(transparent)]
    RecordsFull(#[from] ArenaFull),
    /// Deque and overflow ring both full.
    #[error("queue {queue} is full: its deque and its overflow ring ({overflow} jobs) are full")]
    QueueFull {
        /// Queue name.
        queue: String,
        /// Overflow ring capacity.
        overflow: usize,
    },
    /// The segment holds values no correct program writes.
    #[error("segment corruption while pushing: {0}")]
    Corrupt(String),
}

/// Why a claimed job could not be acked, nacked or read.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The claim's lease ran out before the ack or nack; the job was re-queued (or
    /// dead-lettered) and may already be running elsewhere.
    #[error("lease expired, the job was re-queued; its result was not recorded")]
    LeaseExpired {
        /// The job.
        handle: JobHandle,
    },
    /// The record is no longer ours: recovery or an expired lease gave it to someone else.
    #[error(
        "job {handle} is no longer held by this process (record is now {found}); it was re-queued or freed"
    )]
    NotHeld {
        /// The job.
        handle: JobHandle,
        /// What the record holds now.
        found: String,
    },
    /// Bad payload length.
    #[error(transparent)]
    BadPayload(#[from] BadPayloadLen),
    /// The overflow ring could not take a nacked job back.
    #[error("could not re-queue job {handle}: {source}")]
    Requeue {
        /// The job.
        handle: JobHandle,
        /// Why.
        source: RingError,
    },
    /// The segment holds values no correct program writes.
    #[error("segment corruption: {0}")]
    Corrupt(String),
}

/// What a consumer needs of one queue: resolved once, shared by its jobs.
#[derive(Clone, Copy, Debug)]
struct QueueCtx<'a> {
    queue: u32,
    max_attempts: u32,
    /// Default claim lease, ns (0: none).
    lease_ns: u64,
    records: RecordArena<'a>,
    overflow: OverflowRef<'a>,
    wait: &'a WaitWord,
}

impl<'a> QueueCtx<'a> {
    fn new(seg: &'a Segment, q: &QueueInfo) -> Result<Self, QueueError> {
        Self::from_parts(seg, q.index, q.spec.max_attempts, q.spec.lease_ms as u64 * 1_000_000)
    }

    fn from_parts(
        seg: &'a Segment,
        queue: u32,
        max_attempts: u32,
        lease_ns: u64,
    ) -> Result<Self, QueueError> {
        let corrupt = |what: &str| QueueError::Corrupt { index: queue, what: what.to_string() };
        Ok(Self {
            queue,
            max_attempts,
            lease_ns,
            records: seg.records(),
            overflow: seg.overflow(queue).ok_or_else(|| corrupt("no overflow ring"))?,
            wait: seg.wait_word(queue).ok_or_else(|| corrupt("no wait word"))?,
        })
    }

    /// Claims the job a deque slot word names. `None`: stale, duplicate or garbage handle.
    #[inline]
    fn claim_word(&self, word: u64, me: u32) -> Option<ClaimedJob<'_>> {
        let h = JobHandle::from_word(word)?;
        // The claim loads the state word, then CASes it, then the payload is read: fetch
        // the header for writing and the payload together, one transfer each, overlapped.
        self.records.prefetch_for_claim(h.index);
        self.claim(h.index, Some(h.generation), me)
    }

    /// Claims record `index` if it is `Queued` for this queue (at `generation`, when given).
    fn claim(&self, index: u32, generation: Option<u32>, me: u32) -> Option<ClaimedJob<'_>> {
        let hdr = self.records.header(index)?;
        let st = self.records.state(index)?;
        let w = st.load();
        if w.state() != Some(State::Queued) || generation.is_some_and(|g| g != w.generation()) {
            return None;
        }
        // The queue field was written while Filling and published with the state word we
        // just loaded (Acquire); if the record moves on, the CAS below fails.
        if hdr.queue.load(Ordering::Relaxed) != self.queue {
            return None;
        }
        st.claim(w.generation(), me).ok()?;
        crate::fail_point!("claim.after_cas");
        // Relaxed: every give-back (nack, fail, recovery, lease expiry, requeue of a dead
        // letter) clears the deadline before its Release CAS, and our claim CAS continues that
        // release sequence, so a lease scan that sees `Claimed(g, me)` reads 0 or this value,
        // never a deadline of an earlier claim.
        let deadline = if self.lease_ns == 0 { 0 } else { monotonic_ns().saturating_add(self.lease_ns) };
        hdr.deadline_ns.store(deadline, Ordering::Relaxed);
        Some(ClaimedJob {
            deadline: std::cell::Cell::new(deadline),
            ctx: self,
            handle: std::cell::Cell::new(JobHandle { index, generation: w.generation() }),
            me,
            done: false,
        })
    }

    fn pop_overflow(&self, me: u32) -> Result<Option<ClaimedJob<'_>>, RingError> {
        while let Some(i) = self.overflow.pop()? {
            if let Some(j) = self.claim(i, None, me) {
                return Ok(Some(j));
            }
        }
        Ok(None)
    }
}

/// A producer's handle on its deque of one queue. `Send`, not `Sync`.
///
/// Over a segment file of its own (in a service, `xtcqd` creates the segment and hands out
/// the deque and the process slot):
///
/// ```
/// use std::sync::Arc;
/// use xtcq_shm::{Owner, QueueSpec, Segment, SegmentConfig};
/// let dir = tempfile::tempdir()?;
/// let config = SegmentConfig { queues: 1, deques_per_queue: 1, job_records: 64, ..SegmentConfig::default() };
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
    ctx: QueueCtx<'static>,
    info: QueueInfo,
    deque_index: u32,
    me: u32,
    cursor: Cell<u32>,
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

/// Extends a borrow of the segment to `'static` for a view stored beside the `Arc` that
/// keeps the segment alive.
///
/// # Safety
/// The returned reference must not outlive `seg`'s `Arc` clone stored in the same struct, and
/// must not escape it with the `'static` lifetime.
unsafe fn extend(seg: &Arc<Segment>) -> &'static Segment {
    // SAFETY: the Segment lives inside the Arc's allocation, which does not move and lives
    // as long as any clone of the Arc; see the contract for the lifetime.
    unsafe { &*Arc::as_ptr(seg) }
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
        let ctx = QueueCtx::new(s, queue)?;
        Ok(Self {
            deque: DequeOwner::adopt(d),
            ctx,
            info: queue.clone(),
            deque_index: deque,
            me,
            cursor: Cell::new(me.wrapping_mul(0x9E37_79B9) % s.config().job_records),
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

    /// Handles in our deque.
    pub fn len(&self) -> usize {
        self.deque.len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.deque.is_empty()
    }

    /// Queues a job with `payload`. Goes to our deque, or to the overflow ring when the deque
    /// is full; wakes sleeping consumers if there are any.
    pub fn push(&self, payload: &[u8]) -> Result<JobHandle, PushError> {
        let h = publish(&self.ctx, self.me, &self.cursor, payload)?;
        if self.deque.push(h.to_word()).is_err() {
            index_in_overflow(&self.ctx, h, &self.info.spec.name)?;
        }
        crate::wait::notify(self.ctx.wait);
        Ok(h)
    }

    /// The next job in the queue's flavor order from our deque (newest first for LIFO,
    /// oldest first for FIFO), else from the overflow ring; claimed for us.
    pub fn pop(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
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
    pub fn take(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        // Bounded as in `pop`.
        for _ in 0..=self.deque.deque().capacity() {
            let Some(w) = self.deque.take() else { break };
            if let Some(j) = self.ctx.claim_word(w, self.me) {
                return Ok(Some(j));
            }
        }
        self.ctx.pop_overflow(self.me)
    }
}

/// Allocates, fills and publishes a record; returns its handle (not yet indexed).
fn publish(ctx: &QueueCtx<'_>, me: u32, cursor: &Cell<u32>, payload: &[u8]) -> Result<JobHandle, PushError> {
    publish_at(ctx, me, cursor, payload, None)
}

/// Fills a record and publishes it: `Queued` when `due_ns` is `None`, else `Delayed` until
/// `due_ns` (CLOCK_MONOTONIC ns, kept in `enqueued_ns`: the time the job joins the line).
fn publish_at(
    ctx: &QueueCtx<'_>,
    me: u32,
    cursor: &Cell<u32>,
    payload: &[u8],
    due_ns: Option<u64>,
) -> Result<JobHandle, PushError> {
    let max = ctx.records.payload_capacity();
    if payload.len() > max as usize {
        return Err(PushError::PayloadTooLarge { len: payload.len(), max });
    }
    let mut c = cursor.get();
    let (index, generation) = ctx.records.allocate(me, &mut c)?;
    cursor.set(c);
    crate::fail_point!("alloc.after_begin_fill");
    let hdr = ctx
        .records
        .header(index)
        .ok_or_else(|| PushError::Corrupt(format!("record {index} out of range")))?;
    // SAFETY: `allocate` moved the record to Filling(me); we are its only writer.
    unsafe { ctx.records.write_payload(index, payload) }.map_err(|e| PushError::Corrupt(e.to_string()))?;
    // Relaxed: published by the Release CAS in `publish` below.
    hdr.queue.store(ctx.queue, Ordering::Relaxed);
    hdr.attempts.store(0, Ordering::Relaxed);
    hdr.deadline_ns.store(0, Ordering::Relaxed);
    hdr.enqueued_ns.store(due_ns.unwrap_or_else(coarse_monotonic_ns), Ordering::Relaxed);
    // The birth generation (the job's stable id), no last error yet.
    hdr.flags.store(
        crate::JobId::of_push(JobHandle { index, generation }).birth << crate::record::state::BIRTH_SHIFT,
        Ordering::Relaxed,
    );
    let st =
        ctx.records.state(index).ok_or_else(|| PushError::Corrupt(format!("record {index} out of range")))?;
    let published = match due_ns {
        None => st.publish(generation, me),
        Some(_) => st.publish_delayed(generation, me),
    };
    published.map_err(|c| {
        PushError::Corrupt(format!("record {index} changed while we were filling it (now {:#x})", c.found.0))
    })?;
    if due_ns.is_some() {
        crate::fail_point!("delay.after_publish");
    } else {
        crate::fail_point!("publish.before_index");
    }
    Ok(JobHandle { index, generation })
}

/// Puts a published record in the overflow ring; withdraws it if the ring is full, so the
/// push fails cleanly rather than leaving an unindexed job behind.
fn index_in_overflow(ctx: &QueueCtx<'_>, h: JobHandle, queue: &str) -> Result<(), PushError> {
    match ctx.overflow.push(h.index) {
        Ok(()) => Ok(()),
        Err(e) => {
            let withdrawn = ctx
                .records
                .state(h.index)
                .map(|st| st.withdraw(h.generation, State::Queued).is_ok())
                .unwrap_or(false);
            match e {
                RingError::Full if withdrawn => {
                    Err(PushError::QueueFull { queue: queue.to_string(), overflow: ctx.overflow.capacity() })
                }
                RingError::Full => Err(PushError::Corrupt(format!(
                    "queue {queue} is full and job {h} could not be withdrawn"
                ))),
                RingError::Corrupt(m) => Err(PushError::Corrupt(m)),
            }
        }
    }
}

/// A producer without a deque: pushes go straight to the overflow ring. For one-shot pushes
/// (`xtcq push`) and for processes that only feed a queue now and then.
pub struct Injector {
    ctx: QueueCtx<'static>,
    info: QueueInfo,
    me: u32,
    cursor: Cell<u32>,
    seg: Arc<Segment>,
}

impl Injector {
    /// An injector for `queue` as process slot `me`.
    pub fn new(seg: Arc<Segment>, queue: &QueueInfo, me: u32) -> Result<Self, QueueError> {
        // SAFETY: as in `Owner::new`.
        let s = unsafe { extend(&seg) };
        Ok(Self {
            ctx: QueueCtx::new(s, queue)?,
            info: queue.clone(),
            me,
            cursor: Cell::new(me.wrapping_mul(0x9E37_79B9) % s.config().job_records),
            seg,
        })
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Queues a job in the overflow ring.
    pub fn push(&self, payload: &[u8]) -> Result<JobHandle, PushError> {
        let h = publish(&self.ctx, self.me, &self.cursor, payload)?;
        index_in_overflow(&self.ctx, h, &self.info.spec.name)?;
        crate::wait::notify(self.ctx.wait);
        Ok(h)
    }

    /// Writes a job that no steal sees before `due_ns` (CLOCK_MONOTONIC ns, see
    /// [`monotonic_ns`]): the record is left `Delayed`, in no index. Tell the daemon its
    /// handle (it makes the job `Queued` once due); a daemon that is not told finds it by its
    /// record scan when it adopts the segment or recovers a dead process.
    pub fn push_delayed(&self, payload: &[u8], due_ns: u64) -> Result<JobHandle, PushError> {
        publish_at(&self.ctx, self.me, &self.cursor, payload, Some(due_ns.max(1)))
    }
}

/// A consumer's handle on one queue: steals from any of its deques and its overflow ring.
/// `Clone` and `Sync`.
///
/// A thief takes the oldest job of a deque (the top), whatever the owner's order; usually
/// it lives in another process, mapping the same segment file with [`Segment::attach`]:
///
/// ```
/// use std::sync::Arc;
/// use xtcq_shm::{Owner, QueueSpec, Segment, SegmentConfig, Thief};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("segment");
/// let config = SegmentConfig { queues: 1, deques_per_queue: 1, job_records: 64, ..SegmentConfig::default() };
/// let seg = Arc::new(Segment::create(&path, &config, 0o600)?);
/// let queue = seg.create_queue(&QueueSpec::new("jobs"))?;
/// let owner = Owner::new(seg, &queue, 0, 0)?;
/// owner.push(b"first")?;
/// owner.push(b"second")?;
///
/// let other = Arc::new(Segment::attach(&path)?); // a second mapping, as another process has
/// let thief = Thief::new(other.clone(), &other.queue_by_name("jobs")?, 1)?; // process slot 1
/// let job = thief.steal()?.expect("a job");
/// assert_eq!(job.payload()?, b"first");
/// job.ack()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Thief {
    deques: Arc<[DequeRef<'static>]>,
    ctx: QueueCtx<'static>,
    info: QueueInfo,
    me: u32,
    next: StdAtomicU32,
    seg: Arc<Segment>,
}

impl Clone for Thief {
    fn clone(&self) -> Self {
        Self {
            deques: self.deques.clone(),
            ctx: self.ctx,
            info: self.info.clone(),
            me: self.me,
            next: StdAtomicU32::new(self.next.load(Ordering::Relaxed).wrapping_add(7)),
            seg: self.seg.clone(),
        }
    }
}

impl std::fmt::Debug for Thief {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thief").field("queue", &self.info.spec.name).field("me", &self.me).finish()
    }
}

impl Thief {
    /// A thief on `queue` as process slot `me`.
    pub fn new(seg: Arc<Segment>, queue: &QueueInfo, me: u32) -> Result<Self, QueueError> {
        // SAFETY: as in `Owner::new`.
        let s = unsafe { extend(&seg) };
        if queue.spec.deques == 0 {
            // `steal` picks a deque modulo their number.
            return Err(QueueError::NoSuchDeque { queue: queue.spec.name.clone(), index: 0, count: 0 });
        }
        let deques = (0..queue.spec.deques).map(|d| s.deque(queue, d)).collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            deques: deques.into(),
            ctx: QueueCtx::new(s, queue)?,
            info: queue.clone(),
            me,
            next: StdAtomicU32::new(me.wrapping_mul(0x9E37_79B9)),
            seg,
        })
    }

    /// The queue.
    pub fn queue(&self) -> &QueueInfo {
        &self.info
    }

    /// Jobs visible in the queue's deques and overflow ring, approximately.
    pub fn len(&self) -> usize {
        self.deques.iter().map(|d| d.len()).sum::<usize>() + self.ctx.overflow.len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steals the oldest job of deque `deque`. `Retry` also covers a stale handle skipped.
    pub fn steal_from(&self, deque: u32) -> Steal<ClaimedJob<'_>> {
        self.steal_counted(deque, &mut 0)
    }

    /// [`steal_from`](Self::steal_from), counting in `skipped` the handles taken off the
    /// deque whose claim failed.
    fn steal_counted(&self, deque: u32, skipped: &mut usize) -> Steal<ClaimedJob<'_>> {
        let Some(d) = self.deques.get(deque as usize) else {
            return Steal::Empty;
        };
        match d.steal() {
            Steal::Success(w) => {
                crate::fail_point!("steal.after_cas");
                match self.ctx.claim_word(w, self.me) {
                    Some(j) => Steal::Success(j),
                    None => {
                        *skipped += 1;
                        Steal::Retry
                    }
                }
            }
            Steal::Empty => Steal::Empty,
            Steal::Retry => Steal::Retry,
        }
    }

    /// Steals up to `limit` jobs of deque `deque` (about half of it), appending them to
    /// `out`; one CAS for a FIFO queue. Returns how many were claimed.
    pub fn steal_batch_from<'s>(
        &'s self,
        deque: u32,
        limit: usize,
        out: &mut Vec<ClaimedJob<'s>>,
    ) -> Steal<usize> {
        let Some(d) = self.deques.get(deque as usize) else {
            return Steal::Empty;
        };
        let mut buf = [0u64; MAX_BATCH];
        let n = limit.clamp(1, MAX_BATCH);
        match d.steal_batch_into(&mut buf[..n]) {
            Steal::Success(k) => {
                crate::fail_point!("steal.after_cas");
                // Every record's transfer starts before the first claim, so the k misses
                // overlap instead of following one another.
                for h in buf[..k].iter().filter_map(|&w| JobHandle::from_word(w)) {
                    self.ctx.records.prefetch_for_claim(h.index);
                }
                let before = out.len();
                out.extend(buf[..k].iter().filter_map(|&w| self.ctx.claim_word(w, self.me)));
                match out.len() - before {
                    0 => Steal::Retry,
                    c => Steal::Success(c),
                }
            }
            Steal::Empty => Steal::Empty,
            Steal::Retry => Steal::Retry,
        }
    }

    /// Takes a job from the overflow ring.
    pub fn steal_overflow(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        self.ctx.pop_overflow(self.me)
    }

    /// Any job: the overflow ring, then every deque from a rotating start; rounds repeat
    /// while some steal lost a race. `None` when everything looked empty.
    pub fn steal(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        // A corrupt ring must not hide the jobs in the deques: try them, and report the
        // ring's error only when they had nothing either.
        let ring_error = match self.ctx.pop_overflow(self.me) {
            Ok(Some(j)) => return Ok(Some(j)),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        let n = self.deques.len() as u32;
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        // Each skipped handle moved a `top` on, and the deques hold at most their capacities
        // in handles; more skips than that in one call means corrupt indices (a `bottom` far
        // past `top`), not stale handles: report it instead of walking up to 2^63 garbage
        // slots. Lost races are not counted: each is another consumer's progress.
        let max_skips: usize = self.deques.iter().map(|d| d.capacity()).sum();
        let mut skipped = 0;
        loop {
            let mut retry = false;
            for k in 0..n {
                match self.steal_counted((start + k) % n, &mut skipped) {
                    Steal::Success(j) => return Ok(Some(j)),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if skipped > max_skips {
                return Err(RingError::Corrupt(format!(
                    "deques of queue {}: {skipped} handles in one steal named no queued job; \
                     their indices or slots are corrupt",
                    self.info.spec.name
                )));
            }
            if !retry {
                return match ring_error {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            }
            crate::sync::spin_hint();
        }
    }

    /// Like [`steal`](Self::steal), sleeping on the queue's wait word until a job arrives or
    /// `deadline` passes (`None`: forever). `Ok(None)`: timed out.
    pub fn steal_wait(&self, deadline: Option<Instant>) -> Result<Option<ClaimedJob<'_>>, RingError> {
        crate::wait::wait_for(self.ctx.wait, deadline, || self.steal())
    }
}

/// A job this process has claimed: run it, then [`ack`](Self::ack) or [`nack`](Self::nack).
/// Dropped without either, it is nacked (so a panic in the job's code re-queues it).
#[derive(Debug)]
pub struct ClaimedJob<'q> {
    ctx: &'q QueueCtx<'q>,
    /// Our lease deadline, CLOCK_MONOTONIC ns (0: none).
    deadline: std::cell::Cell<u64>,
    /// `(index, generation)` of our claim; the generation moves on when we extend the lease.
    handle: std::cell::Cell<JobHandle>,
    me: u32,
    done: bool,
}

impl ClaimedJob<'_> {
    /// `(record index, generation)` of the claim; the generation moves on with each
    /// [`extend_lease`](Self::extend_lease).
    pub fn handle(&self) -> JobHandle {
        self.handle.get()
    }

    /// A copy of the payload.
    pub fn payload(&self) -> Result<Vec<u8>, JobError> {
        let mut v = Vec::new();
        self.read_payload(&mut v)?;
        Ok(v)
    }

    /// Appends the payload to `out` (reuse one buffer across jobs).
    pub fn read_payload(&self, out: &mut Vec<u8>) -> Result<(), JobError> {
        let st = self
            .ctx
            .records
            .state(self.handle.get().index)
            .ok_or_else(|| JobError::Corrupt("record out of range".into()))?;
        let ours =
            crate::record::state::StateWord::pack(self.handle.get().generation, State::Claimed, self.me);
        let before = out.len();
        // SAFETY: we hold the record in Claimed(me): our claim CAS succeeded, and only we move
        // it on, except recovery of a dead holder (not us: we run) and lease expiry, which
        // revokes a live holder whose lease ran out. In that case a producer may be rewriting
        // the payload while we copy it; the copy stays inside the record (its length is
        // bounds-checked) and the check below throws it away.
        unsafe { self.ctx.records.read_payload(self.handle.get().index, out) }?;
        // The fence keeps the copy's reads before the re-check (an Acquire load alone orders
        // only what comes after it; as in a seqlock reader), and makes the check see a revoke
        // whose Release preceded a rewrite we might have copied from.
        crate::sync::fence(Ordering::Acquire);
        let now = crate::record::state::StateWord(st.0.load(Ordering::Acquire));
        if now != ours {
            out.truncate(before);
            return Err(self.not_held(now.0));
        }
        Ok(())
    }

    /// The job's stable id (the handle it was pushed as), the same at every attempt.
    pub fn id(&self) -> crate::JobId {
        match self.ctx.records.header(self.handle.get().index) {
            Some(h) => crate::dead_letter::job_id(h, self.handle.get().index),
            None => crate::JobId::of_push(self.handle.get()),
        }
    }

    /// Times this job was given back before this claim.
    pub fn attempts(&self) -> u32 {
        self.ctx
            .records
            .header(self.handle.get().index)
            .map(|h| h.attempts.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// When it was queued: CLOCK_MONOTONIC ns at the kernel tick's resolution (1-4 ms; a
    /// job's age, not a latency measurement).
    pub fn enqueued_ns(&self) -> u64 {
        self.ctx
            .records
            .header(self.handle.get().index)
            .map(|h| h.enqueued_ns.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// The claim's lease deadline (CLOCK_MONOTONIC ns), `None` without a lease.
    pub fn lease_deadline_ns(&self) -> Option<u64> {
        Some(self.deadline.get()).filter(|&d| d != 0)
    }

    /// Extends (or sets) the claim's lease to `lease` from now: a heartbeat for a long job.
    /// Fails with `LeaseExpired` / `NotHeld` when the job is no longer ours.
    pub fn extend_lease(&self, lease: std::time::Duration) -> Result<(), JobError> {
        let (Some(st), Some(hdr)) = (
            self.ctx.records.state(self.handle.get().index),
            self.ctx.records.header(self.handle.get().index),
        ) else {
            return Err(JobError::Corrupt("record out of range".into()));
        };
        // Writing(me) while we store the deadline: a revoke cannot slip in between a check
        // and the store and leave our deadline on the record's next claim.
        st.begin_write(self.handle.get().generation, self.me).map_err(|c| self.not_held(c.found.0))?;
        let d = monotonic_ns().saturating_add(lease.as_nanos().min(u64::MAX as u128) as u64);
        // Relaxed: published by end_write's Release.
        hdr.deadline_ns.store(d, Ordering::Relaxed);
        self.deadline.set(d);
        let g = st.end_write(self.handle.get().generation, self.me).map_err(|c| self.not_held(c.found.0))?;
        self.handle.set(JobHandle { index: self.handle.get().index, generation: g });
        Ok(())
    }

    fn not_held(&self, found: u64) -> JobError {
        let d = self.deadline.get();
        if d != 0 && monotonic_ns() >= d {
            return JobError::LeaseExpired { handle: self.handle.get() };
        }
        let w = crate::record::state::StateWord(found);
        JobError::NotHeld {
            handle: self.handle.get(),
            found: format!("{:?} generation {} holder {}", w.state(), w.generation(), w.holder()),
        }
    }

    /// Done: frees the record.
    pub fn ack(mut self) -> Result<(), JobError> {
        self.done = true;
        let st = self
            .ctx
            .records
            .state(self.handle.get().index)
            .ok_or_else(|| JobError::Corrupt("record out of range".into()))?;
        crate::fail_point!("ack.before_cas");
        st.ack(self.handle.get().generation, self.me).map_err(|c| self.not_held(c.found.0))
    }

    /// Failed: re-queues the job (attempt + 1) on the overflow ring, or dead-letters it when
    /// the queue's attempt limit is reached.
    pub fn nack(mut self) -> Result<(), JobError> {
        self.done = true;
        self.give_back(None)
    }

    /// Like [`nack`](Self::nack), recording why (the first
    /// [`LAST_ERROR_BYTES`](crate::dead_letter::LAST_ERROR_BYTES) bytes), which a dead
    /// letter keeps.
    pub fn fail(mut self, reason: &str) -> Result<(), JobError> {
        self.done = true;
        self.give_back(Some(reason))
    }

    /// Gives the job back *without* counting an attempt, for a job this consumer did not run
    /// (it could not hand the payload on, or was told to stop before it finished): re-queued
    /// on the overflow ring, never dead-lettered.
    pub fn release(mut self) -> Result<(), JobError> {
        self.done = true;
        self.give_back_as(None, false)
    }

    /// Failed: like [`fail`](Self::fail) (or [`nack`](Self::nack) without a reason), but the
    /// job waits `delay` before it is in line again (a retry backoff): it is left `Delayed`,
    /// in no index, and the caller must tell the daemon the returned handle (it re-queues
    /// the job once due). `Ok(None)`: the job reached the attempt limit and is a dead letter
    /// now, with nothing to tell.
    pub fn fail_after(
        mut self,
        reason: Option<&str>,
        delay: std::time::Duration,
    ) -> Result<Option<JobHandle>, JobError> {
        self.done = true;
        let due = monotonic_ns().saturating_add(delay.as_nanos().min(u64::MAX as u128) as u64);
        self.give_back_until(reason, true, Some(due))
    }

    fn give_back(&self, reason: Option<&str>) -> Result<(), JobError> {
        self.give_back_as(reason, true)
    }

    fn give_back_as(&self, reason: Option<&str>, count_attempt: bool) -> Result<(), JobError> {
        self.give_back_until(reason, count_attempt, None).map(|_| ())
    }

    /// Gives the job back: re-queued now (`due_ns` `None`) or `Delayed` until `due_ns`
    /// (returns the delayed job's handle), or dead-lettered at the attempt limit.
    fn give_back_until(
        &self,
        reason: Option<&str>,
        count_attempt: bool,
        due_ns: Option<u64>,
    ) -> Result<Option<JobHandle>, JobError> {
        let idx = self.handle.get().index;
        let (Some(hdr), Some(st)) = (self.ctx.records.header(idx), self.ctx.records.state(idx)) else {
            return Err(JobError::Corrupt("record out of range".into()));
        };
        let g = self.handle.get().generation;
        // Claimed(me) -> Writing(me) first: if lease expiry took the job back, this fails and
        // we write nothing (the header may already be the next claim's, or another job's);
        // once it succeeds, nothing but our own death moves the record until we leave
        // Writing, so the header writes below cannot land on another job.
        st.begin_write(g, self.me).map_err(|c| self.not_held(c.found.0))?;
        crate::fail_point!("give_back.writing");
        if let Some(reason) = reason {
            crate::dead_letter::store_last_error(hdr, reason);
        }
        // Relaxed: published by the Release of the CAS that leaves Writing.
        let attempts = hdr.attempts.load(Ordering::Relaxed).saturating_add(count_attempt as u32);
        hdr.attempts.store(attempts, Ordering::Relaxed);
        // Cleared before the Release CAS that gives the job back: the next claim's CAS
        // continues that release sequence, so a lease scan that Acquires `Claimed(g, next)`
        // reads 0 or the next claim's deadline, never ours (which may have passed while the
        // job waited in line, and would expire the next claim at once).
        hdr.deadline_ns.store(0, Ordering::Relaxed);
        if count_attempt && self.ctx.max_attempts != 0 && attempts >= self.ctx.max_attempts {
            return st.dead_letter_written(g, self.me).map(|_| None).map_err(|c| self.not_held(c.found.0));
        }
        if let Some(due) = due_ns {
            // Relaxed: published by delay_written's Release. The due time is the time the
            // job joins the line again (see `RecordHeader::enqueued_ns`).
            hdr.enqueued_ns.store(due.max(1), Ordering::Relaxed);
            st.delay_written(g, self.me).map_err(|c| self.not_held(c.found.0))?;
            crate::fail_point!("delay.after_publish");
            return Ok(Some(JobHandle { index: idx, generation: next_generation(g) }));
        }
        // State first, then index: a crash in between leaves a Queued, unindexed record,
        // which recovery re-indexes. The other order could leave an index whose claim fails
        // while we still hold the record, and the job would wait for recovery.
        st.requeue_written(g, self.me).map_err(|c| self.not_held(c.found.0))?;
        crate::fail_point!("nack.after_requeue");
        match self.ctx.overflow.push(idx) {
            Ok(()) => crate::wait::notify(self.ctx.wait),
            // The job is queued but the ring has no room for its index: the daemon's stray
            // sweep indexes it once there is (`recovery::StraySweep`), so the give-back is
            // done; failing it would tell the caller a queued job was lost.
            Err(RingError::Full) => {}
            Err(source) => return Err(JobError::Requeue { handle: self.handle.get(), source }),
        }
        Ok(None)
    }
}

impl Drop for ClaimedJob<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.give_back(None);
        }
    }
}
