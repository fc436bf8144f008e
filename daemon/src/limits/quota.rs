//! The registry's side of per-queue record quotas and dead-letter caps.
//!
//! Rules kept:
//! - a queue is created with no record quota and the default dead-letter cap (a quarter of
//!   the segment's records), written before the queue becomes active; `SetQueueLimits`
//!   changes them, and only those who may delete the queue may;
//! - pushes and frees keep a queue's held count exactly while it has a quota
//!   (`xtcq_shm::segment::Held`); the scan's walk of the records (see `scan`: when anything
//!   moved, at the latest every few seconds) counts each queue's records for the stats,
//!   puts the held count right when nothing moved it during the walk (a process that died
//!   between its two CASes), and past its cap drops a queue's oldest dead letters (by the
//!   time they were queued), counted and logged;
//! - the daemon keeps the limits it set in its own memory: the walk writes them back over
//!   the segment's words before it reads the cap (an attached process can rewrite those
//!   words, and a cap rewritten to 1 would drop another queue's dead letters), and the
//!   per-user share is summed from that memory;
//! - a drop is one CAS from `Dead` to `Free`: a dead letter re-queued or purged meanwhile
//!   is left alone, and a daemon killed at any point loses no other job.

use std::sync::atomic::Ordering;

use tracing::{debug, warn};
use xtcq_proto as proto;
use xtcq_shm::segment::{QueueQuota, QueueRecordCount, RunningWalk};

use crate::registry::{queue_error, Access, Bookkeeping, Op, Registry};

/// Default dead-letter cap of a new queue: a quarter of the segment's records, so that the
/// dead letters of one queue whose jobs all fail cannot take every record from the others.
pub fn default_max_dead(job_records: u32) -> u32 {
    (job_records / 4).max(1)
}

/// The limits a `SetQueueLimits` changes (each `None`: left as it is; 0: none).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// Record quota.
    pub max_records: Option<u32>,
    /// Dead-letter cap.
    pub max_dead: Option<u32>,
    /// Concurrency limit.
    pub max_running: Option<u32>,
    /// Rate limit (`interval_ns` 0: none).
    pub max_rate: Option<proto::RateLimit>,
}

impl Registry {
    /// The limits a new queue gets.
    pub(crate) fn default_quota(&self) -> QueueQuota {
        QueueQuota { max_records: 0, max_dead: default_max_dead(self.seg.config().job_records) }
    }

    /// Sets queue `name`'s record quota and dead-letter cap (`None`: unchanged; 0: none), if
    /// `who` may delete it.
    pub fn set_queue_limits(
        &self,
        name: &str,
        max_records: Option<u32>,
        max_dead: Option<u32>,
        who: Option<&Access>,
    ) -> Result<QueueQuota, proto::ErrorReply> {
        self.set_queue_limits_running(name, Limits { max_records, max_dead, ..Limits::default() }, who)
    }

