//! Owner, thief and injector handles: the segment API of `xtcq-shm` bound to a control
//! connection.
//!
//! Invariants:
//! - a handle holds an `Arc` of the connection, so the daemon sees the process attached for
//!   as long as any handle lives; the segment mapping is held by the `xtcq-shm` object;
//! - an [`OwnerHandle`] drops its `Owner` *before* it gives the lease back (field order, and
//!   `detach` drops it first explicitly), so the deque is never touched after the daemon
//!   may have handed it to another process;
//! - the queue a handle acts on is the one the daemon named, checked by index *and* name
//!   against the segment's table;
//! - in a forked child ([`crate::fork`]) every operation fails with [`Error::Forked`] before
//!   it touches the segment, and drops settle nothing (see [`crate::job`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_proto::{Attachment, JobState, OwnerLease, QueueInfo, Request};
use xtcq_shm::overflow::RingError;
use xtcq_shm::{ClaimedJob, Injector, JobHandle, JobId, Owner, Segment, Steal, Thief};

use crate::conn::Conn;
use crate::job::Job;
use crate::Error;

pub(crate) fn overflow_ring_error(e: RingError) -> Error {
    Error::Corrupt(e.to_string())
}

/// Resolves the queue the daemon named in the segment, checking that both agree.
fn resolve(seg: &Segment, conn: &Conn, q: &QueueInfo) -> Result<xtcq_shm::QueueInfo, Error> {
    let info = seg.queue(q.index)?;
    if info.spec.name != q.name || info.spec.deques != q.deques || info.spec.capacity != q.capacity {
        return Err(Error::Protocol {
            path: conn.path().to_path_buf(),
            message: format!(
                "the daemon named queue {} at table entry {}, but the segment has {:?} there",
                q.name, q.index, info.spec.name
            ),
        });
    }
    Ok(info)
}

/// Whether a handle may still act: not once a daemon restarted with `--recreate` retired its
/// segment (its jobs would be seen by no one), nor once its process slot is no longer this
/// attachment's — the daemon recovered it (it took the process for dead), perhaps gave it to
/// another process (a new epoch), or refused to give it back on a reconnect (`lost_at` is
/// `Conn::slots_lost` when the handle was made). Read from the segment on each call, so a
/// process that makes no requests (a pure producer or worker) still stops at once. Loads of
/// lines written only at registration and recovery.
#[inline]
pub(crate) fn usable(seg: &Segment, conn: &Conn, att: &Attachment, lost_at: u64) -> Result<(), Error> {
    conn.not_forked()?;
    if seg.is_retired() {
        if seg.is_lost() {
            return Err(Error::SegmentLost { segment: seg.path().to_path_buf() });
        }
        return Err(Error::SegmentReplaced {
            path: conn.path().to_path_buf(),
            segment: seg.path().to_path_buf(),
        });
    }
    let lost = |message: &str| Error::SlotNotResumed {
        path: conn.path().to_path_buf(),
        slot: att.process_slot,
        message: message.into(),
    };
    if conn.slots_lost() != lost_at {
        return Err(lost("this handle was attached under that slot"));
    }
    let ours = seg.process_slot(att.process_slot).is_some_and(|p| {
        p.state.load(Ordering::Relaxed) == xtcq_shm::layout::PROCESS_ACTIVE
            && p.epoch.load(Ordering::Relaxed) == att.slot_epoch
    });
    if !ours {
        return Err(lost("the segment no longer registers it to this handle's attachment (recovered, or another process's now)"));
    }
    Ok(())
}

/// Steal rounds that all lose (a race, or a stale handle) before a steal gives up with
/// `Corrupt`: a lost race means a rival made progress, so a million in a row (about 0.1-1 s
/// of spinning) only happens on a deque whose indices were scribbled.
pub(crate) const MAX_STEAL_ROUNDS: u32 = 1_000_000;

/// Gives a deque lease back when dropped (after the `Owner` declared before it).
struct LeaseGuard {
    conn: Arc<Conn>,
    lease: OwnerLease,
    released: bool,
}

impl LeaseGuard {
    fn release(&mut self, timeout: Duration) -> Result<(), Error> {
        self.released = true;
        let q = &self.lease.attachment.queue.name;
        self.conn
            .request_within(Request::Detach { queue: q.clone(), deque: self.lease.deque }, Some(q), timeout)
            .map(|_| ())
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        // Not in a forked child: the lease is the parent's (`is_connected` locks, too).
        if !self.released && self.conn.not_forked().is_ok() && self.conn.is_connected() {
            // Best effort: if the daemon is gone the lease ends when this process exits.
            let _ = self.release(Duration::from_secs(2));
        }
    }
}

