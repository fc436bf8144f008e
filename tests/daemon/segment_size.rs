//! A segment that cannot fit is refused at start, before anything is created: the real
//! xtcqd, given size flags (or config-file keys) whose segment is larger than any segment
//! may be, or larger than the free space of the file system it would go in (for a memfd
//! segment, than memory and swap), exits non-zero at once, says the size it would need, the
//! limit or the room there is, and which flags to lower, and leaves no segment file behind;
//! with `--recreate`, the old segment and its jobs stay.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use xtcq_shm::layout::payload::PAYLOAD_CLASSES;
use xtcq_shm::layout::{compute_regions, MAX_SEGMENT_LEN};
use xtcq_shm::SegmentConfig;
use xtcq_testkit::*;

/// 16 MiB, the largest block.
const MIB16: u64 = 16 << 20;

/// A directory for the segment: under /dev/shm (where segments go by default) when that is
/// a tmpfs with a size, else the usual temporary directory.
fn segment_dir() -> tempfile::TempDir {
    let sized = |p: &str| rustix::fs::statvfs(p).is_ok_and(|s| s.f_blocks > 0);
    if sized("/dev/shm") {
        if let Ok(d) = tempfile::Builder::new().prefix("xtcq-size-").tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().expect("temporary directory")
}

/// Starts xtcqd on `dir` with `flags` and waits (at most 10 s) for it to exit.
fn refused(dir: &Path, flags: &[&str]) -> (ExitStatus, String, PathBuf) {
    let segment = dir.join("segment");
    let (status, err) = run_daemon_once(&dir.join("xtcqd.sock"), &segment, flags);
    assert!(!status.success(), "xtcqd started with {flags:?}: {err}");
    assert_eq!(status.code(), Some(1), "{err}");
    (status, err, segment)
}

/// The number just before `unit` after `label` in `text` (`would need 123 bytes`).
fn figure(text: &str, label: &str) -> u128 {
    let after = text.split(label).nth(1).unwrap_or_else(|| panic!("no {label:?} in: {text}"));
    let digits: String = after.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {label:?} in: {text}"))
}

/// No file named `segment*` is left in `dir`.
fn no_segment_left(dir: &Path, segment: &Path) {
    assert!(!segment.exists(), "{} was left behind", segment.display());
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("read the directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("segment"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn blocks_past_the_largest_segment_are_refused_naming_the_flag_and_the_sizes() {
    let dir = segment_dir();
    let flags = ["--payload-bytes", "16777216", "--payload-blocks", "16MiB=100000"];
    let (_, err, segment) = refused(dir.path(), &flags);
    let need = figure(&err, "would need");
    assert!(need >= 100_000 * MIB16 as u128 && need < 101_000 * MIB16 as u128, "{need}: {err}");
    assert!(err.contains(&format!("{MAX_SEGMENT_LEN} bytes")), "the limit is not named: {err}");
    assert!(err.contains("--payload-blocks") && err.contains("16MiB"), "the flag is not named: {err}");
    no_segment_left(dir.path(), &segment);
}

#[test]
fn deques_past_the_largest_segment_name_the_deque_flags() {
    let dir = segment_dir();
    let flags = ["--queues", "4096", "--deques-per-queue", "4096", "--deque-capacity", "16777216"];
    let (_, err, segment) = refused(dir.path(), &flags);
    assert!(figure(&err, "would need") >= 4096 * 4096 * (16 << 20) * 8, "{err}");
    for flag in ["--queues", "--deques-per-queue", "--deque-capacity"] {
        assert!(err.contains(flag), "{flag} is not named: {err}");
    }
    no_segment_left(dir.path(), &segment);
}

#[test]
fn a_segment_larger_than_the_free_space_is_refused_before_it_is_made() {
    let dir = segment_dir();
    let vfs = rustix::fs::statvfs(dir.path()).expect("statvfs");
    let avail = vfs.f_bavail.saturating_mul(vfs.f_frsize);
    // Enough 16 MiB blocks to pass the free space by 4 GiB, yet stay a layable segment.
    let count = avail / MIB16 + 256;
    let mut c = SegmentConfig { payload_bytes: MIB16 as u32, ..SegmentConfig::default() };
    c.payload_blocks = [0; PAYLOAD_CLASSES];
    c.payload_blocks[PAYLOAD_CLASSES - 1] = count as u32;
    let Ok(regions) = compute_regions(&c) else {
        eprintln!(
            "{} has {avail} bytes free, more than a segment may be: not exercised",
            dir.path().display()
        );
        return;
    };
    let blocks = format!("16MiB={count}");
    let flags = ["--payload-bytes", "16777216", "--payload-blocks", blocks.as_str()];
    let (_, err, segment) = refused(dir.path(), &flags);
    assert!(err.contains(&format!("would need {} bytes", regions.total_len)), "{err}");
    let room = figure(&err, "has only");
    assert!(room < regions.total_len as u128, "{room}: {err}");
    assert!(err.contains("available") && err.contains("--payload-blocks"), "{err}");
    no_segment_left(dir.path(), &segment);
}

#[test]
fn config_file_keys_are_named_too_and_the_refusal_is_prompt() {
    let dir = segment_dir();
    let file = dir.path().join("xtcqd.toml");
    std::fs::write(&file, "payload-bytes = 16777216\npayload-blocks = \"16MiB=100000\"\n").unwrap();
    let segment = dir.path().join("segment");
    let out = run_within(
        xtcqd()
            .arg("--config")
            .arg(&file)
            .arg("--socket")
            .arg(dir.path().join("xtcqd.sock"))
            .arg("--segment")
            .arg(&segment),
        Duration::from_secs(10),
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(err.contains("config-file keys"), "the keys are not named: {err}");
    no_segment_left(dir.path(), &segment);
}

#[test]
fn a_recreate_that_cannot_fit_is_refused_with_the_old_segment_and_its_jobs_kept() {
    let mut d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "kept"]));
    d.stop();
    let flags = ["--recreate", "--payload-bytes", "16777216", "--payload-blocks", "16MiB=100000"];
    let (status, err) = run_daemon_once(&d.socket, &d.segment, &flags);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("would need") && err.contains("--payload-blocks"), "{err}");
    assert!(d.segment.exists(), "the old segment was removed: {err}");
    d.restart_with(SMALL_SEGMENT, |_| {});
    assert_eq!(d.drain("q"), ["kept"], "the old segment's job was lost");
}

