//! `fanout`'s producers: the pushes (one at a time or in batches, a full queue waited out),
//! and with `XTCQ_BENCH_PRODUCERS=P` above 1, the producer processes, each the owner of its
//! own deque of the queue, pushing every P-th sequence number (producer p: p, p + P, ...),
//! so that the consumers' files still name each job once.

use std::path::Path;
use std::sync::atomic::Ordering;

use xtcq_benches::{env_u64, pin, SharedPage};
use xtcq_client::{Client, OwnerHandle};
use xtcq_testkit::monotonic_ns;

use crate::{Ctl, MSG, QUEUE};

/// The producer's wait while the queue is full: pauses doubling from 1 to 1024 between
/// tries. Each try of a full deque reads `top`, the line every steal CASes; retried as fast
/// as the CPU goes (a run of `push_batch(32)` against one consumer tried 122,000-892,000
/// times) it keeps taking that line from the consumer and slows the drain it waits for.
#[derive(Default)]
pub(crate) struct FullWait {
    /// Doublings so far in this wait.
    level: u32,
    /// Tries in this wait, to fail a run whose consumers died instead of hanging.
    tries: u64,
}

impl FullWait {
    pub(crate) fn wait(&mut self) {
        for _ in 0..1u32 << self.level {
            std::hint::spin_loop();
        }
        self.level = (self.level + 1).min(10);
        self.tries += 1;
        assert!(self.tries < 1 << 22, "the queue stayed full: are the consumers alive?");
    }

    pub(crate) fn reset(&mut self) {
        *self = FullWait::default();
    }
}

/// The jobs one producer pushes: sequence numbers `first`, `first + step`, ... below `n`.
#[derive(Clone, Copy)]
pub(crate) struct Share {
    pub(crate) first: u64,
    pub(crate) step: u64,
    pub(crate) n: u64,
}

impl Share {
    fn seqs(self) -> impl Iterator<Item = u64> {
        (self.first..self.n).step_by(self.step as usize)
    }
}

/// Pushes `share`'s jobs through `owner`, `push_batch` at a time (`push_batch`: one store of
/// the deque's `bottom` and one wake a batch); a full queue is waited out (`FullWait`).
pub(crate) fn push_share(owner: &OwnerHandle, share: Share, push_batch: usize) {
    let mut full = FullWait::default();
    if push_batch <= 1 {
        let mut m = [0xabu8; MSG];
        for seq in share.seqs() {
            m[..8].copy_from_slice(&seq.to_le_bytes());
            while let Err(e) = owner.push(&m) {
                match e {
                    xtcq_client::Error::QueueFull { .. } | xtcq_client::Error::RecordsFull(_) => full.wait(),
                    e => panic!("push: {e}"),
                }
            }
            full.reset();
        }
        return;
    }
    let seqs: Vec<u64> = share.seqs().collect();
    let mut msgs = vec![[0xabu8; MSG]; push_batch];
    let mut at = 0;
    while at < seqs.len() {
        let k = (seqs.len() - at).min(push_batch);
        for (m, seq) in msgs[..k].iter_mut().zip(&seqs[at..at + k]) {
            m[..8].copy_from_slice(&seq.to_le_bytes());
        }
        let refs: Vec<&[u8]> = msgs[..k].iter().map(|m| m.as_slice()).collect();
        match owner.push_batch(&refs) {
            Ok(0) | Err(xtcq_client::Error::RecordsFull(_)) => full.wait(),
            Ok(n) => {
                at += n;
                if n < k {
                    full.wait();
                } else {
                    full.reset();
                }
            }
            Err(e) => panic!("push_batch: {e}"),
        }
    }
}

/// Producer role (`XTCQ_BENCH_PRODUCERS` > 1): attaches as the owner of a deque of its own,
/// says ready, pushes its share once told to (`fill` for a prefilled run, else `go`), says
/// so, and stays attached until the run stops.
pub(crate) fn producer() {
    let index = env_u64("XTCQ_BENCH_INDEX").expect("index");
    let producers = env_u64("XTCQ_BENCH_PRODUCERS").expect("producers");
    let n = env_u64("XTCQ_BENCH_N").expect("n");
    let push_batch = env_u64("XTCQ_BENCH_PUSH_BATCH").unwrap_or(1).clamp(1, 128) as usize;
    let prefill = std::env::var("XTCQ_BENCH_PREFILL").is_ok_and(|v| v == "1");
    pin(index as usize);
    let ctl_map =
        SharedPage::<Ctl>::open(Path::new(&std::env::var_os("XTCQ_BENCH_CTL").expect("ctl")), false);
    let ctl = ctl_map.get();
    let socket = std::path::PathBuf::from(std::env::var_os("XTCQ_SOCKET").expect("socket"));
    let client = Client::connect(Some(&socket)).expect("connect");
    let owner = client.attach_owner(QUEUE).expect("attach_owner");
    ctl.ready.0.fetch_add(1, Ordering::AcqRel);
    let start = if prefill { &ctl.fill } else { &ctl.go };
    wait_until(|| start.0.load(Ordering::Acquire) == 1, "the producers' start");
    push_share(&owner, Share { first: index, step: producers, n }, push_batch);
    ctl.pushed.0.fetch_add(1, Ordering::AcqRel);
    // Asleep, not spinning: the consumers still drain, and may share this CPU.
    let deadline = monotonic_ns() + 120_000_000_000;
    while ctl.stop.0.load(Ordering::Acquire) == 0 {
        assert!(monotonic_ns() < deadline, "waited two minutes for the run's end");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    owner.detach().expect("detach");
}

/// Spins until `f` holds; fails after two minutes (the coordinator died).
fn wait_until(f: impl Fn() -> bool, what: &str) {
    let deadline = monotonic_ns() + 120_000_000_000;
    while !f() {
        assert!(monotonic_ns() < deadline, "waited two minutes for {what}");
        std::hint::spin_loop();
    }
}
