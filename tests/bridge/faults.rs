//! Faults during a run: `kill -9` of each bridge, of xtcqd on either side and of nats-server
//! (each restarted: the bridges with the same `--state`, the daemons on the same segment, the
//! server on the same store), one after another while jobs flow from host A to host B: no job
//! lost, re-runs counted and bounded, no two overlapping runs of one job on B. Each kill waits
//! for progress since the previous one (a condition, not a time). Rounds: `XTCQ_BRIDGE_FAULT_ROUNDS`
//! (1 by default), jobs: `XTCQ_BRIDGE_FAULT_JOBS` (400); `XTCQ_BRIDGE_FAULT_SKIP=nats,in` leaves
//! those victims out.

use xtcq_testkit::bridge::*;
use xtcq_testkit::*;

use std::collections::HashMap;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `(payload, start ns, end ns)` of each finished run, from the workers' log.
fn runs(file: &std::path::Path) -> Vec<(String, u128, u128)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [p, s, e] => Some((p.to_string(), s.parse().ok()?, e.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn kills_of_every_component_lose_no_job_and_never_overlap_a_job() {
    let Some(mut nats) = Nats::start("kills_of_every_component_lose_no_job_and_never_overlap_a_job") else {
        return;
    };
    let (mut a, mut b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q", "--max-attempts", "50"], b"");
    b.ok(&["create", "q", "--lease", "1s", "--max-attempts", "50"], b"");
    let n = env_or("XTCQ_BRIDGE_FAULT_JOBS", 400);
    let rounds = env_or("XTCQ_BRIDGE_FAULT_ROUNDS", 1);
    let skip = std::env::var("XTCQ_BRIDGE_FAULT_SKIP").unwrap_or_default();
    let (names, text) = payloads(n as usize);
    let log = b.dir().join("runs");
    // Two worker threads, so that two copies of one job could overlap if the bridge made them.
    let script =
        format!("s=$(date +%s%N); sleep 0.005; echo \"$XTCQ_PAYLOAD $s $(date +%s%N)\" >> {}", log.display());
    let state = b.dir().join("bridge.state").to_str().expect("utf8").to_string();
    let in_args = ["--consumer", "B", "--ack-wait", "3s", "--state", state.as_str(), "--max-inflight", "64"];
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &["--batch", "16"], &[]);
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &in_args, &[]);
    let mut work = Some(b.worker("q", "600s", &script));
    let mut work2 = Some(b.worker("q", "600s", &script));
    a.ok(&["push", "q"], &text);
    let done = || runs(&log).len() as u64;
    let mut step = 0u64;
    let progress = |step: u64| (step + 1) * n / (5 * rounds + 2);
    for _ in 0..rounds {
        for victim in ["out", "in", "nats", "xtcqd A", "xtcqd B"] {
            if skip.split(',').any(|s| s == victim) {
                continue;
            }
            let target = progress(step);
            wait_until(LONG, &format!("progress before killing {victim}"), || done() >= target);
            step += 1;
            match victim {
                "out" => {
                    out.proc.kill9();
                    out = Bridge::start(&a, &nats, "out", "q", "JOBS", &["--batch", "16"], &[]);
                }
                "in" => {
                    inb.proc.kill9();
                    inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &in_args, &[]);
                }
                "nats" => {
                    nats.kill();
                    nats.spawn();
                }
                "xtcqd A" => a.restart_after_kill9(),
                _ => {
                    b.restart_after_kill9();
                    // The workers ride through a daemon restart; restarted anyway if one gave up.
                    for w in [&mut work, &mut work2] {
                        if w.as_mut().is_some_and(|p| {
                            p.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some())
                        }) {
                            *w = Some(b.worker("q", "600s", &script));
                        }
                    }
                }
            }
        }
    }
    let ran =
        |r: &[(String, u128, u128)]| r.iter().map(|x| x.0.clone()).collect::<std::collections::HashSet<_>>();
    wait_until(Duration::from_secs(120), "every job ran", || ran(&runs(&log)).len() as u64 == n);
    // Settled upstream: nothing left to deliver, nothing delivered and unacked. (Not "the
    // stream is empty": after a kill -9 of nats-server 2.9 the stream can keep messages that
    // the consumer had acked, below its ack floor, never delivered again; guarantees/across-hosts.md.)
    wait_until(LONG, "the consumer settled", || {
        let (pending, unacked, _) = nats.consumer("JOBS", "B");
        pending == 0 && unacked == 0 && inb.stat("held") == 0
    });
    let residue = nats.messages("JOBS");
    let all = runs(&log);
    let mut by_job: HashMap<&str, Vec<(u128, u128)>> = HashMap::new();
    for (p, s, e) in &all {
        by_job.entry(p.as_str()).or_default().push((*s, *e));
    }
    for name in &names {
        assert!(by_job.contains_key(name.as_str()), "{name} lost");
    }
    for (job, spans) in &mut by_job {
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[1].0 >= w[0].1, "two runs of {job} overlapped: {spans:?}");
        }
    }
    let reruns = all.len() as u64 - n;
    eprintln!(
        "{n} jobs, {} runs, {reruns} re-runs after {step} kills; {residue} acked messages left in the stream",
        all.len()
    );
    // Each kill can re-run at most what was in flight: a bridge's batch or held jobs, or the
    // workers' two jobs.
    assert!(reruns <= step * 64, "re-runs bounded by what was in flight: {reruns}");
    inb.stop();
    out.stop();
    a.check();
    b.check();
}
