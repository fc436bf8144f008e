//! The queue table: creating, reading, sizing up and deleting queue entries.
//!
//! Rules kept:
//! - the daemon is the table's only writer; an entry moves FREE -> ACTIVE on create and
//!   ACTIVE -> DELETING -> FREE on delete, each by a CAS on its control word;
//! - a descriptor is plain data reached through raw pointers, never under a `&` that covers
//!   bytes another process writes; what is read is validated before it is returned;
//! - a delete withdraws every job of the entry and resets its deques, ring and sleepers
//!   while it holds the entry in DELETING, so no one sees half of a reset.

use super::*;

/// What refers to one queue-table entry, from one walk of its deques and of every record
/// ([`Segment::queue_usage`]). A racy snapshot unless the caller keeps everyone else away.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueUsage {
    /// `(deque, owner's process slot)` of every deque of the entry with a lease word, over
    /// all of the segment's deques per queue (a lease beyond the queue's count is corruption,
    /// and still someone's).
    pub leases: Vec<(u32, u32)>,
    /// Records of the queue waiting to be claimed.
    pub queued: u32,
    /// Dead letters of the queue.
    pub dead: u32,
    /// Records of the queue being run (`Claimed` or `Writing`).
    pub claimed: u32,
    /// `(process slot, jobs)` holding those, by slot ascending; claims revoked by a daemon
    /// and not yet given back ([`NO_HOLDER`]) are counted in `claimed` only.
    pub holders: Vec<(u32, u32)>,
    /// Records being filled whose queue field names the entry. Only a hint: a filler writes
    /// the queue field during the fill, so until it publishes, the field may still name the
    /// queue of the record's previous job. A job can only be pushed to a queue by one of its
    /// owners or injectors, so the daemon keeps those away instead of counting on this.
    pub filling: u32,
}

impl QueueUsage {
    /// Whether a delete (forced or not) must be refused with this usage.
    pub fn refusal(&self, queue: &str, force: bool) -> Result<(), DeleteError> {
        if !self.leases.is_empty() {
            return Err(DeleteError::Leased { queue: queue.to_string(), leases: self.leases.clone() });
        }
        if self.claimed > 0 {
            return Err(DeleteError::JobsHeld {
                queue: queue.to_string(),
                claimed: self.claimed,
                holders: self.holders.clone(),
            });
        }
        if !force && (self.queued > 0 || self.dead > 0) {
            return Err(DeleteError::NotEmpty {
                queue: queue.to_string(),
                queued: self.queued,
                dead: self.dead,
            });
        }
        Ok(())
    }
}

/// Jobs a delete dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DroppedJobs {
    /// Queued jobs freed.
    pub queued: u32,
    /// Dead letters freed.
    pub dead: u32,
}

/// A queue [`Segment::delete_queue_at`] deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDeleted {
    /// The queue as it was.
    pub info: QueueInfo,
    /// What a forced delete dropped (zero without force).
    pub dropped: DroppedJobs,
}

/// A queue's properties, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// Name, 1–64 bytes of UTF-8.
    pub name: String,
    /// The owners' order.
    pub flavor: Flavor,
    /// Deques (owners) the queue can have.
    pub deques: u32,
    /// Slots per deque, a power of two.
    pub capacity: u32,
    /// Attempts before dead-lettering (0: no limit).
    pub max_attempts: u32,
    /// Default claim lease in ms (0: none).
    pub lease_ms: u32,
    /// Priority levels, 1 to [`MAX_LEVELS`](crate::levels::MAX_LEVELS) (`crate::levels`):
    /// each has its own `deques` deques and a cut of the overflow ring.
    pub levels: u32,
    /// Every `aging`-th job a consumer handle takes comes from the least urgent non-empty
    /// level (0: never).
    pub aging: u32,
}

