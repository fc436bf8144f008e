//! The process registry: process slots, deque leases and recovery, over the segment.
//!
//! The segment holds the jobs (so a restarted daemon can adopt them), but not who holds a
//! process slot: every attached process can write the segment. Who holds which slot is this
//! daemon's memory ([`Tracked`]) and, for the next daemon, its private state file
//! ([`crate::state`]); a slot the segment shows in use that neither records is reclaimed. This
//! module is the only writer of the process table, the queue table and the deque lease words, and all
//! its writes happen under one mutex ([`Registry`]'s), so the daemon's tasks never race each
//! other on them.
//!
//! Invariants:
//! - a slot is `PROCESS_ACTIVE` from registration until its process has exited *and* its
//!   connection is closed; then [`Registry::recover_process`] gives back what it held and
//!   frees it. A process that merely disconnects keeps its slot and leases.
//! - each slot this daemon watches has exactly one *keeper*: the task that recovers it once
//!   its process has exited (the connection that registered it, the watcher of a slot
//!   adopted from an earlier daemon, or the connection that resumed it). A resume moves the
//!   keeper; a task that is no longer the keeper recovers nothing, so a slot is recovered
//!   once however many connections it had.
//! - a slot is given back by [`Registry::resume`] only to the process it is registered to,
//!   as this daemon identified it (kernel pid, start time, uid; never re-read from the
//!   segment, which every attached process can write), at the epoch the caller names.
//! - a deque's lease word is `0` or `lease_word(slot, epoch)` of an active slot; it is set by
//!   a CAS from 0 (at most one owner per deque), and cleared only by the holder's explicit
//!   detach or by recovery after the holder died — ownership never moves while the old owner
//!   lives.
//! - slot writes: fields first, then the state word with Release, so a reader that sees
//!   `PROCESS_ACTIVE` (Acquire) sees the fields.
//! - a queue is deleted ([`Registry::delete_queue`]) only while no process is attached to it:
//!   no lease on one of its deques (in the segment), and no slot this daemon tracks that
//!   attached to it as a thief or injector, or that it adopted from an earlier daemon (the
//!   segment does not say which queues a thief or injector uses, so an adopted slot may use
//!   any). Attaches resolve the queue and record the attachment under the same lock, so an
//!   attach and a delete of one queue cannot interleave: either the attach comes first and
//!   the delete is refused, or the delete comes first and the attach finds no such queue.

mod acl;
mod slots;

pub use acl::{Access, Op};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use shm_layout::layout::{PROCESS_ACTIVE, PROCESS_FREE, PROCESS_RECOVERING};
use shm_layout::record::state::State;
use shm_layout::recovery::{self, lease_holder, lease_word};
use shm_layout::segment::{DeleteError, QueueError};
use shm_layout::{QueueInfo, QueueSpec, Segment};

use crate::state::{self, DaemonState, QueueAcl, SlotRecord, StateFile};
use std::sync::atomic::Ordering;
use tracing::{info, warn};
use xtcq_proto as proto;

mod fencing;
mod scan;

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
    seg: Arc<Segment>,
    lock: Arc<Mutex<Tracked>>,
    next_keeper: Arc<AtomicU64>,
    /// Where the slots and queue permissions are kept for the next daemon (`None`: nowhere,
    /// so a restart trusts no slot; for tests of the registry alone).
    state: Option<Arc<StateFile>>,
    /// Most slots one uid may hold, and the uids without a limit (`None`: no limit).
    slot_limit: Option<(u32, [u32; 2])>,
}

/// In-memory bookkeeping the segment does not hold: the slots this daemon watches.
#[derive(Default)]
struct Tracked {
    slots: BTreeMap<u32, Kept>,
    /// The periodic scan's memory (see `scan`).
    scan: scan::ScanMemory,
    /// Commands registered to be stopped before their job runs again (see `crate::fence`).
    fences: crate::fence::Fences,
    /// Queue permissions, by queue-table index (see [`crate::acl`]).
    pub(crate) queues: BTreeMap<u32, QueueAcl>,
}

