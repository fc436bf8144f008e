//! What `Request::Stats` answers: the segment's sizes, each queue's records, deques,
//! quota and counters, and each process slot.
//!
//! - Every figure is read from the segment by the daemon at the time of the request; none is
//!   kept between requests.
//! - Fields may be added (with `#[serde(default)]`), never removed or retyped, so that an
//!   older client still reads a newer daemon's answer.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::msg::QueueInfo;

/// The segment's fixed configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentSummary {
    /// The segment file.
    pub path: PathBuf,
    /// Bytes mapped.
    pub total_len: u64,
    /// Queue-table entries.
    pub queues: u32,
    /// Deques each queue may have.
    pub deques_per_queue: u32,
    /// Largest deque capacity.
    pub deque_capacity: u32,
    /// Job records.
    pub job_records: u32,
    /// Payload bytes per record.
    pub payload_bytes: u32,
    /// Process slots.
    pub process_slots: u32,
    /// Cells per overflow ring.
    pub overflow_capacity: u32,
    /// Payload bytes kept in the record itself (`--inline-bytes` rounded up to 64, at least
    /// 8 when there are blocks); a larger payload takes a payload block (see
    /// [`Stats::payload_blocks`]). 0 from a daemon that predates payload blocks.
    #[serde(default)]
    pub inline_bytes: u32,
}

/// One size class of payload blocks: how many the segment has and how many are held now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockClassStats {
    /// Bytes in one block of the class (a power of two, 128 B to 16 MiB).
    pub size: u32,
    /// Blocks of the class in the segment (`xtcqd --payload-blocks SIZE=COUNT`).
    pub total: u32,
    /// Blocks held now: by the payload of a job (being pushed, queued, running, delayed or
    /// dead), or left by a process that died mid-way until the daemon's next scan frees it.
    pub in_use: u32,
    /// `total - in_use`.
    pub free: u32,
}

/// Job records by state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCounts {
    /// Unused.
    pub free: u64,
    /// Being written by a producer.
    pub filling: u64,
    /// Waiting to be claimed.
    pub queued: u64,
    /// Being run.
    pub claimed: u64,
    /// Dead-lettered.
    pub dead: u64,
    /// State bits no correct program writes.
    pub corrupt: u64,
    /// Waiting for their due time (delayed pushes, retries after a backoff). Absent from a
    /// daemon that predates them.
    #[serde(default)]
    pub delayed: u64,
}

/// One deque of a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DequeStats {
    /// Deque index.
    pub index: u32,
    /// Handles in it (approximate).
    pub len: u64,
    /// The owner's process slot, if leased.
    pub owner_slot: Option<u32>,
}

/// Counters of one queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// The queue.
    pub info: QueueInfo,
    /// Its deques.
    pub deques: Vec<DequeStats>,
    /// Indices in its overflow ring (approximate).
    pub overflow_len: u64,
    /// Jobs waiting at each priority level, most urgent first (approximate: its deques and
    /// ring of each level). Absent (empty) from a daemon that predates levels.
    #[serde(default)]
    pub level_depths: Vec<u64>,
    /// Records of this queue by state (`free` is always 0 here: a free record belongs to no
    /// queue).
    pub records: RecordCounts,
    /// Its record quota and dead-letter cap, and what the daemon's last scan counted. Absent
    /// from a daemon that predates them.
    #[serde(default)]
    pub quota: QuotaStats,
    /// Running totals and gauges. Zeros from a daemon that predates them.
    #[serde(default)]
    pub metrics: QueueMetrics,
    /// Its batches (open, sealed, and complete ones whose table entry was not reused yet).
    /// Absent from a daemon that predates them.
    #[serde(default)]
    pub batches: Vec<crate::BatchInfo>,
}

/// A queue's record quota and dead-letter cap (0: none), and the daemon's last count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaStats {
    /// Most records its jobs may hold at once (0: no quota).
    pub max_records: u32,
    /// Records its jobs held (queued, running, delayed, dead) at the last scan.
    pub records_used: u32,
    /// Most dead letters kept (0: no cap).
    pub max_dead: u32,
    /// Dead letters dropped by the cap (the oldest first) since the queue was created.
    pub dead_dropped: u64,
    /// Most of its jobs claimed at once (0: no limit). Absent from a daemon that predates it.
    #[serde(default)]
    pub max_running: u32,
    /// Slots of that limit taken now (its jobs running, give or take one being taken or
    /// settled); 0 without a limit.
    #[serde(default)]
    pub running: u32,
    /// Its rate limit (`interval_ns` 0: none). Absent from a daemon that predates it.
    #[serde(default)]
    pub max_rate: crate::RateLimit,
}

