//! The worker pool of `xtcq work`: the signal handler that stops it, the `--jobs` threads,
//! and the progress line.
//!
//! Rules kept:
//! - the first SIGINT / SIGTERM stops taking jobs (running commands finish), the second
//!   kills the running commands (their jobs are given back);
//! - one worker's error stops them all at once, not only when it is joined;
//! - a thread that cannot be started stops the pool with an error that says to lower --jobs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use xtcq_client::{Client, ThiefHandle};

use crate::cgroup::CgroupHome;
use crate::work::{worker, WorkArgs};
use crate::work_summary::Counters;

/// How `work` is told to stop (see the module's rules).
#[derive(Default)]
pub(crate) struct Stop {
    pub(crate) taking: AtomicBool,
    pub(crate) now: AtomicBool,
}

/// SIGINT / SIGTERM once: take no more jobs; twice: stop the running ones too.
pub(crate) fn stop_on_signals(stop: &Arc<Stop>) -> Result<()> {
    let mut signals =
        signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
            .context("cannot install the SIGINT / SIGTERM handlers")?;
    let stop = stop.clone();
    std::thread::spawn(move || {
        for _ in signals.forever() {
            if stop.taking.swap(true, Ordering::Relaxed) {
                stop.now.store(true, Ordering::Relaxed);
            }
        }
    });
    Ok(())
}

/// Runs `--jobs` workers until they all stop; the first error of any. With `progress` (the
/// start time), prints a progress line on the terminal while they run.
pub(crate) fn run_workers(
    a: &WorkArgs,
    (c, home): (&Client, Option<&CgroupHome>),
    thief: &ThiefHandle,
    stop: &Stop,
    n: &Counters,
    progress: Option<Instant>,
) -> Result<()> {
    std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(a.jobs as usize);
        let mut first_err = None;
        for i in 0..a.jobs {
            let spawned = std::thread::Builder::new().spawn_scoped(s, || {
                let r = worker(a, (c, home), thief.clone(), stop, n);
                if r.is_err() {
                    // One worker's error stops them all, not only once it is joined.
                    stop.taking.store(true, Ordering::Relaxed);
                }
                r
            });
            match spawned {
                Ok(w) => workers.push(w),
                Err(e) => {
                    // The machine cannot serve this many: stop the ones started (they give
                    // back nothing: they finish their command) and say so.
                    stop.taking.store(true, Ordering::Relaxed);
                    first_err = Some(anyhow::anyhow!(
                        "cannot start worker thread {} of --jobs {}: {e}; lower --jobs",
                        i + 1,
                        a.jobs
                    ));
                    break;
                }
            }
        }
        let mut last_print = Instant::now();
        for w in workers {
            while !w.is_finished() {
                std::thread::sleep(Duration::from_millis(20));
                if let Some(t0) = progress.filter(|_| last_print.elapsed() >= Duration::from_millis(500)) {
                    last_print = Instant::now();
                    print_progress(&a.queue, n, t0);
                }
            }
            let joined = w.join().unwrap_or_else(|_| {
                stop.taking.store(true, Ordering::Relaxed);
                Err(anyhow::anyhow!("a worker thread panicked"))
            });
            if let Err(e) = joined {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    })
}

/// The progress line on a terminal.
fn print_progress(queue: &str, n: &Counters, t0: Instant) {
    let done = n.ok.load(Ordering::Relaxed) + n.failed.load(Ordering::Relaxed);
    eprint!(
        "\rxtcq work {}: {} ok, {} failed, {} running, {:.0} jobs/s   ",
        queue,
        n.ok.load(Ordering::Relaxed),
        n.failed.load(Ordering::Relaxed),
        n.running.load(Ordering::Relaxed),
        done as f64 / t0.elapsed().as_secs_f64().max(1e-9)
    );
}