impl QueueSpec {
    /// A LIFO queue named `name` with one deque of 1,024 slots, no attempt limit and no lease:
    /// set the fields to change them; `create_queue` validates the whole.
    ///
    /// ```
    /// use xtcq_shm::{Flavor, QueueSpec};
    /// let spec = QueueSpec { flavor: Flavor::Fifo, deques: 4, ..QueueSpec::new("jobs") };
    /// assert_eq!((spec.name.as_str(), spec.capacity), ("jobs", 1024));
    /// ```
    pub fn new(name: &str) -> QueueSpec {
        QueueSpec {
            name: name.to_string(),
            flavor: Flavor::Lifo,
            deques: 1,
            capacity: 1024,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        }
    }

    /// The queue's deques over every level: deque `d` of level `l` is `l * deques + d`.
    pub fn level_deques(&self) -> u32 {
        self.deques.saturating_mul(self.levels.max(1))
    }

    /// Refuses a spec a segment whose queues may have `deques_per_queue` deques of at most
    /// `deque_capacity` slots cannot create (name, deques, capacity): what `create_queue`
    /// checks first, for a caller that must know before it creates anything (an import).
    pub fn check(&self, deques_per_queue: u32, deque_capacity: u32) -> Result<(), QueueError> {
        if self.name.is_empty() || self.name.len() > MAX_QUEUE_NAME {
            return Err(QueueError::BadSpec(format!(
                "name must be 1 to {MAX_QUEUE_NAME} bytes, got {}",
                self.name.len()
            )));
        }
        if self.name.chars().any(|ch| ch.is_control() || ch.is_whitespace()) {
            return Err(QueueError::BadSpec(format!(
                "name {:?} contains whitespace or control characters",
                self.name
            )));
        }
        if self.deques == 0 || self.deques > deques_per_queue {
            return Err(QueueError::BadSpec(format!(
                "deques must be 1 to {} (the segment's deques per queue), got {}",
                deques_per_queue, self.deques
            )));
        }
        if !self.capacity.is_power_of_two() || self.capacity < 2 || self.capacity > deque_capacity {
            return Err(QueueError::BadSpec(format!(
                "capacity must be a power of two from 2 to {} (the segment's deque capacity), got {}",
                deque_capacity, self.capacity
            )));
        }
        self.check_levels(deques_per_queue)
    }

    /// Refuses a level count past [`MAX_LEVELS`](crate::levels::MAX_LEVELS) or whose deques
    /// over every level do not fit the segment's deques per queue.
    fn check_levels(&self, deques_per_queue: u32) -> Result<(), QueueError> {
        let max = crate::levels::MAX_LEVELS;
        if self.levels == 0 || self.levels > max {
            return Err(QueueError::BadSpec(format!("--levels must be 1 to {max}, got {}", self.levels)));
        }
        if self.deques as u64 * self.levels as u64 > deques_per_queue as u64 {
            return Err(QueueError::BadSpec(format!(
                "--deques {} times --levels {} is {} deques, past the segment's {} per queue \
                 (fewer --deques or --levels, or xtcqd --deques-per-queue)",
                self.deques,
                self.levels,
                self.deques as u64 * self.levels as u64,
                deques_per_queue
            )));
        }
        Ok(())
    }
}

/// An active queue, as read from the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// Table index.
    pub index: u32,
    /// Its properties.
    pub spec: QueueSpec,
}

impl Segment {
    /// Offset of queue-table entry `index`. Only its atomic parts are ever borrowed: the
    /// descriptor is plain data and is reached through raw pointers, so no `&` ever covers
    /// bytes that another process (or the daemon in this one) writes.
    pub(super) fn queue_entry_offset(&self, index: u32) -> Option<u64> {
        if index >= self.desc.config.queues {
            return None;
        }
        Some(self.desc.regions.queue_table + index as u64 * core::mem::size_of::<QueueEntry>() as u64)
    }

    pub(crate) fn queue_control(&self, index: u32) -> Option<&QueueControl> {
        let off = self.queue_entry_offset(index)? + core::mem::offset_of!(QueueEntry, control) as u64;
        // SAFETY: index < queues, so the entry lies inside the queue table, which validation
        // placed inside the mapping; 128-aligned since the table start and size are.
        Some(unsafe { self.at(off) })
    }

