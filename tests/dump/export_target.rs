//! Red-team pass 7 on where `xtcq export FILE` writes.
//!
//! - A dump is written to `FILE.tmp.PID` and renamed over `FILE`. Before, whatever `FILE`
//!   was got replaced: `xtcq export /dev/full` run as root turned the device into a regular
//!   file (and `/dev/stdout`, `/dev/null` alike), a FIFO a reader waited on was replaced, a
//!   symbolic link was replaced by a file instead of being written through, and the export
//!   said it wrote its jobs "to /dev/full".
//! - Kept here: an existing path that is not a regular file is refused, untouched, with a
//!   message that says what it is and what to give instead; a regular file is still
//!   replaced whole.

use std::os::unix::fs::FileTypeExt;

use xtcq_testkit::*;

fn daemon_with_a_job() -> Daemon {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "kept"]));
    d
}

/// `xtcq export PATH` must fail, say that PATH is not a regular file, and leave it be.
#[track_caller]
fn refused(d: &Daemon, path: &std::path::Path, what: &str) {
    let o = d.run(&["export", path.to_str().expect("utf8 path")]);
    assert_ne!(code(&o), 0, "export over a {what} must be refused: {}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("not a regular file") && err.contains(what), "say what it is: {err}");
}

#[test]
fn export_refuses_to_replace_a_fifo() {
    let d = daemon_with_a_job();
    let fifo = d.dir().join("fifo");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).expect("mkfifo");
    refused(&d, &fifo, "FIFO");
    let kind = std::fs::symlink_metadata(&fifo).expect("still there").file_type();
    assert!(kind.is_fifo(), "the FIFO was replaced: {kind:?}");
    assert_eq!(d.drain("q"), ["kept"], "the export took nothing");
}

#[test]
fn export_refuses_to_replace_a_symbolic_link() {
    let d = daemon_with_a_job();
    let target = d.dir().join("target.txt");
    std::fs::write(&target, "not a dump\n").expect("write");
    let link = d.dir().join("link.dump");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    refused(&d, &link, "symbolic link");
    assert!(std::fs::symlink_metadata(&link).expect("still there").file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "not a dump\n");
}

#[test]
fn export_refuses_a_directory_and_still_replaces_a_regular_file() {
    let d = daemon_with_a_job();
    refused(&d, d.dir(), "directory");
    let file = d.dir().join("old.dump");
    std::fs::write(&file, "an older dump\n").expect("write");
    ok(&d.run(&["export", file.to_str().expect("utf8 path")]));
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(text.starts_with("{\"kind\":\"header\"") && text.contains("kept"), "{text}");
}
