//! The process registry: process slots, deque leases and recovery, over the segment.
//!
//! The segment holds the jobs, so a restarted daemon can adopt them, but not who holds a
//! process slot, since every attached process can write it: that is this daemon's memory
//! ([`Bookkeeping`]) and, for the next daemon, its private state file ([`crate::persistence::state`]).
//!
//! Rules kept:
//! - this module is the only writer of the process table, the queue table and the deque
//!   lease words, and writes them under one mutex ([`Registry`]'s).
//! - a slot the segment shows in use that neither this daemon nor its state file records is
//!   reclaimed.
//! - a slot is `PROCESS_ACTIVE` from registration until its process has exited *and* its
//!   connection is closed; then [`Registry::recover_process`] gives back what it held. A mere
//!   disconnect keeps slot and leases.
//! - each watched slot has one *keeper* (the connection that registered or resumed it, or
//!   the watcher of an adopted slot); only the keeper recovers it, so a slot is recovered
//!   once however many connections it had.
//! - [`Registry::resume`] gives a slot back only to the process it is registered to, as this
//!   daemon identified it (kernel pid, start time, uid; never re-read from the segment), at
//!   the epoch the caller names.
//! - a deque's lease word is `0` or `lease_word(slot, epoch)` of an active slot: set by a CAS
//!   from 0 (one owner per deque), cleared only by the holder's detach or by recovery after
//!   it died. Ownership never moves while the old owner lives.
//! - slot writes: fields first, then the state word with Release, so a reader that sees
//!   `PROCESS_ACTIVE` (Acquire) sees the fields.
//! - a queue is deleted ([`Registry::delete_queue`]) only while no process is attached to it:
//!   no lease on its deques, no tracked thief or injector of it, no adopted slot (which may
//!   use any queue). Attaches record themselves under the same lock, so an attach and a
//!   delete of one queue cannot interleave.

mod acl;
mod delete;
mod exist_ok;
mod recover;
pub(crate) mod scan;
mod slots;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use xtcq_shm::layout::{PROCESS_ACTIVE, PROCESS_FREE};
use xtcq_shm::recovery::{lease_holder, lease_word};
use xtcq_shm::{QueueInfo, QueueSpec, Segment};

use xtcq_proto as proto;

use crate::persistence::state::{QueueAcl, StateFile};

pub use crate::convert::{queue_error, queue_info};
pub use acl::{Access, Op};
pub use delete::DeleteRefused;

/// A registered process slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotId {
    /// Index (`me`).
    pub slot: u32,
    /// Incarnation.
    pub epoch: u64,
}

/// Who is registering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    /// Pid (0: unknown).
    pub pid: u32,
    /// Uid.
    pub uid: u32,
    /// Start time (0: unknown).
    pub start_time: u64,
}

/// A process slot found registered when the daemon adopted the segment.
#[derive(Clone, Copy, Debug)]
pub struct Adopted {
    /// The slot.
    pub slot: SlotId,
    /// Its process.
    pub process: ProcessId,
    /// The keeper of the slot: the watcher the daemon starts for it.
    pub keeper: Keeper,
}

/// Names the one task in charge of recovering a slot once its process has exited (see the
/// module's invariants). Made by [`Registry::keeper`]; never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keeper(u64);

/// The registry; cheap to clone.
#[derive(Clone)]
pub struct Registry {
    pub(crate) seg: Arc<Segment>,
    pub(crate) lock: Arc<Mutex<Bookkeeping>>,
    pub(crate) next_keeper: Arc<AtomicU64>,
    /// Where the slots and queue permissions are kept for the next daemon (`None`: nowhere,
    /// so a restart trusts no slot; for tests of the registry alone).
    pub(crate) state: Option<Arc<StateFile>>,
    /// Most slots one uid may hold, and the uids without a limit (`None`: no limit).
    pub(crate) slot_limit: Option<(u32, [u32; 2])>,
    /// What one uid may own of the queues and records (`None`: no limit).
    pub(crate) share: Option<crate::limits::share::UidShare>,
    /// The wake directory and its group (`None`: descriptor waits are off).
    pub(crate) wake: Option<Arc<crate::wake::registry::PathBufAndGroup>>,
    /// The delayed jobs this daemon knows of (see `crate::delay`).
    pub(crate) timers: Arc<crate::delay::Timers>,
}

