//! Per-queue record quotas and dead-letter caps ([`QueueLimits`], layout version 5).
//!
//! Rules kept:
//! - only the daemon writes a queue's limits: at create (through
//!   [`Segment::create_queue_limited`], before the entry becomes active) and from its
//!   periodic scan ([`Segment::count_queue_records`], [`Segment::store_queue_counts`]), and
//!   a count only when it changed, so the line stays shared in producers' caches;
//! - a push reads the quota and the last count, never writes them: no atomic
//!   read-modify-write on a shared line per push or per ack;
//! - every value read back is only compared, never used as an index or a length, so a
//!   garbage quota can refuse pushes to its own queue but cannot panic or hang anyone.

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
}

/// Records of each queue-table entry, by what the cap and the quota need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueRecordCount {
    /// Records not free whose queue field names the entry.
    pub used: u32,
    /// Its dead letters as `(enqueued_ns, handle)`, for the cap to drop the oldest.
    pub dead: Vec<(u64, crate::record::state::JobHandle)>,
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
            l.reserved.store(0, Ordering::Relaxed);
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

    /// Empty counts, one per queue-table entry, for [`QueueRecordCount::tally`].
    pub fn queue_record_counts(&self) -> Vec<QueueRecordCount> {
        vec![QueueRecordCount::default(); self.desc.config.queues as usize]
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
