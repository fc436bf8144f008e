//! The registry's side of dead letters: listing them a page at a time, and re-queuing or
//! purging many in one request (`Request::DeadLetters`, `Request::ActOnDead`).
//!
//! Rules kept:
//! - the caller has checked that the peer may use the queue (and, to act, attached it as an
//!   injector, whose process slot a re-queue writes as);
//! - a named job is resolved against the queue's dead letters in the segment, so a name of
//!   another queue's job (or of no dead letter) is refused, and the whole request with it,
//!   before anything is done;
//! - acting runs under the registry lock, so it cannot interleave with a delete of the queue;
//!   the queue is resolved again there, and a queue deleted and created again is refused;
//! - a page is sized to fit a reply frame (see `proto::dead`).

use xtcq_proto as proto;
use xtcq_proto::{DeadActed, DeadAction, DeadLetterInfo, DeadLetterPage, JobRef, DEAD_PAYLOAD_SHOWN};
use xtcq_shm::dead_letter::{self, DeadLetter, DeadLetterError};
use xtcq_shm::JobHandle;
use xtcq_shm::QueueInfo;

use crate::registry::Registry;

/// The most dead letters in one page.
const PAGE_LETTERS: usize = 1024;

/// The bytes a page's letters may take once encoded, leaving room for the frame's envelope.
const PAGE_BYTES: usize = proto::MAX_FRAME_LEN - 8 * 1024;

/// An upper bound on the JSON of one letter: a payload byte is at most 4 characters (`255,`),
/// a last-error byte at most 6 (`\u001f`), and the fixed fields well under 200.
fn encoded_cost(d: &DeadLetter) -> usize {
    200 + 4 * d.payload.len().min(DEAD_PAYLOAD_SHOWN) + 6 * d.last_error.len()
}

fn letter_info(mut d: DeadLetter) -> DeadLetterInfo {
    let payload_len = d.payload.len() as u32;
    d.payload.truncate(DEAD_PAYLOAD_SHOWN);
    DeadLetterInfo {
        index: d.handle.index,
        generation: d.handle.generation,
        birth: d.id.birth,
        attempts: d.attempts,
        last_error: d.last_error,
        payload: d.payload,
        payload_len,
    }
}

impl Registry {
    /// A page of queue `q`'s dead letters from record `from` on (a walk of the records).
    pub fn dead_letter_page(&self, q: &QueueInfo, from: u32) -> DeadLetterPage {
        let (letters, mut next) = dead_letter::dead_letters_from(&self.seg, q.index, from, PAGE_LETTERS);
        let mut budget = PAGE_BYTES;
        let mut out = Vec::with_capacity(letters.len());
        for d in letters {
            let cost = encoded_cost(&d);
            if cost > budget {
                next = Some(d.handle.index);
                break;
            }
            budget -= cost;
            out.push(letter_info(d));
        }
        DeadLetterPage { letters: out, next }
    }

    /// Re-queues (as process slot `me`) or purges the dead letters `jobs` of queue `q`, or all
    /// of them; refused, with nothing done, when a named job is not one.
    pub fn act_on_dead(
        &self,
        q: &QueueInfo,
        action: DeadAction,
        jobs: Option<&[JobRef]>,
        me: u32,
    ) -> Result<DeadActed, proto::ErrorReply> {
        let mut t = self.lock();
        let now = self.queue(&q.spec.name)?;
        if now.index != q.index {
            return Err(proto::ErrorReply::new(
                proto::ErrorCode::NoSuchQueue,
                format!(
                    "queue {} was deleted (and created again) meanwhile; run the command again",
                    q.spec.name
                ),
            ));
        }
        let handles = match jobs {
            None => dead_letter::dead_handles(&self.seg, q.index),
            Some(jobs) => self.resolve_dead(q, jobs)?,
        };
        let mut out = DeadActed::default();
        t.scan.changed();
        for &h in &handles {
            let r = match action {
                DeadAction::Requeue => dead_letter::requeue_dead(&self.seg, h, me),
                DeadAction::Purge => dead_letter::purge_dead(&self.seg, h),
            };
            match r {
                Ok(()) => out.done += 1,
                Err(DeadLetterError::NotDead(_)) => out.gone += 1,
                Err(e) => return Err(stopped(e, action, out.done, handles.len())),
            }
        }
        Ok(out)
    }

    /// The handles of the dead letters of `q` that `jobs` name, or a refusal naming the first
    /// that is not one.
    fn resolve_dead(&self, q: &QueueInfo, jobs: &[JobRef]) -> Result<Vec<JobHandle>, proto::ErrorReply> {
        jobs.iter()
            .map(|j| {
                dead_letter::find_dead(&self.seg, q.index, j.index, j.number).ok_or_else(|| {
                    let name = proto::queue_name::escaped(&q.spec.name);
                    proto::ErrorReply::new(
                        proto::ErrorCode::BadRequest,
                        format!(
                            "job {}.{} is not a dead letter of queue {name} (see `xtcq dead {name}`); nothing was done",
                            j.index, j.number
                        ),
                    )
                })
            })
            .collect()
    }
}

/// The reply for an act stopped by `e` after `done` of `total` jobs.
fn stopped(e: DeadLetterError, action: DeadAction, done: u64, total: usize) -> proto::ErrorReply {
    let verb = if action == DeadAction::Requeue { "re-queued" } else { "purged" };
    let code = match e {
        DeadLetterError::Corrupt(_) => proto::ErrorCode::Corrupt,
        _ => proto::ErrorCode::BadRequest,
    };
    proto::ErrorReply::new(code, format!("{e} ({done} of {total} {verb} before it)"))
}
