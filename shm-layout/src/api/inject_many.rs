//! [`Injector::push_many`]: many jobs onto a queue's overflow ring in one call, for a caller
//! that has them all at once (a SQL statement's array).
//!
//! - Each job takes the path of [`Injector::push_priority`], step for step: its record
//!   allocated, filled and published, then its index pushed onto the ring. A process killed
//!   part way leaves the states a run of single pushes would, which recovery already knows:
//!   no new state, no new crash window.
//! - What a run of single pushes repeats per job and needs only once is done once: the
//!   priority's check, the ring's resolution, the clock read (the jobs join the line
//!   together, as an owner's batch does) and the wake (a fence and a load of the sleepers'
//!   word), which comes after the last job, so a sleeper wakes to the whole lot.

use super::owner::{check_priority, index_in_ring, publish_at, Injector, Joins};
use super::{PushBatchError, PushError};
use crate::record::state::JobHandle;
use crate::segment::coarse_monotonic_ns;

/// How many records past the next one a push of many prefetches: far enough that the lines
/// arrive before the job needs them (a job is filled in about 50 ns), near enough that they
/// are the ones it takes.
const PREFETCH_AHEAD: u32 = 2;

impl Injector {
    /// Queues `payloads` in order at `priority` on the overflow ring of that level, as
    /// [`push_priority`](Self::push_priority) would one by one, and tells `queued` each
    /// job's position in `payloads` and handle once it is queued. One wake for the lot,
    /// after the last.
    ///
    /// When one fails (records, blocks, the quota or the ring full, a payload too large)
    /// those before it are queued, and [`PushBatchError`] says how many.
    pub fn push_many(
        &self,
        payloads: &[&[u8]],
        priority: u32,
        queued: impl FnMut(usize, JobHandle),
    ) -> Result<(), PushBatchError> {
        let failed = self.push_each(payloads, priority, queued);
        let queued = failed.as_ref().map_or(payloads.len(), |(done, _)| *done);
        if queued > 0 {
            self.ctx.mark(priority);
            crate::wait::notify(self.ctx.wait);
        }
        match failed {
            None => Ok(()),
            Some((queued, error)) => Err(PushBatchError { queued, error }),
        }
    }

    /// The loop of [`push_many`](Self::push_many), without its wake: `Some((queued, why))`
    /// when a job could not be queued.
    fn push_each(
        &self,
        payloads: &[&[u8]],
        priority: u32,
        mut queued: impl FnMut(usize, JobHandle),
    ) -> Option<(usize, PushError)> {
        if let Err(e) = check_priority(&self.info, priority) {
            return Some((0, e));
        }
        let ring = match self.ctx.ring(priority) {
            Ok(r) => r,
            Err(e) => return Some((0, PushError::Corrupt(e.to_string()))),
        };
        let now = Joins::Now(coarse_monotonic_ns());
        for (i, p) in payloads.iter().enumerate() {
            // The records this loop takes next are usually the cursor's and the one after
            // (records are taken in order, and a batch's are mostly free): their lines start
            // coming while this job is filled, so each job's misses overlap another's.
            self.ctx.records.prefetch_for_fill(self.cursor.record.get().wrapping_add(PREFETCH_AHEAD));
            let pushed = publish_at(&self.ctx, self.me, &self.cursor, p, now, priority, ())
                .and_then(|h| index_in_ring(&self.ctx, ring, h, &self.info.spec.name).map(|()| h));
            match pushed {
                Ok(h) => queued(i, h),
                Err(e) => return Some((i, e)),
            }
        }
        None
    }
}

#[cfg(all(test, not(xtcq_loom)))]
mod tests {
    use std::sync::Arc;

    use crate::{Injector, PushError, QueueSpec, Segment, SegmentConfig, Thief};

    fn injector(dir: &tempfile::TempDir, spec: &QueueSpec, records: u32) -> (Arc<Segment>, Injector) {
        let config = SegmentConfig::small().with_queues(1, 1).with_records(records);
        let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
        let queue = seg.create_queue(spec).unwrap();
        let inj = Injector::new(seg.clone(), &queue, 0).unwrap();
        (seg, inj)
    }

