//! Writing into a segment's file as a hostile or buggy process with write access to it would,
//! and the byte and block lists those writes and small segments are made of: what the tests of
//! garbage in the segment repeated each in its own words.
//!
//! Std only: `shm-layout`'s tests include this file by path (they cannot link testkit, which
//! links their crate through the client).

use std::os::unix::fs::FileExt;
use std::path::Path;

/// Writes `bytes` at `offset` of the file at `path` (a segment), in place, past whatever maps
/// it.
pub fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {} to write into it: {e}", path.display()));
    f.write_all_at(bytes, offset)
        .unwrap_or_else(|e| panic!("write {} bytes at {offset} of {}: {e}", bytes.len(), path.display()));
}

/// Overwrites the first occurrence of `from` in the file at `path` with `to` (as long).
pub fn replace_first(path: &Path, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len(), "a replacement changes no length");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{:?} is not in {}", String::from_utf8_lossy(from), path.display()));
    write_at(path, at as u64, to);
}

/// `words` as the segment stores them (native-endian), back to back.
pub fn u64_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// `words` as the segment stores them (native-endian), back to back.
pub fn u32_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// A segment's payload-block counts per class from `(block size, count)` pairs, where
/// `class_size(k)` is the size of class `k` (`xtcq_shm::layout::payload::class_size`). A size
/// that is no class's panics, naming it.
pub fn block_counts<const CLASSES: usize>(
    list: &[(u32, u32)],
    class_size: impl Fn(usize) -> u32,
) -> [u32; CLASSES] {
    let mut counts = [0; CLASSES];
    for &(size, n) in list {
        let class = (0..CLASSES).find(|&k| class_size(k) == size);
        counts[class.unwrap_or_else(|| panic!("{size} bytes is not a payload block class"))] = n;
    }
    counts
}
