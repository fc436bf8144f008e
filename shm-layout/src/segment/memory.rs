//! How much memory the host has, for a segment that lives in memory alone (a memfd, or a
//! file on tmpfs: the daemon's size check before it creates one).
//!
//! - Read from `/proc/meminfo` (`MemTotal` + `SwapTotal`): no dependency, and nothing to
//!   guess when the file is missing or unreadable (`None`: not checked).

/// Bytes of memory and swap on this host, `None` when `/proc/meminfo` cannot be read.
pub fn host_memory_and_swap() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some(kib("MemTotal:")?.saturating_add(kib("SwapTotal:").unwrap_or(0)).saturating_mul(1024))
}
