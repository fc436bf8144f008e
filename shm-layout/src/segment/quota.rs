//! Per-queue record quotas and dead-letter caps ([`QueueLimits`], layout version 5).
//!
//! Rules kept:
//! - only the daemon writes a queue's limits: at create (through
//!   [`Segment::create_queue_limited`], before the entry becomes active) and from its
//!   periodic scan ([`Segment::count_queue_records`], [`Segment::store_queue_counts`]), and
//!   a count only when it changed, so the line stays shared in producers' caches;
//! - a push to a queue without a quota reads `max_records` and writes nothing here; to a
//!   queue with one, it and the free of its record each make one CAS on the `held` word
//!   ([`Held`]), so that the quota holds at every push, not one scan late;
//! - every value read back is only compared, never used as an index or a length, so a
//!   garbage quota can refuse pushes to its own queue but cannot panic or hang anyone; a
//!   garbage `held` word is put right by the daemon's next quiet walk.

use super::*;

/// The limits a queue is created with (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueQuota {
    /// Most records the queue's jobs may hold at once (0: no quota).
    pub max_records: u32,
    /// Most dead letters kept before the daemon drops the oldest (0: no cap).
    pub max_dead: u32,
}

/// A queue's limits and what the daemon's last scan counted, as read from the segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaState {
    /// The limits.
    pub quota: QueueQuota,
    /// Records its jobs held at the last scan.
    pub records_used: u32,
    /// Dead letters at the last scan.
    pub dead: u32,
    /// Dead letters the cap dropped since the queue was created.
    pub dead_dropped: u64,
    /// Its concurrency limit (`segment::running`; 0: none).
    pub max_running: u32,
    /// Its rate limit (`segment::rate`; `interval_ns` 0: none).
    pub max_rate: super::RateLimit,
}

/// The `held` word of a queue with a record quota: how many records its jobs hold, kept by
/// the pushes that take them and the frees that give them back, so that a push past the
/// quota is refused at once (a count taken by the daemon's scan lets one burst between two
/// scans take every record).
///
/// Rules kept:
/// - a push takes a record from the count before it allocates one, and gives it back if
///   the push fails; an ack, and a purge of a dead letter, give theirs back once the
///   record is free; each is one CAS on the word, and only while the queue has a quota;
/// - the count never goes below zero nor above the quota through these calls;
/// - a process that dies between its CAS on a record and its CAS on this word leaves the
///   count off by one; the daemon's walk puts it right ([`Segment::correct_held`]) when
///   nothing changed the word during the walk, which the sequence in the high half shows.
pub struct Held;

impl Held {
    const ONE_CHANGE: u64 = 1 << 32;

    fn count(w: u64) -> u32 {
        w as u32
    }

    fn next(w: u64, count: u32) -> u64 {
        (w & !0xFFFF_FFFF).wrapping_add(Self::ONE_CHANGE) | u64::from(count)
    }

    /// Takes one record from `l`'s quota `max`; `Err(held)` when the queue already holds
    /// `max`. Relaxed: the word orders nothing else; the record's own CASes do.
    pub fn take(l: &QueueLimits, max: u32) -> Result<(), u32> {
        let mut w = l.held.load(Ordering::Relaxed);
        loop {
            let n = Self::count(w);
            if n >= max {
                return Err(n);
            }
            match l.held.compare_exchange_weak(w, Self::next(w, n + 1), Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => w = now,
            }
        }
    }

