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
//! - What it repeats per job and can do once per run of [`RUN`] jobs is done so: the jobs
//!   of a run are published first, then counted as pushed with one add, then indexed with
//!   one move of the ring's `tail` ([`OverflowRef::push_run`]). A pusher killed in a run
//!   leaves published jobs no index names yet, as a single push killed between its publish
//!   and its index does, several at once: recovery indexes them. (One stopped there, alive,
//!   shows in the daemon's next full walk rather than its next scan: its count is not made.)

use super::owner::Injector;
use super::publish::{check_priority, publish_uncounted, unindexed, Joins};
use super::{PushBatchError, PushError};
use crate::metrics::Counter;
use crate::overflow::OverflowRef;
use crate::record::state::JobHandle;
use crate::segment::coarse_monotonic_ns;

/// How many records past the next one a push of many prefetches: far enough that the lines
/// arrive before the job needs them (a job is filled in about 50 ns), near enough that they
/// are the ones it takes.
const PREFETCH_AHEAD: u32 = 2;

/// Jobs published, counted and indexed together: long enough that the count and the move
/// of `tail` are a small part of a job's cost, short enough that the first job of a run is
/// in line a few microseconds after it was filled.
const RUN: usize = 64;

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
        let mut done = 0;
        for run in payloads.chunks(RUN) {
            let mut handles = [JobHandle { index: 0, generation: 0 }; RUN];
            let (published, unpublished) = self.publish_run(run, now, priority, &mut handles);
            let indexed = self.index_run(ring, &handles[..published]);
            let in_line = indexed.as_ref().err().map_or(published, |(n, _)| *n);
            for (k, h) in handles[..in_line].iter().enumerate() {
                queued(done + k, *h);
            }
            done += in_line;
            if let Some(why) = indexed.err().map(|(_, e)| e).or(unpublished) {
                return Some((done, why));
            }
        }
        None
    }

    /// Publishes the jobs of `run` into `handles`, in order: how many, and why the next one
    /// could not be.
    fn publish_run(
        &self,
        run: &[&[u8]],
        now: Joins,
        priority: u32,
        handles: &mut [JobHandle; RUN],
    ) -> (usize, Option<PushError>) {
        for (k, p) in run.iter().enumerate() {
            // The records this loop takes next are usually the cursor's and the one after
            // (records are taken in order, and a batch's are mostly free): their lines start
            // coming while this job is filled, so each job's misses overlap another's.
            self.ctx.records.prefetch_for_fill(self.cursor.record.get().wrapping_add(PREFETCH_AHEAD));
            match publish_uncounted(&self.ctx, self.me, &self.cursor, p, now, priority, ()) {
                Ok(h) => handles[k] = h,
                Err(e) => return (k, Some(e)),
            }
            crate::fail_point!("publish.before_index");
        }
        (run.len(), None)
    }

    /// Counts the published jobs `handles` as pushed and puts them in `ring` in one run;
    /// `Err((n, why))` when only the first `n` went in: the rest are withdrawn.
    fn index_run(&self, ring: OverflowRef<'_>, handles: &[JobHandle]) -> Result<(), (usize, PushError)> {
        if handles.is_empty() {
            return Ok(());
        }
        self.ctx.add(self.me, Counter::Pushed, handles.len() as u64);
        let indices: [u32; RUN] = core::array::from_fn(|k| handles.get(k).map_or(0, |h| h.index));
        ring.push_run(&indices[..handles.len()]).map_err(|(n, e)| {
            let queue = &self.info.spec.name;
            let why = unindexed(&self.ctx, ring, handles[n], queue, e.clone());
            for h in &handles[n + 1..] {
                unindexed(&self.ctx, ring, *h, queue, e.clone());
            }
            (n, why)
        })
    }
}

#[cfg(all(test, not(xtcq_loom)))]
mod tests {
    use std::sync::Arc;

