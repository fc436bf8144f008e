//! Deleting a queue: refused while anyone is, or may be, attached to it or runs one of its
//! jobs (see the registry's invariants).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use tracing::info;
use xtcq_proto as proto;
use xtcq_shm::segment::DeleteError;
use xtcq_shm::segment::QueueUsage;

use crate::registry::{queue_error, queue_info, Access, Bookkeeping, Op, ProcessId, QueuesUsed, Registry};

/// Why [`Registry::delete_queue`] refused.
#[derive(Debug)]
pub struct DeleteRefused {
    /// The answer for the client.
    pub reply: proto::ErrorReply,
    /// Everyone in the way is a process that has exited and whose slot its watcher has not
    /// recovered yet (a matter of milliseconds): asking again shortly may succeed.
    pub only_exited: bool,
}

impl Registry {
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
        let in_way = slots_in_way(&t, q.index, &usage);
        let (who, all_exited) = self.describe_in_way(&t, &in_way, &usage, alive);
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
        let d = self.seg.delete_queue_at(q.index, force).map_err(|e| refused(delete_error_reply(&e)))?;
        self.forget_acl(&mut t, q.index);
        t.scan.changed();
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

    /// One line per process slot in `in_way` (who, why, and whether it exited) plus one for
    /// claims no holder accounts for; and whether everyone in the way has exited.
    fn describe_in_way(
        &self,
        t: &Bookkeeping,
        in_way: &BTreeMap<u32, Vec<String>>,
        usage: &QueueUsage,
        alive: impl Fn(u32, u64) -> bool,
    ) -> (Vec<String>, bool) {
        let mut who = Vec::new();
        let mut all_exited = true;
        for (slot, why) in in_way {
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
        (who, all_exited)
    }
}

/// Every process slot in the way of deleting queue `index`, with why: deque owners,
/// attached thieves and injectors (or anyone whose queues are unknown), and job holders.
fn slots_in_way(t: &Bookkeeping, index: u32, usage: &QueueUsage) -> BTreeMap<u32, Vec<String>> {
    let mut in_way: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for &(d, slot) in &usage.leases {
        in_way.entry(slot).or_default().push(format!("owner of deque {d}"));
    }
    for (&slot, k) in &t.slots {
        match &k.uses {
            QueuesUsed::Unknown => in_way
                .entry(slot)
                .or_default()
                .push("attached before xtcqd restarted, so xtcqd cannot tell which queues it uses".into()),
            QueuesUsed::Known(m) => {
                if let Some(&roles) = m.get(&index) {
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
    in_way
}

/// The reply for a delete the segment refused. Only what the registry's checks missed
/// reaches it: a lease or claim that came between them and the delete's own look (nothing
/// under the registry's lock grants one), or a lookup that failed.
fn delete_error_reply(e: &DeleteError) -> proto::ErrorReply {
    let code = match e {
        DeleteError::Queue(qe) => return queue_error(qe),
        DeleteError::Leased { .. } | DeleteError::JobsHeld { .. } | DeleteError::StillInUse { .. } => {
            proto::ErrorCode::QueueInUse
        }
        DeleteError::NotEmpty { .. } => proto::ErrorCode::QueueNotEmpty,
    };
    proto::ErrorReply::new(code, format!("{e}; it was not deleted"))
}