    /// [`set_queue_limits`](Self::set_queue_limits) with the concurrency limit too
    /// (`max_running`: `None` unchanged, 0 none).
    pub fn set_queue_limits_running(
        &self,
        name: &str,
        Limits { max_records, max_dead, max_running, max_rate }: Limits,
        who: Option<&Access>,
    ) -> Result<QueueQuota, proto::ErrorReply> {
        if let Some(r) = max_rate {
            check_rate(r)?;
        }
        if let Some(n) = max_running.filter(|&n| n > proto::MAX_RUNNING_LIMIT) {
            return Err(proto::ErrorReply::new(
                proto::ErrorCode::BadRequest,
                format!(
                    "--max-running {n} is more than {}, the most jobs of one queue that can run at once; \
                     give fewer (or none for no limit)",
                    proto::MAX_RUNNING_LIMIT
                ),
            ));
        }
        let records = self.seg.config().job_records;
        if let Some(n) = max_records.filter(|&n| n > records) {
            return Err(proto::ErrorReply::new(
                proto::ErrorCode::BadRequest,
                format!(
                    "a record quota of {n} is more than the segment's {records} records; give at most \
                     {records} (or 0 for no quota)"
                ),
            ));
        }
        let mut t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, who, Op::Delete)?;
        // What is not asked for stays as this daemon set it, not as the segment now says.
        let used = || self.seg.count_queue_records().get(q.index as usize).map_or(0, |c| c.used);
        self.restore_quota(&mut t, q.index, used);
        if let (Some(n), Some(who), Some(acl)) = (max_records, who, t.queues.get(&q.index)) {
            if self.share_of(who.uid).is_some() {
                self.check_quota_change(&t, q.index, acl.owner, n)?;
            }
        }
        let limits = self
            .seg
            .queue_limits(q.index)
            .ok_or_else(|| queue_error(&xtcq_shm::QueueError::NoSuchQueue(name.to_string())))?;
        if let Some(n) = max_records {
            let had = limits.max_records.swap(n, Ordering::Relaxed);
            if had == 0 && n != 0 {
                // Pushes and acks kept no count while the queue had no quota: start it from
                // a walk (off by what moves during the walk, until a quiet walk puts it right).
                self.seg.set_held(q.index, used());
            }
        }
        if let Some(n) = max_dead {
            limits.max_dead.store(n, Ordering::Relaxed);
        }
        if let Some(n) = max_running {
            self.seg.set_max_running(q.index, n);
        }
        if let Some(r) = max_rate {
            let limit = xtcq_shm::segment::RateLimit { interval_ns: r.interval_ns, burst: r.burst };
            self.seg.set_rate_limit(q.index, limit);
        }
        // A lower cap drops dead letters at the next walk.
        t.scan.changed();
        let set = self.seg.quota_state(q.index).quota;
        t.quotas.insert(q.index, set);
        Ok(set)
    }

    /// The limits this daemon set for queue `index` (those in the segment for a queue it
    /// adopted and has not walked since).
    pub(crate) fn quota_of(&self, t: &Bookkeeping, index: u32) -> QueueQuota {
        t.quotas.get(&index).copied().unwrap_or_else(|| self.seg.quota_state(index).quota)
    }

    /// Writes back queue `index`'s limits where the segment's words are not those this
    /// daemon set (some attached process rewrote them), logged; a queue it has no record of
    /// (adopted with the segment) is recorded as it is. `used`: its records as a walk
    /// counts them, the held count to start from where the quota was rewritten to "none"
    /// (pushes kept no count meanwhile).
    fn restore_quota(&self, t: &mut Bookkeeping, index: u32, used: impl FnOnce() -> u32) {
        let Some(l) = self.seg.queue_limits(index) else { return };
        let now = self.seg.quota_state(index).quota;
        let set = *t.quotas.entry(index).or_insert(now);
        if now == set {
            return;
        }
        l.max_records.store(set.max_records, Ordering::Relaxed);
        l.max_dead.store(set.max_dead, Ordering::Relaxed);
        if now.max_records == 0 && set.max_records != 0 {
            self.seg.set_held(index, used());
        }
        let name = self.seg.queue(index).map(|q| q.spec.name).unwrap_or_default();
        warn!(
            queue = %name,
            max_records = set.max_records,
            max_dead = set.max_dead,
            found_max_records = now.max_records,
            found_max_dead = now.max_dead,
            "a queue's record quota or dead-letter cap was rewritten in the segment by an attached process; \
             the daemon's were written back"
        );
    }

    /// The scan's quota pass, over what its walk counted of every queue's records: drops
    /// the oldest dead letters past each cap, and publishes the counts. Returns the dead
    /// letters dropped.
    pub(crate) fn enforce_quotas(&self, t: &mut Bookkeeping, counts: Vec<QueueRecordCount>) -> u64 {
        let mut total = 0;
        // Taken out for the loop, which also lends `t` to `restore_quota`.
        let mut running = std::mem::take(&mut t.scan.running);
        running.resize(counts.len(), None);
        for (index, mut c) in (0u32..).zip(counts) {
            self.correct_running(index, &c, &mut running);
            let Ok(q) = self.seg.queue(index) else { continue };
            // Before the cap is read: a rewritten cap must not drop anyone's dead letters.
            self.restore_quota(t, index, || c.used);
            let cap = self.seg.quota_state(index).quota.max_dead;
            let mut dropped = 0u32;
            if cap != 0 && c.dead.len() > cap as usize {
                let over = c.dead.len() - cap as usize;
                c.dead.sort_unstable_by_key(|&(at, h)| (at, h.index));
                for &(_, h) in &c.dead[..over] {
                    if xtcq_shm::dead_letter::purge_dead(&self.seg, h).is_ok() {
                        dropped += 1;
                    }
                }
                warn!(
                    queue = %q.spec.name,
                    dropped,
                    max_dead = cap,
                    "dead-letter cap reached: the oldest dead letters were dropped (raise it with \
                     `xtcq limits QUEUE --max-dead N`, or requeue or purge them sooner)"
                );
            }
            let dead = (c.dead.len() as u32).saturating_sub(dropped);
            let used = c.used.saturating_sub(dropped);
            self.seg.store_queue_counts(index, used, dead, u64::from(dropped));
            // Drops moved the word, so this waits for a walk without them.
            if self.seg.quota_state(index).quota.max_records != 0
                && self.seg.correct_held(index, c.held_before, used)
            {
                debug!(queue = %q.spec.name, held = used, "record quota: the held count was put right by the walk");
            }
            total += u64::from(dropped);
        }
        t.scan.running = running;
        total
    }

    /// Puts queue `index`'s running count right from this walk and the one before
    /// (`xtcq_shm::segment::running`), logged when it changed.
    fn correct_running(&self, index: u32, c: &QueueRecordCount, running: &mut [Option<RunningWalk>]) {
        let now = RunningWalk { before: c.running_before, claimed: c.claimed };
        let Some(earlier) = running.get_mut(index as usize) else { return };
        if self.seg.correct_running(index, *earlier, now) {
            let name = self.seg.queue(index).map(|q| q.spec.name).unwrap_or_default();
            debug!(queue = %name, running = now.claimed, "concurrency limit: the running count was put right by the walk");
        }
        *earlier = Some(now);
    }
}

/// Refuses a rate limit no flag of the CLI makes: an interval past a day, a burst of none or
/// past [`proto::MAX_RATE_BURST`].
fn check_rate(r: proto::RateLimit) -> Result<(), proto::ErrorReply> {
    let bad = |what: String| Err(proto::ErrorReply::new(proto::ErrorCode::BadRequest, what));
    if r.interval_ns == 0 {
        return Ok(());
    }
    if r.interval_ns > proto::MAX_RATE_INTERVAL_NS {
        return bad(format!(
            "--max-rate of one claim every {} s is slower than one a day; give a faster rate, or pause the queue",
            r.interval_ns / 1_000_000_000
        ));
    }
    if r.burst == 0 || r.burst > proto::MAX_RATE_BURST {
        return bad(format!("--burst {} must be from 1 to {}", r.burst, proto::MAX_RATE_BURST));
    }
    Ok(())
}
