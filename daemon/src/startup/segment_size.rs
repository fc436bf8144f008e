//! Refusing a segment that cannot fit, before anything is created: the segment's size is
//! computed from the size flags, and a start whose segment is larger than a segment may be,
//! or than the room where it would go, is refused saying the size, the room and the flags.
//!
//! Rules kept:
//! - The size checked is the layout's own (`compute_regions`), so the check and the creation
//!   cannot disagree. Past what the layout lays out (over `MAX_SEGMENT_LEN`, or past 64
//!   bits) it is the same sum done in 128 bits ([`estimate`]), for the message only.
//! - The room of a file is the free space of its file system (`statvfs` of its directory:
//!   `f_bavail * f_frsize`), plus the blocks of the file `--recreate` replaces when no live
//!   process registered in it still maps them (the caller's `reclaim`); on tmpfs it
//!   is also at most memory + swap, since a tmpfs sized past memory does not fail a
//!   `fallocate`, it wakes the OOM killer. A file system that reports no size (`f_blocks`
//!   0: a tmpfs without a limit, some FUSE ones) or a failing `statvfs` leaves the memory
//!   bound or none. A memfd's room is memory + swap.
//! - A check only: the room can shrink between it and the creation, whose own `ENOSPC`
//!   (and removal of the half-made file) stays the last word.
//! - The message names the parts that make most of the segment, each with the flags that
//!   size it (the config-file keys have the same names without `--`).

use std::path::{Path, PathBuf};

use xtcq_shm::layout::payload::{self, class_size};
use xtcq_shm::layout::{
    compute_regions, BatchEntry, ConfigError, DequeHeader, MetricsBlock, OverflowHeader, ProcessSlot,
    QueueEntry, SegmentHeader, BATCH_SLOTS, RECORD_HEADER_SIZE,
};
use xtcq_shm::SegmentConfig;

/// `statfs` type of tmpfs (and of /dev/shm).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// What to lower, said after the parts.
const LOWER: &str = "lower these flags (or the config-file keys of the same names without --)";

/// Why the segment the flags describe cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum SizeError {
    /// Larger than the layout allows.
    #[error(
        "segment {} would be larger than a segment may be: it would need {need} bytes ({}), and \
         the most is {max} bytes ({}). Most of it: {parts}; {LOWER}",
        path.display(), human(*need), human(*max as u128)
    )]
    TooLarge {
        /// The segment file (or memfd label).
        path: PathBuf,
        /// Bytes it would take.
        need: u128,
        /// `xtcq_shm::layout::MAX_SEGMENT_LEN`.
        max: u64,
        /// Its largest parts and their flags.
        parts: String,
    },
    /// Larger than the room where it would go.
    #[error(
        "segment {} would need {need} bytes ({}), but {place} has only {room} bytes ({}) \
         available. Most of it: {parts}; {LOWER}, or put --segment where there is room",
        path.display(), human(*need as u128), human(*room as u128)
    )]
    NoRoom {
        /// The segment file (or memfd label).
        path: PathBuf,
        /// Bytes it would take.
        need: u64,
        /// Bytes there are.
        room: u64,
        /// What bounds the room (a file system, the host's memory).
        place: String,
        /// Its largest parts and their flags.
        parts: String,
    },
}

/// Refuses a segment file at `path` that could not be created or could not fit. `reclaim`:
/// bytes freed before the creation (the blocks of a file `--recreate` removes).
pub fn check_file(c: &SegmentConfig, path: &Path, reclaim: u64) -> Result<(), SizeError> {
    let Some(need) = laid_out(c, path)? else { return Ok(()) };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match room(dir, reclaim) {
        Some((room, place)) if need > room => Err(no_room(c, path, need, room, place)),
        _ => Ok(()),
    }
}

/// Refuses a memfd segment (`label` names it) that could not be created or could not fit in
/// this host's memory and swap.
pub fn check_memfd(c: &SegmentConfig, label: &Path) -> Result<(), SizeError> {
    let Some(need) = laid_out(c, label)? else { return Ok(()) };
    match xtcq_shm::segment::host_memory_and_swap() {
        Some(room) if need > room => {
            Err(no_room(c, label, need, room, "this host's memory and swap (a memfd segment)".into()))
        }
        _ => Ok(()),
    }
}

