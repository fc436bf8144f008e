//! Dead letters through the daemon that owns them: listing, re-queuing and purging are
//! requests (`DeadLetters`, `ActOnDead`), never edits of the segment by this process.
//!
//! Rules kept:
//! - a listing comes a page at a time (a reply frame is bounded); a payload longer than
//!   [`proto::DEAD_PAYLOAD_SHOWN`] bytes is listed cut to that;
//! - re-queuing or purging every dead letter of a queue is one request, however many there
//!   are (65,536 take one walk of the records and one CAS or two each, in the daemon);
//! - named jobs go [`NAMED_PER_REQUEST`] to a request (a request frame is bounded too); the
//!   daemon refuses a request that names a job which is not a dead letter of that queue
//!   before doing anything, so only the batches before it have been acted on.

use xtcq_proto::{self as proto, JobRef, Request, Response};
use xtcq_shm::JobId;

use crate::{Client, DeadLetter, Error, JobHandle};

pub use proto::{DeadActed as BulkDead, DeadAction};

/// Named jobs per `ActOnDead` request: 1,024 references of at most 42 bytes of JSON each
/// stay well inside a frame.
pub const NAMED_PER_REQUEST: usize = 1024;

impl Client {
    /// The dead letters of `queue`: jobs that reached its attempt limit, with their last
    /// error and payload (cut to [`proto::DEAD_PAYLOAD_SHOWN`] bytes).
    pub fn dead_letters(&self, queue: &str) -> Result<Vec<DeadLetter>, Error> {
        let mut out = Vec::new();
        let mut from = 0;
        loop {
            let page = match self.call(Request::DeadLetters { queue: queue.to_string(), from })? {
                Response::DeadLetters(page) => page,
                r => return Err(self.unexpected(r)),
            };
            out.extend(page.letters.into_iter().map(|d| DeadLetter {
                handle: JobHandle { index: d.index, generation: d.generation },
                id: JobId { index: d.index, birth: d.birth },
                attempts: d.attempts,
                last_error: d.last_error,
                payload: d.payload,
            }));
            match page.next {
                // A daemon that does not advance would loop for ever: stop instead.
                Some(next) if next > from => from = next,
                Some(_) => {
                    return Err(Error::Protocol {
                        path: self.conn.path().to_path_buf(),
                        message: format!("xtcqd listed dead letters from record {from} without moving on"),
                    })
                }
                None => return Ok(out),
            }
        }
    }

    /// Puts a dead letter of `queue` back on the queue (attempts reset), to run again. The
    /// daemon attaches this process to the queue as an injector first, as any producer is.
    pub fn requeue_dead(&self, queue: &str, job: JobHandle) -> Result<(), Error> {
        self.act_on_one(queue, job, DeadAction::Requeue)
    }

    /// Deletes a dead letter of `queue` for good.
    pub fn purge_dead(&self, queue: &str, job: JobHandle) -> Result<(), Error> {
        self.act_on_one(queue, job, DeadAction::Purge)
    }

    fn act_on_one(&self, queue: &str, job: JobHandle, action: DeadAction) -> Result<(), Error> {
        let named = vec![JobRef { index: job.index, number: job.generation }];
        let done = self.act_request(queue, Some(named), action)?;
        if done.done == 0 {
            return Err(Error::DeadLetter(format!(
                "job {job} is not a dead letter (it was re-queued or purged already, or never died)"
            )));
        }
        Ok(())
    }

    /// Re-queues or purges the dead letters `jobs` of `queue` (each named by its id, as
    /// every command prints it; a handle's `index.generation` is taken too, as people may
    /// copy one), or every one of them when `jobs` is `None`; `progress(acted_so_far)` is
    /// called after each request. A named job that is not a dead letter of `queue` is refused
    /// with nothing of its batch done; one that stops being one meanwhile is counted in
    /// [`BulkDead::gone`].
    pub fn act_on_dead(
        &self,
        queue: &str,
        jobs: Option<&[JobId]>,
        action: DeadAction,
        mut progress: impl FnMut(u64),
    ) -> Result<BulkDead, Error> {
        let Some(jobs) = jobs else {
            let out = self.act_request(queue, None, action)?;
            progress(out.done + out.gone);
            return Ok(out);
        };
        let mut out = BulkDead::default();
        for batch in jobs.chunks(NAMED_PER_REQUEST) {
            let named = batch.iter().map(|j| JobRef { index: j.index, number: j.birth }).collect();
            let got = self.act_request(queue, Some(named), action).map_err(|e| match e {
                Error::DeadLetter(m) if out.done + out.gone > 0 => Error::DeadLetter(format!(
                    "{m} ({} of {} acted on in the requests before)",
                    out.done + out.gone,
                    jobs.len()
                )),
                e => e,
            })?;
            out.done += got.done;
            out.gone += got.gone;
            progress(out.done + out.gone);
        }
        Ok(out)
    }

    fn act_request(
        &self,
        queue: &str,
        jobs: Option<Vec<JobRef>>,
        action: DeadAction,
    ) -> Result<BulkDead, Error> {
        match self.call(Request::ActOnDead { queue: queue.to_string(), action, jobs }) {
            Ok(Response::DeadActedOn(d)) => Ok(d),
            Ok(r) => Err(self.unexpected(r)),
            // The daemon's refusals of a dead-letter request are about the dead letters.
            Err(Error::BadRequest(m)) => Err(Error::DeadLetter(m)),
            Err(e) => Err(e),
        }
    }
}
