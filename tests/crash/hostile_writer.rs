//! Red team 3: a same-user process maps a live `xtcqd`'s segment and writes garbage into
//! payload block owner words, block references, payload lengths and inline areas while a
//! producer pushes jobs of every size and a batch consumer (`steal_into`, per-job acks)
//! takes them. The garbage touches no state word or index, so every pushed job must still be
//! claimed and acked exactly once (its payload may read as corrupt: that is what the garbage
//! destroyed); nobody panics; the daemon keeps serving; `xtcq check` runs; and once the
//! queue is drained the daemon's sweep leaves no block held.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xtcq_client::{Flavor, JobBatch, JobId, QueueParams};
use xtcq_shm::layout::payload::PAYLOAD_CLASSES;
use xtcq_shm::layout::RECORD_HEADER_SIZE;
use xtcq_shm::record::blocks::BlockRef;
use xtcq_testkit::*;

const FLAGS: &[&str] = &[
    "--queues",
    "1",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "128",
    "--records",
    "256",
    "--payload-bytes",
    "8192",
    "--inline-bytes",
    "64",
    "--payload-blocks",
    "128=32,1KiB=32,8KiB=16",
    "--process-slots",
    "16",
    "--overflow-capacity",
    "256",
    "--lease-scan-interval",
    "20ms",
];

fn word(p: *const u8) -> &'static AtomicU64 {
    // SAFETY: 8-aligned, inside the mapping, which the test keeps until the scribbler ends.
    unsafe { &*(p as *const AtomicU64) }
}

/// One garbage write into the block machinery of `seg` (never a state word or an index).
fn scribble(seg: &xtcq_shm::Segment, rng: &mut Rng) {
    let records = seg.records();
    let blocks = records.blocks();
    let i = (rng.next_u64() % u64::from(records.len())) as u32;
    let garbage = match rng.next_u64() % 4 {
        0 => rng.next_u64(),
        1 => rng.next_u64() & 0x3fff,
        2 => ((rng.next_u64() % 20) << 32) | (rng.next_u64() % 40),
        _ => u64::MAX,
    };
    let h = records.header(i).expect("record") as *const _ as *const u8;
    match rng.next_u64() % 4 {
        0 => {
            let class = (rng.next_u64() % PAYLOAD_CLASSES as u64) as usize;
            if blocks.count(class) > 0 {
                let b = BlockRef { class, index: (rng.next_u64() % u64::from(blocks.count(class))) as u32 };
                blocks.owner(b).store(garbage, Ordering::Relaxed);
            }
        }
        1 => word(h.wrapping_add(RECORD_HEADER_SIZE)).store(garbage, Ordering::Relaxed),
        2 => {
            records.header(i).expect("record").payload_len.store(garbage as u32, Ordering::Relaxed);
        }
        _ => word(h.wrapping_add(RECORD_HEADER_SIZE + 8 * (1 + rng.next_u64() % 7) as usize))
            .store(garbage, Ordering::Relaxed),
    }
}

#[test]
fn garbage_in_the_block_machinery_of_a_live_daemon_loses_and_doubles_no_job() {
    let d = Daemon::start_with(FLAGS);
    let c = d.client();
    let q = QueueParams {
        name: "q".into(),
        deques: 2,
        capacity: 128,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    c.create_queue(&q).expect("create");
    let stop = Arc::new(AtomicBool::new(false));
    let pushed = Arc::new(Mutex::new(Vec::<JobId>::new()));
    let acked = Arc::new(Mutex::new(Vec::<JobId>::new()));
    let producer = {
        let (socket, stop, pushed) = (d.socket.clone(), stop.clone(), pushed.clone());
        std::thread::spawn(move || {
            let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
            let inj = c.attach_injector("q").expect("injector");
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let len = [0, 20, 64, 65, 128, 129, 1000, 1024, 1025, 8192][i % 10];
                if let Ok(h) = inj.push(&vec![b'x'; len]) {
                    pushed.lock().expect("lock").push(JobId::of_push(h));
                } else {
                    std::thread::yield_now();
                }
            }
        })
    };
    let consume = |socket: std::path::PathBuf, stop: Arc<AtomicBool>, acked: Arc<Mutex<Vec<JobId>>>| {
        let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
        let t = c.attach_thief("q").expect("thief");
        let mut batch = JobBatch::new();
        loop {
            let n = t.steal_into(8, &mut batch).expect("steal_into");
            if n == 0 && stop.load(Ordering::Relaxed) {
                break;
            }
            for i in 0..n {
                let _ = batch.payload(i);
                let id = batch.id(i).expect("id");
                if batch.ack(i).is_ok() {
                    acked.lock().expect("lock").push(id);
                }
            }
        }
    };
    let consumer = {
        let (socket, stop, acked) = (d.socket.clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || consume(socket, stop, acked))
    };
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let mut rng = Rng::new(0x7ed3_0003);
    for round in 0..60_000u32 {
        scribble(&seg, &mut rng);
        if round % 64 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("the producer panicked");
    consumer.join().expect("the consumer panicked");
    // Whatever the consumer left (it stops at its first empty look after the stop).
    consume(d.socket.clone(), Arc::new(AtomicBool::new(true)), acked.clone());

    let o = d.run(&["check"]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(d.run(&["stats"]).status.success(), "the daemon stopped serving:\n{}", d.log_text());
    let pushed: HashSet<JobId> = pushed.lock().expect("lock").iter().copied().collect();
    let acked_list = acked.lock().expect("lock").clone();
    let acked: HashSet<JobId> = acked_list.iter().copied().collect();
    assert_eq!(acked.len(), acked_list.len(), "a job was acked twice");
    assert!(pushed.len() > 100, "only {} jobs pushed", pushed.len());
    let lost: Vec<_> = pushed.difference(&acked).collect();
    assert!(
        lost.is_empty(),
        "{} of {} jobs never acked: {:?}",
        lost.len(),
        pushed.len(),
        &lost[..lost.len().min(5)]
    );
    // With every record free, the daemon's sweep frees every block the garbage left held.
    let r = eventually(Duration::from_secs(20), || {
        let r = c.check_with_strays(false, Duration::ZERO).ok()?;
        (r.counts.blocks.held == 0).then_some(r)
    });
    assert!(r.is_some(), "blocks still held after the drain; daemon log:\n{}", d.log_text());
    assert!(d.run(&["stats"]).status.success(), "the daemon stopped serving");
}
