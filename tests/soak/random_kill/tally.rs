//! The soak's accounting, from the logs the children wrote and the daemons' logs.
//!
//! - Every id logged as pushed was run; ids run but never logged as pushed are at most one
//!   per producer kill (killed between push and log).
//! - An id run more than once was run each time at a different attempt, and the re-runs are
//!   bounded by worker kills × batch size; no two runs of one id overlap in time.
//! - Recovery time: from a `kill -9` to the daemon's log line saying the dead process's jobs
//!   are re-queued (`done_mono_ns`, the same clock in every process).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::fleet::Fleet;
use super::BATCH;

pub fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Lines in the logs (ids pushed, or jobs run).
pub fn line_count(logs: &[PathBuf]) -> u64 {
    logs.iter()
        .map(|p| std::fs::read(p).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0) as u64)
        .sum()
}

/// The start / end log beside a worker's log.
pub fn run_log(log: &Path) -> PathBuf {
    log.with_extension("runs")
}

/// What the logs say happened, each promise asserted on the way.
pub struct Tally {
    pub pushed: usize,
    pub run: usize,
    pub unlogged: u64,
    pub duplicates: u64,
    pub max_runs: usize,
}

impl Tally {
    /// Reads the logs of every child `fleet` ran and checks the accounting promises.
    pub fn account(fleet: &Fleet) -> Tally {
        let pushed = pushed_ids(&fleet.producer_logs);
        let runs = runs_by_id(&fleet.worker_logs);
        let lost: Vec<_> = pushed.iter().filter(|id| !runs.contains_key(id)).take(20).collect();
        assert!(lost.is_empty(), "pushed ids never run (lost): {lost:?}");
        let unlogged = runs.keys().filter(|id| !pushed.contains(id)).count() as u64;
        assert!(
            unlogged <= fleet.producer_kills,
            "{unlogged} ids run whose push was never logged, with only {} producer kills",
            fleet.producer_kills
        );
        let (duplicates, max_runs) = reruns(&runs);
        assert!(
            duplicates <= fleet.worker_kills * BATCH as u64,
            "{duplicates} re-runs, more than {} worker kills x {BATCH} jobs each could cause",
            fleet.worker_kills
        );
        let overlaps = overlapping_runs(&fleet.worker_logs, &fleet.killed_at);
        assert!(
            overlaps.is_empty(),
            "{} overlapping runs of one job: {:?}",
            overlaps.len(),
            &overlaps[..overlaps.len().min(10)]
        );
        Tally { pushed: pushed.len(), run: runs.len(), unlogged, duplicates, max_runs }
    }
}

/// The ids the producers logged, each logged once (by one producer, once).
fn pushed_ids(producer_logs: &[PathBuf]) -> BTreeSet<u64> {
    let mut logged_in: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for p in producer_logs {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for l in lines(p) {
            let id = l.parse::<u64>().unwrap_or_else(|e| panic!("producer log line {l:?} in {name}: {e}"));
            logged_in.entry(id).or_default().push(name.clone());
        }
    }
    let twice: Vec<_> = logged_in.iter().filter(|(_, f)| f.len() > 1).take(10).collect();
    assert!(
        twice.is_empty(),
        "ids logged as pushed more than once (id, logs): {twice:?}; producer logs {producer_logs:?}"
    );
    logged_in.into_keys().collect()
}

/// The attempt of each run of each id, from the workers' logs.
fn runs_by_id(worker_logs: &[PathBuf]) -> BTreeMap<u64, Vec<u32>> {
    let mut runs: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for w in worker_logs {
        for l in lines(w) {
            let (id, attempts) = l.split_once(' ').expect("worker log line");
            runs.entry(id.parse().expect("id")).or_default().push(attempts.parse().expect("attempts"));
        }
    }
    runs
}

/// `(re-runs, most runs of one id)`; each run of one id must be at another attempt.
fn reruns(runs: &BTreeMap<u64, Vec<u32>>) -> (u64, usize) {
    let (mut duplicates, mut max_runs) = (0u64, 1);
    for (id, attempts) in runs.iter().filter(|(_, a)| a.len() > 1) {
        duplicates += attempts.len() as u64 - 1;
        max_runs = max_runs.max(attempts.len());
        let mut a = attempts.clone();
        a.sort_unstable();
        a.dedup();
        assert_eq!(
            a.len(),
            attempts.len(),
            "job {id} run twice at the same attempt {attempts:?} (run twice at once?)"
        );
    }
    (duplicates, max_runs)
}

