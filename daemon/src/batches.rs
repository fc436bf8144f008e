//! Batches (`xtcq_shm::batch`): the daemon opens and seals them, and completes them after
//! its walks of the records.
//!
//! Rules kept:
//! - those who may use a queue may open, seal and look at its batches; a callback needs the
//!   use of its own queue too;
//! - a callback is written when the batch is opened, as a job `Delayed` with no due time in
//!   its queue, so that nothing can fail to be allocated when the batch completes; the
//!   completion releases it with one CAS, and a daemon that adopts the segment releases the
//!   callbacks of complete batches its predecessor died before releasing;
//! - completion is checked after a seal and after every walk of the records by the periodic
//!   scan (which walks when any job moved), all under the registry lock.

mod requests;

use tracing::{info, warn};
use xtcq_proto::{self as proto, ErrorCode, ErrorReply};
use xtcq_shm::batch::{self as shm_batch, BatchError, BatchProgress};
use xtcq_shm::record::state::{JobHandle, State};
use xtcq_shm::Injector;

use crate::registry::{Access, Op, ProcessId, Registry};

/// The due time of a held callback: never (only the batch's completion releases it).
const NEVER: u64 = u64::MAX;

impl Registry {
    /// Opens batch `name` of queue `queue` for `who`, with its callback written now.
    pub fn open_batch(
        &self,
        queue: &str,
        name: &str,
        on_complete: Option<proto::OnComplete>,
        who: &Access,
    ) -> Result<proto::BatchInfo, ErrorReply> {
        let q = self.check_use(queue, who)?;
        let callback = match on_complete {
            Some(cb) => Some(self.hold_callback(&cb, who)?),
            None => None,
        };
        let t = self.lock();
        self.check_access(&t, q.index, &q.spec.name, Some(who), Op::Use)?;
        match shm_batch::open(&self.seg, q.index, name, callback) {
            Ok(b) => {
                info!(queue, batch = name, slot = b.slot, callback = callback.is_some(), "batch opened");
                self.batch_info(q.index, name)
            }
            Err(e) => {
                if let Some(h) = callback {
                    self.drop_callback(h);
                }
                Err(batch_error(e))
            }
        }
    }

    /// Seals batch `name` of queue `queue`, then completes it if its last job ended.
    pub fn seal_batch(&self, queue: &str, name: &str, who: &Access) -> Result<proto::BatchInfo, ErrorReply> {
        let q = self.check_use(queue, who)?;
        let t = self.lock();
        let p = shm_batch::find(&self.seg, q.index, name)
            .ok_or_else(|| batch_error(BatchError::NotFound(name.into())))?;
        shm_batch::seal(&self.seg, p.batch).map_err(batch_error)?;
        self.complete_batches();
        drop(t);
        self.batch_info(q.index, name)
    }

    /// Batch `name` of queue `queue` as it is now.
    pub fn batch_progress(
        &self,
        queue: &str,
        name: &str,
        who: &Access,
    ) -> Result<proto::BatchInfo, ErrorReply> {
        let q = self.check_use(queue, who)?;
        self.batch_info(q.index, name)
    }

    fn batch_info(&self, queue: u32, name: &str) -> Result<proto::BatchInfo, ErrorReply> {
        shm_batch::find(&self.seg, queue, name)
            .map(|p| info_of(&p))
            .ok_or_else(|| batch_error(BatchError::NotFound(name.into())))
    }

    /// Completes every sealed batch whose last job ended (a walk of the records). Called
    /// with the registry lock held.
    pub(crate) fn complete_batches(&self) {
        for c in shm_batch::complete_sealed(&self.seg) {
            let p = &c.progress;
            info!(
                batch = %p.name,
                queue = p.queue,
                pushed = p.pushed,
                acked = p.acked(),
                dead = p.dead,
                cancelled = p.cancelled,
                callback = c.callback_released,
                "batch complete"
            );
        }
    }

    /// On adopting a segment: releases the callbacks of batches completed by a daemon that
    /// died before it could.
    pub(crate) fn release_batch_callbacks(&self) {
        let _t = self.lock();
        let n = shm_batch::release_callbacks(&self.seg);
        if n > 0 {
            info!(callbacks = n, "callbacks of complete batches released");
        }
    }

    /// Writes `cb` as a `Delayed` job with no due time, as a process slot of the daemon's own.
    fn hold_callback(&self, cb: &proto::OnComplete, who: &Access) -> Result<JobHandle, ErrorReply> {
        let q = self.check_use(&cb.queue, who)?;
        let pid = std::process::id();
        let me = ProcessId {
            pid,
            uid: rustix::process::getuid().as_raw(),
            start_time: crate::server::peer::start_time(pid).unwrap_or(0),
        };
        let slot = self.register(me, proto::ROLE_INJECTOR, self.keeper())?;
        let pushed = Injector::new(self.segment().clone(), &q, slot.slot)
            .map_err(|e| ErrorReply::new(ErrorCode::Internal, e.to_string()))
            .and_then(|inj| {
                inj.push_delayed(&cb.payload, NEVER)
                    .map_err(|e| ErrorReply::new(ErrorCode::NoRoom, format!("callback job: {e}")))
            });
        self.recover_process(slot);
        pushed
    }

    /// A callback written for a batch that could not be opened: withdrawn.
    fn drop_callback(&self, h: JobHandle) {
        let withdrawn = self
            .seg
            .records()
            .state(h.index)
            .is_some_and(|st| st.withdraw(h.generation, State::Delayed).is_ok());
        if !withdrawn {
            warn!(job = %h, "the callback of a batch that was not opened could not be withdrawn");
        }
    }
}

/// A batch's progress on the wire.
pub fn info_of(p: &BatchProgress) -> proto::BatchInfo {
    proto::BatchInfo {
        name: p.name.clone(),
        slot: p.batch.slot,
        generation: p.batch.generation,
        status: match p.status {
            shm_batch::BatchStatus::Complete => proto::BatchStatus::Complete,
            shm_batch::BatchStatus::Sealed => proto::BatchStatus::Sealed,
            _ => proto::BatchStatus::Open,
        },
        pushed: p.pushed,
        running: p.live,
        acked: p.acked(),
        dead: p.dead,
        cancelled: p.cancelled,
    }
}

fn batch_error(e: BatchError) -> ErrorReply {
    let code = match e {
        BatchError::TableFull => ErrorCode::NoRoom,
        BatchError::NotFound(_) => ErrorCode::NoSuchBatch,
        BatchError::NoTable => ErrorCode::Corrupt,
        BatchError::Exists(_) | BatchError::BadName => ErrorCode::BadRequest,
    };
    ErrorReply::new(code, e.to_string())
}
