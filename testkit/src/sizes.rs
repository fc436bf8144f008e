//! Named segment sizes (as `xtcqd` flags), so a test says which it wants instead of spelling
//! out seven numbers, and a full queue or table is easy to reach.

/// 256 records, 8 process slots: for tests that fill the segment or its process table.
pub const TINY_SEGMENT: &[&str] = &[
    "--queues",
    "4",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "64",
    "--records",
    "256",
    "--payload-bytes",
    "64",
    "--process-slots",
    "8",
    "--overflow-capacity",
    "64",
];

/// 4,096 records of 64-byte payloads, deques of 256: the command line's tests.
pub const SMALL_SEGMENT: &[&str] = &[
    "--queues",
    "4",
    "--deques-per-queue",
    "4",
    "--deque-capacity",
    "256",
    "--records",
    "4096",
    "--payload-bytes",
    "64",
    "--process-slots",
    "64",
    "--overflow-capacity",
    "4096",
];

/// 16,384 records of 64-byte payloads, deques of 1,024: the daemon's protocol and crash tests.
pub const MEDIUM_SEGMENT: &[&str] = &[
    "--queues",
    "4",
    "--deques-per-queue",
    "4",
    "--deque-capacity",
    "1024",
    "--records",
    "16384",
    "--payload-bytes",
    "64",
    "--process-slots",
    "32",
    "--overflow-capacity",
    "16384",
];

/// 8,192 records, deques of 256: a host in the bridge's tests.
pub const HOST_SEGMENT: &[&str] = &[
    "--queues",
    "4",
    "--deques-per-queue",
    "4",
    "--deque-capacity",
    "256",
    "--records",
    "8192",
    "--payload-bytes",
    "64",
    "--process-slots",
    "64",
    "--overflow-capacity",
    "4096",
];

/// 256 records keeping `inline_bytes` inline, payloads up to 64 KiB, the rest of a payload in
/// a block of the classes `payload_blocks` names (`--payload-blocks` syntax, e.g.
/// `"4KiB=8,64KiB=3"`): the large-payload tests, which differ in their block counts (how
/// many large jobs may be held at once is what they test).
pub fn large_payload_segment(inline_bytes: u32, payload_blocks: &str) -> Vec<String> {
    let inline_bytes = inline_bytes.to_string();
    [
        "--queues",
        "2",
        "--deques-per-queue",
        "2",
        "--deque-capacity",
        "64",
        "--records",
        "256",
        "--payload-bytes",
        "65536",
        "--inline-bytes",
        &inline_bytes,
        "--payload-blocks",
        payload_blocks,
        "--process-slots",
        "16",
        "--overflow-capacity",
        "256",
    ]
    .map(String::from)
    .to_vec()
}