/// Runs of one job id that overlap in time. A run with a start and no end was cut by its
/// worker's kill: it ends at `killed_at` of that worker's log (or never, if not killed).
pub fn overlapping_runs(worker_logs: &[PathBuf], killed_at: &BTreeMap<PathBuf, u64>) -> Vec<String> {
    let mut runs: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for w in worker_logs {
        let cut = killed_at.get(w).copied().unwrap_or(u64::MAX);
        for (id, span) in spans(&run_log(w), cut) {
            runs.entry(id).or_default().push(span);
        }
    }
    let mut out = Vec::new();
    for (id, mut r) in runs {
        r.sort_unstable();
        for pair in r.windows(2).filter(|p| p[0].1 > p[1].0) {
            out.push(format!(
                "job {id}: a run [{}, {}] overlaps the next, from {}",
                pair[0].0, pair[0].1, pair[1].0
            ));
        }
    }
    out
}

/// `(id, (start, end))` of each run in one worker's run log; a run with no end ends at `cut`.
fn spans(run_log: &Path, cut: u64) -> Vec<(String, (u64, u64))> {
    let mut out = Vec::new();
    let mut open: Option<(String, u64)> = None;
    for l in lines(run_log) {
        let mut f = l.split(' ');
        let (Some(kind), Some(id), Some(ns)) = (f.next(), f.next(), f.next().and_then(|n| n.parse().ok()))
        else {
            continue;
        };
        if let Some((oid, s)) = open.take() {
            // A start after a start: the first run was cut (its worker died mid-batch).
            out.push((oid, (s, if kind == "S" { cut } else { ns })));
        }
        if kind == "S" {
            open = Some((id.to_string(), ns));
        }
    }
    out.extend(open.map(|(id, s)| (id, (s, cut))));
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `(pid, done_mono_ns)` of every recovery a daemon log reports.
fn recoveries(log: &str) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        if !(line.contains("recovered jobs of an exited process")
            || line.contains("process exited; slot freed"))
        {
            continue;
        }
        let field = |name: &str| -> Option<u64> {
            let at = line.find(&format!(" {name}="))? + name.len() + 2;
            line[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        };
        if let (Some(pid), Some(done)) = (field("pid"), field("done_mono_ns")) {
            out.insert(pid as u32, done);
        }
    }
    out
}

/// Kill-to-re-queue times in ms, sorted, of the kills the running daemon recovered, and how
/// many kills the next daemon recovered when it adopted the segment.
fn recovery_ms(fleet: &Fleet) -> (Vec<f64>, usize) {
    let per_daemon: Vec<BTreeMap<u32, u64>> =
        fleet.daemons.iter().map(|d| recoveries(&d.log_text())).collect();
    let (mut same, mut on_adopt) = (Vec::new(), 0);
    for k in &fleet.kills {
        if let Some(done) = per_daemon[k.daemon].get(&k.pid) {
            same.push(done.saturating_sub(k.at_ns) as f64 / 1e6);
        } else if per_daemon[k.daemon + 1..].iter().any(|m| m.contains_key(&k.pid)) {
            on_adopt += 1;
        }
    }
    same.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (same, on_adopt)
}

/// The figures the soak prints (and writes to `$XTCQ_SOAK_REPORT`).
pub fn figures(fleet: &Fleet, t: &Tally, seed: u64, under_fire: f64, elapsed: f64) -> String {
    let (same, on_adopt) = recovery_ms(fleet);
    let restarts: Vec<String> =
        fleet.daemon_restarts.iter().map(|t| format!("{:.0} ms", t.as_secs_f64() * 1e3)).collect();
    format!(
        "soak figures:\n\
         \x20 jobs pushed (logged)         {}\n\
         \x20 jobs run (distinct ids)      {}\n\
         \x20 pushed, unlogged (killed between push and log) {}\n\
         \x20 kills survived               workers {}, producer {}, daemon {}\n\
         \x20 overlapping runs of one job  0\n\
         \x20 re-runs (duplicates)         {} (bound {} = worker kills x batch {BATCH}); most runs of one job {}\n\
         \x20 kill -> re-queued (ms)       p50 {:.2}, p90 {:.2}, max {:.2} over {} recoveries by the running daemon; {on_adopt} recovered by the next daemon on adopt\n\
         \x20 daemon restart (kill -> ready) {}\n\
         \x20 time                         {under_fire:.1} s under fire, {elapsed:.1} s in all; seed {seed}\n\
         \x20 check_segment                consistent; every record free",
        t.pushed,
        t.run,
        t.unlogged,
        fleet.worker_kills,
        fleet.producer_kills,
        fleet.daemon_restarts.len(),
        t.duplicates,
        fleet.worker_kills * BATCH as u64,
        t.max_runs,
        percentile(&same, 0.5),
        percentile(&same, 0.9),
        same.last().copied().unwrap_or(f64::NAN),
        same.len(),
        restarts.join(", "),
    )
}