/// A producer's handle: owns one deque of a queue. `Send`, not `Sync` (one thread pushes
/// and pops; that is what makes the deque lock-free at the bottom).
pub struct OwnerHandle {
    // Declared before `lease`: dropped first.
    pub(crate) owner: Owner,
    lease: LeaseGuard,
    lost_at: u64,
}

impl std::fmt::Debug for OwnerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerHandle")
            .field("queue", &self.lease.lease.attachment.queue.name)
            .field("deque", &self.lease.lease.deque)
            .field("slot", &self.lease.lease.attachment.process_slot)
            .finish()
    }
}

impl OwnerHandle {
    pub(crate) fn new(conn: Arc<Conn>, lease: OwnerLease) -> Result<Self, Error> {
        let seg = conn.segment(&lease.attachment.segment_path)?;
        let info = resolve(&seg, &conn, &lease.attachment.queue)?;
        let owner = Owner::new(seg, &info, lease.deque, lease.attachment.process_slot)?;
        let lost_at = conn.slots_lost();
        Ok(Self { owner, lease: LeaseGuard { conn, lease, released: false }, lost_at })
    }

    /// Also checks that the deque's lease word is still ours: two owners on one deque
    /// would break the Chase-Lev protocol.
    #[inline]
    pub(crate) fn usable(&self) -> Result<(), Error> {
        let lease = &self.lease.lease;
        let seg = self.owner.segment();
        usable(seg, &self.lease.conn, &lease.attachment, self.lost_at)?;
        let held = seg
            .deque_header(lease.attachment.queue.index, lease.deque)
            .is_some_and(|h| h.lease.load(Ordering::Relaxed) == lease.lease);
        if !held {
            return Err(Error::SlotNotResumed {
                path: self.lease.conn.path().to_path_buf(),
                slot: lease.attachment.process_slot,
                message: format!("deque {} is no longer leased to this handle", lease.deque),
            });
        }
        Ok(())
    }

    /// The queue.
    pub fn queue(&self) -> &QueueInfo {
        &self.lease.lease.attachment.queue
    }

    /// The deque owned.
    pub fn deque(&self) -> u32 {
        self.lease.lease.deque
    }

    /// This process's slot in the segment.
    pub fn process_slot(&self) -> u32 {
        self.lease.lease.attachment.process_slot
    }

    /// The lease as the daemon granted it.
    pub fn lease(&self) -> &OwnerLease {
        &self.lease.lease
    }

    /// Largest payload a job can carry.
    pub fn payload_capacity(&self) -> u32 {
        self.owner.segment().config().payload_bytes
    }

    /// Queues a job: into our deque, or the queue's overflow ring when the deque is full.
    /// Wakes sleeping thieves (a system call only when some sleep).
    pub fn push(&self, payload: &[u8]) -> Result<JobHandle, Error> {
        self.usable()?;
        self.owner.push(payload).map_err(Error::from_push)
    }

    /// [`push`](Self::push) at `priority`: 0 the most urgent (what `push` uses), up to the
    /// queue's `levels - 1`; consumers take from the most urgent non-empty level first.
    pub fn push_priority(&self, payload: &[u8], priority: u32) -> Result<JobHandle, Error> {
        self.usable()?;
        self.owner.push_priority(payload, priority).map_err(Error::from_push)
    }

    /// Our next job in the queue's order (LIFO or FIFO), else one from the overflow ring.
    pub fn pop(&self) -> Result<Option<Job<'_>>, Error> {
        self.usable()?;
        Ok(self
            .owner
            .pop()
            .map_err(overflow_ring_error)?
            .map(Job::new(self.owner.segment(), &self.lease.conn)))
    }

    /// Our oldest job (FIFO whatever the flavor), else one from the overflow ring.
    pub fn take(&self) -> Result<Option<Job<'_>>, Error> {
        self.usable()?;
        Ok(self
            .owner
            .take()
            .map_err(overflow_ring_error)?
            .map(Job::new(self.owner.segment(), &self.lease.conn)))
    }

    /// Jobs in our deque (approximate while thieves steal).
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// Stops owning the deque and gives the lease back now (dropping the handle does the
    /// same, best effort). Jobs left in the deque stay there for thieves.
    pub fn detach(self) -> Result<(), Error> {
        let OwnerHandle { owner, mut lease, .. } = self;
        drop(owner);
        let t = Duration::from_secs(10);
        lease.release(t)
    }
}