    use crate::{Injector, PushError, QueueSpec, Segment, SegmentConfig, Thief};

    fn injector(dir: &tempfile::TempDir, spec: &QueueSpec, records: u32) -> (Arc<Segment>, Injector) {
        injector_with(dir, spec, SegmentConfig::small().with_queues(1, 1).with_records(records))
    }

    fn injector_with(
        dir: &tempfile::TempDir,
        spec: &QueueSpec,
        config: SegmentConfig,
    ) -> (Arc<Segment>, Injector) {
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

    /// The ring fills part way through a run: the jobs past it are withdrawn, their records
    /// free again (a second push finds the ring full, not the records), none comes out.
    #[test]
    fn a_ring_full_inside_a_run_withdraws_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let config = SegmentConfig::small().with_queues(1, 1).with_records(12).with_overflow_capacity(8);
        let (seg, inj) = injector_with(&dir, &QueueSpec::new("jobs"), config);
        let thief = Thief::new(seg.clone(), &seg.queue_by_name("jobs").unwrap(), 1).unwrap();
        let payloads: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        for round in 0..2 {
            let mut told = Vec::new();
            let e = inj.push_many(&refs, 0, |i, _| told.push(i)).unwrap_err();
            assert_eq!((e.queued, told), (8, (0..8).collect::<Vec<_>>()), "round {round}");
            assert!(matches!(e.error, PushError::QueueFull { .. }), "round {round}: {:?}", e.error);
            for i in 0..8u8 {
                let job = thief.steal().unwrap().expect("a job");
                assert_eq!(job.payload().unwrap(), [i]);
                job.ack().unwrap();
            }
            assert!(thief.steal().unwrap().is_none(), "round {round}: a withdrawn job came out");
            let records = seg.records();
            let held: Vec<u32> = (0..records.len())
                .filter(|&i| records.state(i).unwrap().load().state() != Some(crate::State::Free))
                .collect();
            assert!(held.is_empty(), "round {round}: records {held:?} were left behind");
        }
    }

    /// Every record is free and the queue's quota holds nothing: what a push of many that
    /// failed part way, then a drain, must leave.
    fn all_given_back(seg: &Segment, queue: u32, why: &str) {
        let records = seg.records();
        let held: Vec<u32> = (0..records.len())
            .filter(|&i| records.state(i).unwrap().load().state() != Some(crate::State::Free))
            .collect();
        assert!(held.is_empty(), "{why}: records {held:?} were left behind");
        assert_eq!(seg.held(queue), 0, "{why}: the quota still counts jobs");
    }

    /// Takes every job of queue "jobs", acking each; the payloads in the order they came.
    fn drain(seg: &Arc<Segment>) -> Vec<Vec<u8>> {
        let thief = Thief::new(seg.clone(), &seg.queue_by_name("jobs").unwrap(), 7).unwrap();
        std::iter::from_fn(|| thief.steal().unwrap())
            .map(|job| {
                let p = job.payload().unwrap();
                job.ack().unwrap();
                p
            })
            .collect()
    }

