//! A chain of K dependent cache lines handed from one core to another: the yardstick for
//! how many dependent line transfers a hand-off costs, whatever the vCPU placement.
//!
//! - The producer (the calling thread, pinned to CPU 0 by the caller) writes lines K-1 .. 0
//!   of a chain, each holding the round and the offset of the next line, line 0 last
//!   (Release); the consumer (a thread pinned to CPU 1) spins on line 0, then follows the
//!   chain. Each next address comes from the value just loaded, so the K transfers follow
//!   one another and cannot overlap, as a steal's slot -> record -> payload cannot.
//! - The consumer answers on a line of its own, one transfer back: one way of K lines is the
//!   round trip less half the round trip of one line.
//! - Lines are 256 bytes apart, so the adjacent-line prefetcher does not bring the next one
//!   in with the last.
//! - The slope (ns per added line) divides a hand-off's latency into dependent line
//!   transfers: a figure two runs on different placements can compare, where nanoseconds
//!   move 4x with the placement.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::cpu::pin;

/// One line of the chain, alone on its 256 bytes.
#[repr(align(256))]
struct Line(AtomicU64);

/// The chain's lines, then the consumer's answer line.
struct Lines {
    chain: Vec<Line>,
    answer: Line,
}

/// A word of the chain: the round in the high half, the index of the next line in the low.
fn word(round: u64, next: usize) -> u64 {
    round << 32 | next as u64
}

/// One turn of a spin-wait. Every 4096th yields the CPU, so that on one CPU (or an
/// oversubscribed pair) the other side gets to run; a measured wait is far shorter.
#[inline]
fn spin(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if spins.is_multiple_of(4096) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The consumer: for each round, waits for line 0 to name it, follows the chain to its end
/// (each load's address from the last load's value), then answers with the round.
fn follow(lines: &Lines, k: usize, rounds: u64) {
    for round in 1..=rounds {
        let mut w = lines.chain[0].0.load(Ordering::Acquire);
        let mut spins = 0u32;
        while w >> 32 != round {
            spin(&mut spins);
            w = lines.chain[0].0.load(Ordering::Acquire);
        }
        for _ in 1..k {
            // The index comes from the loaded value: a data dependence, so no overlap.
            let next = (w & 0xffff_ffff) as usize;
            w = lines.chain[next.min(k - 1)].0.load(Ordering::Acquire);
        }
        std::hint::black_box(w);
        lines.answer.0.store(round, Ordering::Release);
    }
}

/// Round trip of a chain of `k` lines, ns: write the chain, wait for the answer. The median
/// of `rounds` timed one by one, so that a thread preempted now and then (an oversubscribed
/// machine) does not lift the figure as it would a mean.
fn round_trip_ns(k: usize, rounds: u64) -> f64 {
    let lines = Arc::new(Lines {
        chain: (0..k).map(|_| Line(AtomicU64::new(0))).collect(),
        answer: Line(AtomicU64::new(0)),
    });
    let theirs = lines.clone();
    let consumer = std::thread::spawn(move || {
        pin(1);
        follow(&theirs, k, rounds);
    });
    // The first tenth warms up (the thread starts, the lines settle), untimed.
    let warm = rounds / 10;
    let mut times = Vec::with_capacity((rounds - warm) as usize);
    for round in 1..=rounds {
        let t0 = xtcq_client::monotonic_ns();
        for i in (1..k).rev() {
            lines.chain[i].0.store(word(round, (i + 1).min(k - 1)), Ordering::Relaxed);
        }
        lines.chain[0].0.store(word(round, 1.min(k - 1)), Ordering::Release);
        let mut spins = 0u32;
        while lines.answer.0.load(Ordering::Acquire) != round {
            spin(&mut spins);
        }
        if round > warm {
            times.push(xtcq_client::monotonic_ns() - t0);
        }
    }
    consumer.join().expect("chain consumer");
    times.sort_unstable();
    times[times.len() / 2] as f64
}

/// One way of chains of 1 ..= `max_lines` dependent lines, ns, between the calling thread
/// (pin it to CPU 0 first) and a thread on CPU 1; `rounds` hand-offs each.
///
/// The lengths take turns, [`REPEATS`] times, and each length's median is taken: a vCPU that
/// moves during the measurement moves every length's figures alike, not only the last ones'.
pub fn dependent_chain_ns(max_lines: usize, rounds: u64) -> Vec<f64> {
    let lengths = max_lines.max(1);
    let mut trips = vec![Vec::with_capacity(REPEATS); lengths];
    for _ in 0..REPEATS {
        for (i, t) in trips.iter_mut().enumerate() {
            t.push(round_trip_ns(i + 1, (rounds / REPEATS as u64).max(10)));
        }
    }
    let medians: Vec<f64> = trips
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    let back = medians[0] / 2.0;
    medians.iter().map(|t| t - back).collect()
}

/// How many times each chain length is measured, taking turns with the others.
const REPEATS: usize = 5;

/// The ns each added dependent line costs: the least-squares slope of `one_way` (one way of
/// 1, 2, ... lines); `None` with fewer than two points or a slope of zero or less.
pub fn ns_per_line(one_way: &[f64]) -> Option<f64> {
    let n = one_way.len() as f64;
    if one_way.len() < 2 {
        return None;
    }
    let mean_x = (n + 1.0) / 2.0;
    let mean_y = one_way.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, y) in one_way.iter().enumerate() {
        let dx = (i + 1) as f64 - mean_x;
        sxy += dx * (y - mean_y);
        sxx += dx * dx;
    }
    let slope = sxy / sxx;
    (slope > 0.0).then_some(slope)
}

/// How many dependent line transfers a hand-off of `ns` one way is worth on the chain
/// `one_way`: one line, plus what is left over divided by the slope.
pub fn in_dependent_lines(one_way: &[f64], ns: f64) -> Option<f64> {
    let slope = ns_per_line(one_way)?;
    Some(1.0 + (ns - one_way[0]) / slope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_straight_chain_has_its_slope_and_counts_its_lines() {
        let chain = [100.0, 150.0, 200.0, 250.0];
        assert_eq!(ns_per_line(&chain), Some(50.0));
        assert_eq!(in_dependent_lines(&chain, 300.0), Some(5.0));
        assert_eq!(ns_per_line(&chain[..1]), None);
        assert_eq!(ns_per_line(&[100.0, 90.0]), None);
    }

    #[test]
    fn a_chain_is_measured_between_two_threads() {
        let one_way = dependent_chain_ns(2, 200);
        assert_eq!(one_way.len(), 2);
        // Only the first length is sure to be positive: later ones subtract half of the
        // first, and a vCPU preempted during the first can make the difference negative.
        assert!(one_way.iter().all(|ns| ns.is_finite()), "{one_way:?}");
        assert!(one_way[0] > 0.0, "{one_way:?}");
    }
}