/// Bytes of memory and swap, as `/proc/meminfo` says.
fn memory_and_swap() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let kib = |key: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap_or("0");
        line.trim_start_matches(key).trim().trim_end_matches("kB").trim().parse().unwrap_or(0)
    };
    (kib("MemTotal:") + kib("SwapTotal:")) * 1024
}

#[test]
fn a_memfd_segment_larger_than_memory_is_refused_before_the_fd_store_is_touched() {
    let dir = segment_dir();
    let count = memory_and_swap() / MIB16 + 256;
    if count * MIB16 >= MAX_SEGMENT_LEN {
        eprintln!("this host has more memory than a segment may be: not exercised");
        return;
    }
    let blocks = format!("16MiB={count}");
    // With an fd store the segment is a memfd; the notify socket is never reached.
    let out = run_within(
        xtcqd()
            .env("NOTIFY_SOCKET", dir.path().join("no-notify.sock"))
            .env("FDSTORE", "1")
            .env_remove("LISTEN_FDS")
            .arg("--socket")
            .arg(dir.path().join("xtcqd.sock"))
            .args(["--payload-bytes", "16777216", "--payload-blocks", blocks.as_str()]),
        Duration::from_secs(10),
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(err.contains("memfd:") && err.contains("memory and swap"), "{err}");
    assert!(figure(&err, "would need") > figure(&err, "has only"), "{err}");
    assert!(err.contains(&format!("({count} x 16MiB)")) && err.contains("--payload-blocks"), "{err}");
}