/// In-memory bookkeeping the segment does not hold: the slots this daemon watches.
#[derive(Default)]
pub(crate) struct Bookkeeping {
    pub(crate) slots: BTreeMap<u32, WatchedSlot>,
    /// The periodic scan's memory (see `scan`).
    pub(crate) scan: scan::ScanMemory,
    /// Commands registered to be stopped before their job runs again (see `crate::fence`).
    pub(crate) fences: crate::fence::Fences,
    /// Queue permissions, by queue-table index (see `acl`).
    pub(crate) queues: BTreeMap<u32, QueueAcl>,
    /// Wake descriptors granted: (queue-table index, waiter bit) -> process slot.
    pub(crate) wakes: BTreeMap<(u32, u32), u32>,
    /// Queues with jobs queued at the last scan (see `crate::wake`).
    pub(crate) stranded: BTreeSet<u32>,
    /// The limits this daemon set, by queue-table index: what the scan writes back over the
    /// segment's words and what the per-user share is counted from (see `crate::limits::quota`).
    pub(crate) quotas: BTreeMap<u32, xtcq_shm::segment::QueueQuota>,
}

impl Bookkeeping {
    /// The fences (read) and the scan memory (written) at once.
    pub(crate) fn split_scan(&mut self) -> (&mut crate::fence::Fences, &mut scan::ScanMemory) {
        (&mut self.fences, &mut self.scan)
    }
}

/// A registered slot this daemon watches.
pub(crate) struct WatchedSlot {
    /// The incarnation registered (or adopted).
    pub(crate) epoch: u64,
    /// The process it belongs to, as this daemon identified it: from the kernel for a slot
    /// registered over a connection, from the segment confirmed by `/proc` and a pidfd for
    /// an adopted one. WatchedSlot here, so a process that scribbles over the segment's copy
    /// cannot make the slot look like its own.
    pub(crate) process: ProcessId,
    /// Who recovers it.
    pub(crate) keeper: Keeper,
    /// Whether the keeper is an open connection.
    pub(crate) connected: bool,
    /// The queues it attached to as a thief or injector, as far as this daemon knows.
    pub(crate) uses: QueuesUsed,
}

/// The queues a slot's process attached to as a thief or an injector. (An owner is known by
/// its lease word in the segment, which also says when it detached.) Attachments last until
/// the process exits: neither role has a detach, and the process may keep using a handle
/// without its connection.
pub(crate) enum QueuesUsed {
    /// Queue-table index → `ROLE_THIEF | ROLE_INJECTOR` bits, of every attach this daemon
    /// granted to the slot (over any of its process's connections).
    Known(BTreeMap<u32, u32>),
    /// Adopted from an earlier daemon, which knew: the segment does not record it, so the
    /// process may use any queue. A resume does not change that (the old handles live on).
    Unknown,
}

