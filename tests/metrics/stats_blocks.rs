//! Payload-block use in `xtcq stats` (table and `--json`) and on `/metrics`, with a real
//! xtcqd and real `xtcq push` processes: the figures show the inline size and, per block
//! class, the blocks there are and the blocks held; they go up with queued and held large
//! jobs, show a full class as full when a push is refused for want of a block, and go back to
//! 0 once every job is acked; garbage in the owner table crashes nothing and is swept.

use std::time::Duration;

use xtcq_testkit::*;

/// Records keep 64 bytes inline; 8 blocks of 4 KiB and 3 of 64 KiB; metrics on a free port.
fn flags() -> Vec<String> {
    let mut f = large_payload_segment(64, "4KiB=8,64KiB=3");
    f.extend(METRICS_ON_ANY_PORT.map(str::to_string));
    f
}

/// `(size, total, in_use, free)` of each class `stats --json` reports.
fn blocks(d: &Daemon) -> Vec<(u64, u64, u64, u64)> {
    let s = d.stats();
    let classes = s["payload_blocks"].as_array().unwrap_or_else(|| panic!("no payload_blocks in {s}"));
    let n = |b: &serde_json::Value, k: &str| b[k].as_u64().unwrap_or_else(|| panic!("no {k} in {b}"));
    classes.iter().map(|b| (n(b, "size"), n(b, "total"), n(b, "in_use"), n(b, "free"))).collect()
}

/// Blocks held: `[4 KiB, 64 KiB]`, checking each class's total and free count on the way.
fn held(d: &Daemon) -> [u64; 2] {
    let b = blocks(d);
    assert_eq!(b.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>(), [(4096, 8), (65536, 3)], "{b:?}");
    for c in &b {
        assert_eq!(c.2 + c.3, c.1, "in use + free != total: {b:?}");
    }
    [b[0].2, b[1].2]
}

/// Pushes `jobs` (NUL-separated) with one `xtcq push -0` process.
fn push(d: &Daemon, jobs: &[Vec<u8>]) {
    ok(&d.run_in(&["push", "big", "-0"], &jobs.join(&0u8)));
}

fn payload(fill: u8, len: usize) -> Vec<u8> {
    vec![fill; len]
}

#[test]
fn block_use_follows_queued_and_held_large_jobs_and_returns_to_zero_once_acked() {
    let d = Daemon::builder().flags(flags()).start();
    ok(&d.run(&["create", "big", "--deques", "1"]));
    let s = d.stats();
    assert_eq!(s["segment"]["inline_bytes"], 64, "{s}");
    assert_eq!(held(&d), [0, 0]);
    let table = ok(&d.run(&["stats"]));
    assert!(table.contains("payload blocks (payloads over 64 bytes, up to 65536)"), "{table}");
    assert!(table.contains("4KiB") && table.contains("64KiB") && !table.contains("FULL"), "{table}");

    // Inline payloads take no block; three of 3000 bytes take 4 KiB ones, two of 64 KiB the
    // 64 KiB ones.
    push(&d, &[payload(b'i', 64), payload(b'j', 10)]);
    assert_eq!(held(&d), [0, 0]);
    push(&d, &[payload(b'a', 3000), payload(b'b', 3000), payload(b'c', 3000)]);
    push(&d, &[payload(b'x', 65536), payload(b'y', 65000)]);
    assert_eq!(held(&d), [3, 2]);

    // A third 64 KiB job fills the class; a fourth is refused, and stats says the class is full.
    push(&d, &[payload(b'z', 65536)]);
    let o = d.run_in(&["push", "big", "-0", "--timeout", "0s"], &payload(b'w', 65536));
    assert_ne!(code(&o), 0, "a push with every 64 KiB block held succeeded");
    assert!(stderr(&o).contains("no free payload block"), "{}", stderr(&o));
    assert_eq!(held(&d), [3, 3]);
    let table = ok(&d.run(&["stats"]));
    let row =
        table.lines().find(|l| l.trim_start().starts_with("64KiB")).unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["64KiB", "3", "3", "0", "FULL"], "{table}");
    let body = scrape_metrics(&d.metrics_addr());
    assert!(body.contains("# TYPE xtcq_payload_blocks gauge"), "{body}");
    assert!(body.contains("xtcq_payload_blocks{size=\"65536\"} 3\n"), "{body}");
    assert!(body.contains("xtcq_payload_blocks_in_use{size=\"65536\"} 3\n"), "{body}");
    assert!(body.contains("xtcq_payload_blocks_in_use{size=\"4096\"} 3\n"), "{body}");

    // A claimed job keeps its block while it is held; its ack gives it back.
    let c = d.client();
    let t = c.attach_thief("big").expect("attach a thief");
    let mut held_jobs = Vec::new();
    while let Some(j) = t.steal().expect("steal") {
        held_jobs.push(j);
    }
    assert_eq!(held_jobs.len(), 8, "jobs lost or doubled");
    assert_eq!(d.stats()["records"]["claimed"], 8);
    assert_eq!(held(&d), [3, 3], "blocks of claimed jobs were freed before their ack");
    let large =
        held_jobs.iter().position(|j| j.payload().expect("payload").len() > 60000).expect("a large job");
    held_jobs.remove(large).ack().expect("ack");
    assert_eq!(held(&d), [3, 2]);

    // Every job acked: no block held, and the class is no longer full.
    for j in held_jobs {
        j.ack().expect("ack");
    }
    assert_eq!(held(&d), [0, 0]);
    let table = ok(&d.run(&["stats"]));
    assert!(!table.contains("FULL"), "{table}");
    let body = scrape_metrics(&d.metrics_addr());
    assert!(body.contains("xtcq_payload_blocks_in_use{size=\"65536\"} 0\n"), "{body}");
}