    fn queue_desc_ptr(&self, index: u32) -> Option<*mut QueueDescriptor> {
        let off = self.queue_entry_offset(index)?;
        // SAFETY: in bounds as in `queue_control`.
        Some(unsafe { self.map.as_mut_ptr().add(off as usize) as *mut QueueDescriptor })
    }

    /// Writes a queue into table entry `index`, which must be free. Used by the daemon (the
    /// only writer of the queue table) and by tests that run without one.
    pub fn create_queue_at(&self, index: u32, spec: &QueueSpec) -> Result<QueueInfo, QueueError> {
        self.create_queue_at_limited(index, spec, super::QueueQuota::default())
    }

    /// [`create_queue_at`](Self::create_queue_at) with limits `quota`, written (and the
    /// last create's counts cleared) before the entry becomes active.
    pub fn create_queue_at_limited(
        &self,
        index: u32,
        spec: &QueueSpec,
        quota: super::QueueQuota,
    ) -> Result<QueueInfo, QueueError> {
        self.check_spec(spec)?;
        let not_active = QueueError::NotActive { index, queues: self.desc.config.queues };
        let control = self.queue_control(index).ok_or(not_active.clone())?;
        let desc_ptr = self.queue_desc_ptr(index).ok_or(not_active)?;
        if control
            .state
            .compare_exchange(QUEUE_FREE, QUEUE_CREATING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(QueueError::BadSpec(format!("queue-table entry {index} is in use")));
        }
        let mut name = [0u8; MAX_QUEUE_NAME];
        name[..spec.name.len()].copy_from_slice(spec.name.as_bytes());
        let desc = QueueDescriptor {
            name,
            name_len: spec.name.len() as u32,
            flavor: spec.flavor as u32,
            deque_count: spec.deques,
            capacity: spec.capacity,
            max_attempts: spec.max_attempts,
            lease_ms: spec.lease_ms,
            created_unix_ns: now_unix_ns(),
        };
        // SAFETY: the entry is in the mapping (above) and ours alone while CREATING; the
        // descriptor is plain data that nothing borrows.
        unsafe { core::ptr::write_volatile(desc_ptr, desc) };
        self.reset_queue_limits(index, quota);
        self.reset_flow(index);
        self.reset_running(index);
        self.reset_rate(index);
        self.reset_levels(index, spec.levels, spec.aging);
        // Release: readers that see ACTIVE (Acquire) see the descriptor.
        control.state.store(QUEUE_ACTIVE, Ordering::Release);
        Ok(QueueInfo { index, spec: spec.clone() })
    }

    /// Creates a queue in the first free table entry; refuses a duplicate name.
    pub fn create_queue(&self, spec: &QueueSpec) -> Result<QueueInfo, QueueError> {
        self.create_queue_limited(spec, super::QueueQuota::default())
    }

    pub(super) fn check_spec(&self, spec: &QueueSpec) -> Result<(), QueueError> {
        let c = &self.desc.config;
        spec.check(c.deques_per_queue, c.deque_capacity)?;
        if crate::levels::RingSplit::of(c.overflow_capacity as usize, spec.levels).is_none() {
            return Err(QueueError::BadSpec(format!(
                "--levels {} cuts the overflow ring of {} cells into rings of fewer than {} \
                 (fewer --levels, or xtcqd --overflow-capacity)",
                spec.levels,
                c.overflow_capacity,
                crate::levels::MIN_LEVEL_RING
            )));
        }
        Ok(())
    }