pub(crate) fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Registry {
    /// A registry over `seg`.
    pub fn new(seg: Arc<Segment>) -> Self {
        Self {
            seg,
            lock: Arc::new(Mutex::new(Bookkeeping::default())),
            next_keeper: Arc::new(AtomicU64::new(1)),
            state: None,
            slot_limit: None,
            share: None,
            wake: None,
            timers: crate::delay::new_timers(),
        }
    }

    /// Fences at most `n` commands at once (each holds a file descriptor).
    pub fn limit_fences(self, n: usize) -> Self {
        self.lock().fences.set_limit(n);
        self
    }

    /// Lets no uid but `exempt` hold more than `per_uid` process slots at once.
    pub fn limit_slots_per_uid(mut self, per_uid: u32, exempt: [u32; 2]) -> Self {
        self.slot_limit = Some((per_uid, exempt));
        self
    }

    /// A registry over `seg` that keeps its slots and queue permissions in `state` (and,
    /// on [`adopt`](Self::adopt), trusts only what that file says).
    pub fn with_state(seg: Arc<Segment>, state: StateFile) -> Self {
        Self { state: Some(Arc::new(state)), ..Self::new(seg) }
    }

    /// A new keeper token (one per connection, one per adopted slot's watcher).
    pub fn keeper(&self) -> Keeper {
        Keeper(self.next_keeper.fetch_add(1, Ordering::Relaxed))
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Bookkeeping> {
        // A panic while holding the lock leaves only stats bookkeeping behind; go on.
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a process in a free slot with `roles`, kept by the connection `keeper`.
    pub fn register(&self, p: ProcessId, roles: u32, keeper: Keeper) -> Result<SlotId, proto::ErrorReply> {
        let mut t = self.lock();
        self.check_slot_limit(&t, &p)?;
        let n = self.seg.config().process_slots;
        for i in 0..n {
            // Free means: this daemon registered no process to it. The segment's state word
            // is only a copy for readers; an attached process can write it.
            if t.slots.contains_key(&i) {
                continue;
            }
            let Some(s) = self.seg.process_slot(i) else { break };
            if s.state.load(Ordering::Acquire) != PROCESS_FREE {
                self.reclaim_unregistered(i);
            }
            s.pid.store(p.pid, Ordering::Relaxed);
            s.uid.store(p.uid, Ordering::Relaxed);
            s.start_time.store(p.start_time, Ordering::Relaxed);
            s.role.store(roles, Ordering::Relaxed);
            s.attached_unix_ns.store(now_unix_ns(), Ordering::Relaxed);
            let epoch = s.epoch.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            // Release: the fields above are visible to whoever sees ACTIVE.
            s.state.store(PROCESS_ACTIVE, Ordering::Release);
            t.slots.insert(
                i,
                WatchedSlot {
                    epoch,
                    process: p,
                    keeper,
                    connected: true,
                    uses: QueuesUsed::Known(BTreeMap::new()),
                },
            );
            self.persist(&t);
            return Ok(SlotId { slot: i, epoch });
        }
        Err(proto::ErrorReply::new(
            proto::ErrorCode::NoFreeSlot,
            // An existing segment keeps its size: more slots means a new segment.
            format!(
                "all {n} process slots are held by attached processes (a slot is held until its \
                 process exits); stop some of them, or restart xtcqd with --recreate and more \
                 --process-slots (which drops the segment's jobs)"
            ),
        ))
    }

    /// Adds role bits to a registered slot.
    pub fn add_roles(&self, slot: SlotId, roles: u32) {
        let _t = self.lock();
        if let Some(s) = self.seg.process_slot(slot.slot) {
            s.role.fetch_or(roles, Ordering::Relaxed);
        }
    }

    /// Gives slot `want` to the connection `keeper` of process `p`, which held it over an
    /// earlier connection: only if this daemon has it registered to exactly that process
    /// (pid, start time and uid, all known) at `want.epoch`, and the segment still shows
    /// it active at that epoch. The keeper moves to the connection, which from now on
    /// recovers the slot when it has closed and the process has exited. Anything else is
    /// [`proto::ErrorCode::SlotNotHeld`], and nothing changes.
    pub fn resume(&self, want: SlotId, p: &ProcessId, keeper: Keeper) -> Result<SlotId, proto::ErrorReply> {
        let refuse = |why: String| {
            proto::ErrorReply::new(
                proto::ErrorCode::SlotNotHeld,
                format!(
                    "process slot {} (epoch {}) cannot be given back to this process: {why}; attach \
                     again for a fresh slot",
                    want.slot, want.epoch
                ),
            )
        };
        // Without a pid and a start time nothing tells this process from another (say, one
        // in a pid namespace we cannot see into): never hand it a slot on its word.
        if p.pid == 0 || p.start_time == 0 {
            return Err(refuse(
                "xtcqd cannot identify the connecting process (no pid or start time visible to it)".into(),
            ));
        }
        let mut t = self.lock();
        let n = self.seg.config().process_slots;
        let Some(s) = self.seg.process_slot(want.slot) else {
            return Err(refuse(format!("the segment has {n} process slots")));
        };
        let Some(kept) = t.slots.get_mut(&want.slot) else {
            return Err(refuse(
                "it is not registered (free, or recovered after its process was seen to exit)".into(),
            ));
        };
        if kept.epoch != want.epoch {
            return Err(refuse("it was registered again since, for another attachment".into()));
        }
        if kept.process.pid != p.pid || kept.process.uid != p.uid {
            return Err(refuse("it is registered to another process".into()));
        }
        if kept.process.start_time == 0 {
            // Registered when /proc did not show a start time: a reused pid would pass.
            return Err(refuse(
                "it was registered without its process's start time, so xtcqd cannot tell that it is \
                 this process"
                    .into(),
            ));
        }
        if kept.process.start_time != p.start_time {
            return Err(refuse("it is registered to another process (an earlier one with this pid)".into()));
        }
        // The segment must agree (a slot being recovered, or scribbled over, is not given).
        if s.state.load(Ordering::Acquire) != PROCESS_ACTIVE || s.epoch.load(Ordering::Relaxed) != want.epoch
        {
            return Err(refuse("the segment no longer shows it active at that epoch".into()));
        }
        kept.keeper = keeper;
        kept.connected = true;
        Ok(want)
    }

    /// Marks a slot's connection `keeper` closed (its process may live on). Returns whether
    /// `keeper` still keeps the slot, i.e. must watch the process and recover the slot: not
    /// when another connection of the process has resumed it meanwhile.
    pub fn disconnected(&self, slot: SlotId, keeper: Keeper) -> bool {
        let mut t = self.lock();
        match t.slots.get_mut(&slot.slot) {
            Some(k) if k.keeper == keeper && k.epoch == slot.epoch => {
                k.connected = false;
                true
            }
            _ => false,
        }
    }

    /// Creates a queue owned by the daemon's own uid, shared with nobody else.
    pub fn create_queue(&self, p: &proto::QueueParams) -> Result<proto::QueueInfo, proto::ErrorReply> {
        let me = rustix::process::getuid().as_raw();
        self.create_queue_as(p, me, &[], &[])
    }

    /// Creates a queue owned by `owner` and usable also by `uids` and members of `gids`,
    /// within `owner`'s share (`share`).
    pub fn create_queue_as(
        &self,
        p: &proto::QueueParams,
        owner: u32,
        uids: &[u32],
        gids: &[u32],
    ) -> Result<proto::QueueInfo, proto::ErrorReply> {
        self.create_queue_with(p, owner, uids, gids, true)
    }

    /// As [`create_queue_as`](Self::create_queue_as), for the daemon's own import: the
    /// operator's, so no share limits it.
    pub fn import_queue_as(
        &self,
        p: &proto::QueueParams,
        owner: u32,
        uids: &[u32],
        gids: &[u32],
    ) -> Result<proto::QueueInfo, proto::ErrorReply> {
        self.create_queue_with(p, owner, uids, gids, false)
    }

    fn create_queue_with(
        &self,
        p: &proto::QueueParams,
        owner: u32,
        uids: &[u32],
        gids: &[u32],
        limited: bool,
    ) -> Result<proto::QueueInfo, proto::ErrorReply> {
        let mut t = self.lock();
        self.create_queue_locked(&mut t, p, owner, uids, gids, limited)
    }

    /// [`create_queue_with`](Self::create_queue_with) under the lock already held (`t`).
    fn create_queue_locked(
        &self,
        t: &mut Bookkeeping,
        p: &proto::QueueParams,
        owner: u32,
        uids: &[u32],
        gids: &[u32],
        limited: bool,
    ) -> Result<proto::QueueInfo, proto::ErrorReply> {
        let quota = if limited { self.quota_for_new_queue(t, owner)? } else { self.default_quota() };
        let spec = QueueSpec {
            name: p.name.clone(),
            flavor: crate::convert::flavor_from_proto(p.flavor),
            deques: p.deques,
            capacity: p.capacity,
            max_attempts: p.max_attempts,
            lease_ms: p.lease_ms,
            levels: p.levels,
            aging: p.aging,
        };
        let q = self.seg.create_queue_limited(&spec, quota).map_err(|e| queue_error(&e))?;
        t.quotas.insert(q.index, quota);
        let acl = QueueAcl {
            name: q.spec.name.clone(),
            owner,
            uids: uids.to_vec(),
            gids: gids.to_vec(),
            retry_backoff: None,
        };
        self.record_acl(t, q.index, acl);
        Ok(queue_info(&q))
    }

    /// The active queue `name`.
    pub fn queue(&self, name: &str) -> Result<QueueInfo, proto::ErrorReply> {
        self.seg.queue_by_name(name).map_err(|e| queue_error(&e))
    }

    /// Attaches `slot` to queue `name` as a thief or injector (`role`): resolves the queue
    /// and records the attachment in one step under the lock, so that a delete of the queue
    /// either sees the attachment (and refuses) or has happened before (and this finds no
    /// such queue). Returns the queue.
    pub fn attach(&self, name: &str, slot: SlotId, role: u32) -> Result<QueueInfo, proto::ErrorReply> {
        self.attach_as(name, slot, role, None)
    }

    /// [`attach`](Self::attach) if `who` may use the queue (checked in the same step).
    pub fn attach_as(
        &self,
        name: &str,
        slot: SlotId,
        role: u32,
        who: Option<&Access>,
    ) -> Result<QueueInfo, proto::ErrorReply> {
        let mut t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, who, Op::Use)?;
        match t.slots.get_mut(&slot.slot) {
            Some(k) if k.epoch == slot.epoch => {
                if let QueuesUsed::Known(m) = &mut k.uses {
                    *m.entry(q.index).or_insert(0) |= role;
                }
                Ok(q)
            }
            // Recovered meanwhile: its process has exited.
            _ => Err(proto::ErrorReply::new(
                proto::ErrorCode::SlotNotHeld,
                format!("process slot {} is no longer registered to this process", slot.slot),
            )),
        }
    }

    /// Leases deque `want` (or the first free one) of queue `name` to `slot`. Returns the
    /// queue, the deque and the lease word. The queue is resolved under the lock, as in
    /// [`attach`](Self::attach).
    pub fn lease(
        &self,
        name: &str,
        want: Option<u32>,
        slot: SlotId,
    ) -> Result<(QueueInfo, u32, u64), proto::ErrorReply> {
        self.lease_as(name, want, slot, None)
    }

    /// [`lease`](Self::lease) if `who` may use the queue (checked in the same step).
    pub fn lease_as(
        &self,
        name: &str,
        want: Option<u32>,
        slot: SlotId,
        who: Option<&Access>,
    ) -> Result<(QueueInfo, u32, u64), proto::ErrorReply> {
        let t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, who, Op::Use)?;
        let q = &q;
        let word = lease_word(slot.slot, slot.epoch as u32);
        let candidates: Vec<u32> = match want {
            Some(d) if d >= q.spec.deques => {
                return Err(proto::ErrorReply::new(
                    proto::ErrorCode::BadRequest,
                    format!("queue {} has {} deques; there is no deque {d}", q.spec.name, q.spec.deques),
                ))
            }
            Some(d) => vec![d],
            None => (0..q.spec.deques).collect(),
        };
        for d in &candidates {
            let Some(h) = self.seg.deque_header(q.index, *d) else { continue };
            // AcqRel: pairs with the Release of the clearing CAS in recovery / detach, so
            // the new owner sees the repaired `bottom`.
            if h.lease.compare_exchange(0, word, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Ok((q.clone(), *d, word));
            }
        }
        let msg = match want {
            Some(d) => format!("deque {d} of queue {} is owned by another live process", q.spec.name),
            None => format!(
                "all {} deques of queue {} are owned by live processes (an owner's lease ends when its \
                 process exits)",
                q.spec.deques, q.spec.name
            ),
        };
        Err(proto::ErrorReply::new(proto::ErrorCode::NoFreeDeque, msg))
    }

    /// Gives back `slot`'s lease on deque `d` of `q` (an explicit detach by a live owner that
    /// promised to stop using it).
    pub fn release_lease(&self, q: &QueueInfo, d: u32, word: u64) -> Result<(), proto::ErrorReply> {
        let _t = self.lock();
        let h = self.seg.deque_header(q.index, d).ok_or_else(|| {
            proto::ErrorReply::new(proto::ErrorCode::BadRequest, format!("no deque {d} in {}", q.spec.name))
        })?;
        h.lease.compare_exchange(word, 0, Ordering::AcqRel, Ordering::Acquire).map(|_| ()).map_err(|_| {
            proto::ErrorReply::new(
                proto::ErrorCode::BadRequest,
                format!("this connection holds no lease on deque {d} of queue {}", q.spec.name),
            )
        })
    }

    /// The lease word on deque `d` of `q` when it is held by a slot registered for process
    /// `p` (same pid and start time, both known): a lease that process took over an earlier
    /// connection, e.g. before a daemon restart, and may give back over this one. The
    /// process is the one this daemon recorded for the slot, not what the segment says.
    pub fn lease_of_process(&self, q: &QueueInfo, d: u32, p: &ProcessId) -> Option<u64> {
        if p.pid == 0 || p.start_time == 0 {
            return None;
        }
        let t = self.lock();
        let word = self.seg.deque_header(q.index, d)?.lease.load(Ordering::Acquire);
        let holder = lease_holder(word)?;
        let kept = t.slots.get(&holder)?;
        let slot = self.seg.process_slot(holder)?;
        let same = slot.state.load(Ordering::Acquire) == PROCESS_ACTIVE
            && word >> 32 == kept.epoch & 0xFFFF_FFFF
            && kept.process.pid == p.pid
            && kept.process.start_time == p.start_time;
        same.then_some(word)
    }
}