    /// Gives one record back to `l`'s count (never below zero).
    pub fn give(l: &QueueLimits) {
        let mut w = l.held.load(Ordering::Relaxed);
        loop {
            let n = Self::count(w).saturating_sub(1);
            match l.held.compare_exchange_weak(w, Self::next(w, n), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }

    /// Gives one record back if the queue has a quota.
    #[inline]
    pub fn give_if_limited(l: &QueueLimits) {
        if l.max_records.load(Ordering::Relaxed) != 0 {
            Self::give(l);
        }
    }
}

/// Records of each queue-table entry, by what the cap and the quota need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueRecordCount {
    /// Records not free whose queue field names the entry.
    pub used: u32,
    /// Its dead letters as `(enqueued_ns, handle)`, for the cap to drop the oldest.
    pub dead: Vec<(u64, crate::record::state::JobHandle)>,
    /// Its `held` word as read before the walk, for [`Segment::correct_held`].
    pub held_before: u64,
    /// Its records `Claimed` or `Writing` (being run, or being given back).
    pub claimed: u32,
    /// Its `running` word as read before the walk, for [`Segment::correct_running`].
    pub running_before: u64,
}

impl QueueRecordCount {
    /// Counts record `i` (state word `w`, header `h`) into its entry of `counts` (see
    /// [`Segment::count_queue_records`]): for a walk that also does other things.
    pub fn tally(counts: &mut [QueueRecordCount], i: u32, w: StateWord, h: &RecordHeader) {
        let Some(c) = counts.get_mut(h.queue.load(Ordering::Relaxed) as usize) else { return };
        match w.state() {
            Some(State::Free) | None => {}
            Some(State::Dead) => {
                c.used += 1;
                let handle = crate::record::state::JobHandle { index: i, generation: w.generation() };
                c.dead.push((h.enqueued_ns.load(Ordering::Relaxed), handle));
            }
            Some(State::Claimed | State::Writing) => {
                c.used += 1;
                c.claimed += 1;
            }
            Some(_) => c.used += 1,
        }
    }
}

impl Segment {
    /// Queue-table entry `index`'s limit words, `None` out of range. Atomics only: the plain
    /// descriptor before them is never borrowed.
    pub fn queue_limits(&self, index: u32) -> Option<&QueueLimits> {
        let off = self.queue_entry_offset(index)?
            + core::mem::offset_of!(QueueEntry, desc) as u64
            + core::mem::offset_of!(QueueDescBlock, limits) as u64;
        // SAFETY: index < queues, so the entry (and its descriptor line) lies inside the
        // queue table, which validation placed in the mapping; offset 96 of a 128-aligned
        // entry is 8-aligned.
        Some(unsafe { self.at(off) })
    }

    /// The limits and last counts of entry `index` (zero out of range).
    pub fn quota_state(&self, index: u32) -> QuotaState {
        let Some(l) = self.queue_limits(index) else { return QuotaState::default() };
        QuotaState {
            quota: QueueQuota {
                max_records: l.max_records.load(Ordering::Relaxed),
                max_dead: l.max_dead.load(Ordering::Relaxed),
            },
            records_used: l.records_used.load(Ordering::Relaxed),
            dead: l.dead.load(Ordering::Relaxed),
            dead_dropped: l.dead_dropped.load(Ordering::Relaxed),
            max_running: self.max_running(index),
            max_rate: self.rate_limit(index),
        }
    }

    /// Sets entry `index`'s limits and clears its counts; the caller holds the entry in
    /// `QUEUE_CREATING` (a Release store of `QUEUE_ACTIVE` publishes them).
    pub(super) fn reset_queue_limits(&self, index: u32, q: QueueQuota) {
        if let Some(l) = self.queue_limits(index) {
            l.max_records.store(q.max_records, Ordering::Relaxed);
            l.max_dead.store(q.max_dead, Ordering::Relaxed);
            l.records_used.store(0, Ordering::Relaxed);
            l.dead.store(0, Ordering::Relaxed);
            l.dead_dropped.store(0, Ordering::Relaxed);
            l.held.store(0, Ordering::Relaxed);
        }
    }

