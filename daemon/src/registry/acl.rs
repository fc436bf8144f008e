//! Per-queue permissions (see [`crate::persistence::state::QueueAcl`]): the uid that created a queue owns
//! it; `create --allow-uid / --allow-gid` let others use it too. Using a queue is attaching
//! to it as an owner, thief or injector (which re-queuing and purging dead letters do
//! first); deleting it is for its owner. Root and the daemon's own uid may do either.
//!
//! The permissions live in the daemon's memory and its private state file, never in the
//! segment (which every attached process can write). A queue the daemon has no record of
//! (created before it kept them, or its state file lost) is open only to root and the
//! daemon's uid: failing closed, with a message that says how to share it.
//!
//! Checked under the registry's lock, in the same step that resolves the queue for the
//! attach or delete, so a queue deleted and created again in between is checked as the new
//! queue it is.

use tracing::warn;
use xtcq_proto::{self as proto, names};

use super::{Bookkeeping, Registry};
use crate::persistence::state::QueueAcl;

/// Who asks: a connection's uid and every group it is in (primary and supplementary).
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// Effective uid.
    pub uid: u32,
    /// Gids.
    pub gids: Vec<u32>,
}

/// What is asked of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Attach as owner, thief or injector (also before re-queuing or purging dead letters).
    Use,
    /// Delete it.
    Delete,
    /// Pause or resume it: as `Delete`, its owner, root and xtcqd's uid.
    Administer,
}

impl Registry {
    /// Keeps the recorded permissions only of queues that are still those queues (active
    /// at that index, with that name).
    pub(crate) fn adopt_queue_acls(&self, t: &mut Bookkeeping) {
        t.queues.retain(|&index, acl| match self.seg.queue(index) {
            Ok(q) if q.spec.name == acl.name => true,
            _ => {
                warn!(index, queue = %xtcq_proto::queue_name::escaped(&acl.name), "dropping the permissions of a queue that no longer exists");
                false
            }
        });
        for q in self.seg.queues().into_iter().flatten() {
            if !t.queues.contains_key(&q.index) {
                warn!(
                    // Read from the segment, which an attached process may have scribbled.
                    queue = %xtcq_proto::queue_name::escaped(&q.spec.name),
                    "queue has no recorded owner (xtcqd's state file lost, or made by an older xtcqd): only \
                     root and xtcqd's own uid may use or delete it; delete it and create it again to share it"
                );
            }
        }
    }

    /// The queue `name`, if `who` may use it: a look before registering a slot for an
    /// attach (which checks again, in its own step).
    pub fn check_use(&self, name: &str, who: &Access) -> Result<xtcq_shm::QueueInfo, proto::ErrorReply> {
        let t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, Some(who), Op::Use)?;
        Ok(q)
    }

    /// Whether `who` may do `op` to queue `index` (named `name`), under the lock.
    pub(crate) fn check_access(
        &self,
        t: &Bookkeeping,
        index: u32,
        name: &str,
        who: Option<&Access>,
        op: Op,
    ) -> Result<(), proto::ErrorReply> {
        let Some(who) = who else { return Ok(()) };
        let me = rustix::process::getuid().as_raw();
        if who.uid == 0 || who.uid == me {
            return Ok(());
        }
        let acl = t.queues.get(&index);
        let ok = acl.is_some_and(|a| {
            a.owner == who.uid
                || (op == Op::Use
                    && (a.uids.contains(&who.uid) || who.gids.iter().any(|g| a.gids.contains(g))))
        });
        if ok {
            return Ok(());
        }
        let what = match op {
            Op::Use => "use (attach to)",
            Op::Delete => "delete",
            Op::Administer => "pause, resume or cancel the jobs of",
        };
        let why = match acl {
            None => "it has no recorded owner, so only root and xtcqd's own uid may".to_string(),
            Some(a) if op != Op::Use => format!("only its owner, {}, may", names::uid_label(a.owner)),
            Some(a) => format!(
                "it belongs to {} and is shared with users [{}], groups [{}]",
                names::uid_label(a.owner),
                names::uid_list_label(&a.uids),
                names::gid_list_label(&a.gids)
            ),
        };
        Err(proto::ErrorReply::new(
            proto::ErrorCode::Unauthorized,
            format!(
                "{} may not {what} queue {name}: {why}; ask its owner to create it with --allow-uid or \
                 --allow-gid naming you",
                names::uid_label(who.uid)
            ),
        ))
    }

    /// The recorded owner, grants and backoff of the active queue `name`, if any (for a dump).
    pub fn acl_of(&self, name: &str) -> Option<QueueAcl> {
        let t = self.lock();
        let q = self.queue(name).ok()?;
        t.queues.get(&q.index).filter(|a| a.name == q.spec.name).cloned()
    }

    /// Records the permissions of a queue just created at `index` (under the lock).
    pub(crate) fn record_acl(&self, t: &mut Bookkeeping, index: u32, acl: QueueAcl) {
        t.queues.insert(index, acl);
        self.persist(t);
    }

    /// Forgets the permissions of a deleted queue (under the lock).
    pub(crate) fn forget_acl(&self, t: &mut Bookkeeping, index: u32) {
        t.quotas.remove(&index);
        if t.queues.remove(&index).is_some() {
            self.persist(t);
        }
    }
}