    /// The jobs come out in order, each once, with the handles `push_many` gave.
    #[test]
    fn many_jobs_queue_in_order_with_their_handles() {
        let dir = tempfile::tempdir().unwrap();
        let (seg, inj) = injector(&dir, &QueueSpec::new("jobs"), 64);
        let payloads: Vec<Vec<u8>> = (0..20).map(|i| format!("job {i}").into_bytes()).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let mut handles = Vec::new();
        inj.push_many(&refs, 0, |i, h| {
            assert_eq!(i, handles.len());
            handles.push(h);
        })
        .unwrap();
        let queue = seg.queue_by_name("jobs").unwrap();
        let thief = Thief::new(seg.clone(), &queue, 1).unwrap();
        for (p, h) in payloads.iter().zip(&handles) {
            let job = thief.steal().unwrap().expect("a job");
            assert_eq!(&job.payload().unwrap(), p);
            assert_eq!(job.handle().index, h.index);
            job.ack().unwrap();
        }
        assert!(thief.steal().unwrap().is_none());
    }

    /// Records run out part way: the jobs before are queued and counted, the rest not.
    #[test]
    fn a_push_that_runs_out_of_records_says_how_many_were_queued() {
        let dir = tempfile::tempdir().unwrap();
        let (_seg, inj) = injector(&dir, &QueueSpec::new("jobs"), 8);
        let refs: Vec<&[u8]> = vec![b"x"; 12];
        let mut told = 0;
        let e = inj.push_many(&refs, 0, |_, _| told += 1).unwrap_err();
        assert_eq!((e.queued, told), (8, 8));
        assert!(matches!(e.error, PushError::RecordsFull(_)), "{:?}", e.error);
    }

    /// Garbage written into the ring's cells and the records' state words in the middle of
    /// pushes of many (by the callback, as another process could at that instant), with a
    /// thief taking what it can between them: every call ends, the count it returns is the
    /// number of jobs it told of, and nothing panics. (Jobs the garbage hit may be lost or
    /// refused: that is what it destroyed.)
    #[test]
    fn garbage_in_the_ring_and_the_records_under_pushes_of_many_panics_nothing() {
        use std::cell::Cell;
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().unwrap();
        let (seg, inj) = injector(&dir, &QueueSpec::new("jobs"), 1024);
        let queue = seg.queue_by_name("jobs").unwrap();
        let thief = Thief::new(seg.clone(), &queue, 1).unwrap();
        let ring = seg.overflow(queue.index).unwrap();
        let records = seg.records();
        let x = Cell::new(0x9e37_79b9_7f4a_7c15u64);
        // The ring's garbage mostly sticks (a cell no lap can have refuses every push after),
        // so it comes last.
        let scribble = |ring_too: bool| {
            // xorshift: garbage of every shape, and where to put it.
            let mut v = x.get();
            v ^= v << 13;
            v ^= v >> 7;
            v ^= v << 17;
            x.set(v);
            let garbage = [v, v & 0xffff_ffff, (v >> 40) << 32, u64::MAX][(v % 4) as usize];
            if ring_too && v & 0x100 == 0 {
                ring.raw_cell(v >> 9).store(garbage, Ordering::Relaxed);
            } else if let Some(st) = records.state(((v >> 9) % u64::from(records.len())) as u32) {
                st.0.store(garbage, Ordering::Relaxed);
            }
        };
        let refs: Vec<&[u8]> = vec![b"job"; 300];
        let (mut all, mut failed) = (0, 0);
        for round in 0..100 {
            let mut told = 0;
            let pushed = inj.push_many(&refs, 0, |i, _| {
                told += 1;
                if i % (7 + round % 50) == 0 {
                    scribble(round >= 80);
                }
            });
            let queued = pushed.as_ref().map_or_else(|e| e.queued, |()| refs.len());
            failed += usize::from(pushed.is_err());
            assert_eq!(queued, told, "round {round}: the count returned is the jobs told of");
            all += queued;
            for _ in 0..refs.len() {
                match thief.steal() {
                    Ok(Some(job)) => {
                        let _ = job.ack();
                    }
                    Ok(None) => break,
                    Err(_) => {}
                }
            }
        }
        assert!(
            all > 0 && failed > 0,
            "the garbage hit no push, or every push: {all} queued, {failed} failed"
        );
    }

    /// A priority past the queue's levels queues nothing.
    #[test]
    fn a_priority_past_the_levels_queues_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_seg, inj) = injector(&dir, &QueueSpec::new("jobs"), 8);
        let e = inj.push_many(&[b"a", b"b"], 1, |_, _| panic!("none is queued")).unwrap_err();
        assert_eq!(e.queued, 0);
        assert!(matches!(e.error, PushError::Priority { .. }), "{:?}", e.error);
    }
}
