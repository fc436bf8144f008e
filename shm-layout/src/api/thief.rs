//! Consumers: [`Thief`], which steals claimed jobs from every deque of a queue and from its
//! overflow ring.
//!
//! - A steal takes a handle (one CAS on a deque's `top`, or on the ring's head), then claims
//!   the record it names (one CAS on the state word): the claim alone decides who runs a job,
//!   so a stale or duplicated handle is skipped, never run twice.
//! - A paused queue (`segment::flow`) gives nothing, nor does one at its concurrency limit
//!   (`segment::running`): the gate is passed before a handle is taken, so no job leaves its
//!   index only to be put back; a slot taken for a take that found nothing is given back.
//! - A round repeats only while some steal lost a race (another consumer's progress); more
//!   skipped handles than the deques can hold means corrupt indices, reported, not walked.

use std::sync::atomic::AtomicU32 as StdAtomicU32;
use std::sync::Arc;
use std::time::Instant;

use super::batch::claim_words_into;
use super::{extend, ClaimedBatch, ClaimedJob, QueueCtx};
use crate::deque::{DequeRef, Steal, MAX_BATCH};
use crate::overflow::RingError;
use crate::record::state::JobHandle;

mod levels;
use crate::segment::{QueueError, QueueInfo, Segment};
use crate::sync::Ordering;
use levels::Levels;

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
/// let config = SegmentConfig::small().with_queues(1, 1).with_records(64);
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
    /// Every deque of every level, level by level (`Segment::deque`).
    deques: Arc<[DequeRef<'static>]>,
    ctx: QueueCtx<'static>,
    /// A queue of several priority levels; `None` for one, which takes no other path.
    levels: Option<Arc<Levels>>,
    info: QueueInfo,
    me: u32,
    next: StdAtomicU32,
    /// Jobs this handle took from a queue of several levels, for aging.
    taken: StdAtomicU32,
    seg: Arc<Segment>,
}