    /// The record quota runs out inside a run (10 of a run of 64), and in a second call the
    /// ring runs out inside the quota (8 cells, 10 allowed): each time the jobs told of come
    /// out once, in order, the rest were given back (records and quota), and a drain leaves
    /// the quota empty.
    #[test]
    fn a_quota_full_inside_a_run_gives_back_what_was_not_queued() {
        let dir = tempfile::tempdir().unwrap();
        let seg = Arc::new(
            Segment::create(
                &dir.path().join("segment"),
                &SegmentConfig::small().with_queues(1, 1).with_records(64).with_overflow_capacity(8),
                0o600,
            )
            .unwrap(),
        );
        let quota = crate::segment::QueueQuota { max_records: 10, max_dead: 0 };
        let queue = seg.create_queue_limited(&QueueSpec::new("jobs"), quota).unwrap();
        let inj = Injector::new(seg.clone(), &queue, 0).unwrap();
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        for round in 0..3 {
            let mut told = Vec::new();
            let e = inj.push_many(&refs, 0, |i, _| told.push(i)).unwrap_err();
            assert_eq!(e.queued, 8, "round {round}: the ring holds 8: {:?}", e.error);
            assert_eq!(told, (0..8).collect::<Vec<_>>(), "round {round}");
            assert!(matches!(e.error, PushError::QueueFull { .. }), "round {round}: {:?}", e.error);
            assert_eq!(seg.held(queue.index), 8, "round {round}: the two withdrawn gave theirs back");
            let e = inj.push_many(&refs, 0, |_, _| {}).unwrap_err();
            assert_eq!(e.queued, 0, "round {round}");
            assert_eq!(seg.held(queue.index), 8, "round {round}: a refused push holds nothing");
            assert_eq!(drain(&seg), payloads[..8], "round {round}");
            all_given_back(&seg, queue.index, &format!("round {round}"));
        }
        // A ring big enough: the quota is what ends the run, at 10.
        let dir = tempfile::tempdir().unwrap();
        let seg = Arc::new(
            Segment::create(
                &dir.path().join("segment"),
                &SegmentConfig::small().with_queues(1, 1).with_records(64).with_overflow_capacity(64),
                0o600,
            )
            .unwrap(),
        );
        let queue = seg.create_queue_limited(&QueueSpec::new("jobs"), quota).unwrap();
        let inj = Injector::new(seg.clone(), &queue, 0).unwrap();
        let e = inj.push_many(&refs, 0, |_, _| {}).unwrap_err();
        assert_eq!(e.queued, 10);
        assert!(matches!(e.error, PushError::QuotaFull { .. }), "{:?}", e.error);
        assert_eq!(drain(&seg), payloads[..10]);
        all_given_back(&seg, queue.index, "quota");
    }

