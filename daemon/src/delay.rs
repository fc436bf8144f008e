//! The daemon's timer for delayed jobs: which `Delayed` records it knows of, by due time, and
//! the task that puts each in line once due and wakes the queue's sleepers.
//!
//! Rules kept:
//! - nothing polls: the task sleeps until the earliest due time, or until a new job is
//!   earlier than that ([`Timers::add`] wakes it); consumers sleep on their queue's futex
//!   and are woken by the release, as by any push;
//! - the daemon learns of a delayed job from the process that made it (`Schedule`, sent
//!   after the record is `Delayed`), and by a scan of every record when it adopts a segment
//!   and after it recovers a dead process (which may have died before it told): a job is
//!   never lost for want of a message;
//! - an entry is only a hint: [`xtcq_shm::delayed::release_due`] acts only on a record that
//!   is still `Delayed` at the entry's generation, so a stale or duplicated entry is harmless;
//! - the memory is bounded: a duplicate is not added, and past twice the segment's record
//!   count the set is rebuilt from a scan.

mod registry;
mod requests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use xtcq_shm::delayed::{self, DelayedJob};
use xtcq_shm::segment::monotonic_ns;
use xtcq_shm::{JobHandle, Segment};

use crate::registry::Registry;

/// Most due jobs put in line per turn of the task, so that the registry lock is let go now
/// and then while a great many come due at once.
const RELEASE_BATCH: usize = 4096;

/// The delayed jobs the daemon knows of. Shared by the registry (which adds to it) and the
/// timer task.
#[derive(Debug, Default)]
pub struct Timers {
    inner: Mutex<Known>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Known {
    heap: BinaryHeap<Reverse<DelayedJob>>,
    handles: HashSet<JobHandle>,
}

impl Timers {
    fn lock(&self) -> MutexGuard<'_, Known> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Knows of `job` from now on; wakes the task when it is the earliest.
    pub fn add(&self, job: DelayedJob) {
        let mut k = self.lock();
        if !k.handles.insert(job.handle) {
            return;
        }
        let earliest = k.heap.peek().is_none_or(|Reverse(e)| job.due_ns < e.due_ns);
        k.heap.push(Reverse(job));
        drop(k);
        if earliest {
            self.wake.notify_one();
        }
    }

    /// Adds every `Delayed` record of `seg` not known yet (one walk of the records); how many
    /// were new. Rebuilds the set first when it has grown past twice the records (stale
    /// entries of jobs freed by a queue delete).
    pub fn scan(&self, seg: &Segment) -> usize {
        let found = delayed::scan_delayed(seg);
        let mut k = self.lock();
        if k.handles.len() > 2 * seg.config().job_records as usize {
            *k = Known::default();
        }
        let mut new = 0;
        for j in found {
            if k.handles.insert(j.handle) {
                k.heap.push(Reverse(j));
                new += 1;
            }
        }
        drop(k);
        if new > 0 {
            self.wake.notify_one();
        }
        new
    }

    /// Up to `max` entries due at `now_ns`, taken out.
    fn take_due(&self, now_ns: u64, max: usize) -> Vec<JobHandle> {
        let mut k = self.lock();
        let mut out = Vec::new();
        while out.len() < max && k.heap.peek().is_some_and(|Reverse(e)| e.due_ns <= now_ns) {
            if let Some(Reverse(e)) = k.heap.pop() {
                k.handles.remove(&e.handle);
                out.push(e.handle);
            }
        }
        out
    }

    /// The earliest due time known.
    fn next_due(&self) -> Option<u64> {
        self.lock().heap.peek().map(|Reverse(e)| e.due_ns)
    }

    /// Jobs known (for logs and tests).
    pub fn len(&self) -> usize {
        self.lock().handles.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The timer task: puts due jobs in line and sleeps until the next is due, until shutdown.
pub async fn run(reg: Registry, mut stop: watch::Receiver<Option<String>>) {
    let timers = reg.timers().clone();
    loop {
        let now = monotonic_ns();
        let due = timers.take_due(now, RELEASE_BATCH);
        let batch_full = due.len() == RELEASE_BATCH;
        if !due.is_empty() {
            let reg = reg.clone();
            // Registry lock and record CASes: off the async threads.
            let _ = tokio::task::spawn_blocking(move || reg.release_due(&due)).await;
        }
        if batch_full {
            tokio::task::yield_now().await;
            continue;
        }
        let sleep = timers.next_due().map(|d| Duration::from_nanos(d.saturating_sub(monotonic_ns())));
        tokio::select! {
            _ = sleep_or_never(sleep) => {}
            _ = timers.wake.notified() => {}
            _ = stop.wait_for(|s| s.is_some()) => return,
        }
    }
}

async fn sleep_or_never(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// A shared, empty set (the registry's default).
pub fn new_timers() -> Arc<Timers> {
    Arc::new(Timers::default())
}

#[cfg(test)]
mod tests {
    use xtcq_shm::delayed::DelayedJob;
    use xtcq_shm::JobHandle;

    use super::Timers;

    fn job(due_ns: u64, index: u32) -> DelayedJob {
        DelayedJob { due_ns, handle: JobHandle { index, generation: 1 } }
    }

    #[test]
    fn due_jobs_come_out_earliest_first_once_each() {
        let t = Timers::default();
        for (due, i) in [(30, 3), (10, 1), (20, 2), (10, 1)] {
            t.add(job(due, i));
        }
        assert_eq!(t.len(), 3, "a duplicate is not added");
        assert_eq!(t.next_due(), Some(10));
        assert!(t.take_due(5, 10).is_empty(), "nothing is due before its time");
        let got: Vec<u32> = t.take_due(25, 10).iter().map(|h| h.index).collect();
        assert_eq!(got, [1, 2]);
        assert_eq!(t.take_due(u64::MAX, 1).len(), 1, "at most the batch");
        assert!(t.is_empty() && t.next_due().is_none());
    }
}