impl Clone for Thief {
    fn clone(&self) -> Self {
        Self {
            deques: self.deques.clone(),
            ctx: self.ctx,
            levels: self.levels.clone(),
            info: self.info.clone(),
            me: self.me,
            next: StdAtomicU32::new(self.next.load(Ordering::Relaxed).wrapping_add(7)),
            taken: StdAtomicU32::new(0),
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
        let deques =
            (0..queue.spec.level_deques()).map(|d| s.deque(queue, d)).collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            deques: deques.into(),
            ctx: QueueCtx::for_handle(s, queue)?,
            levels: Self::levels(s, queue)?,
            info: queue.clone(),
            me,
            next: StdAtomicU32::new(me.wrapping_mul(0x9E37_79B9)),
            taken: StdAtomicU32::new(0),
            seg,
        })
    }

    /// The queue.
    pub fn queue(&self) -> &QueueInfo {
        &self.info
    }

    /// Jobs visible in the queue's deques and overflow ring, approximately.
    pub fn len(&self) -> usize {
        let rings = match &self.levels {
            Some(lv) => lv.rings.iter().map(|r| r.len()).sum(),
            None => self.ctx.overflow.len(),
        };
        self.deques.iter().map(|d| d.len()).sum::<usize>() + rings
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steals the oldest job of deque `deque`. `Retry` also covers a stale handle skipped.
    pub fn steal_from(&self, deque: u32) -> Steal<ClaimedJob<'_>> {
        let Some(pass) = self.ctx.enter(1, || self.deque_empty(deque)) else { return Steal::Empty };
        let r = self.steal_counted(deque, &mut 0);
        if !matches!(r, Steal::Success(_)) {
            self.ctx.leave_unused(pass, 0);
        }
        r
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

    /// Steals up to `limit` jobs of deque `deque` (all it holds, up to `limit`), appending
    /// them to `out`; one CAS for a FIFO queue. Returns how many were claimed.
    pub fn steal_batch_from<'s>(
        &'s self,
        deque: u32,
        limit: usize,
        out: &mut Vec<ClaimedJob<'s>>,
    ) -> Steal<usize> {
        // 0 takes nothing (see `steal_batch_counted`), and holds no slot.
        if limit == 0 {
            return Steal::Empty;
        }
        let Some(pass) = self.ctx.enter(limit.min(MAX_BATCH), || self.deque_empty(deque)) else {
            return Steal::Empty;
        };
        let r = self.steal_batch_counted(deque, pass.n, out, &mut 0);
        self.ctx.leave_unused(pass, if let Steal::Success(got) = r { got } else { 0 });
        r
    }

    /// Like [`steal_batch_from`](Self::steal_batch_from), into `batch` (emptied first, its
    /// unsettled jobs nacked): the handles go straight into a buffer of ours, then each
    /// record is claimed. `Retry` also covers a batch whose every handle was stale.
    ///
    /// Between the CAS and the claims the jobs are `Queued` in no index: a crash there leaves
    /// orphans, which recovery and the daemon's stray sweep index again.
    pub fn steal_batch_claimed_from<'s>(
        &'s self,
        deque: u32,
        limit: usize,
        batch: &mut ClaimedBatch<'s>,
    ) -> Steal<usize> {
        batch.clear();
        // 0 takes nothing (see `steal_batch_counted`), and holds no slot.
        if limit == 0 {
            return Steal::Empty;
        }
        let Some(pass) = self.ctx.enter(limit.min(MAX_BATCH), || self.deque_empty(deque)) else {
            return Steal::Empty;
        };
        let r = self.steal_batch_counted(deque, pass.n, batch.jobs_mut(), &mut 0);
        self.ctx.leave_unused(pass, if let Steal::Success(got) = r { got } else { 0 });
        r
    }

    /// The batch steal: counts in `skipped` the handles taken off the deque whose claim
    /// failed.
    fn steal_batch_counted<'s>(
        &'s self,
        deque: u32,
        limit: usize,
        out: &mut Vec<ClaimedJob<'s>>,
        skipped: &mut usize,
    ) -> Steal<usize> {
        let Some(d) = self.deques.get(deque as usize) else {
            return Steal::Empty;
        };
        // A limit of 0 takes nothing: a job claimed for a caller that asked for none would be
        // nacked when dropped, an attempt it never made.
        let n = limit.min(MAX_BATCH);
        if n == 0 {
            return Steal::Empty;
        }
        // Zeroing a buffer is paid on every look, empty ones included (a consumer that keeps
        // up looks about twice per job): 256 bytes for the usual limits, 1 KiB only above 32.
        let (mut small, mut large);
        let buf: &mut [u64] = if n <= 32 {
            small = [0u64; 32];
            &mut small[..n]
        } else {
            large = [0u64; MAX_BATCH];
            &mut large[..n]
        };
        match d.steal_up_to_into(buf) {
            Steal::Success(k) => {
                crate::fail_point!("steal_batch.after_cas");
                let c = claim_words_into(&self.ctx, &buf[..k], self.me, out);
                *skipped += k - c;
                if c == 0 {
                    Steal::Retry
                } else {
                    Steal::Success(c)
                }
            }
            Steal::Empty => Steal::Empty,
            Steal::Retry => Steal::Retry,
        }
    }

    /// Up to `limit` jobs into `batch` (emptied first, its unsettled jobs nacked): from the
    /// overflow ring while it has any, else what one deque holds, up to `limit` (one CAS on
    /// `top` for a FIFO queue), trying every deque from a rotating start, with rounds repeated
    /// while a steal lost a race. `Ok(0)` when everything looked empty, or `limit` is 0.
    pub fn steal_batch_claimed<'s>(
        &'s self,
        limit: usize,
        batch: &mut ClaimedBatch<'s>,
    ) -> Result<usize, RingError> {
        batch.clear();
        // 0 takes nothing (see `steal_batch_counted`).
        let limit = limit.min(MAX_BATCH);
        if limit == 0 {
            return Ok(0);
        }
        let Some(pass) = self.ctx.enter(limit, || self.all_empty()) else { return Ok(0) };
        let r = match &self.levels {
            None => self.steal_batch_open(pass.n, batch),
            Some(lv) => {
                let jobs = batch.jobs_mut();
                self.by_level(lv, |level| self.steal_batch_level(lv, level, pass.n, jobs))
                    .map(|c| c.unwrap_or(0))
            }
        };
        self.ctx.leave_unused(pass, r.as_ref().map_or(0, |&got| got));
        r
    }

    /// [`steal_batch_claimed`](Self::steal_batch_claimed) once the gate let `limit` takes
    /// through.
    fn steal_batch_open<'s>(
        &'s self,
        limit: usize,
        batch: &mut ClaimedBatch<'s>,
    ) -> Result<usize, RingError> {
        let ring_error = loop {
            if batch.len() >= limit {
                return Ok(batch.len());
            }
            match self.ctx.pop_overflow(self.me) {
                Ok(Some(j)) => batch.push_claimed(j),
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        if !batch.is_empty() {
            return Ok(batch.len());
        }
        let jobs = batch.jobs_mut();
        let taken =
            self.walk_deques(ring_error, |d, skipped| self.steal_batch_counted(d, limit, jobs, skipped));
        taken.map(|c| c.unwrap_or(0))
    }

    /// Whether deque `deque` looks empty now (out of range: yes).
    fn deque_empty(&self, deque: u32) -> bool {
        self.deques.get(deque as usize).is_none_or(|d| d.is_empty())
    }

    /// Whether the overflow rings and every deque look empty now.
    fn all_empty(&self) -> bool {
        let rings = match &self.levels {
            Some(lv) => lv.rings.iter().all(|r| r.is_empty()),
            None => self.ctx.overflow.is_empty(),
        };
        rings && self.deques.iter().all(|d| d.is_empty())
    }

    /// Takes a job from the overflow ring (of a queue of several levels: from the rings,
    /// most urgent first).
    pub fn steal_overflow(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        let Some(lv) = &self.levels else {
            return self.ctx.gated(|| self.ctx.overflow.is_empty(), || self.ctx.pop_overflow(self.me));
        };
        self.ctx.gated(
            || lv.rings.iter().all(|r| r.is_empty()),
            || {
                for ring in &lv.rings {
                    if let Some(j) = self.ctx.pop_ring(ring, self.me)? {
                        return Ok(Some(j));
                    }
                }
                Ok(None)
            },
        )
    }

    /// Any job: the overflow ring, then every deque from a rotating start; rounds repeat
    /// while some steal lost a race. `None` when everything looked empty. Of a queue of
    /// several levels, the same within the most urgent level that holds jobs
    /// (`crate::levels`).
    // Always inlined, as `Owner::pop` is, with the levels' walk behind a call that gives back
    // its job in two registers (`steal_by_level`): returned through memory, the ~40-byte
    // result made both arms meet in memory, and the one-level steal + ack on one thread took
    // about 7 ns more; inlined, the walk still cost it 3-5 ns
    // (benches/results/2026-12-07-priorities.md).
    #[inline(always)]
    pub fn steal(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        if let Some(lv) = &self.levels {
            let mut error = None;
            let (word, deadline) = self.steal_by_level(lv, &mut error);
            return match JobHandle::from_word(word) {
                Some(handle) => Ok(Some(self.ctx.job(handle, self.me, deadline))),
                None => error.map_or(Ok(None), Err),
            };
        }
        self.ctx.gated(|| self.all_empty(), || self.steal_open())
    }

    /// [`steal`](Self::steal) once the gate let it through.
    #[inline]
    fn steal_open(&self) -> Result<Option<ClaimedJob<'_>>, RingError> {
        // A corrupt ring must not hide the jobs in the deques: try them, and report the
        // ring's error only when they had nothing either.
        let ring_error = match self.ctx.pop_overflow(self.me) {
            Ok(Some(j)) => return Ok(Some(j)),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        self.walk_deques(ring_error, |d, skipped| self.steal_counted(d, skipped))
    }

    /// The look both steals share: `look` at every deque from a rotating start, in rounds
    /// repeated while some look lost a race, until one yields; then `ring_error` (the
    /// overflow ring was looked at first) once every deque looked empty. `look` counts in its
    /// second argument the handles it took whose claim failed.
    ///
    /// Generic and inlined: each steal gets its own copy of the loop with its look in it, no
    /// call through a pointer.
    #[inline]
    fn walk_deques<T>(
        &self,
        ring_error: Option<RingError>,
        look: impl FnMut(u32, &mut usize) -> Steal<T>,
    ) -> Result<Option<T>, RingError> {
        self.walk_deques_in(0, self.deques.len() as u32, ring_error, look)
    }

    /// [`walk_deques`](Self::walk_deques) over the `n` deques from `first` (one level's).
    /// Always inlined (see `steal`).
    #[inline(always)]
    fn walk_deques_in<T>(
        &self,
        first: u32,
        n: u32,
        ring_error: Option<RingError>,
        mut look: impl FnMut(u32, &mut usize) -> Steal<T>,
    ) -> Result<Option<T>, RingError> {
        // A rotating start spreads thieves over the deques; with one deque there is nothing
        // to spread.
        let start = if n == 1 { 0 } else { self.rotate() % n };
        // Each skipped handle moved a `top` on, and the deques hold at most their capacities
        // in handles; more skips than that in one call means corrupt indices (a `bottom` far
        // past `top`), not stale handles: report it instead of walking up to 2^63 garbage
        // slots. Lost races are not counted: each is another consumer's progress.
        let max_skips: usize = self.deques.iter().map(|d| d.capacity()).sum();
        let mut skipped = 0;
        loop {
            let mut retry = false;
            for k in 0..n {
                match look(first + (start + k) % n, &mut skipped) {
                    Steal::Success(x) => return Ok(Some(x)),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if skipped > max_skips {
                return Err(self.corrupt_skips(skipped));
            }
            if !retry {
                return ring_error.map_or(Ok(None), Err);
            }
            crate::sync::spin_hint();
        }
    }

    /// The next deque to look at first, moved on by one. A load and a store, not a
    /// `fetch_add`: the start is only a hint that spreads looks over the deques, so two
    /// threads of one thief reading the same value cost nothing but the same start, and
    /// the locked instruction a steal would pay for exactness buys nothing.
    fn rotate(&self) -> u32 {
        let s = self.next.load(Ordering::Relaxed);
        self.next.store(s.wrapping_add(1), Ordering::Relaxed);
        s
    }

    /// The error for a steal that skipped more handles than the deques hold.
    fn corrupt_skips(&self, skipped: usize) -> RingError {
        RingError::Corrupt(format!(
            "deques of queue {}: {skipped} handles in one steal named no queued job; \
             their indices or slots are corrupt",
            self.info.spec.name
        ))
    }

    /// Like [`steal`](Self::steal), sleeping on the queue's wait word until a job arrives or
    /// `deadline` passes (`None`: forever). `Ok(None)`: timed out.
    pub fn steal_wait(&self, deadline: Option<Instant>) -> Result<Option<ClaimedJob<'_>>, RingError> {
        crate::wait::wait_for(
            self.ctx.wait.of_slot(&self.seg, self.me),
            deadline,
            || self.steal(),
            || !self.all_empty(),
        )
    }
}