    /// Reads and validates the queue at table entry `index`.
    pub fn queue(&self, index: u32) -> Result<QueueInfo, QueueError> {
        let not_active = QueueError::NotActive { index, queues: self.desc.config.queues };
        let control = self.queue_control(index).ok_or(not_active.clone())?;
        let desc_ptr = self.queue_desc_ptr(index).ok_or(not_active.clone())?;
        // Acquire pairs with the Release store of ACTIVE in `create_queue_at`.
        if control.state.load(Ordering::Acquire) != QUEUE_ACTIVE {
            return Err(not_active);
        }
        // SAFETY: in the mapping; plain data valid for any bits, copied out once.
        let d = unsafe { core::ptr::read_volatile(desc_ptr) };
        // Still ACTIVE after the copy, or the queue was deleted meanwhile and is not to be
        // reported. (A delete leaves the descriptor as it was, so the copy is whole unless the
        // entry was also created anew while we copied: a delete and a create, each a walk of
        // every record, inside one 96-byte copy.) The fence keeps the copy's reads before the
        // re-check, as in a seqlock reader; the Acquire load alone would not.
        crate::sync::fence(Ordering::Acquire);
        if control.state.load(Ordering::Acquire) != QUEUE_ACTIVE {
            return Err(not_active);
        }
        let corrupt = |what: String| QueueError::Corrupt { index, what };
        let c = &self.desc.config;
        if d.name_len == 0 || d.name_len as usize > MAX_QUEUE_NAME {
            return Err(corrupt(format!("name length {}", d.name_len)));
        }
        let name = std::str::from_utf8(&d.name[..d.name_len as usize])
            .map_err(|_| corrupt("name is not UTF-8".into()))?
            .to_string();
        let flavor = Flavor::from_u32(d.flavor).ok_or_else(|| corrupt(format!("flavor {}", d.flavor)))?;
        if d.deque_count == 0 || d.deque_count > c.deques_per_queue {
            return Err(corrupt(format!("deque count {}", d.deque_count)));
        }
        if !d.capacity.is_power_of_two() || d.capacity < 2 || d.capacity > c.deque_capacity {
            return Err(corrupt(format!("deque capacity {}", d.capacity)));
        }
        let (levels, aging) = self.read_levels(index).ok_or_else(|| corrupt("level count".into()))?;
        if d.deque_count as u64 * levels as u64 > c.deques_per_queue as u64
            || crate::levels::RingSplit::of(c.overflow_capacity as usize, levels).is_none()
        {
            return Err(corrupt(format!("{levels} levels of {} deques", d.deque_count)));
        }
        Ok(QueueInfo {
            index,
            spec: QueueSpec {
                name,
                flavor,
                deques: d.deque_count,
                capacity: d.capacity,
                max_attempts: d.max_attempts,
                lease_ms: d.lease_ms,
                levels,
                aging,
            },
        })
    }

    /// All active queues.
    pub fn queues(&self) -> Vec<Result<QueueInfo, QueueError>> {
        (0..self.desc.config.queues)
            .filter_map(|i| match self.queue(i) {
                Err(QueueError::NotActive { .. }) => None,
                r => Some(r),
            })
            .collect()
    }

    /// The active queue called `name`.
    pub fn queue_by_name(&self, name: &str) -> Result<QueueInfo, QueueError> {
        self.queues()
            .into_iter()
            .flatten()
            .find(|q| q.spec.name == name)
            .ok_or_else(|| QueueError::NoSuchQueue(name.to_string()))
    }

    /// The raw state word (`QUEUE_*`) of queue-table entry `index`, `None` out of range.
    pub fn queue_state(&self, index: u32) -> Option<u32> {
        self.queue_control(index).map(|c| c.state.load(Ordering::Acquire))
    }

    /// What refers to queue-table entry `index`: leases on its deques and its records by
    /// state. Empty for an index out of range.
    pub fn queue_usage(&self, index: u32) -> QueueUsage {
        let mut u = QueueUsage::default();
        if index >= self.desc.config.queues {
            return u;
        }
        for d in 0..self.desc.config.deques_per_queue {
            if let Some(h) = self.deque_header(index, d) {
                if let Some(slot) = crate::layout::lease_holder(h.lease.load(Ordering::Acquire)) {
                    u.leases.push((d, slot));
                }
            }
        }
        let records = self.records();
        let mut holders = std::collections::BTreeMap::<u32, u32>::new();
        for i in 0..records.len() {
            let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
            // The word first (Acquire), then the queue field: for a published record the
            // field was written before the word's publishing CAS, so it is the job's queue.
            let w = st.load();
            if hdr.queue.load(Ordering::Relaxed) != index {
                continue;
            }
            match w.state() {
                // A delayed job is a queued one that waits for its time.
                Some(State::Queued | State::Delayed) => u.queued += 1,
                Some(State::Dead) => u.dead += 1,
                Some(State::Claimed | State::Writing) => {
                    u.claimed += 1;
                    if w.holder() != NO_HOLDER {
                        *holders.entry(w.holder()).or_insert(0) += 1;
                    }
                }
                Some(State::Filling) => u.filling += 1,
                // Free, or bits no correct program writes (`check` reports those).
                Some(State::Free) | None => {}
            }
        }
        u.holders = holders.into_iter().collect();
        u
    }

