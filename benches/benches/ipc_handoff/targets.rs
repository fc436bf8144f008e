//! The job path's targets, as ratios of rows of one run, and the dependent-line count.

use super::*;

/// The job path's targets that this bench measures, as ratios of rows of one run.
#[derive(Default)]
pub(crate) struct Targets {
    /// Medians (M msgs/s, p50 ns) by (transport, spinning, batch).
    rows: Vec<(RowKey, (f64, u64))>,
    /// The cache-line probe right before and right after the xtcq spinning row, ns.
    pub(crate) probe: Option<(f64, f64)>,
    /// One way of chains of 1 ..= [`CHAIN_LINES`] dependent lines, right after that row, ns.
    pub(crate) chain: Vec<f64>,
}

/// The longest chain of dependent lines measured: long enough for a slope, short of the
/// xtcq hand-off's count, so that its count is a short extrapolation.
pub(crate) const CHAIN_LINES: usize = 5;

/// A table row: transport, consumer spinning, batch.
pub(crate) type RowKey = (Transport, bool, usize);

/// How far apart the probe's two readings may be and still describe one vCPU placement.
pub(crate) const PROBE_AGREES: f64 = 1.25;

impl Targets {
    pub(crate) fn record(&mut self, transport: Transport, spin: bool, batch: usize, runs: &[Run]) {
        let mps = median_f(runs.iter().map(|r| r.mps).collect());
        let p50 = median_u(runs.iter().map(|r| r.p50).collect());
        self.rows.push(((transport, spin, batch), (mps, p50)));
    }

    pub(crate) fn get(&self, transport: Transport, spin: bool, batch: usize) -> Option<(f64, u64)> {
        self.rows.iter().find(|(k, _)| *k == (transport, spin, batch)).map(|(_, v)| *v)
    }

    /// One line per target: the ratio, the target, met or not; "n/a" when a row is missing.
    pub(crate) fn print(&self) {
        let xtcq_spin = self.get(Transport::Xtcq, true, 1);
        let xtcq_batch = self.get(Transport::Xtcq, true, 32);
        let xtcq_sleep = self.get(Transport::Xtcq, false, 1);
        let pipe_spin = self.get(Transport::Pipe, true, 1);
        let pipe_sleep = self.get(Transport::Pipe, false, 1);
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
        let p50 = |r: Option<(f64, u64)>| r.map(|(_, p)| p as f64);
        let mps = |r: Option<(f64, u64)>| r.map(|(m, _)| m);
        println!(
            "
== the job path's targets (ratios of rows of this run) =="
        );
        println!("{:<58} {:>8} {:>8}  met", "target", "ratio", "target");
        match self.probe {
            Some((before, after)) if before.max(after) / before.min(after).max(1.0) > PROBE_AGREES => {
                println!(
                "{:<58} {:>8} {:>8}  n/a: the probe read {before:.0} ns before the row and {after:.0} ns \
                 after it; the vCPUs moved, no ratio quoted",
                "xtcq spinning p50 / cache-line hand-off", "-", "<= 2.00"
            )
            }
            Some((before, after)) => line(
                "xtcq spinning p50 / cache-line hand-off",
                ratio(p50(xtcq_spin), Some((before + after) / 2.0)),
                2.0,
                true,
            ),
            None => line("xtcq spinning p50 / cache-line hand-off", None, 2.0, true),
        }
        self.print_chain(p50(xtcq_spin));
        line("xtcq spinning p50 / pipe spinning p50", ratio(p50(xtcq_spin), p50(pipe_spin)), 0.5, true);
        line(
            "xtcq steal_batch(32) M/s / xtcq single steals M/s",
            ratio(mps(xtcq_batch), mps(xtcq_spin)),
            1.5,
            false,
        );
        line(
            "xtcq woken from futex p50 / pipe asleep p50",
            ratio(p50(xtcq_sleep), p50(pipe_sleep)),
            1.0,
            true,
        );
    }
}

impl Targets {
    /// The chain of dependent lines and the xtcq spinning p50 counted in its lines: the
    /// placement-free figure beside the ratio to one line.
    pub(crate) fn print_chain(&self, xtcq_p50: Option<f64>) {
        if self.chain.is_empty() {
            return;
        }
        let each: Vec<String> =
            self.chain.iter().enumerate().map(|(i, ns)| format!("{}: {ns:.0}", i + 1)).collect();
        let slope = ns_per_line(&self.chain).map_or("-".into(), |s| format!("{s:.0} ns a line"));
        println!("{:<58} {}  ({slope})", "dependent lines one way, ns", each.join(", "));
        let lines = xtcq_p50.and_then(|p| in_dependent_lines(&self.chain, p));
        match lines {
            Some(n) => println!(
                "{:<58} {n:>7.1}   (not a target: the count to cut)",
                "xtcq spinning p50 in dependent line transfers"
            ),
            None => println!(
                "{:<58} {:>8}   n/a: no slope or no row",
                "xtcq spinning p50 in dependent line transfers", "-"
            ),
        }
    }
}

/// Prints one target's line; `at_most`: the ratio must be at most `target`, else at least.
pub(crate) fn line(what: &str, ratio: Option<f64>, target: f64, at_most: bool) {
    let bound = format!("{} {target:.2}", if at_most { "<=" } else { ">=" });
    match ratio {
        Some(r) => {
            let met = if at_most { r <= target } else { r >= target };
            println!("{what:<58} {r:>7.2}x {bound:>8}  {}", if met { "met" } else { "NOT met" });
        }
        None => println!("{what:<58} {:>8} {bound:>8}  n/a: a row it needs was not run", "-"),
    }
}
