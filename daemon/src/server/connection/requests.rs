//! The requests of the control channel: `handle` checks the daemon's guard and dispatches,
//! each to the module of its feature (`crate::fence::requests`, `crate::delay::requests`,
//! `crate::dead_letters::requests`, `crate::limits::requests`, `crate::flow::requests`,
//! `crate::metrics::requests`, `crate::wake::requests`); the requests of the core (queues,
//! attaching, leases, resuming, stopping) are answered here.
//!
//! Rules kept:
//! - a request that registers a slot looks the queue up (and checks the peer may use it)
//!   first, so a request for no queue registers nothing; the registry resolves and checks it
//!   again under its lock;
//! - blocking registry work (walks of every record, the state file) runs on tokio's blocking
//!   threads, not on the connection's task.

use std::time::Duration;

use tracing::{info, warn};
use xtcq_proto::names;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply, Request, Response};

use crate::limits::quota::Limits;
use crate::registry::queue_info;
use crate::registry::{ProcessId, SlotId};
use crate::server::connection::Conn;
use crate::server::peer;

/// How long a delete waits for exited processes in its way to be recovered.
const DELETE_WAIT_FOR_EXITED: Duration = Duration::from_secs(3);

impl Conn {
    /// The peer as the kernel identified it (0 for what it could not tell).
    pub(crate) fn process_id(&self) -> ProcessId {
        ProcessId { pid: self.peer.pid, uid: self.peer.uid, start_time: self.peer.start_time.unwrap_or(0) }
    }

    pub(crate) fn ensure_slot(&mut self, role: u32) -> Result<SlotId, ErrorReply> {
        if let Some(s) = self.slot {
            self.st.reg.add_roles(s, role);
            return Ok(s);
        }
        let s = self.st.reg.register(self.process_id(), role, self.keeper)?;
        info!(slot = s.slot, epoch = s.epoch, pid = self.peer.pid, client = %self.name, "process registered");
        self.slot = Some(s);
        Ok(s)
    }

    fn attachment(&self, slot: SlotId, q: &xtcq_shm::QueueInfo) -> proto::Attachment {
        proto::Attachment {
            process_slot: slot.slot,
            slot_epoch: slot.epoch,
            segment_path: self.st.hello.segment_path.clone(),
            queue: self.st.reg.with_backoff(queue_info(q)),
        }
    }

    fn create_queue(
        &mut self,
        p: proto::QueueParams,
        mut uids: Vec<u32>,
        mut gids: Vec<u32>,
        exist_ok: bool,
    ) -> Result<Response, ErrorReply> {
        uids.sort_unstable();
        uids.dedup();
        gids.sort_unstable();
        gids.dedup();
        // Names are printed by every reader and used in logs: only the portable set.
        proto::queue_name::check(&p.name)
            .map_err(|e| ErrorReply::new(ErrorCode::BadRequest, e.to_string()))?;
        let q = if exist_ok {
            let who = self.access();
            match self.st.reg.create_queue_exist_ok(&p, &who, &uids, &gids)? {
                (q, true) => q,
                (q, false) => return Ok(Response::QueueCreated(q)),
            }
        } else {
            self.st.reg.create_queue_as(&p, self.peer.uid, &uids, &gids)?
        };
        info!(
            queue = %q.name, deques = q.deques, capacity = q.capacity, flavor = ?q.flavor,
            owner = self.peer.uid, allow_users = %names::uid_list_label(&uids),
            allow_groups = %names::gid_list_label(&gids), "queue created"
        );
        Ok(Response::QueueCreated(q))
    }

