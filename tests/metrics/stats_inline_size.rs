//! Red-team pass 5 on the payload-block figures of `xtcq stats`: the inline size it reports
//! must be the one the records have, so that "payloads over N bytes" take blocks is true.
//! The record's inline area is `--inline-bytes` rounded up to 64 (at least 8 when there are
//! blocks); before, stats reported the flag as given, and `--inline-bytes 0` was shown as
//! "payload blocks (payloads over 0 bytes ...)" while a 10-byte job sat inline.

use xtcq_testkit::*;

/// Pushes payloads of `lens` bytes and checks that the jobs over the reported inline size
/// are exactly the blocks in use.
fn inline_size_tells_which_payloads_take_blocks(flags: &[&str], lens: &[usize]) {
    let d = Daemon::start_with(flags);
    ok(&d.run(&["create", "q", "--deques", "1"]));
    for &n in lens {
        ok(&d.run(&["push", "q", &"x".repeat(n)]));
    }
    let s = d.stats();
    let inline = s["segment"]["inline_bytes"].as_u64().expect("inline_bytes") as usize;
    let in_use: u64 = s["payload_blocks"]
        .as_array()
        .expect("payload_blocks")
        .iter()
        .map(|c| c["in_use"].as_u64().expect("in_use"))
        .sum();
    let over = lens.iter().filter(|&&n| n > inline).count() as u64;
    assert_eq!(in_use, over, "stats says payloads over {inline} bytes take blocks; lens {lens:?}: {s}");
    let text = ok(&d.run(&["stats"]));
    assert!(text.contains(&format!("payloads over {inline} bytes")), "{text}");
}

#[test]
fn inline_bytes_0_is_reported_as_the_inline_area_the_records_have() {
    let flags = ["--records", "64", "--inline-bytes", "0", "--payload-bytes", "448", "--queues", "1"];
    inline_size_tells_which_payloads_take_blocks(&flags, &[1, 10, 64, 65, 100]);
}

#[test]
fn inline_bytes_rounded_up_is_reported_rounded() {
    let flags = ["--records", "64", "--inline-bytes", "100", "--payload-bytes", "448", "--queues", "1"];
    inline_size_tells_which_payloads_take_blocks(&flags, &[100, 120, 128, 129]);
}