impl Tracked {
    /// The fences (read) and the scan memory (written) at once.
    fn split_scan(&mut self) -> (&mut crate::fence::Fences, &mut scan::ScanMemory) {
        (&mut self.fences, &mut self.scan)
    }
}

/// A registered slot this daemon watches.
struct Kept {
    /// The incarnation registered (or adopted).
    epoch: u64,
    /// The process it belongs to, as this daemon identified it: from the kernel for a slot
    /// registered over a connection, from the segment confirmed by `/proc` and a pidfd for
    /// an adopted one. Kept here, so a process that scribbles over the segment's copy
    /// cannot make the slot look like its own.
    process: ProcessId,
    /// Who recovers it.
    keeper: Keeper,
    /// Whether the keeper is an open connection.
    connected: bool,
    /// The queues it attached to as a thief or injector, as far as this daemon knows.
    uses: Uses,
}

/// The queues a slot's process attached to as a thief or an injector. (An owner is known by
/// its lease word in the segment, which also says when it detached.) Attachments last until
/// the process exits: neither role has a detach, and the process may keep using a handle
/// without its connection.
enum Uses {
    /// Queue-table index → `ROLE_THIEF | ROLE_INJECTOR` bits, of every attach this daemon
    /// granted to the slot (over any of its process's connections).
    Known(BTreeMap<u32, u32>),
    /// Adopted from an earlier daemon, which knew: the segment does not record it, so the
    /// process may use any queue. A resume does not change that (the old handles live on).
    Unknown,
}

/// Why [`Registry::delete_queue`] refused.
#[derive(Debug)]
pub struct DeleteRefused {
    /// The answer for the client.
    pub reply: proto::ErrorReply,
    /// Everyone in the way is a process that has exited and whose slot its watcher has not
    /// recovered yet (a matter of milliseconds): asking again shortly may succeed.
    pub only_exited: bool,
}

/// Converts a segment queue error to an error reply.
pub fn queue_error(e: &QueueError) -> proto::ErrorReply {
    use proto::ErrorCode as C;
    let code = match e {
        QueueError::NoSuchQueue(_) => C::NoSuchQueue,
        QueueError::Exists(_) => C::QueueExists,
        QueueError::TableFull(_) => C::QueueTableFull,
        QueueError::BadSpec(_) | QueueError::NoSuchDeque { .. } => C::BadRequest,
        QueueError::NotActive { .. } => C::NoSuchQueue,
        QueueError::Corrupt { .. } => C::Corrupt,
    };
    proto::ErrorReply::new(code, e.to_string())
}

/// Protocol view of a queue.
pub fn queue_info(q: &QueueInfo) -> proto::QueueInfo {
    proto::QueueInfo {
        index: q.index,
        name: q.spec.name.clone(),
        flavor: match q.spec.flavor {
            shm_layout::Flavor::Lifo => proto::Flavor::Lifo,
            shm_layout::Flavor::Fifo => proto::Flavor::Fifo,
        },
        deques: q.spec.deques,
        capacity: q.spec.capacity,
        max_attempts: q.spec.max_attempts,
        lease_ms: q.spec.lease_ms,
    }
}