    pub(super) async fn handle(&mut self, req: Request) -> Result<Response, ErrorReply> {
        if !matches!(req, Request::Ping | Request::Shutdown) {
            if let Some(refused) = self.st.guard.refusal() {
                return Err(refused);
            }
        }
        match req {
            Request::Ping => Ok(Response::Pong),
            Request::CreateQueue(p) => self.create_queue(p, Vec::new(), Vec::new(), false),
            Request::CreateSharedQueue { params, allow_uids, allow_gids } => {
                self.create_queue(params, allow_uids, allow_gids, false)
            }
            Request::CreateQueueExistOk { params, allow_uids, allow_gids } => {
                self.create_queue(params, allow_uids, allow_gids, true)
            }
            Request::ListQueues => self.list_queues(),
            Request::Stats { queue } => self.stats(queue).await,
            Request::AttachOwner { queue, deque } => self.attach_owner(queue, deque),
            Request::AttachThief { queue } => self.attach_thief(queue),
            Request::AttachInjector { queue } => self.attach_injector(queue),
            Request::WakeDescriptor { queue } => self.wake_descriptor(queue),
            Request::ReleaseWake { queue, bit } => self.release_wake(queue, bit),
            Request::DeleteQueue { name, force } => self.delete_queue(name, force).await,
            Request::Detach { queue, deque } => self.detach(queue, deque),
            Request::Resume { slot, slot_epoch } => self.resume(slot, slot_epoch),
            Request::FenceCommand { index, birth, generation, pid } => {
                self.fence_command((index, birth, generation), pid, false).await
            }
            Request::FenceCgroup { index, birth, generation, pid } => {
                self.fence_command((index, birth, generation), pid, true).await
            }
            Request::Unfence { index, birth, pid } => self.unfence(index, birth, pid),
            Request::Schedule { index, generation } => self.schedule(index, generation),
            Request::SetRetryBackoff { queue, backoff } => self.set_retry_backoff(queue, backoff),
            Request::DeadLetters { queue, from } => self.dead_letters(queue, from).await,
            Request::ActOnDead { queue, action, jobs } => self.act_on_dead(queue, action, jobs).await,
            Request::SetQueueLimits { queue, max_records, max_dead, max_running, max_rate } => {
                self.set_queue_limits(queue, Limits { max_records, max_dead, max_running, max_rate })
            }
            Request::SetPaused { queue, paused } => self.set_paused(queue, paused),
            Request::JobFate { queue, job } => self.job_fate(queue, job),
            Request::CancelJob { queue, job } => self.cancel_job(queue, job).await,
            Request::Batch { queue, name, action } => self.batch(queue, name, action),
            Request::Shutdown => self.shutdown(),
        }
    }