/// The segment's length; refused past `MAX_SEGMENT_LEN`; `None` for a configuration the
/// creation refuses itself, for another reason, with its own message.
fn laid_out(c: &SegmentConfig, path: &Path) -> Result<Option<u64>, SizeError> {
    match compute_regions(c) {
        Ok(r) => Ok(Some(r.total_len)),
        Err(ConfigError::TooLarge { max }) => {
            let (need, parts) = estimate(c);
            Err(SizeError::TooLarge { path: path.to_path_buf(), need, max, parts: largest(&parts, need) })
        }
        Err(_) => Ok(None),
    }
}

fn no_room(c: &SegmentConfig, path: &Path, need: u64, room: u64, place: String) -> SizeError {
    let (total, parts) = estimate(c);
    SizeError::NoRoom { path: path.to_path_buf(), need, room, place, parts: largest(&parts, total) }
}

/// The bytes a file in `dir` may take and what bounds them, `None` when nothing is known.
fn room(dir: &Path, reclaim: u64) -> Option<(u64, String)> {
    let disk = rustix::fs::statvfs(dir).ok().filter(|v| v.f_blocks > 0).map(|v| {
        let free = v.f_bavail.saturating_mul(v.f_frsize).saturating_add(reclaim);
        (free, format!("the file system of {}", dir.display()))
    });
    let tmpfs = rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC);
    let memory = xtcq_shm::segment::host_memory_and_swap()
        .filter(|_| tmpfs)
        .map(|m| (m, format!("this host's memory and swap ({} is a tmpfs)", dir.display())));
    match (disk, memory) {
        (Some(d), Some(m)) => Some(if m.0 < d.0 { m } else { d }),
        (d, m) => d.or(m),
    }
}

/// One part of the segment: what it is, its bytes, and the flags that size it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// What it is, with its counts.
    pub what: String,
    /// Its bytes.
    pub bytes: u128,
    /// The flags that size it.
    pub flags: String,
}

/// The segment's length as `compute_regions` lays it out, in 128 bits (so it never
/// overflows), and its parts.
pub fn estimate(c: &SegmentConfig) -> (u128, Vec<Part>) {
    let size = |n: usize| n as u128;
    let up = |v: u128, to: u128| v.div_ceil(to) * to;
    let (q, dpq, slots) = (c.queues as u128, c.deques_per_queue as u128, c.process_slots as u128);
    let deque_stride = up(size(size_of::<DequeHeader>()) + 8 * c.deque_capacity as u128, 128);
    let overflow_stride = up(size(size_of::<OverflowHeader>()) + 8 * c.overflow_capacity as u128, 128);
    let record_stride = size(RECORD_HEADER_SIZE) + payload::inline_area(c) as u128;
    let counts = payload::resolved_blocks(c);
    let n_blocks: u128 = counts.iter().map(|&n| n as u128).sum();
    let part = |what: String, bytes: u128, flags: &str| Part { what, bytes, flags: flags.to_string() };
    let mut parts = vec![
        part("the queue table".into(), q * size(size_of::<QueueEntry>()), "--queues"),
        part(
            format!("the deques ({q} queues x {dpq} deques x {} slots)", c.deque_capacity),
            q * dpq * deque_stride,
            "--queues, --deques-per-queue, --deque-capacity",
        ),
        part(
            format!("the overflow rings ({q} x {} cells)", c.overflow_capacity),
            q * overflow_stride,
            "--queues, --overflow-capacity",
        ),
        part(
            format!("the job records ({} x {record_stride} bytes)", c.job_records),
            c.job_records as u128 * record_stride,
            "--records, --inline-bytes",
        ),
    ];
    let owners = if n_blocks == 0 { 0 } else { up(8 * n_blocks, 128) };
    parts.push(part("the payload blocks' owner table".into(), owners, "--payload-blocks"));
    for (k, &n) in counts.iter().enumerate().filter(|(_, &n)| n > 0) {
        let label = size_label(class_size(k));
        let bytes = n as u128 * class_size(k) as u128;
        parts.push(part(
            format!("the payload blocks of {label} ({n} x {label})"),
            bytes,
            &format!("--payload-blocks {label}=COUNT"),
        ));
    }
    let tables = slots * size(size_of::<ProcessSlot>()) + q * (slots + 2) * size(size_of::<MetricsBlock>());
    parts.push(part("the process and metrics tables".into(), tables, "--process-slots, --queues"));
    let keys = c.keys as u128 * size(size_of::<xtcq_shm::keys::KeyEntry>());
    parts.push(part(format!("the key table ({} entries)", c.keys), keys, "--keys"));
    // Offsets as `compute_regions` rounds them: records end on a line, blocks end on a line,
    // the tables on a line, the whole on a page.
    let records_end = size(size_of::<SegmentHeader>()) + parts[..4].iter().map(|p| p.bytes).sum::<u128>();
    let blocks_end = up(records_end, 128) + parts[4..parts.len() - 2].iter().map(|p| p.bytes).sum::<u128>();
    let batches = u128::from(BATCH_SLOTS) * size(size_of::<BatchEntry>()) + 8 * c.job_records as u128;
    parts.push(part("the batch table and the records' batch references".into(), batches, "--records"));
    (up(up(up(up(blocks_end, 128) + tables, 128) + batches, 128) + keys, 4096), parts)
}

