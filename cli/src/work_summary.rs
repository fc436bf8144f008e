//! What `xtcq work` counts, and the summary it prints when it stops: on every exit (its
//! queue idle, `--max-jobs` reached, SIGINT / SIGTERM, an error), whether stderr is a
//! terminal or a log file, because a log is where a service's summary is read.
//!
//! Jobs are counted once each, by the last thing that became of them in this run: a job that
//! failed twice and then succeeded is one job ok (with three attempts), not two failures;
//! one whose failing attempt was its queue's last (`--max-attempts`) is dead; one killed at a
//! second SIGINT, or not fenced, was given back uncounted and is neither failed nor dead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use xtcq_client::JobId;

use crate::exit;

/// What became of one run of a job's command, once settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Exit 0 and acked.
    Ok,
    /// Failed (or its ack came too late): re-queued for another attempt.
    Failed,
    /// Failed at its last attempt: now a dead letter.
    Dead,
    /// Not run to its end (interrupted, not fenced): given back without counting an attempt.
    GivenBack,
    /// Cancelled while it ran (`xtcq cancel`): the daemon stopped its command and freed it.
    Cancelled,
}

/// The counters the workers share: live ones for the progress line, and each job's last
/// outcome for the summary.
#[derive(Default)]
pub struct Counters {
    /// Attempts that succeeded (live, for the progress line).
    pub ok: AtomicU64,
    /// Attempts that failed (live, for the progress line).
    pub failed: AtomicU64,
    /// Commands running now.
    pub running: AtomicU64,
    /// Jobs taken, against `--max-jobs`.
    pub taken: AtomicU64,
    /// Commands run to an outcome (every attempt, given back ones included).
    attempts: AtomicU64,
    /// Each job's last outcome in this run.
    jobs: Mutex<HashMap<JobId, Settled>>,
}

/// Whether a failed attempt (`attempt` attempts before it) was the job's last.
pub fn failed_outcome(attempt: u32, max_attempts: u32) -> Settled {
    if max_attempts != 0 && attempt.saturating_add(1) >= max_attempts {
        Settled::Dead
    } else {
        Settled::Failed
    }
}

/// The totals of a run, by job.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub ok: u64,
    pub failed: u64,
    pub dead: u64,
    pub given_back: u64,
    pub cancelled: u64,
    pub attempts: u64,
}

impl Counters {
    /// Records what became of one run of job `id`.
    pub fn settled(&self, id: JobId, what: Settled) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        match what {
            Settled::Ok => self.ok.fetch_add(1, Ordering::Relaxed),
            Settled::Failed | Settled::Dead => self.failed.fetch_add(1, Ordering::Relaxed),
            Settled::GivenBack | Settled::Cancelled => 0,
        };
        // A poisoned lock only means a worker panicked mid-insert; the map is still whole.
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.insert(id, what);
    }

    pub fn summary(&self) -> Summary {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = Summary { attempts: self.attempts.load(Ordering::Relaxed), ..Summary::default() };
        for what in jobs.values() {
            match what {
                Settled::Ok => s.ok += 1,
                Settled::Failed => s.failed += 1,
                Settled::Dead => s.dead += 1,
                Settled::GivenBack => s.given_back += 1,
                Settled::Cancelled => s.cancelled += 1,
            }
        }
        s
    }
}

impl Summary {
    /// The final line, e.g. `xtcq work q: 3 job(s) ok, 1 failed, 2 dead, 0 given back;
    /// 9 attempt(s) in 1.2 s`.
    pub fn line(&self, queue: &str, took: Duration) -> String {
        // Named only when some were: a run without cancels prints the line it always did.
        let cancelled =
            if self.cancelled > 0 { format!(", {} cancelled", self.cancelled) } else { String::new() };
        format!(
            "xtcq work {queue}: {} job(s) ok, {} failed, {} dead, {} given back{cancelled}; {} attempt(s) in {:.1} s",
            self.ok,
            self.failed,
            self.dead,
            self.given_back,
            self.attempts,
            took.as_secs_f64()
        )
    }

    /// `work`'s exit status: 5 when any job ended failed or dead in this run.
    pub fn status(&self) -> i32 {
        if self.failed + self.dead > 0 {
            exit::FAILED
        } else {
            exit::OK
        }
    }
}

/// Prints the summary on stderr (after the progress line, on a terminal) and returns the
/// exit status it implies.
pub fn finish(n: &Counters, queue: &str, took: Duration, progress: bool) -> i32 {
    let s = n.summary();
    // On a terminal the progress line is overwritten; in a log, a line of its own.
    let lead = if progress { "\r" } else { "" };
    eprintln!("{lead}{}            ", s.line(queue, took));
    s.status()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> JobId {
        JobId { index: i, birth: 1 }
    }

    #[test]
    fn jobs_are_counted_once_by_their_last_outcome() {
        let n = Counters::default();
        n.settled(id(1), Settled::Failed);
        n.settled(id(1), Settled::Failed);
        n.settled(id(1), Settled::Ok);
        n.settled(id(2), Settled::Failed);
        n.settled(id(2), Settled::Dead);
        n.settled(id(3), Settled::GivenBack);
        n.settled(id(4), Settled::Failed);
        let s = n.summary();
        assert_eq!(s, Summary { ok: 1, failed: 1, dead: 1, given_back: 1, cancelled: 0, attempts: 7 });
        assert_eq!(s.status(), exit::FAILED);
        assert_eq!(failed_outcome(2, 3), Settled::Dead);
        assert_eq!(failed_outcome(1, 3), Settled::Failed);
        assert_eq!(failed_outcome(9, 0), Settled::Failed);
    }

    #[test]
    fn given_back_jobs_are_no_failure() {
        let n = Counters::default();
        n.settled(id(1), Settled::GivenBack);
        n.settled(id(2), Settled::Ok);
        n.settled(id(3), Settled::Failed);
        n.settled(id(3), Settled::Cancelled);
        assert_eq!(n.summary().status(), exit::OK, "a cancelled job is no failure");
        assert!(n.summary().line("q", Duration::ZERO).contains("1 given back, 1 cancelled;"));
    }
}