    /// `ListQueues`: every active queue (a corrupt entry is logged and skipped).
    fn list_queues(&self) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let mut out = Vec::new();
        for q in reg.segment().queues() {
            match q {
                Ok(q) => out.push(reg.with_backoff(queue_info(&q))),
                Err(e) => warn!(error = %e, "skipping a corrupt queue-table entry"),
            }
        }
        Ok(Response::Queues(out))
    }

    /// `AttachOwner`: a deque lease for this process.
    fn attach_owner(&mut self, queue: String, deque: Option<u32>) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        // A look first, so that a request for no queue (or one this user may not
        // use) registers no slot; the lease resolves and checks the queue again under
        // the registry's lock (a delete may have come in between).
        let who = self.access();
        reg.check_use(&queue, &who)?;
        let slot = self.ensure_slot(proto::ROLE_OWNER)?;
        let (q, d, word) = reg.lease_as(&queue, deque, slot, Some(&who))?;
        self.leases.push((q.index, q.spec.name.clone(), d, word));
        info!(slot = slot.slot, queue = %q.spec.name, deque = d, "owner lease granted");
        Ok(Response::OwnerAttached(proto::OwnerLease {
            attachment: self.attachment(slot, &q),
            deque: d,
            lease: word,
        }))
    }

    /// `AttachThief`: steal from the queue's deques.
    fn attach_thief(&mut self, queue: String) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        // As for an owner: look, register, then resolve and record under the lock.
        let who = self.access();
        reg.check_use(&queue, &who)?;
        let slot = self.ensure_slot(proto::ROLE_THIEF)?;
        let q = reg.attach_as(&queue, slot, proto::ROLE_THIEF, Some(&who))?;
        Ok(Response::ThiefAttached(self.attachment(slot, &q)))
    }

    /// `AttachInjector`: push to the queue's overflow ring.
    fn attach_injector(&mut self, queue: String) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let who = self.access();
        reg.check_use(&queue, &who)?;
        let slot = self.ensure_slot(proto::ROLE_INJECTOR)?;
        let q = reg.attach_as(&queue, slot, proto::ROLE_INJECTOR, Some(&who))?;
        Ok(Response::InjectorAttached(self.attachment(slot, &q)))
    }

    /// `DeleteQueue`: refused while anyone is in the way (see the registry).
    async fn delete_queue(&mut self, name: String, force: bool) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        // A process that has just exited is still in the way until its watcher has
        // given back what it held (milliseconds): ask again for a little while rather
        // than refuse a `delete` typed right after its last consumer quit.
        let until = tokio::time::Instant::now() + DELETE_WAIT_FOR_EXITED;
        let who = self.access();
        loop {
            let (reg, n, who) = (reg.clone(), name.clone(), who.clone());
            let r = tokio::task::spawn_blocking(move || {
                reg.delete_queue_as(&n, force, peer::is_alive, Some(&who))
            })
            .await
            .map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("delete failed: {e}")))?;
            match r {
                Ok(d) => return Ok(Response::QueueDeleted(d)),
                Err(refused) if refused.only_exited && tokio::time::Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(refused) => {
                    info!(queue = %name, pid = self.peer.pid, client = %self.name, "delete refused: {}", refused.reply.message);
                    return Err(refused.reply);
                }
            }
        }
    }

    /// `Detach`: give back a deque lease this process holds.
    fn detach(&mut self, queue: String, deque: u32) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let q = reg.queue(&queue)?;
        if let Some(pos) = self.leases.iter().position(|(qi, _, d, _)| *qi == q.index && *d == deque) {
            let (_, _, d, word) = self.leases[pos];
            reg.release_lease(&q, d, word)?;
            self.leases.swap_remove(pos);
            info!(queue = %q.spec.name, deque = d, "owner lease given back");
            return Ok(Response::Detached);
        }
        // Not taken over this connection, but maybe by this same process over an
        // earlier one (it reconnected after a daemon restart): the process, not the
        // connection, holds a lease.
        let me = self.process_id();
        let word = reg.lease_of_process(&q, deque, &me).ok_or_else(|| {
            ErrorReply::new(
                ErrorCode::BadRequest,
                format!(
                    "this process holds no lease on deque {deque} of queue {queue} (never taken, or \
                     already given back)"
                ),
            )
        })?;
        reg.release_lease(&q, deque, word)?;
        info!(queue = %q.spec.name, deque, pid = me.pid, "owner lease taken over an earlier connection given back");
        Ok(Response::Detached)
    }

    /// `Resume`: this process's slot back, over a new connection.
    fn resume(&mut self, slot: u32, slot_epoch: u64) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let want = SlotId { slot, epoch: slot_epoch };
        match self.slot {
            Some(have) if have == want => {
                return Ok(Response::Resumed { process_slot: slot, slot_epoch });
            }
            Some(have) => {
                return Err(ErrorReply::new(
                    ErrorCode::BadRequest,
                    format!(
                        "this connection already holds process slot {}; Resume comes before any \
                         attach on a connection",
                        have.slot
                    ),
                ))
            }
            None => {}
        }
        let me = self.process_id();
        let got = reg.resume(want, &me, self.keeper).inspect_err(
            |e| warn!(pid = me.pid, uid = me.uid, client = %self.name, "resume refused: {}", e.message),
        )?;
        info!(slot = got.slot, epoch = got.epoch, pid = me.pid, client = %self.name, "process resumed its slot");
        self.slot = Some(got);
        Ok(Response::Resumed { process_slot: got.slot, slot_epoch: got.epoch })
    }

    /// `Shutdown`: only the daemon's own uid or root may ask.
    fn shutdown(&self) -> Result<Response, ErrorReply> {
        if self.peer.uid == self.st.my_uid || self.peer.uid == 0 {
            info!(pid = self.peer.pid, client = %self.name, "shutdown requested");
            Ok(Response::ShuttingDown)
        } else {
            Err(ErrorReply::new(
                ErrorCode::Unauthorized,
                format!("only uid {} or root may stop this xtcqd", self.st.my_uid),
            ))
        }
    }
}