/// A consumer's handle on one queue: steals from its overflow ring and from every deque.
/// `Send + Sync` and `Clone` (clones share the connection; each thread may steal).
pub struct ThiefHandle {
    pub(crate) thief: Thief,
    pub(crate) seg: Arc<Segment>,
    pub(crate) att: Attachment,
    rng: AtomicU64,
    pub(crate) conn: Arc<Conn>,
    pub(crate) lost_at: u64,
}

impl Clone for ThiefHandle {
    fn clone(&self) -> Self {
        Self {
            thief: self.thief.clone(),
            seg: self.seg.clone(),
            att: self.att.clone(),
            rng: AtomicU64::new(self.next_random() | 1),
            conn: self.conn.clone(),
            lost_at: self.lost_at,
        }
    }
}

impl std::fmt::Debug for ThiefHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThiefHandle")
            .field("queue", &self.att.queue.name)
            .field("slot", &self.att.process_slot)
            .finish()
    }
}

fn seed(slot: u32) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64) | 1
}

impl ThiefHandle {
    pub(crate) fn new(conn: Arc<Conn>, att: Attachment) -> Result<Self, Error> {
        let seg = conn.segment(&att.segment_path)?;
        let info = resolve(&seg, &conn, &att.queue)?;
        let thief = Thief::new(seg.clone(), &info, att.process_slot)?;
        let lost_at = conn.slots_lost();
        Ok(Self { thief, seg, rng: AtomicU64::new(seed(att.process_slot)), att, conn, lost_at })
    }

    /// xorshift64*: a random start for each round of steals, so thieves spread out.
    pub(crate) fn next_random(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The queue.
    pub fn queue(&self) -> &QueueInfo {
        &self.att.queue
    }

    /// This process's slot in the segment.
    pub fn process_slot(&self) -> u32 {
        self.att.process_slot
    }

    /// Jobs visible in the queue (approximate).
    pub fn len(&self) -> usize {
        self.thief.len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.thief.is_empty()
    }

    pub(crate) fn deques(&self) -> u32 {
        self.thief.queue().spec.deques.max(1)
    }

    /// One job: the overflow ring first, then every deque from a random start; rounds repeat
    /// while a steal lost a race. `None` when everything looked empty. Of a queue of several
    /// priority levels, the same within the most urgent level that holds jobs.
    pub fn steal(&self) -> Result<Option<Job<'_>>, Error> {
        Ok(self.steal_claimed()?.map(Job::new(&self.seg, &self.conn)))
    }

    fn steal_claimed(&self) -> Result<Option<ClaimedJob<'_>>, Error> {
        // Also what a sleeping `steal_wait` sees when it is woken by the segment's retirement.
        usable(&self.seg, &self.conn, &self.att, self.lost_at)?;
        // A queue of several levels: the segment's thief walks them most urgent first.
        if self.thief.queue().spec.levels > 1 {
            return self.thief.steal().map_err(overflow_ring_error);
        }
        if let Some(j) = self.thief.steal_overflow().map_err(overflow_ring_error)? {
            return Ok(Some(j));
        }
        let n = self.deques();
        let start = (self.next_random() % n as u64) as u32;
        for _ in 0..MAX_STEAL_ROUNDS {
            let mut retry = false;
            for k in 0..n {
                match self.thief.steal_from((start + k) % n) {
                    Steal::Success(j) => return Ok(Some(j)),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
        Err(self.no_progress())
    }

    /// A steal that lost every round: a deque whose indices were scribbled (its `bottom`
    /// far beyond `top`) hands out stale handles forever.
    pub(crate) fn no_progress(&self) -> Error {
        Error::Corrupt(format!(
            "queue {}: {MAX_STEAL_ROUNDS} steal rounds in a row found only stale or contended slots; \
             a deque's indices look corrupt (run `xtcq check`)",
            self.att.queue.name
        ))
    }

    /// Like [`steal`](Self::steal), but sleeps (a futex on the queue's wait word, woken by a
    /// push in any process) until a job arrives or `timeout` passes (`None`: no limit).
    /// `Ok(None)`: timed out.
    pub fn steal_wait(&self, timeout: Option<Duration>) -> Result<Option<Job<'_>>, Error> {
        // A timeout too long to add to the clock is as good as none.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let Some(w) = self.seg.waker(self.att.queue.index) else {
            return Err(Error::Corrupt(format!("queue {} has no wait word", self.att.queue.name)));
        };
        let w = w.of_slot(&self.seg, self.att.process_slot);
        Ok(xtcq_shm::wait::wait_for(w, deadline, || self.steal_claimed(), || !self.thief.is_empty())?
            .map(Job::new(&self.seg, &self.conn)))
    }
}

/// A producer without a deque: each push goes to the queue's overflow ring. `Send`.
pub struct InjectorHandle {
    pub(crate) inj: Injector,
    pub(crate) att: Attachment,
    pub(crate) conn: Arc<Conn>,
    pub(crate) lost_at: u64,
}

