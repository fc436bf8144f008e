//! What an import can know will fail, checked before it writes anything.
//!
//! Rules kept:
//! - an import that is refused here has created no queue and written no job, so the file
//!   keeps its name and can be fixed and imported again;
//! - checked: every queue the dump creates (its first line for a name the segment lacks)
//!   has a name, deques and capacity the segment takes and a record quota within its
//!   records, and the queue table has a free entry for each; every job's payload decodes
//!   and fits the segment's largest payload; every job's queue is in the segment or defined
//!   by the dump; the segment has a free record for every job; each queue's overflow ring
//!   has room for its queued jobs (an import queues through the ring), and its dead-letter
//!   cap for its dead letters (past it the daemon drops the oldest); each payload larger
//!   than a record's inline area finds a free block, taken as the import will take them (in
//!   order, the smallest free class that holds it);
//! - what cannot be known before (another process taking records or blocks meanwhile)
//!   still fails part-way, and the file stays `FILE.importing`.

use std::collections::HashMap;

use xtcq_proto as proto;
use xtcq_shm::QueueSpec;

use crate::{flavor, params, Dump, DumpError, JobState, QueueLine};

/// The segment's queue table and sizes, against which the queues a dump creates are checked.
#[derive(Clone, Copy, Debug)]
pub struct QueueRoom {
    /// Queue-table entries not in use.
    pub free_entries: u64,
    /// Deques a queue may have.
    pub deques_per_queue: u32,
    /// Slots a deque may have.
    pub deque_capacity: u32,
    /// Job records (the most a record quota may be).
    pub job_records: u32,
}

/// What one of the segment's queues holds now.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueNow {
    /// Handles in its overflow ring.
    pub overflow_len: u64,
    /// Its dead letters.
    pub dead: u64,
    /// Its dead-letter cap (0: none).
    pub max_dead: u32,
}

/// What the segment has room for, as its daemon last counted it.
#[derive(Clone, Debug)]
pub struct Room<F: Fn(&str) -> Option<QueueNow>> {
    /// The largest payload a job may have (`payload_bytes`).
    pub payload_capacity: u32,
    /// Records in the `Free` state.
    pub free_records: u64,
    /// Handles each queue's overflow ring holds.
    pub overflow_capacity: u64,
    /// What queue `name` holds now; `None` when the segment has no such queue.
    pub existing: F,
    /// The queue table and sizes.
    pub queues: QueueRoom,
    /// Payload bytes a record holds inline; a larger payload takes a block.
    pub inline_capacity: u32,
    /// Each payload-block class: its block size and free blocks, smallest first.
    pub free_blocks: Vec<(u32, u64)>,
}

/// The room the daemon's `stats` describe (as `xtcq import` gets them, and the daemon's own
/// import computes them): records, rings, queues, blocks and each queue's dead letters as
/// counted now. The free queue-table
/// entries are those without a queue in `stats` (a queue being deleted holds one unseen; a
/// caller that can count them exactly sets [`QueueRoom::free_entries`] after).
pub fn room_of(stats: &proto::Stats) -> Room<impl Fn(&str) -> Option<QueueNow> + '_> {
    let existing = |name: &str| {
        let q = stats.queues.iter().find(|q| q.info.name == name)?;
        Some(QueueNow { overflow_len: q.overflow_len, dead: q.records.dead, max_dead: q.quota.max_dead })
    };
    Room {
        payload_capacity: stats.segment.payload_bytes,
        free_records: stats.records.free,
        overflow_capacity: u64::from(stats.segment.overflow_capacity),
        existing,
        queues: QueueRoom {
            free_entries: u64::from(stats.segment.queues).saturating_sub(stats.queues.len() as u64),
            deques_per_queue: stats.segment.deques_per_queue,
            deque_capacity: stats.segment.deque_capacity,
            job_records: stats.segment.job_records,
        },
        inline_capacity: stats.segment.inline_bytes,
        free_blocks: stats.payload_blocks.iter().map(|c| (c.size, u64::from(c.free))).collect(),
    }
}

/// Refuses `dump` when writing it into a segment with `room` is bound to fail part-way.
pub fn check<F: Fn(&str) -> Option<QueueNow>>(dump: &Dump, room: &Room<F>) -> Result<(), DumpError> {
    check_queues(dump, room)?;
    let (mut queued, mut dead): (HashMap<&str, u64>, HashMap<&str, u64>) = Default::default();
    let mut free_blocks = room.free_blocks.clone();
    for (n, j) in dump.jobs.iter().enumerate() {
        let bad = |what: String| {
            DumpError::Import(format!(
                "job {} of the dump (queue {}): {what}; nothing was imported",
                n + 1,
                j.queue
            ))
        };
        let payload = j.payload_bytes().ok_or_else(|| bad("no payload, or bad hex".into()))?;
        check_payload(payload.len(), room, &mut free_blocks).map_err(bad)?;
        let defined = dump.queues.iter().any(|q| q.name == j.queue);
        if !defined && (room.existing)(&j.queue).is_none() {
            return Err(bad("no such queue in the segment, and the dump does not define it".into()));
        }
        match j.state {
            JobState::Queued => *queued.entry(j.queue.as_str()).or_default() += 1,
            JobState::Dead => *dead.entry(j.queue.as_str()).or_default() += 1,
        }
    }
    let jobs = dump.jobs.len() as u64;
    if jobs > room.free_records {
        return Err(DumpError::Import(format!(
            "the dump has {jobs} jobs and the segment {} free records; nothing was imported. \
             Consume jobs first, or start xtcqd with at least {} more --records",
            room.free_records,
            jobs - room.free_records
        )));
    }
    for (queue, n) in queued {
        let there = (room.existing)(queue).map_or(0, |q| q.overflow_len);
        if there + n > room.overflow_capacity {
            return Err(DumpError::Import(format!(
                "queue {queue}: the dump has {n} queued jobs and its overflow ring room for {} more \
                 (of {}); nothing was imported. Start xtcqd with a larger --overflow-capacity, or \
                 consume jobs first",
                room.overflow_capacity.saturating_sub(there),
                room.overflow_capacity
            )));
        }
    }
    check_dead_letters(dump, room, &dead)
}