    /// Deletes the queue at table entry `index`, so that the entry can be created anew:
    /// refused while one of its deques is leased or one of its jobs is being run, and, unless
    /// `force`, while it holds queued jobs or dead letters (with `force` those are dropped:
    /// each record is freed by one CAS that bumps its generation, so a handle from before
    /// fails its claim, re-queue or purge).
    ///
    /// The caller (the daemon, under the lock it takes to create queues and attach processes)
    /// must keep every process away from the queue: no owner, thief or injector attached. A
    /// record being filled cannot be told to belong to the queue before it is published (see
    /// [`QueueUsage::filling`]), and a thief or injector leaves no trace in the segment.
    ///
    /// Steps: `ACTIVE -> DELETING` first, so that no lookup (`queue`, `queues`,
    /// `queue_by_name`) returns it and nothing new attaches; then the jobs are dropped; then
    /// every deque of the entry (`top = bottom = 0`, slots and lease word zeroed) and its
    /// overflow ring (`head = tail = 0`, cells zeroed) are reset, and its sleepers woken (the
    /// wait word's `seq` is bumped, never reset: a sleeper compares it with the value it read);
    /// then `DELETING -> FREE`. A lease or claim that shows up once the entry is `DELETING`
    /// (a process the caller did not keep away) puts the entry back to `ACTIVE` and refuses.
    /// A crash in between leaves `DELETING`, which [`finish_interrupted_deletes`] completes.
    ///
    /// [`finish_interrupted_deletes`]: Segment::finish_interrupted_deletes
    pub fn delete_queue_at(&self, index: u32, force: bool) -> Result<QueueDeleted, DeleteError> {
        let info = self.queue(index)?;
        let name = info.spec.name.as_str();
        // Refuse before the entry leaves ACTIVE, so that a refused delete never makes the
        // queue disappear for a moment.
        self.queue_usage(index).refusal(name, force)?;
        let not_active = QueueError::NotActive { index, queues: self.desc.config.queues };
        let control = self.queue_control(index).ok_or(not_active.clone())?;
        // AcqRel: we see every write made under the ACTIVE state we replace; a racing second
        // delete (or anything else that moved the word) fails here.
        control
            .state
            .compare_exchange(QUEUE_ACTIVE, QUEUE_DELETING, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| not_active)?;
        let mut dropped = DroppedJobs::default();
        // Look again now that the queue cannot be found: a lease or a claim that came between
        // the first look and the CAS, or a job re-queued in the middle of our withdrawals (a
        // nack), is someone the caller did not keep away. Each round withdraws what it finds;
        // jobs that keep coming back after a few rounds are a process still at work.
        const ROUNDS: u32 = 4;
        for round in 0..=ROUNDS {
            let usage = self.queue_usage(index);
            let refused = usage.refusal(name, force).and_then(|()| {
                if round == ROUNDS && (usage.queued > 0 || usage.dead > 0) {
                    Err(DeleteError::StillInUse { queue: name.to_string() })
                } else {
                    Ok(())
                }
            });
            if let Err(e) = refused {
                // Back as it was: the deques, ring and descriptor are untouched so far. (Jobs
                // a forced delete withdrew stay dropped; their handles fail as stale.)
                control.state.store(QUEUE_ACTIVE, Ordering::Release);
                return Err(e);
            }
            if usage.queued == 0 && usage.dead == 0 {
                break;
            }
            let d = self.withdraw_jobs(index);
            dropped.queued += d.queued;
            dropped.dead += d.dead;
        }
        self.reset_queue_entry(index);
        // Release: whoever creates the entry anew (its Acquire CAS from FREE) sees the reset.
        control.state.store(QUEUE_FREE, Ordering::Release);
        Ok(QueueDeleted { info, dropped })
    }