    /// Creates a queue, as [`create_queue`](Self::create_queue), with limits `q`.
    pub fn create_queue_limited(&self, spec: &QueueSpec, q: QueueQuota) -> Result<QueueInfo, QueueError> {
        self.check_spec(spec)?;
        if self.queue_by_name(&spec.name).is_ok() {
            return Err(QueueError::Exists(spec.name.clone()));
        }
        for i in 0..self.desc.config.queues {
            match self.create_queue_at_limited(i, spec, q) {
                Ok(info) => return Ok(info),
                Err(QueueError::BadSpec(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(QueueError::TableFull(self.desc.config.queues))
    }

    /// One pass over every record: per queue-table entry, the records in use and the dead
    /// letters. A racy snapshot; records naming no entry are not counted.
    pub fn count_queue_records(&self) -> Vec<QueueRecordCount> {
        let mut out = self.queue_record_counts();
        let records = self.records();
        for i in 0..records.len() {
            let (Some(st), Some(h)) = (records.state(i), records.header(i)) else { break };
            QueueRecordCount::tally(&mut out, i, st.load(), h);
        }
        out
    }

    /// Empty counts, one per queue-table entry, for [`QueueRecordCount::tally`]; each with
    /// its entry's `held` word as it is now, so call it before the walk.
    pub fn queue_record_counts(&self) -> Vec<QueueRecordCount> {
        (0..self.desc.config.queues)
            .map(|i| QueueRecordCount {
                held_before: self.queue_limits(i).map_or(0, |l| l.held.load(Ordering::Relaxed)),
                running_before: self.running_words(i).map_or(0, |(_, r)| r.load(Ordering::Relaxed)),
                ..QueueRecordCount::default()
            })
            .collect()
    }

    /// Sets entry `index`'s held count to `walked`, what a walk counted, if its word is still
    /// `before` (read before the walk: [`QueueRecordCount::held_before`]): no push or free of the queue moved it meanwhile, so
    /// the walk saw what the word should say, but for a push or an ack caught between its
    /// two CASes. Whether it changed the count.
    pub fn correct_held(&self, index: u32, before: u64, walked: u32) -> bool {
        let Some(l) = self.queue_limits(index) else { return false };
        if Held::count(before) == walked {
            return false;
        }
        l.held
            .compare_exchange(before, Held::next(before, walked), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Sets entry `index`'s held count to `n` whatever it was (a quota just set on a queue
    /// whose pushes did not keep it).
    pub fn set_held(&self, index: u32, n: u32) {
        if let Some(l) = self.queue_limits(index) {
            let w = l.held.load(Ordering::Relaxed);
            l.held.store(Held::next(w, n), Ordering::Relaxed);
        }
    }

    /// Entry `index`'s held count (0 out of range or without a quota kept).
    pub fn held(&self, index: u32) -> u32 {
        self.queue_limits(index).map_or(0, |l| Held::count(l.held.load(Ordering::Relaxed)))
    }

    /// Publishes what a scan counted for entry `index`, writing only the words that changed,
    /// and adds `dropped` to its dropped dead letters.
    pub fn store_queue_counts(&self, index: u32, used: u32, dead: u32, dropped: u64) {
        let Some(l) = self.queue_limits(index) else { return };
        if l.records_used.load(Ordering::Relaxed) != used {
            l.records_used.store(used, Ordering::Relaxed);
        }
        if l.dead.load(Ordering::Relaxed) != dead {
            l.dead.store(dead, Ordering::Relaxed);
        }
        if dropped > 0 {
            let old = l.dead_dropped.load(Ordering::Relaxed);
            l.dead_dropped.store(old.saturating_add(dropped), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::AtomicU32;

    fn limits() -> QueueLimits {
        QueueLimits {
            max_records: AtomicU32::new(2),
            max_dead: AtomicU32::new(0),
            records_used: AtomicU32::new(0),
            dead: AtomicU32::new(0),
            dead_dropped: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    #[test]
    fn held_stops_at_the_quota_and_never_goes_below_zero() {
        let l = limits();
        assert_eq!((Held::take(&l, 2), Held::take(&l, 2), Held::take(&l, 2)), (Ok(()), Ok(()), Err(2)));
        Held::give(&l);
        assert_eq!(Held::take(&l, 2), Ok(()));
        for _ in 0..5 {
            Held::give(&l);
        }
        assert_eq!(Held::count(l.held.load(Ordering::Relaxed)), 0);
        // Every change moved the sequence: 4 takes that counted, 6 gives.
        assert_eq!(l.held.load(Ordering::Relaxed) >> 32, 9);
    }

    #[test]
    fn a_word_that_moved_during_the_walk_is_not_corrected() {
        let l = limits();
        Held::take(&l, 2).unwrap();
        let before = l.held.load(Ordering::Relaxed);
        // A take and a give during the walk: same count, another sequence.
        Held::take(&l, 2).unwrap();
        Held::give(&l);
        assert_eq!(Held::count(l.held.load(Ordering::Relaxed)), Held::count(before));
        assert_ne!(l.held.load(Ordering::Relaxed), before);
    }
}
