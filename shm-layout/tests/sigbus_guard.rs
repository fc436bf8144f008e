//! The SIGBUS guard (`xtcq_shm::sigbus`): a segment file truncated under its mappings is an
//! error in this process, not a crash; a SIGBUS anywhere else still kills the process.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use xtcq_shm::{Segment, SegmentConfig};

fn small_config() -> SegmentConfig {
    SegmentConfig::small()
        .with_deque_capacity(8)
        .with_records(64)
        .with_overflow_capacity(16)
        .with_payload_bytes(32)
}

#[test]
fn a_truncated_segment_reads_as_retired_and_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let seg = Segment::create(&path, &small_config(), 0o600).expect("create");
    let other = Segment::attach(&path).expect("attach");
    assert!(!seg.is_retired() && !seg.is_lost());
    std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(0).expect("truncate");
    // Every touch past the end is SIGBUS; the guard turns each mapping into zero pages.
    assert!(seg.is_retired() && seg.is_lost(), "the creator's mapping");
    assert!(other.queue_by_name("q").is_err());
    assert!(other.is_retired() && other.is_lost(), "the attacher's mapping");
    assert!(xtcq_shm::sigbus::faults_taken() >= 2);
    // A mapping made afterwards of a healthy file is not affected.
    let path2 = dir.path().join("seg2");
    let fresh = Segment::create(&path2, &small_config(), 0o600).expect("create");
    assert!(!fresh.is_retired() && !fresh.is_lost());
}

/// In a child: guard a segment, then touch a truncated mapping that is not a segment.
#[test]
fn child_touches_a_truncated_plain_mapping() {
    if std::env::var_os("XTCQ_SIGBUS_CHILD").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let _seg = Segment::create(&dir.path().join("seg"), &small_config(), 0o600).expect("create");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("plain"))
        .expect("open");
    f.set_len(4096).expect("size");
    // SAFETY: a fresh shared mapping of our own file; read once after the file shrank, which
    // is meant to fault.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            {
                use std::os::fd::AsRawFd;
                f.as_raw_fd()
            },
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        f.set_len(0).expect("truncate");
        let v = std::ptr::read_volatile(p as *const u8);
        println!("read {v}: survived a fault that is not a segment's");
    }
}

#[test]
fn a_sigbus_outside_every_segment_still_kills() {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "child_touches_a_truncated_plain_mapping", "--nocapture"])
        .env("XTCQ_SIGBUS_CHILD", "1")
        .output()
        .expect("run the child");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}