    /// Completes every delete a crash interrupted (entries left `DELETING`): drops the jobs
    /// still naming the entry, resets it as [`delete_queue_at`] does, marks it `FREE`.
    /// Returns each entry finished and what it dropped. An entry still in use (a deque
    /// lease or a claimed job) goes back to `ACTIVE` instead: the delete is undone, not
    /// forced. For a daemon adopting a segment, before it serves anyone.
    ///
    /// [`delete_queue_at`]: Segment::delete_queue_at
    pub fn finish_interrupted_deletes(&self) -> Vec<(u32, DroppedJobs)> {
        let mut out = Vec::new();
        for index in 0..self.desc.config.queues {
            let Some(control) = self.queue_control(index) else { break };
            if control.state.load(Ordering::Acquire) != QUEUE_DELETING {
                continue;
            }
            // The daemon may have died after ACTIVE -> DELETING but before the re-check that
            // would have refused (a lease or a claim appeared: a process the daemon did not
            // know of). Someone still uses the queue: undo the delete rather than reset a
            // deque or free a job under them. Otherwise the delete had passed its checks, and
            // whatever is left of its jobs goes.
            let usage = self.queue_usage(index);
            if !usage.leases.is_empty() || usage.claimed > 0 {
                control.state.store(QUEUE_ACTIVE, Ordering::Release);
                continue;
            }
            let dropped = self.withdraw_jobs(index);
            self.reset_queue_entry(index);
            control.state.store(QUEUE_FREE, Ordering::Release);
            out.push((index, dropped));
        }
        out
    }

    /// Frees every `Queued` or `Delayed` record and dead letter whose queue is `index` (one CAS each,
    /// from the exact word seen: a record that moved meanwhile is left to the next look).
    fn withdraw_jobs(&self, index: u32) -> DroppedJobs {
        let mut dropped = DroppedJobs::default();
        let records = self.records();
        for i in 0..records.len() {
            let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
            let w = st.load();
            let state = match w.state() {
                Some(s @ (State::Queued | State::Dead | State::Delayed)) => s,
                _ => continue,
            };
            if hdr.queue.load(Ordering::Relaxed) != index {
                continue;
            }
            // `Queued(g) / Dead(g) -> Free(g + 1)`; fails if the record moved on (its
            // generation or state changed), and then it is no longer this job. Its block is
            // read before (the job is still whole) and given back after.
            let block = records.held_block(i);
            if st.withdraw(w.generation(), state).is_ok() {
                records.release_block(block);
                match state {
                    State::Dead => dropped.dead += 1,
                    _ => dropped.queued += 1,
                }
            }
        }
        dropped
    }

    /// Resets queue-table entry `index`'s deques, overflow ring and sleepers, for an entry
    /// this caller holds in `DELETING` (nobody else reads or writes them).
    fn reset_queue_entry(&self, index: u32) {
        // Its batches go with it: a queue created anew at this index must not find them.
        crate::batch::forget_queue(self, index);
        // A queue created anew in this entry starts its totals from zero.
        self.reset_queue_metrics(index);
        // Relaxed throughout: published by the Release store of FREE that follows.
        for d in 0..self.desc.config.deques_per_queue {
            if let Some((h, slots)) = self.deque_words(index, d) {
                for s in slots {
                    s.store(0, Ordering::Relaxed);
                }
                h.top.store(0, Ordering::Relaxed);
                h.bottom.store(0, Ordering::Relaxed);
                h.lease.store(0, Ordering::Relaxed);
            }
        }
        if let Some((h, cells)) = self.overflow_words(index) {
            // A zero cell is "empty at lap 0", what position 0 expects, as in a new segment.
            for c in cells {
                c.store(0, Ordering::Relaxed);
            }
            h.head.store(0, Ordering::Relaxed);
            h.tail.store(0, Ordering::Relaxed);
        }
        // Anyone still asleep on the queue (nobody should be) wakes up and looks again, and
        // finds it gone; `seq` only moves forward.
        if let Some(w) = self.waker(index) {
            crate::wait::wake_all(w);
        }
    }
}
