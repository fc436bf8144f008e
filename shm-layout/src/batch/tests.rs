use super::{complete_sealed, find, open, seal, BatchClosed, BatchRef, BatchStatus};
use crate::api::{Owner, PushError, Thief};
use crate::segment::one_queue_segment;

#[test]
fn a_batch_completes_when_sealed_and_its_last_job_ended() {
    let (_dir, seg, q) = one_queue_segment();
    let b = open(&seg, q.index, "farm", None).expect("open");
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    owner.set_batch(Some(b));
    for p in [b"a", b"b", b"c"] {
        owner.push(p).expect("push");
    }
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    for _ in 0..2 {
        thief.steal().expect("steal").expect("a job").ack().expect("ack");
    }
    seal(&seg, b).expect("seal");
    assert!(complete_sealed(&seg).is_empty(), "one job is left");
    let p = find(&seg, q.index, "farm").expect("found");
    assert_eq!((p.status, p.pushed, p.live, p.acked()), (BatchStatus::Sealed, 3, 1, 2));
    thief.steal().expect("steal").expect("a job").ack().expect("ack");
    let done = complete_sealed(&seg);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].progress.status, done[0].progress.acked()), (BatchStatus::Complete, 3));
    assert!(complete_sealed(&seg).is_empty(), "completes once");
}

#[test]
fn an_open_batch_never_completes_and_a_sealed_one_takes_no_push() {
    let (_dir, seg, q) = one_queue_segment();
    let b = open(&seg, q.index, "farm", None).expect("open");
    assert!(complete_sealed(&seg).is_empty(), "open, empty: not complete");
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    owner.set_batch(Some(b));
    seal(&seg, b).expect("seal");
    assert!(matches!(owner.push(b"late"), Err(PushError::BatchClosed(BatchClosed::Sealed))));
    assert_eq!(complete_sealed(&seg).len(), 1, "sealed with no job: complete");
    assert_eq!(find(&seg, q.index, "farm").map(|p| p.pushed), Some(0));
}

#[test]
fn garbage_reference_words_hold_back_nothing_else_and_never_panic() {
    let (_dir, seg, q) = one_queue_segment();
    let b = open(&seg, q.index, "farm", None).expect("open");
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    owner.set_batch(Some(BatchRef { slot: u32::MAX, generation: 7 }));
    assert!(matches!(owner.push(b"x"), Err(PushError::BatchClosed(BatchClosed::Unknown))));
    owner.set_batch(Some(BatchRef { slot: b.slot, generation: b.generation + 1 }));
    assert!(matches!(owner.push(b"x"), Err(PushError::BatchClosed(BatchClosed::Unknown))));
    owner.set_batch(None);
    let plain = owner.push(b"plain").expect("push");
    // Right batch, wrong birth: a word left from the record's earlier job.
    let stale = super::record_word(b, plain.generation.wrapping_add(1));
    seg.record_batch(plain.index).expect("word").store(stale, std::sync::atomic::Ordering::Relaxed);
    for (i, w) in
        [u64::MAX, 1 << 24, 0x0000_FFFF_FF00_0000, 0xdead_beef_dead_beef].into_iter().enumerate().skip(1)
    {
        seg.record_batch(i as u32).expect("word").store(w, std::sync::atomic::Ordering::Relaxed);
    }
    seal(&seg, b).expect("seal");
    assert_eq!(complete_sealed(&seg).len(), 1, "no garbage word counts as one of its jobs");
}