fn now_unix_ns() -> u64 {
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
            lock: Arc::new(Mutex::new(Tracked::default())),
            next_keeper: Arc::new(AtomicU64::new(1)),
            state: None,
            slot_limit: None,
        }
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

    /// Writes what this daemon knows to the state file (called under the lock after every
    /// change, before the change is answered). A failure is logged (and returned `false`):
    /// the next daemon then reclaims the slots it cannot verify, which is safe, if unkind.
    fn persist(&self, t: &Tracked) -> bool {
        let Some(f) = &self.state else { return true };
        let st = DaemonState {
            segment: state::file_id(self.seg.file()),
            slots: t
                .slots
                .iter()
                .map(|(&i, k)| {
                    let p = k.process;
                    (i, SlotRecord { epoch: k.epoch, pid: p.pid, uid: p.uid, start_time: p.start_time })
                })
                .collect(),
            queues: t.queues.clone(),
            fences: t.fences.records(),
        };
        match f.save(&st) {
            Ok(()) => true,
            Err(e) => {
                warn!(file = %f.path().display(), error = %e, "cannot write xtcqd's state file");
                false
            }
        }
    }

    /// Keeps one fence change in the state file: appended to its journal, or the whole
    /// state written. `false` when neither could be done.
    fn keep_fence_change(&self, t: &Tracked, change: &state::FenceChange) -> bool {
        let Some(f) = &self.state else { return true };
        match f.append(change) {
            Ok(true) => true,
            Ok(false) => self.persist(t),
            Err(e) => {
                warn!(file = %f.path().display(), error = %e, "cannot append to xtcqd's state file; rewriting it");
                self.persist(t)
            }
        }
    }

    /// What the previous daemon recorded for this segment (nothing without a state file, or
    /// when it describes another segment).
    fn load_state(&self) -> DaemonState {
        let Some(f) = &self.state else { return DaemonState::default() };
        let id = state::file_id(self.seg.file());
        match f.load() {
            Some(s) if s.segment == id => s,
            Some(_) => {
                warn!(file = %f.path().display(), "xtcqd's state file describes another segment; ignoring it");
                DaemonState::default()
            }
            None => DaemonState::default(),
        }
    }

    /// Starts a state file for a segment created now (a leftover one may describe a file
    /// that had the same inode).
    pub fn reset_state(&self) {
        let t = self.lock();
        self.persist(&t);
    }

    /// A new keeper token (one per connection, one per adopted slot's watcher).
    pub fn keeper(&self) -> Keeper {
        Keeper(self.next_keeper.fetch_add(1, Ordering::Relaxed))
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    fn lock(&self) -> MutexGuard<'_, Tracked> {
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
                Kept { epoch, process: p, keeper, connected: true, uses: Uses::Known(BTreeMap::new()) },
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

    /// Creates a queue owned by `owner` and usable also by `uids` and members of `gids`.
    pub fn create_queue_as(
        &self,
        p: &proto::QueueParams,
        owner: u32,
        uids: &[u32],
        gids: &[u32],
    ) -> Result<proto::QueueInfo, proto::ErrorReply> {
        let mut t = self.lock();
        let spec = QueueSpec {
            name: p.name.clone(),
            flavor: match p.flavor {
                proto::Flavor::Lifo => shm_layout::Flavor::Lifo,
                proto::Flavor::Fifo => shm_layout::Flavor::Fifo,
            },
            deques: p.deques,
            capacity: p.capacity,
            max_attempts: p.max_attempts,
            lease_ms: p.lease_ms,
        };
        let q = self.seg.create_queue(&spec).map_err(|e| queue_error(&e))?;
        let acl = QueueAcl { name: q.spec.name.clone(), owner, uids: uids.to_vec(), gids: gids.to_vec() };
        self.record_acl(&mut t, q.index, acl);
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
                if let Uses::Known(m) = &mut k.uses {
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

    /// [`recover_process`](Self::recover_process), if `keeper` still keeps `slot` at its
    /// epoch; else nothing (another task keeps it, or it was recovered already). Returns
    /// whether it recovered.
    pub fn recover_kept(&self, slot: SlotId, keeper: Keeper) -> bool {
        let mut t = self.lock();
        match t.slots.get(&slot.slot) {
            Some(k) if k.keeper == keeper && k.epoch == slot.epoch => {}
            _ => return false,
        }
        self.recover_locked(&mut t, slot);
        true
    }

    /// Everything to do when a registered process has exited and its connection is closed:
    /// free the records it was filling, re-queue those it had claimed, release its deque
    /// leases (repairing `bottom`), re-index orphaned queued records, free the slot.
    pub fn recover_process(&self, slot: SlotId) {
        let mut t = self.lock();
        self.recover_locked(&mut t, slot);
    }

    fn recover_locked(&self, t: &mut Tracked, slot: SlotId) {
        let tracked = t.slots.get(&slot.slot).is_some_and(|k| k.epoch == slot.epoch);
        if tracked {
            t.slots.remove(&slot.slot);
            self.persist(t);
        }
        let Some(s) = self.seg.process_slot(slot.slot) else { return };
        // A slot this daemon tracks is recovered whatever the segment's epoch says (an
        // attached process may have changed it); an untracked one only at its epoch.
        if !tracked && s.epoch.load(Ordering::Relaxed) != slot.epoch {
            return; // already recovered and reused
        }
        let pid = s.pid.load(Ordering::Relaxed);
        s.state.store(PROCESS_RECOVERING, Ordering::Release);
        // A crash here (or inside `recover_holder`, which has the fail point after revoking a
        // claim) leaves the slot RECOVERING; the next daemon's `adopt` recovers it again.
        shm_layout::failpoint::point("daemon.recovery.mid");
        // Each claimed job's command (registered by `xtcq work`) is killed before the job
        // is re-queued; then whatever else it had registered.
        let r = recovery::recover_holder_fenced(&self.seg, slot.slot, &mut |i, h| t.fences.fence(i, h));
        for e in t.fences.fence_all_of(slot.slot) {
            warn!(slot = slot.slot, pid, "a command of an exited process could not be stopped: {e}");
        }
        if t.fences.take_changed() {
            self.persist(t);
        }
        let leases = recovery::release_deque_leases(&self.seg, slot.slot);
        // A thief that died between its winning CAS on `top` and its claim leaves a queued
        // record nothing indexes; a dying injector or overflow popper likewise.
        let orphans = recovery::reindex_orphans(&self.seg);
        s.role.store(0, Ordering::Relaxed);
        s.pid.store(0, Ordering::Relaxed);
        s.start_time.store(0, Ordering::Relaxed);
        s.state.store(PROCESS_FREE, Ordering::Release);
        let touched = r.freed_filling as usize + r.requeued.len() + r.dead_lettered.len() + orphans.len();
        if touched > 0 || r.corrupt > 0 || r.unindexed > 0 {
            warn!(
                slot = slot.slot,
                pid,
                freed_filling = r.freed_filling,
                requeued = r.requeued.len(),
                dead_lettered = r.dead_lettered.len(),
                unindexed = r.unindexed,
                corrupt = r.corrupt,
                orphans_reindexed = orphans.len(),
                leases_released = leases.len(),
                done_mono_ns = shm_layout::segment::monotonic_ns(),
                "recovered jobs of an exited process"
            );
        } else {
            info!(
                slot = slot.slot,
                pid,
                leases_released = leases.len(),
                done_mono_ns = shm_layout::segment::monotonic_ns(),
                "process exited; slot freed"
            );
        }
    }

    /// On adopting a segment: recovers every registered process that is no longer alive (and
    /// any record or lease naming a slot that is not registered), and returns the live ones,
    /// each with the keeper to watch it until it exits (or until its process resumes it
    /// over a connection).
    pub fn adopt(&self, alive: impl Fn(u32, u64) -> bool) -> Vec<Adopted> {
        {
            // A daemon that died half-way through deleting a queue: finish the delete (it had
            // passed its checks), so the entry is free again and nothing names the queue.
            let _t = self.lock();
            for (index, dropped) in self.seg.finish_interrupted_deletes() {
                warn!(
                    index,
                    dropped_queued = dropped.queued,
                    dropped_dead = dropped.dead,
                    "finished deleting a queue whose delete a previous daemon did not complete"
                );
            }
        }
        let known = self.load_state();
        {
            let mut t = self.lock();
            t.queues = known.queues.clone();
            // Before any recovery: a dead holder's commands are killed before its jobs are
            // given back, whichever daemon they were registered with.
            t.fences.adopt(&known.fences);
        }
        let (live, dead) = self.verify_slots(&known, alive);
        for slot in &dead {
            self.recover_process(*slot);
        }
        {
            let mut t = self.lock();
            for a in &live {
                let kept = Kept {
                    epoch: a.slot.epoch,
                    process: a.process,
                    keeper: a.keeper,
                    connected: false,
                    uses: Uses::Unknown,
                };
                t.slots.insert(a.slot.slot, kept);
            }
            self.adopt_queue_acls(&mut t);
            self.persist(&t);
        }
        {
            // Claims a previous daemon revoked (lease expiry or recovery) and died before
            // re-queuing: they name no holder.
            // Their commands are found by record (the previous daemon kept them).
            let mut t = self.lock();
            let r = recovery::recover_holder_fenced(&self.seg, shm_layout::NO_HOLDER, &mut |i, _| {
                t.fences.fence_record(i)
            });
            if !r.requeued.is_empty() || !r.dead_lettered.is_empty() {
                warn!(
                    requeued = r.requeued.len(),
                    dead_lettered = r.dead_lettered.len(),
                    "re-queued claims a previous daemon revoked but did not give back"
                );
            }
        }
        // Holders named by records or leases but not registered (a slot freed by hand, or a
        // corrupt table): give their holdings back too.
        let live_slots: BTreeSet<u32> = live.iter().map(|a| a.slot.slot).collect();
        let mut strays = BTreeSet::new();
        let records = self.seg.records();
        for i in 0..records.len() {
            let Some(st) = records.state(i) else { break };
            let w = st.load();
            if matches!(w.state(), Some(State::Filling | State::Claimed | State::Writing)) {
                if let Some(h) = recovery::holder_slot(&self.seg, w) {
                    if !live_slots.contains(&h) {
                        strays.insert(h);
                    }
                }
            }
        }
        let c = self.seg.config();
        for q in 0..c.queues {
            for d in 0..c.deques_per_queue {
                if let Some(h) = self.seg.deque_header(q, d) {
                    if let Some(s) = lease_holder(h.lease.load(Ordering::Acquire)) {
                        if !live_slots.contains(&s) {
                            strays.insert(s);
                        }
                    }
                }
            }
        }
        if !strays.is_empty() {
            let mut t = self.lock();
            for s in &strays {
                let r = recovery::recover_holder_fenced(&self.seg, *s, &mut |i, h| t.fences.fence(i, h));
                let l = recovery::release_deque_leases(&self.seg, *s);
                warn!(
                    slot = s,
                    requeued = r.requeued.len(),
                    leases = l.len(),
                    "recovered holdings of an unregistered slot"
                );
            }
            recovery::reindex_orphans(&self.seg);
        }
        self.fence_unheld(&live_slots);
        live
    }

    /// Kills the adopted commands whose slot no live process holds (their worker is gone,
    /// and whatever they ran for must not go on beside the job's next run), and writes the
    /// state file if that changed it.
    fn fence_unheld(&self, live_slots: &BTreeSet<u32>) {
        let mut t = self.lock();
        let gone: BTreeSet<u32> =
            t.fences.records().iter().map(|r| r.slot).filter(|s| !live_slots.contains(s)).collect();
        for slot in gone {
            for e in t.fences.fence_all_of(slot) {
                warn!(slot, "a command of a process that exited could not be stopped: {e}");
            }
        }
        if t.fences.take_changed() {
            self.persist(&t);
        }
    }

    /// Deletes queue `name` (see [`Segment::delete_queue_at`]) unless a process is, or may
    /// be, attached to it, or runs one of its jobs; and, unless `force`, unless it holds
    /// queued jobs or dead letters (with `force` they are dropped). A refusal names the
    /// processes in the way (`alive(pid, start_time)` tells which have exited) or the jobs,
    /// and what to do. Under the lock that creates queues and grants attachments (see the
    /// module's invariants); it walks every record, so call it off the async threads.
    pub fn delete_queue(
        &self,
        name: &str,
        force: bool,
        alive: impl Fn(u32, u64) -> bool,
    ) -> Result<proto::QueueDeleted, DeleteRefused> {
        self.delete_queue_as(name, force, alive, None)
    }

    /// [`delete_queue`](Self::delete_queue) if `who` may delete it (checked first, in the
    /// same step).
    pub fn delete_queue_as(
        &self,
        name: &str,
        force: bool,
        alive: impl Fn(u32, u64) -> bool,
        who: Option<&Access>,
    ) -> Result<proto::QueueDeleted, DeleteRefused> {
        let refused = |reply| DeleteRefused { reply, only_exited: false };
        let mut t = self.lock();
        let q = self.queue(name).map_err(refused)?;
        self.check_access(&t, q.index, &q.spec.name, who, Op::Delete).map_err(refused)?;
        let usage = self.seg.queue_usage(q.index);

        // Every process slot in the way, with why.
        let mut in_way: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for &(d, slot) in &usage.leases {
            in_way.entry(slot).or_default().push(format!("owner of deque {d}"));
        }
        for (&slot, k) in &t.slots {
            match &k.uses {
                Uses::Unknown => in_way.entry(slot).or_default().push(
                    "attached before xtcqd restarted, so xtcqd cannot tell which queues it uses".into(),
                ),
                Uses::Known(m) => {
                    if let Some(&roles) = m.get(&q.index) {
                        let r = in_way.entry(slot).or_default();
                        if roles & proto::ROLE_THIEF != 0 {
                            r.push("thief".into());
                        }
                        if roles & proto::ROLE_INJECTOR != 0 {
                            r.push("injector".into());
                        }
                    }
                }
            }
        }
        for &(slot, jobs) in &usage.holders {
            in_way.entry(slot).or_default().push(format!("running {jobs} of its jobs"));
        }
        let mut who = Vec::new();
        let mut all_exited = true;
        for (slot, why) in &in_way {
            // The process as this daemon identified it; the segment's copy for a slot it does
            // not track (a stray lease or claim, which only corruption leaves).
            let p = t.slots.get(slot).map(|k| k.process).or_else(|| {
                self.seg.process_slot(*slot).map(|s| ProcessId {
                    pid: s.pid.load(Ordering::Relaxed),
                    uid: s.uid.load(Ordering::Relaxed),
                    start_time: s.start_time.load(Ordering::Relaxed),
                })
            });
            let pid = p.map(|p| p.pid).unwrap_or(0);
            // Without a pid nothing tells that it exited: it may well be attached.
            let exited = p.is_some_and(|p| p.pid != 0 && !alive(p.pid, p.start_time));
            all_exited &= exited;
            let who_is =
                if pid != 0 { format!("pid {pid}") } else { format!("process slot {slot} (pid unknown)") };
            let exited_note = if exited { ", exited: xtcqd is still giving back what it held" } else { "" };
            who.push(format!("{who_is} ({}{exited_note})", why.join(", ")));
        }
        let unheld = usage.claimed - usage.holders.iter().map(|&(_, n)| n).sum::<u32>().min(usage.claimed);
        if unheld > 0 {
            // Revoked by a lease expiry or a recovery that is re-queuing them (they are only
            // seen between the two steps, which run under this lock, so: never, barring
            // corruption).
            who.push(format!("{unheld} job(s) of it taken back from their consumer and not re-queued yet"));
            all_exited = false;
        }
        if !who.is_empty() {
            let reply = proto::ErrorReply::new(
                proto::ErrorCode::QueueInUse,
                format!(
                    "queue {name} is in use, so it was not deleted: {}. A process stays attached until it \
                     exits (an owner also until it detaches), and a job is being run until it is acked or \
                     given back: stop those processes, or wait for them, then delete again",
                    who.join("; ")
                ),
            );
            return Err(DeleteRefused { reply, only_exited: all_exited });
        }
        if !force && (usage.queued > 0 || usage.dead > 0) {
            return Err(refused(proto::ErrorReply::new(
                proto::ErrorCode::QueueNotEmpty,
                format!(
                    "queue {name} still holds {} queued job(s) and {} dead letter(s), so it was not \
                     deleted: consume them (and purge the dead letters), or delete with --force to drop them",
                    usage.queued, usage.dead
                ),
            )));
        }
        let d = self.seg.delete_queue_at(q.index, force).map_err(|e| {
            // Only what the checks above missed: a lease or claim that came between them and
            // the delete's own look (nothing under this lock grants one), or a lookup that failed.
            let code = match &e {
                DeleteError::Queue(qe) => return refused(queue_error(qe)),
                DeleteError::Leased { .. }
                | DeleteError::JobsHeld { .. }
                | DeleteError::StillInUse { .. } => proto::ErrorCode::QueueInUse,
                DeleteError::NotEmpty { .. } => proto::ErrorCode::QueueNotEmpty,
            };
            refused(proto::ErrorReply::new(code, format!("{e}; it was not deleted")))
        })?;
        self.forget_acl(&mut t, q.index);
        drop(t);
        info!(
            queue = %name,
            index = q.index,
            force,
            dropped_queued = d.dropped.queued,
            dropped_dead = d.dropped.dead,
            "queue deleted"
        );
        Ok(proto::QueueDeleted {
            queue: queue_info(&d.info),
            dropped_queued: d.dropped.queued as u64,
            dropped_dead: d.dropped.dead as u64,
        })
    }

    /// Whether `slot`'s connection is open.
    pub fn is_connected(&self, slot: u32) -> bool {
        self.lock().slots.get(&slot).is_some_and(|k| k.connected)
    }

    /// Stats of one queue (`Some`) or all.
    pub fn stats(&self, queue: Option<&str>, connections: u64) -> Result<proto::Stats, proto::ErrorReply> {
        let seg = &self.seg;
        let c = *seg.config();
        let qs: Vec<QueueInfo> = match queue {
            Some(name) => vec![self.queue(name)?],
            None => seg.queues().into_iter().filter_map(Result::ok).collect(),
        };
        let mut all = proto::RecordCounts::default();
        let mut per_queue = vec![proto::RecordCounts::default(); c.queues as usize];
        let records = seg.records();
        for i in 0..records.len() {
            let (Some(st), Some(h)) = (records.state(i), records.header(i)) else { break };
            let w = st.load();
            let q = h.queue.load(Ordering::Relaxed) as usize;
            let bump = |r: &mut proto::RecordCounts| match w.state() {
                Some(State::Free) => r.free += 1,
                Some(State::Filling) => r.filling += 1,
                Some(State::Queued) => r.queued += 1,
                // Writing: still claimed; its holder is writing the header for a moment.
                Some(State::Claimed | State::Writing) => r.claimed += 1,
                Some(State::Dead) => r.dead += 1,
                None => r.corrupt += 1,
            };
            bump(&mut all);
            if w.state() != Some(State::Free) {
                if let Some(r) = per_queue.get_mut(q) {
                    bump(r);
                }
            }
        }
        let queues = qs
            .iter()
            .map(|q| {
                let deques = (0..q.spec.deques)
                    .map(|d| proto::DequeStats {
                        index: d,
                        len: seg.deque(q, d).map(|dq| dq.len() as u64).unwrap_or(0),
                        owner_slot: seg
                            .deque_header(q.index, d)
                            .and_then(|h| lease_holder(h.lease.load(Ordering::Acquire))),
                    })
                    .collect();
                proto::QueueStats {
                    info: queue_info(q),
                    deques,
                    overflow_len: seg.overflow(q.index).map(|o| o.len() as u64).unwrap_or(0),
                    records: per_queue.get(q.index as usize).cloned().unwrap_or_default(),
                }
            })
            .collect();
        let t = self.lock();
        let processes = (0..c.process_slots)
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
            .collect();
        drop(t);
        let live = seg.header_live();
        Ok(proto::Stats {
            daemon_pid: live.daemon_pid.load(Ordering::Relaxed),
            daemon_epoch: live.daemon_epoch.load(Ordering::Relaxed),
            segment: proto::SegmentSummary {
                path: seg.path().to_path_buf(),
                total_len: seg.descriptor().regions.total_len,
                queues: c.queues,
                deques_per_queue: c.deques_per_queue,
                deque_capacity: c.deque_capacity,
                job_records: c.job_records,
                payload_bytes: c.payload_bytes,
                process_slots: c.process_slots,
                overflow_capacity: c.overflow_capacity,
            },
            records: all,
            queues,
            processes,
            connections,
        })
    }
}
