//! One function per request of the control channel (as mini-redis keeps one command per
//! file): `handle` checks the daemon's guard and dispatches.
//!
//! Rules kept:
//! - a request that registers a slot looks the queue up (and checks the peer may use it)
//!   first, so a request for no queue registers nothing; the registry resolves and checks it
//!   again under its lock;
//! - blocking registry work (walks of every record, the state file) runs on tokio's blocking
//!   threads, not on the connection's task.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, info, warn};
use xtcq_proto::names;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply, Request, Response};

use crate::registry::queue_info;
use crate::registry::{ProcessId, SlotId};
use crate::server::connection::Conn;
use crate::server::peer;

/// How long a delete waits for exited processes in its way to be recovered.
const DELETE_WAIT_FOR_EXITED: Duration = Duration::from_secs(3);

impl Conn {
    /// The peer as the kernel identified it (0 for what it could not tell).
    pub(super) fn process_id(&self) -> ProcessId {
        ProcessId { pid: self.peer.pid, uid: self.peer.uid, start_time: self.peer.start_time.unwrap_or(0) }
    }

    fn ensure_slot(&mut self, role: u32) -> Result<SlotId, ErrorReply> {
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
            Request::ReleaseWake { queue, bit } => {
                let Some(slot) = self.slot else {
                    return Err(ErrorReply::new(ErrorCode::SlotNotHeld, "this connection holds no slot"));
                };
                self.st.reg.release_wake(&queue, bit, slot.slot)?;
                Ok(Response::WakeReleased)
            }
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
            Request::Schedule { index, generation } => {
                self.st.reg.schedule(xtcq_shm::JobHandle { index, generation }).map(|()| Response::Scheduled)
            }
            Request::SetRetryBackoff { queue, backoff } => {
                let who = self.access();
                self.st.reg.set_retry_backoff(&queue, backoff, Some(&who))?;
                info!(queue = %queue, ?backoff, pid = self.peer.pid, "retry backoff set");
                Ok(Response::BackoffSet)
            }
            Request::DeadLetters { queue, from } => self.dead_letters(queue, from).await,
            Request::ActOnDead { queue, action, jobs } => self.act_on_dead(queue, action, jobs).await,
            Request::SetQueueLimits { queue, max_records, max_dead, max_running } => {
                let who = self.access();
                let limits = crate::limits::quota::Limits { max_records, max_dead, max_running };
                let q = self.st.reg.set_queue_limits_running(&queue, limits, Some(&who))?;
                info!(
                    queue = %queue,
                    max_records = q.max_records,
                    max_dead = q.max_dead,
                    ?max_running,
                    pid = self.peer.pid,
                    "queue limits set"
                );
                Ok(Response::LimitsSet)
            }
            Request::SetPaused { queue, paused } => {
                let who = self.access();
                let was_paused = self.st.reg.set_paused(&queue, paused, Some(&who))?;
                info!(queue = %queue, paused, was_paused, pid = self.peer.pid, "queue pause state set");
                Ok(Response::PausedSet { was_paused })
            }
            Request::JobFate { queue, job } => {
                let who = self.access();
                self.st.reg.job_state(&queue, job, &who).map(Response::JobFate)
            }
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

    /// `Stats`: counts over the whole segment, or one queue.
    async fn stats(&self, queue: Option<String>) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let n = self.st.connections.load(Ordering::Relaxed);
        let r = tokio::task::spawn_blocking(move || reg.stats(queue.as_deref(), n)).await;
        match r {
            Ok(s) => s.map(|mut s| {
                for q in &mut s.queues {
                    q.info.retry_backoff = self.st.reg.retry_backoff(q.info.index, &q.info.name);
                }
                Response::Stats(s)
            }),
            Err(e) => Err(ErrorReply::new(ErrorCode::Internal, format!("stats failed: {e}"))),
        }
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

    /// `WakeDescriptor`: a socket for this process to wait on for queue `queue`'s work,
    /// passed with the reply.
    fn wake_descriptor(&mut self, queue: String) -> Result<Response, ErrorReply> {
        let Some(slot) = self.slot else {
            return Err(ErrorReply::new(
                ErrorCode::SlotNotHeld,
                format!("attach to queue {queue} as a thief first"),
            ));
        };
        let who = self.access();
        let (fd, bit) = self.st.reg.grant_wake(&queue, slot, &who)?;
        self.reply_fd = Some(fd);
        debug!(slot = slot.slot, queue = %queue, bit, "wake descriptor granted");
        Ok(Response::WakeDescriptor { bit })
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

    /// `FenceCommand`, or with `in_cgroup` `FenceCgroup` (its two descriptors came with the
    /// frame): a command this worker runs for a job it holds (see `crate::fence`).
    async fn fence_command(
        &mut self,
        (index, birth, generation): (u32, u32, u32),
        pid: u32,
        in_cgroup: bool,
    ) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let slot = self.slot.ok_or_else(|| {
            ErrorReply::new(ErrorCode::BadRequest, "attach (and claim the job) before fencing its command")
        })?;
        let cgroup = if in_cgroup {
            let fds = std::mem::take(&mut self.frame_fds);
            let Ok::<[OwnedFd; 2], _>([dir, kill]) = fds.try_into() else {
                return Err(ErrorReply::new(
                    ErrorCode::BadRequest,
                    "FenceCgroup needs two descriptors passed with it (the cgroup's directory and its cgroup.kill)",
                ));
            };
            Some((dir, kill))
        } else {
            None
        };
        let worker = (self.peer.pid, self.peer.uid);
        tokio::task::spawn_blocking(move || {
            reg.register_fence(slot, (index, birth, generation), pid, worker, cgroup)
        })
        .await
        .map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("fence failed: {e}")))??;
        debug!(slot = slot.slot, index, birth, pid, in_cgroup, "command registered for fencing");
        Ok(Response::Fenced)
    }

    /// `Unfence`: the command of a job exited and was reaped.
    fn unfence(&self, index: u32, birth: u32, pid: u32) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        if let Some(slot) = self.slot {
            reg.unregister_fence(slot, index, birth, pid);
        }
        Ok(Response::Unfenced)
    }

    /// `DeadLetters`: a page of the queue's dead letters, for a peer that may use it.
    async fn dead_letters(&mut self, queue: String, from: u32) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let who = self.access();
        let q = reg.check_use(&queue, &who)?;
        let page = tokio::task::spawn_blocking(move || reg.dead_letter_page(&q, from))
            .await
            .map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("listing dead letters failed: {e}")))?;
        Ok(Response::DeadLetters(page))
    }

    /// `ActOnDead`: re-queue or purge many dead letters. The peer is attached to the queue as
    /// an injector first, as a producer would be: that checks it may use the queue, and gives
    /// the process slot a re-queue writes as (recovery finishes the job if that process dies).
    async fn act_on_dead(
        &mut self,
        queue: String,
        action: proto::DeadAction,
        jobs: Option<Vec<proto::JobRef>>,
    ) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let who = self.access();
        reg.check_use(&queue, &who)?;
        let slot = self.ensure_slot(proto::ROLE_INJECTOR)?;
        let q = reg.attach_as(&queue, slot, proto::ROLE_INJECTOR, Some(&who))?;
        let named = jobs.as_ref().map(Vec::len);
        let done =
            tokio::task::spawn_blocking(move || reg.act_on_dead(&q, action, jobs.as_deref(), slot.slot))
                .await
                .map_err(|e| {
                    ErrorReply::new(ErrorCode::Internal, format!("acting on dead letters failed: {e}"))
                })??;
        info!(queue = %queue, ?action, ?named, done = done.done, gone = done.gone, pid = self.peer.pid, "dead letters acted on");
        Ok(Response::DeadActedOn(done))
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
