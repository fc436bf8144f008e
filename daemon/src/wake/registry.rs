//! The registry's side of wake descriptors: which process slot holds which waiter bit of
//! which queue (`crate::wake` binds the sockets; `xtcq_shm::wake_protocol` is the protocol).
//!
//! Rules kept:
//! - a descriptor is granted only to a registered slot of the asking connection, for a queue
//!   its user may use; bits are per queue, at most `WAKE_BITS` held at once;
//! - a released bit (by its holder, or when the slot is recovered) loses its socket and is
//!   disarmed; a wake that was sent to it and will never be read is handed on (a notify), so
//!   no job waits while another waiter sleeps;
//! - at start every bit of the adopted segment is disarmed: their sockets were an earlier
//!   daemon's, removed with its wake directory's entries;
//! - the nudge: on each scan, a queue with queued jobs for a second scan in a row gets one
//!   more wake, so a wake taken by a waiter whose loop is busy elsewhere strands no job for
//!   longer than two scan intervals. The sleeper count is not asked: any attached process can
//!   zero it while waiters sleep, and a futex-kind descriptor waiter (no timeout, unlike a
//!   consumer in `steal_wait`) would then sleep forever; a nudge nobody hears costs one
//!   `FUTEX_WAKE` a scan. The queue's count of searchers is zeroed with it: a count that
//!   stands beside jobs for two scans has no live searcher behind it (garbage, or a dead
//!   one's), and would make every later push skip its wake.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use tracing::warn;
use xtcq_proto as proto;
use xtcq_shm::wake_protocol::{Disarmed, WAKE_BITS};

use crate::registry::{Access, Bookkeeping, Op, Registry, SlotId};

impl Registry {
    /// Sends descriptor wakes through `dir` (the daemon's wake directory) and binds waiters'
    /// sockets there, with modes for `group`.
    pub fn with_wake_dir(mut self, dir: Option<PathBufAndGroup>) -> Self {
        if let Some((d, _)) = &dir {
            if let Err(e) = self.seg.set_wake_dir(d) {
                warn!("cannot send descriptor wakes: {e}");
            }
        }
        self.wake = dir.map(Arc::new);
        self
    }

    /// A wake descriptor of queue `name` for `slot`: its socket and waiter bit.
    pub fn grant_wake(
        &self,
        name: &str,
        slot: SlotId,
        who: &Access,
    ) -> Result<(OwnedFd, u32), proto::ErrorReply> {
        let refused = |code, m: String| proto::ErrorReply::new(code, m);
        let Some(wake) = self.wake.clone() else {
            return Err(refused(
                proto::ErrorCode::BadRequest,
                "this xtcqd has no wake directory (its --socket path is too long for the names, or the \
                 directory could not be made: see its log); wait with steal_wait instead"
                    .into(),
            ));
        };
        let mut t = self.lock();
        if t.slots.get(&slot.slot).is_none_or(|w| w.epoch != slot.epoch) {
            return Err(refused(proto::ErrorCode::SlotNotHeld, "attach to the queue first".into()));
        }
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, Some(who), Op::Use)?;
        let taken: BTreeSet<u32> = t.wakes.keys().filter(|(qi, _)| *qi == q.index).map(|&(_, b)| b).collect();
        let Some(bit) = (0..WAKE_BITS).find(|b| !taken.contains(b)) else {
            return Err(refused(
                proto::ErrorCode::LimitReached,
                format!("queue {name} has {WAKE_BITS} wake descriptors out, the most it can; wait with steal_wait"),
            ));
        };
        let fd = crate::wake::bind(&wake.0, q.index, bit, wake.1).map_err(|e| {
            refused(
                proto::ErrorCode::Internal,
                format!("cannot bind a wake socket in {}: {e}", wake.0.display()),
            )
        })?;
        t.wakes.insert((q.index, bit), slot.slot);
        Ok((fd, bit))
    }

    /// Takes back wake descriptor `bit` of queue `name`, if `slot` holds it.
    pub fn release_wake(&self, name: &str, bit: u32, slot: u32) -> Result<(), proto::ErrorReply> {
        let mut t = self.lock();
        let q = self.queue(name)?;
        if t.wakes.get(&(q.index, bit)) != Some(&slot) {
            return Err(proto::ErrorReply::new(
                proto::ErrorCode::BadRequest,
                format!("wake descriptor {bit} of queue {name} is not this process's"),
            ));
        }
        // Its holder is alive and let go of it: it disarmed first, handing on any wake it
        // was sent, so a clear bit here is no wake owed (handing one on would wake another
        // waiter for nothing, at every descriptor dropped).
        self.drop_wake(&mut t, q.index, bit, false);
        Ok(())
    }

    /// Takes back every wake descriptor of `slot` (its process is gone).
    pub(crate) fn release_wakes_of(&self, t: &mut Bookkeeping, slot: u32) {
        let held: Vec<(u32, u32)> = t.wakes.iter().filter(|(_, &s)| s == slot).map(|(&k, _)| k).collect();
        for (q, bit) in held {
            self.drop_wake(t, q, bit, true);
        }
    }

    /// Unbinds and disarms waiter `bit` of queue `q`; `owed`: a clear bit means a wake was
    /// sent that its dead holder will never read, to hand on.
    fn drop_wake(&self, t: &mut Bookkeeping, q: u32, bit: u32, owed: bool) {
        t.wakes.remove(&(q, bit));
        if let Some(wake) = &self.wake {
            crate::wake::unbind(&wake.0, q, bit);
        }
        if let Some(w) = self.seg.waker(q) {
            if w.word.sleepers().disarm(bit) == Disarmed::Woken && owed {
                xtcq_shm::wait::notify(w);
            }
        }
    }

    /// Disarms every waiter bit of the segment (at start: their sockets are gone).
    pub fn disarm_all(&self) {
        for q in 0..self.seg.config().queues {
            if let Some(w) = self.seg.wait_word(q) {
                while w.sleepers().claim().is_some() {}
            }
        }
    }

    /// The scan's nudge (see the module comment).
    pub(crate) fn nudge_waiters(&self, t: &mut Bookkeeping) {
        let mut waiting = BTreeSet::new();
        for q in self.seg.queues().into_iter().flatten() {
            let Some(w) = self.seg.waker(q.index) else { continue };
            if !self.has_queued(&q) {
                continue;
            }
            if t.stranded.contains(&q.index) {
                xtcq_shm::wait::nudge_stranded(w);
            }
            waiting.insert(q.index);
        }
        t.stranded = waiting;
    }

    /// Whether queue `q` has a job waiting in a deque or its overflow ring (cheap: the
    /// indices, no record).
    fn has_queued(&self, q: &xtcq_shm::QueueInfo) -> bool {
        let ring = self.seg.overflow_rings(q.index).iter().any(|o| !o.is_empty());
        ring || (0..q.spec.level_deques()).any(|d| self.seg.deque(q, d).is_ok_and(|dq| !dq.is_empty()))
    }
}

/// The wake directory and the group its sockets are shared with.
pub type PathBufAndGroup = (std::path::PathBuf, Option<u32>);