impl std::fmt::Debug for InjectorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InjectorHandle").field("queue", &self.att.queue.name).finish()
    }
}

impl InjectorHandle {
    pub(crate) fn new(conn: Arc<Conn>, att: Attachment) -> Result<Self, Error> {
        let seg = conn.segment(&att.segment_path)?;
        let info = resolve(&seg, &conn, &att.queue)?;
        let inj = Injector::new(seg, &info, att.process_slot)?;
        let lost_at = conn.slots_lost();
        Ok(Self { inj, att, conn, lost_at })
    }

    /// The queue.
    pub fn queue(&self) -> &QueueInfo {
        &self.att.queue
    }

    /// Largest payload a job can carry.
    pub fn payload_capacity(&self) -> u32 {
        self.inj.segment().config().payload_bytes
    }

    /// This process's slot in the segment.
    pub fn process_slot(&self) -> u32 {
        self.att.process_slot
    }

    /// Jobs the queue's overflow ring (where this handle's pushes go) has room for now:
    /// approximate, other producers and consumers move it too.
    pub fn room(&self) -> usize {
        let seg = self.inj.segment();
        seg.overflow(self.att.queue.index).map_or(0, |r| r.capacity().saturating_sub(r.len()))
    }

    /// What became of job `id` of this handle's queue, read from the segment this handle
    /// pushes to, with no request: for a program that polls many of its jobs often (the
    /// bridge). [`Client::job_state`](crate::Client::job_state) asks the daemon instead,
    /// which also names a running job's pid; here `pid` is always `None`.
    ///
    /// A retired segment (the daemon restarted with `--recreate`) answers
    /// [`Error::SegmentReplaced`] or [`Error::SegmentLost`]: its jobs are never settled,
    /// and ids start over in the new one, so an id read against it means nothing.
    pub fn job_state(&self, id: JobId) -> Result<JobState, Error> {
        self.conn.not_forked()?;
        let seg = self.inj.segment();
        if seg.is_retired() {
            if seg.is_lost() {
                return Err(Error::SegmentLost { segment: seg.path().to_path_buf() });
            }
            return Err(Error::SegmentReplaced {
                path: self.conn.path().to_path_buf(),
                segment: seg.path().to_path_buf(),
            });
        }
        Ok(crate::job_state::local(seg, self.att.queue.index, id))
    }

    /// Queues a job on the overflow ring; wakes sleeping thieves.
    pub fn push(&self, payload: &[u8]) -> Result<JobHandle, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        self.inj.push(payload).map_err(Error::from_push)
    }

    /// [`push`](Self::push) at `priority`: 0 the most urgent (what `push` uses), up to the
    /// queue's `levels - 1`; on the overflow ring of that level.
    pub fn push_priority(&self, payload: &[u8], priority: u32) -> Result<JobHandle, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        self.inj.push_priority(payload, priority).map_err(Error::from_push)
    }

    /// Queues `payloads` in order at `priority` on the overflow ring of that level, as
    /// [`push_priority`](Self::push_priority) would one by one, with the handle's checks,
    /// the clock read and the wake made once for the lot; tells `queued` each job's
    /// position and handle once it is queued. Returns how many were queued, from the first:
    /// fewer than all when one failed (its error comes from the next call, as
    /// [`OwnerHandle::push_batch`](crate::OwnerHandle::push_batch)'s does); `Err` when the
    /// first failed.
    pub fn push_many(
        &self,
        payloads: &[&[u8]],
        priority: u32,
        queued: impl FnMut(usize, JobHandle),
    ) -> Result<usize, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        match self.inj.push_many(payloads, priority, queued) {
            Ok(()) => Ok(payloads.len()),
            Err(e) if e.queued > 0 => Ok(e.queued),
            Err(e) => Err(Error::from_push(e.error)),
        }
    }

    /// Writes a job copied out of a dump or another segment (`xtcq import`) with its
    /// attempts, last error and priority (past the queue's levels: its last level): queued,
    /// or a dead letter when `dead`; a queued one holds `key` unless a live job of the queue
    /// already does.
    pub fn import(
        &self,
        payload: &[u8],
        attempts: u32,
        last_error: &str,
        dead: bool,
        priority: u32,
        key: Option<&[u8]>,
    ) -> Result<JobHandle, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        let key = key.map(xtcq_shm::Key::new).transpose().map_err(|e| Error::KeyRefused(e.to_string()))?;
        self.inj.import(payload, attempts, last_error, dead, priority, key.as_ref()).map_err(Error::from_push)
    }
}