    /// Payload blocks run out inside a run (3 blocks for payloads past the inline area):
    /// the jobs before are queued, the one that found no block holds nothing, and a drain
    /// gives every block back (a second call queues 3 again).
    #[test]
    fn blocks_running_out_inside_a_run_leave_nothing_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = SegmentConfig::small().with_queues(1, 1).with_records(64).with_overflow_capacity(64);
        config.payload_bytes = 256;
        config.inline_bytes = 16;
        config.payload_blocks = [0; crate::layout::payload::PAYLOAD_CLASSES];
        config.payload_blocks[crate::layout::payload::class_for(200).unwrap()] = 3;
        let (seg, inj) = injector_with(&dir, &QueueSpec::new("jobs"), config);
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 200]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        for round in 0..3 {
            let e = inj.push_many(&refs, 0, |_, _| {}).unwrap_err();
            assert_eq!(e.queued, 3, "round {round}: {:?}", e.error);
            assert!(matches!(e.error, PushError::BlocksFull(_)), "round {round}: {:?}", e.error);
            assert_eq!(drain(&seg), payloads[..3], "round {round}");
            all_given_back(&seg, 0, &format!("round {round}"));
        }
    }

    /// Several threads pushing many (runs cut by a ring of 8 and a quota of 12) and singly,
    /// with a thief taking and acking, on one queue: every job a push told of comes out
    /// exactly once, each thread's in its order, and at the end every record and the whole
    /// quota are back.
    #[test]
    fn pushes_of_many_beside_single_pushes_and_a_thief_queue_each_job_once() {
        use std::collections::HashSet;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let seg = Arc::new(
            Segment::create(
                &dir.path().join("segment"),
                &SegmentConfig::small().with_queues(1, 1).with_records(64).with_overflow_capacity(8),
                0o600,
            )
            .unwrap(),
        );
        let quota = crate::segment::QueueQuota { max_records: 12, max_dead: 0 };
        let queue = seg.create_queue_limited(&QueueSpec::new("jobs"), quota).unwrap();
        const PER: u32 = 3000;
        let stop = AtomicBool::new(false);
        let (told, got) = std::thread::scope(|s| {
            let pushers: Vec<_> = (0..3u32)
                .map(|t| {
                    let (seg, queue) = (seg.clone(), queue.clone());
                    s.spawn(move || {
                        let inj = Injector::new(seg, &queue, t + 1).unwrap();
                        let mut told = Vec::new();
                        let mut next = 0u32;
                        while next < PER {
                            let len = if t == 2 { 1 } else { 1 + next % 70 };
                            let ids: Vec<[u8; 8]> = (next..(next + len).min(PER))
                                .map(|k| (u64::from(t) << 32 | u64::from(k)).to_le_bytes())
                                .collect();
                            let refs: Vec<&[u8]> = ids.iter().map(|p| p.as_slice()).collect();
                            let mut n = 0;
                            let _ = inj.push_many(&refs, 0, |i, _| {
                                assert_eq!(i, n, "told in order");
                                n += 1;
                            });
                            told.extend(ids[..n].iter().map(|p| u64::from_le_bytes(*p)));
                            next += n as u32;
                            if n == 0 {
                                std::thread::yield_now();
                            }
                        }
                        told
                    })
                })
                .collect();
            let thief = s.spawn(|| {
                let thief = Thief::new(seg.clone(), &queue, 5).unwrap();
                let mut got = Vec::new();
                loop {
                    let finished = stop.load(Ordering::Acquire);
                    match thief.steal().unwrap() {
                        Some(job) => {
                            got.push(u64::from_le_bytes(job.payload().unwrap().try_into().unwrap()));
                            job.ack().unwrap();
                        }
                        None if finished => break got,
                        None => std::thread::yield_now(),
                    }
                }
            });
            let told: Vec<u64> = pushers.into_iter().flat_map(|h| h.join().unwrap()).collect();
            stop.store(true, Ordering::Release);
            (told, thief.join().unwrap())
        });
        let unique: HashSet<u64> = got.iter().copied().collect();
        assert_eq!(unique.len(), got.len(), "a job came out twice");
        assert_eq!(unique, told.iter().copied().collect::<HashSet<_>>(), "what came out is what was told");
        for t in 0..3u64 {
            let mine: Vec<u64> = got.iter().copied().filter(|i| i >> 32 == t).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "thread {t}'s jobs out of order");
        }
        all_given_back(&seg, queue.index, "the end");
    }

    /// A push of many into a batch whose ring fills inside the run: the withdrawn jobs never
    /// ran, so the batch must not show them as pushed, nor (once every queued one is acked
    /// and it completes) as acked.
    #[test]
    fn a_batch_joined_by_a_push_of_many_counts_only_the_jobs_queued() {
        let dir = tempfile::tempdir().unwrap();
        let config = SegmentConfig::small().with_queues(1, 1).with_records(32).with_overflow_capacity(8);
        let (seg, inj) = injector_with(&dir, &QueueSpec::new("jobs"), config);
        let batch = crate::batch::open(&seg, 0, "b", None).unwrap();
        inj.set_batch(Some(batch));
        let payloads: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let e = inj.push_many(&refs, 0, |_, _| {}).unwrap_err();
        assert_eq!(e.queued, 8, "{:?}", e.error);
        let pushed = |seg: &Segment| crate::batch::progress(seg, batch.slot).unwrap().pushed;
        assert_eq!(pushed(&seg), 8, "the 4 withdrawn are not pushed");
        assert_eq!(drain(&seg), payloads[..8]);
        crate::batch::seal(&seg, batch).unwrap();
        let done = crate::batch::complete_sealed(&seg);
        assert_eq!(done.len(), 1, "every queued job ended");
        assert_eq!(done[0].progress.acked(), 8, "only the jobs that ran were acked");
    }
}