/// The parts that make a tenth of `total` or more (the largest at least), largest first,
/// with their sizes and flags.
fn largest(parts: &[Part], total: u128) -> String {
    let mut sorted: Vec<&Part> = parts.iter().collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.bytes));
    let big = sorted.iter().enumerate().filter(|(i, p)| *i == 0 || p.bytes * 10 >= total).map(|(_, p)| p);
    let said: Vec<String> =
        big.take(3).map(|p| format!("{} take {} ({})", p.what, human(p.bytes), p.flags)).collect();
    said.join("; ")
}

/// A block size as `--payload-blocks` spells it: `512`, `4KiB`, `16MiB`.
fn size_label(bytes: u32) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => b.to_string(),
    }
}

/// `b` bytes in binary units: `512 bytes`, `4.0 KiB`, `1.5 TiB`.
pub fn human(b: u128) -> String {
    const UNITS: [&str; 7] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let (mut v, mut unit) = (b as f64, 0);
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} bytes")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use xtcq_shm::SegmentConfig;

    use super::{check_file, compute_regions, estimate, human};
    use xtcq_shm::layout::payload::PAYLOAD_CLASSES;
    use xtcq_shm::layout::MAX_SEGMENT_LEN;

    fn config(f: impl FnOnce(&mut SegmentConfig)) -> SegmentConfig {
        let mut c = SegmentConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn the_estimate_is_the_layouts_length() {
        let configs = [
            SegmentConfig::default(),
            config(|c| c.payload_bytes = 64),
            config(|c| {
                c.payload_bytes = 65536;
                c.payload_blocks = [0; PAYLOAD_CLASSES];
                c.payload_blocks[5] = 1024;
                c.payload_blocks[9] = 16;
            }),
            config(|c| {
                (c.queues, c.deques_per_queue, c.deque_capacity, c.process_slots) = (3, 5, 64, 7);
                (c.job_records, c.overflow_capacity, c.inline_bytes) = (1000, 2, 200);
            }),
        ];
        for c in configs {
            let laid = compute_regions(&c).expect("lays out").total_len;
            assert_eq!(estimate(&c).0, laid as u128, "{c:?}");
        }
    }

    #[test]
    fn past_the_limit_the_largest_part_and_its_flag_are_named() {
        let c = config(|c| {
            c.payload_bytes = 16 << 20;
            c.payload_blocks = [0; PAYLOAD_CLASSES];
            c.payload_blocks[17] = 100_000;
        });
        let e = check_file(&c, Path::new("/nonexistent/segment"), 0).unwrap_err().to_string();
        assert!(e.contains("the payload blocks of 16MiB (100000 x 16MiB) take 1.5 TiB"), "{e}");
        assert!(
            e.contains("(--payload-blocks 16MiB=COUNT)") && e.contains(&MAX_SEGMENT_LEN.to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_small_segment_passes_and_units_read_well() {
        assert!(check_file(&SegmentConfig::default(), Path::new("/nonexistent/segment"), 0).is_ok());
        assert_eq!(human(512), "512 bytes");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(1 << 40), "1.0 TiB");
    }
}
