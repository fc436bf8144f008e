//! `stats`: counts of records by state, deques, processes, payload blocks and the segment,
//! read without stopping anyone (a racy snapshot).
//!
//! - Every scan is bounded by the validated layout (record count, block counts per class),
//!   never by a value read from the segment; a word no correct program writes is counted
//!   (as corrupt, or as a held block), never trusted as an index.

use std::sync::atomic::Ordering;

use xtcq_proto as proto;
use xtcq_shm::layout::payload::{class_size, PAYLOAD_CLASSES};
use xtcq_shm::layout::{PROCESS_ACTIVE, PROCESS_FREE, PROCESS_RECOVERING};
use xtcq_shm::metrics::Counter;
use xtcq_shm::record::blocks::BlockRef;
use xtcq_shm::record::state::State;
use xtcq_shm::recovery::lease_holder;
use xtcq_shm::{QueueInfo, Segment};

use crate::registry::{queue_info, Registry};

/// A queue's totals (from the metrics region) and gauges (from `records`, the scan's counts
/// for it, and `oldest`, the smallest `enqueued_ns` of its queued jobs or `u64::MAX`).
fn queue_metrics(
    seg: &Segment,
    queue: u32,
    records: &proto::RecordCounts,
    oldest: u64,
) -> proto::QueueMetrics {
    let t = seg.queue_totals(queue);
    let now = xtcq_shm::segment::monotonic_ns();
    let in_use =
        [records.filling, records.queued, records.claimed, records.dead, records.delayed, records.corrupt]
            .into_iter()
            .fold(0u64, u64::saturating_add);
    proto::QueueMetrics {
        pushed: t.get(Counter::Pushed),
        claimed: t.get(Counter::Claimed),
        acked: t.get(Counter::Acked),
        nacked: t.get(Counter::Nacked),
        failed: t.get(Counter::Failed),
        dead_total: t.get(Counter::Dead),
        lease_expiries: t.get(Counter::LeaseExpiries),
        recovered: t.get(Counter::Recovered),
        cancelled: t.get(Counter::Cancelled),
        queued: records.queued,
        running: records.claimed,
        dead: records.dead,
        records_in_use: in_use,
        oldest_queued_ns: if oldest == u64::MAX { 0 } else { now.saturating_sub(oldest) },
        sleepers: seg.wait_word(queue).map_or(0, |w| w.sleepers.load(Ordering::Relaxed) as u64),
    }
}

impl Registry {
    /// Each payload-block class with blocks and how many are held now, as `stats` says.
    pub fn payload_blocks(&self) -> Vec<proto::BlockClassStats> {
        block_stats(&self.seg)
    }

    /// Whether `slot`'s connection is open.
    pub fn is_connected(&self, slot: u32) -> bool {
        self.lock().slots.get(&slot).is_some_and(|k| k.connected)
    }

    /// Stats of one queue (`Some`) or all.
    pub fn stats(&self, queue: Option<&str>, connections: u64) -> Result<proto::Stats, proto::ErrorReply> {
        let seg = &self.seg;
        let qs: Vec<QueueInfo> = match queue {
            Some(name) => vec![self.queue(name)?],
            None => seg.queues().into_iter().filter_map(Result::ok).collect(),
        };
        let tally = RecordTally::count(seg);
        let queues = qs.iter().map(|q| queue_stats(seg, q, &tally)).collect();
        let processes = self.process_infos();
        let live = seg.header_live();
        Ok(proto::Stats {
            daemon_pid: live.daemon_pid.load(Ordering::Relaxed),
            daemon_epoch: live.daemon_epoch.load(Ordering::Relaxed),
            segment: segment_summary(seg),
            records: tally.all,
            queues,
            processes,
            connections,
            payload_blocks: block_stats(seg),
        })
    }