/// Refuses a payload of `len` bytes that the segment cannot take, or whose block the jobs
/// before it took (`free_blocks`: what they left, one taken here when it fits).
fn check_payload<F: Fn(&str) -> Option<QueueNow>>(
    len: usize,
    room: &Room<F>,
    free_blocks: &mut [(u32, u64)],
) -> Result<(), String> {
    if len > room.payload_capacity as usize {
        return Err(format!(
            "its payload is {} bytes and this segment takes at most {}; start xtcqd with a larger \
             --payload-blocks class (or --payload-bytes) and import again",
            len, room.payload_capacity
        ));
    }
    // No classes: every payload the capacity allows is inline (or a daemon from before
    // blocks, whose stats say neither).
    if len > room.inline_capacity as usize && !room.free_blocks.is_empty() {
        let fit = free_blocks.iter_mut().find(|(size, free)| *size as usize >= len && *free > 0);
        let Some((_, free)) = fit else {
            return Err(format!(
                "its payload of {} bytes needs a payload block, and the free blocks that hold it \
                 ({}) are taken by the jobs before it; start xtcqd with more --payload-blocks \
                 SIZE=COUNT, or consume jobs first",
                len,
                blocks_label(&room.free_blocks, len)
            ));
        };
        *free -= 1;
    }
    Ok(())
}

/// Refuses dead letters past a queue's cap: the daemon's next scan would drop the oldest of
/// them, so the import would lose jobs while it said it had imported them.
fn check_dead_letters<F: Fn(&str) -> Option<QueueNow>>(
    dump: &Dump,
    room: &Room<F>,
    dead: &HashMap<&str, u64>,
) -> Result<(), DumpError> {
    for (&queue, &n) in dead {
        // An existing queue keeps its own cap; a new one gets its first queue line's.
        let (there, cap) = match (room.existing)(queue) {
            Some(q) => (q.dead, q.max_dead),
            None => (0, dump.queues.iter().find(|q| q.name == queue).map_or(0, |q| q.max_dead)),
        };
        if cap != 0 && there + n > u64::from(cap) {
            return Err(DumpError::Import(format!(
                "queue {queue}: the dump has {n} dead letters and the queue keeps at most {cap} \
                 ({there} there now), so the daemon would drop the oldest; nothing was imported. \
                 Requeue or purge its dead letters first (xtcq dead {queue} --requeue / --purge), \
                 or raise the cap (xtcq limits {queue} --max-dead N; max_dead in the dump's queue \
                 line for a queue the import creates)"
            )));
        }
    }
    Ok(())
}

/// Refuses the queues `dump` would create (the first line of each name the segment lacks,
/// as the import creates them) when one cannot be created or the table has no entry left.
fn check_queues<F: Fn(&str) -> Option<QueueNow>>(dump: &Dump, room: &Room<F>) -> Result<(), DumpError> {
    let mut new: Vec<&str> = Vec::new();
    for q in &dump.queues {
        if new.contains(&q.name.as_str()) || (room.existing)(&q.name).is_some() {
            continue;
        }
        check_queue(q, &room.queues)
            .map_err(|why| DumpError::Import(format!("queue {}: {why}; nothing was imported", q.name)))?;
        new.push(&q.name);
    }
    if new.len() as u64 > room.queues.free_entries {
        return Err(DumpError::Import(format!(
            "the dump creates {} queues and the segment's queue table has {} free entries; nothing was \
             imported. Delete queues first, or start xtcqd with a larger --queues",
            new.len(),
            room.queues.free_entries
        )));
    }
    Ok(())
}

/// Why the segment would refuse to create `q`, if it would.
fn check_queue(q: &QueueLine, room: &QueueRoom) -> Result<(), String> {
    proto::queue_name::check(&q.name).map_err(|e| e.to_string())?;
    let p = params(q);
    let spec = QueueSpec {
        name: p.name,
        flavor: flavor(q),
        deques: p.deques,
        capacity: p.capacity,
        max_attempts: p.max_attempts,
        lease_ms: p.lease_ms,
        levels: p.levels,
        aging: p.aging,
    };
    spec.check(room.deques_per_queue, room.deque_capacity).map_err(|e| e.to_string())?;
    if q.max_records > room.job_records {
        return Err(format!(
            "a record quota (max_records) of {} is more than the segment's {} records; start xtcqd \
             with at least {} --records, or lower it in the dump",
            q.max_records, room.job_records, q.max_records
        ));
    }
    Ok(())
}

/// The classes of `free` that hold `len` bytes, as `SIZE: N free`; "none" when none does.
fn blocks_label(free: &[(u32, u64)], len: usize) -> String {
    let said: Vec<String> = free
        .iter()
        .filter(|(size, _)| *size as usize >= len)
        .map(|(size, n)| format!("{size}: {n} free"))
        .collect();
    if said.is_empty() {
        "no class holds it".into()
    } else {
        said.join(", ")
    }
}