#[test]
fn a_segment_without_blocks_says_every_payload_is_inline() {
    let d = Daemon::start_with(TINY_SEGMENT);
    let s = d.stats();
    assert_eq!(s["payload_blocks"], serde_json::json!([]), "{s}");
    assert_eq!(s["segment"]["inline_bytes"], 64, "{s}");
    let table = ok(&d.run(&["stats"]));
    assert!(
        table.contains("payload blocks: none (every payload, up to 64 bytes, is kept inline)"),
        "{table}"
    );
}

#[test]
fn garbage_in_the_owner_table_crashes_nothing_and_is_swept() {
    let d = Daemon::builder().flags(flags()).start();
    let blocks_at =
        xtcq_shm::Segment::open_read_only(&d.segment).expect("map the segment").descriptor().regions.blocks;
    // One word per block (8 + 3): all ones, generation 0 (no record is ever born at 0), a
    // record number far out of range.
    let words: Vec<u64> =
        (0..11u64).map(|i| [u64::MAX, 1, (0xdead_beef << 32) | 0xffff_fff0, 7 + i][i as usize % 4]).collect();
    let bytes = scribble::u64_bytes(&words);
    // The daemon's scan (every 100 ms) frees what no live job holds, so the stats below may see
    // the garbage or not: each answer must be sane either way (`held` checks the sums).
    for _ in 0..5 {
        scribble::write_at(&d.segment, blocks_at, &bytes);
        let [small, large] = held(&d);
        assert!(small <= 8 && large <= 3, "{small} {large}");
        ok(&d.run(&["stats"]));
        let body = scrape_metrics(&d.metrics_addr());
        assert!(body.contains("xtcq_payload_blocks{size=\"4096\"} 8\n"), "{body}");
    }
    wait_until(Duration::from_secs(20), "the daemon's sweep to free the scribbled blocks", || {
        held(&d) == [0, 0]
    });
    // And the blocks work again: a large push takes one, its ack gives it back.
    ok(&d.run(&["create", "big"]));
    push(&d, &[payload(b'q', 65536)]);
    assert_eq!(held(&d), [0, 1]);
    assert_eq!(d.drain("big").iter().map(String::len).collect::<Vec<_>>(), [65536]);
    assert_eq!(held(&d), [0, 0]);
}