    /// The process slots in use, as this daemon knows them.
    fn process_infos(&self) -> Vec<proto::ProcessInfo> {
        let seg = &self.seg;
        let t = self.lock();
        (0..seg.config().process_slots)
            .filter_map(|i| {
                let s = seg.process_slot(i)?;
                let state = match s.state.load(Ordering::Acquire) {
                    PROCESS_FREE => return None,
                    // Active only if this daemon registered (or adopted) a process to it;
                    // otherwise some attached process wrote it (and the next attach reclaims it).
                    PROCESS_ACTIVE if t.slots.contains_key(&i) => proto::ProcessState::Active,
                    PROCESS_RECOVERING => proto::ProcessState::Recovering,
                    _ => proto::ProcessState::Unknown,
                };
                Some(proto::ProcessInfo {
                    slot: i,
                    state,
                    pid: s.pid.load(Ordering::Relaxed),
                    uid: s.uid.load(Ordering::Relaxed),
                    roles: s.role.load(Ordering::Relaxed),
                    epoch: s.epoch.load(Ordering::Relaxed),
                    connected: t.slots.get(&i).is_some_and(|k| k.connected),
                    attached_unix_ns: s.attached_unix_ns.load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}

/// One pass over the records: counts by state, for the whole segment and per queue, and
/// each queue's oldest queued job.
struct RecordTally {
    all: proto::RecordCounts,
    per_queue: Vec<proto::RecordCounts>,
    /// Per queue, the smallest `enqueued_ns` of a queued job (u64::MAX: none).
    oldest: Vec<u64>,
}

impl RecordTally {
    fn count(seg: &Segment) -> RecordTally {
        let queues = seg.config().queues as usize;
        let mut t = RecordTally {
            all: proto::RecordCounts::default(),
            per_queue: vec![proto::RecordCounts::default(); queues],
            oldest: vec![u64::MAX; queues],
        };
        let records = seg.records();
        for i in 0..records.len() {
            let (Some(st), Some(h)) = (records.state(i), records.header(i)) else { break };
            let state = st.load().state();
            let q = h.queue.load(Ordering::Relaxed) as usize;
            bump(&mut t.all, state);
            if state != Some(State::Free) {
                if let Some(r) = t.per_queue.get_mut(q) {
                    bump(r, state);
                }
            }
            if state == Some(State::Queued) {
                if let Some(o) = t.oldest.get_mut(q) {
                    *o = (*o).min(h.enqueued_ns.load(Ordering::Relaxed));
                }
            }
        }
        t
    }
}

/// Counts one record of state `state` (`None`: undecodable) in `r`.
fn bump(r: &mut proto::RecordCounts, state: Option<State>) {
    match state {
        Some(State::Free) => r.free += 1,
        Some(State::Filling) => r.filling += 1,
        Some(State::Queued) => r.queued += 1,
        // Writing: still claimed; its holder is writing the header for a moment.
        Some(State::Claimed | State::Writing) => r.claimed += 1,
        Some(State::Dead) => r.dead += 1,
        Some(State::Delayed) => r.delayed += 1,
        None => r.corrupt += 1,
    }
}

/// One queue's figures: its deques, ring, records by state, quota and metrics.
fn queue_stats(seg: &Segment, q: &QueueInfo, tally: &RecordTally) -> proto::QueueStats {
    let deques = (0..q.spec.deques)
        .map(|d| proto::DequeStats {
            index: d,
            // The owner's deque at every level (`levels`).
            len: (0..q.spec.levels)
                .filter_map(|l| seg.deque(q, l * q.spec.deques + d).ok())
                .map(|dq| dq.len() as u64)
                .sum(),
            owner_slot: seg
                .deque_header(q.index, d)
                .and_then(|h| lease_holder(h.lease.load(Ordering::Acquire))),
        })
        .collect();
    let records = tally.per_queue.get(q.index as usize).cloned().unwrap_or_default();
    let oldest = tally.oldest.get(q.index as usize).copied().unwrap_or(u64::MAX);
    let s = seg.quota_state(q.index);
    proto::QueueStats {
        info: proto::QueueInfo { paused: seg.is_paused(q.index), ..queue_info(q) },
        deques,
        overflow_len: seg.overflow_rings(q.index).iter().map(|o| o.len() as u64).sum(),
        level_depths: seg.level_depths(q),
        quota: proto::QuotaStats {
            max_records: s.quota.max_records,
            records_used: s.records_used,
            max_dead: s.quota.max_dead,
            dead_dropped: s.dead_dropped,
            max_running: seg.max_running(q.index),
            running: if seg.max_running(q.index) == 0 { 0 } else { seg.running(q.index) },
            max_rate: {
                let r = seg.rate_limit(q.index);
                proto::RateLimit { interval_ns: r.interval_ns, burst: r.burst }
            },
        },
        metrics: queue_metrics(seg, q.index, &records, oldest),
        batches: xtcq_shm::batch::list(seg, q.index).iter().map(crate::batches::info_of).collect(),
        records,
    }
}

/// The segment's fixed configuration, as `stats` reports it.
fn segment_summary(seg: &Segment) -> proto::SegmentSummary {
    let c = seg.config();
    proto::SegmentSummary {
        path: seg.path().to_path_buf(),
        total_len: seg.descriptor().regions.total_len,
        queues: c.queues,
        deques_per_queue: c.deques_per_queue,
        deque_capacity: c.deque_capacity,
        job_records: c.job_records,
        payload_bytes: c.payload_bytes,
        process_slots: c.process_slots,
        overflow_capacity: c.overflow_capacity,
        // The records' inline area (the flag rounded up to 64, at least 8 with blocks), not
        // the flag: what decides which payloads take a block.
        inline_bytes: seg.records().inline_capacity(),
    }
}

/// Each block class with blocks: its size, its count and how many blocks have an owner
/// word other than 0 now, smallest first. The counts come from the validated layout, so
/// the scan reads only owner words inside the block table; any non-zero word counts as held
/// (a forged one too: it holds the block until the daemon's sweep frees it).
fn block_stats(seg: &Segment) -> Vec<proto::BlockClassStats> {
    let records = seg.records();
    let blocks = records.blocks();
    (0..PAYLOAD_CLASSES)
        .filter_map(|class| {
            let total = blocks.count(class);
            (total > 0).then(|| {
                let in_use = (0..total)
                    .filter(|&index| blocks.owner(BlockRef { class, index }).load(Ordering::Relaxed) != 0)
                    .count() as u32;
                proto::BlockClassStats { size: class_size(class), total, in_use, free: total - in_use }
            })
        })
        .collect()
}
