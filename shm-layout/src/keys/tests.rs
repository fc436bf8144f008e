use std::sync::Arc;

use super::{holder_word, Key, KeyError, BOUND, WRITING};
use crate::segment::{QueueInfo, QueueSpec, Segment};
use crate::sync::Ordering;
use crate::{Owner, PushError, SegmentConfig};

fn key(s: &str) -> Key {
    Key::new(s.as_bytes()).expect("a key")
}

fn segment(keys: u32) -> (tempfile::TempDir, Arc<Segment>, QueueInfo, QueueInfo) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = SegmentConfig::small().with_queues(2, 1).with_records(256).with_keys(keys);
    let seg = Arc::new(Segment::create(&dir.path().join("s"), &config, 0o600).expect("segment"));
    let a = seg.create_queue(&QueueSpec::new("a")).expect("queue a");
    let b = seg.create_queue(&QueueSpec::new("b")).expect("queue b");
    (dir, seg, a, b)
}

fn duplicate_of(r: Result<crate::JobHandle, PushError>) -> crate::JobId {
    match r {
        Err(PushError::Key(KeyError::Duplicate { existing })) => existing,
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

#[test]
fn unique_key_is_refused_while_its_job_lives_and_free_once_it_ends() {
    let (_d, seg, a, _) = segment(64);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    let first = owner.push_with_key(b"1", &key("k")).expect("first push");
    assert_eq!(duplicate_of(owner.push_with_key(b"2", &key("k"))), crate::JobId::of_push(first));
    owner.push_with_key(b"3", &key("other")).expect("another key");
    // Retried (nack): still live, still held.
    owner.pop().expect("pop").expect("a job").nack().expect("nack");
    let job = loop {
        let j = owner.take().expect("take").expect("a job");
        if j.payload().expect("payload") == b"1" {
            break j;
        }
        j.nack().expect("nack");
    };
    assert_eq!(duplicate_of(owner.push_with_key(b"4", &key("k"))), crate::JobId::of_push(first));
    job.ack().expect("ack");
    let again = owner.push_with_key(b"5", &key("k")).expect("pushable again after the ack");
    assert_eq!(seg.key_table().find(a.index, &key("k")), Some(crate::JobId::of_push(again)));
}

#[test]
fn unique_keys_of_two_queues_do_not_meet() {
    let (_d, seg, a, b) = segment(64);
    let oa = Owner::new(seg.clone(), &a, 0, 0).expect("owner a");
    let ob = Owner::new(seg.clone(), &b, 0, 1).expect("owner b");
    oa.push_with_key(b"x", &key("same")).expect("in a");
    ob.push_with_key(b"x", &key("same")).expect("in b, the same key");
    assert!(matches!(ob.push_with_key(b"x", &key("same")), Err(PushError::Key(KeyError::Duplicate { .. }))));
}

#[test]
fn unique_key_refused_push_leaves_no_record_behind() {
    let (_d, seg, a, _) = segment(64);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    owner.push_with_key(b"1", &key("k")).expect("first");
    for _ in 0..1000 {
        duplicate_of(owner.push_with_key(b"2", &key("k")));
    }
    // 256 records: a leaked record per refusal would have run out long ago.
    for i in 0..200 {
        owner.push(format!("{i}").as_bytes()).expect("plain push");
    }
}

#[test]
fn unique_key_table_full_names_the_flag() {
    let (_d, seg, a, _) = segment(8);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    for i in 0..8 {
        owner.push_with_key(b"j", &key(&format!("k{i}"))).expect("room for 8");
    }
    let e = owner.push_with_key(b"j", &key("k8")).expect_err("a full table");
    assert!(matches!(e, PushError::Key(KeyError::Full { keys: 8, .. })), "{e:?}");
    assert!(e.to_string().contains("--keys"), "{e}");
    // One job ends: its entry takes the next key.
    owner.pop().expect("pop").expect("a job").ack().expect("ack");
    owner.push_with_key(b"j", &key("k8")).expect("an ended job's entry is reused");
}

#[test]
fn unique_key_without_a_table_is_a_clear_error() {
    let (_d, seg, a, _) = segment(0);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    let e = owner.push_with_key(b"j", &key("k")).expect_err("no table");
    assert!(matches!(e, PushError::Key(KeyError::NoTable)), "{e:?}");
    owner.push(b"plain").expect("a push without a key still works");
}

#[test]
fn unique_key_lengths() {
    assert!(Key::new(b"").is_err());
    assert!(Key::new(&[b'x'; 64]).is_ok());
    assert_eq!(Key::new(&[b'x'; 65]), Err(super::BadKey::TooLong { len: 65 }));
    assert_ne!(key("ab"), key("ab\0"), "a trailing zero byte is part of the key");
}

#[test]
fn unique_key_garbage_entries_never_panic_nor_block() {
    let (_d, seg, a, _) = segment(64);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    let entries = seg.key_table().entries();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for e in entries {
        for w in [&e.state, &e.job].into_iter().chain(e.bytes.iter()) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.store(x, Ordering::Relaxed);
        }
        e.queue.store(x as u32 % 5, Ordering::Relaxed);
        e.len.store((x >> 32) as u32 % 80, Ordering::Relaxed);
    }
    // Bound entries of a job that is not live, and a state no one writes.
    entries[3].state.store(super::pack(7, BOUND, 0), Ordering::Relaxed);
    entries[4].state.store(super::pack(7, 9, 0), Ordering::Relaxed);
    for i in 0..40 {
        owner.push_with_key(b"j", &key(&format!("g{i}"))).expect("garbage is reusable");
    }
    duplicate_of(owner.push_with_key(b"j", &key("g3")));
    assert_eq!(seg.key_table().bound().len(), 40);
}

#[test]
fn unique_key_lock_of_a_gone_process_is_taken_over() {
    let (_d, seg, a, _) = segment(64);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    let k = key("k");
    let home = k.home(a.index, 64);
    // Slot 5 at epoch 3 is not attached: the lock is taken over, not waited for.
    seg.key_table().entries()[home].lock.store(holder_word(5, 3), Ordering::Relaxed);
    owner.push_with_key(b"j", &k).expect("the gone holder's lock was taken over");
    assert_eq!(seg.key_table().entries()[home].lock.load(Ordering::Relaxed), 0, "unlocked after");
}

#[test]
fn unique_key_recovery_frees_a_dead_slots_locks_and_writes() {
    let (_d, seg, _, _) = segment(64);
    let entries = seg.key_table().entries();
    entries[1].lock.store(holder_word(5, 3), Ordering::Relaxed);
    entries[2].state.store(super::pack(4, WRITING, 5), Ordering::Relaxed);
    entries[3].state.store(super::pack(4, WRITING, 6), Ordering::Relaxed);
    assert_eq!(seg.key_table().release_slot(5), 2);
    assert_eq!(entries[1].lock.load(Ordering::Relaxed), 0);
    assert_eq!(super::kind(entries[2].state.load(Ordering::Relaxed)), super::FREE);
    assert_eq!(super::kind(entries[3].state.load(Ordering::Relaxed)), WRITING, "another slot's");
}

#[test]
fn unique_key_entry_with_a_length_no_key_has_is_reused() {
    let (_d, seg, a, _) = segment(4);
    let owner = Owner::new(seg.clone(), &a, 0, 0).expect("owner");
    for e in seg.key_table().entries() {
        e.len.store(200, Ordering::Relaxed);
        e.state.store(super::pack(3, BOUND, 0), Ordering::Relaxed);
    }
    for i in 0..4 {
        owner.push_with_key(b"j", &key(&format!("k{i}"))).expect("garbage lengths are reusable");
    }
}

#[test]
fn unique_key_racing_threads_one_wins_each_round() {
    let (_d, seg, a, _) = segment(64);
    let k = key("raced");
    for _round in 0..200 {
        let ids: Vec<Result<crate::JobHandle, PushError>> = std::thread::scope(|s| {
            // Two threads of each of two slots: the threads of one process share its slot.
            let pushers: Vec<_> = [0, 0, 1, 1]
                .into_iter()
                .map(|slot| {
                    let (seg, a, k) = (seg.clone(), a.clone(), k.clone());
                    s.spawn(move || {
                        crate::Injector::new(seg, &a, slot).expect("injector").push_with_key(b"j", &k, None)
                    })
                })
                .collect();
            pushers.into_iter().map(|p| p.join().expect("pusher")).collect()
        });
        let won: Vec<_> = ids.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "one push of the key wins a round: {ids:?}");
        let winner = crate::JobId::of_push(*won[0]);
        for r in ids.iter().filter(|r| r.is_err()) {
            assert!(
                matches!(r, Err(PushError::Key(KeyError::Duplicate { existing })) if *existing == winner),
                "{r:?}"
            );
        }
        let thief = crate::Thief::new(seg.clone(), &a, 5).expect("thief");
        thief.steal().expect("steal").expect("the winner's job").ack().expect("ack");
    }
}