/// A queue's running totals (since the queue was created, across daemon restarts) and
/// gauges (now), as `xtcqd --metrics` exports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueMetrics {
    /// Jobs pushed (delayed ones included).
    pub pushed: u64,
    /// Claims won (a job claimed twice counts twice).
    pub claimed: u64,
    /// Jobs acked.
    pub acked: u64,
    /// Give-backs by `nack` (no reason).
    pub nacked: u64,
    /// Give-backs by `fail` (with a reason).
    pub failed: u64,
    /// Jobs that became dead letters.
    pub dead_total: u64,
    /// Claims revoked because their lease ran out.
    pub lease_expiries: u64,
    /// Claims of dead processes given back.
    pub recovered: u64,
    /// Jobs cancelled (`xtcq cancel`).
    pub cancelled: u64,
    /// Jobs queued now (`records.queued`).
    pub queued: u64,
    /// Jobs claimed now (`records.claimed`).
    pub running: u64,
    /// Dead letters now (`records.dead`).
    pub dead: u64,
    /// Records this queue holds now, whatever their state.
    pub records_in_use: u64,
    /// Age of the oldest queued job, ns (0 when none is queued).
    pub oldest_queued_ns: u64,
    /// Consumers asleep waiting for a job.
    pub sleepers: u64,
}

/// State of a process slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcessState {
    /// Attached.
    Active,
    /// Died; recovery in progress.
    Recovering,
    /// Bits no correct program writes.
    Unknown,
}

/// A registered process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Slot index (`me`).
    pub slot: u32,
    /// State.
    pub state: ProcessState,
    /// Pid in the daemon's pid namespace (0 if unknown).
    pub pid: u32,
    /// Uid.
    pub uid: u32,
    /// `ROLE_*` bits.
    pub roles: u32,
    /// Slot incarnation.
    pub epoch: u64,
    /// Whether its control connection is open.
    pub connected: bool,
    /// When it attached, ns since the Unix epoch.
    pub attached_unix_ns: u64,
}

/// The answer to [`Request::Stats`](crate::Request::Stats).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// The daemon's pid.
    pub daemon_pid: u32,
    /// The segment's daemon epoch.
    pub daemon_epoch: u64,
    /// The segment.
    pub segment: SegmentSummary,
    /// All records by state (all queues; `free` counted here).
    pub records: RecordCounts,
    /// The queues asked for.
    pub queues: Vec<QueueStats>,
    /// Registered processes.
    pub processes: Vec<ProcessInfo>,
    /// Open control connections.
    pub connections: u64,
    /// Each payload-block class the segment has blocks of, smallest first. Empty from a
    /// daemon that predates payload blocks, and for a segment whose payloads are all inline.
    #[serde(default)]
    pub payload_blocks: Vec<BlockClassStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Stats` answer as a daemon without payload blocks wrote it (no `inline_bytes`, no
    /// `payload_blocks`).
    const OLD: &str = r#"{"daemon_pid":7,"daemon_epoch":1,"segment":{"path":"/dev/shm/x",
        "total_len":4096,"queues":1,"deques_per_queue":1,"deque_capacity":64,"job_records":8,
        "payload_bytes":64,"process_slots":4,"overflow_capacity":64},
        "records":{"free":8,"filling":0,"queued":0,"claimed":0,"dead":0,"corrupt":0},
        "queues":[],"processes":[],"connections":0}"#;

    #[test]
    fn an_older_daemons_answer_reads_with_no_blocks() {
        let s: Stats = serde_json::from_str(OLD).expect("an older answer parses");
        assert_eq!((s.segment.inline_bytes, s.payload_blocks.len()), (0, 0));
    }

    #[test]
    fn a_newer_answer_reads_with_fields_this_build_does_not_know() {
        let mut v: serde_json::Value = serde_json::from_str(OLD).unwrap();
        v["segment"]["inline_bytes"] = 64.into();
        v["payload_blocks"] = serde_json::json!([
            {"size": 4096, "total": 8, "in_use": 3, "free": 5, "some_later_field": 1}
        ]);
        v["some_later_field"] = "x".into();
        let s: Stats = serde_json::from_value(v).expect("a newer answer parses");
        assert_eq!(s.segment.inline_bytes, 64);
        assert_eq!(s.payload_blocks, [BlockClassStats { size: 4096, total: 8, in_use: 3, free: 5 }]);
    }
}
