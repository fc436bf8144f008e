//! Red-team pass 7 on a control socket path (`--socket`, `XTCQ_SOCKET`) that names something
//! other than a socket.
//!
//! - Before: connecting to a directory, a regular file or a FIFO fails with ECONNREFUSED,
//!   and `xtcq` said "daemon not running at PATH (is xtcqd started?)"; an xtcqd started
//!   there refuses the path ("exists and is not a socket"), so following the advice led
//!   nowhere.
//! - Kept here: the client says what PATH is and to point it at xtcqd's socket, exit 4 as
//!   any unreachable daemon.

use std::path::Path;

use xtcq_testkit::*;

#[track_caller]
fn names_the_path_as_no_socket(path: &Path, kind: &str) {
    let o = run_bounded(xtcq().env("XTCQ_SOCKET", path).arg("ls"), None);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("is a {kind}, not a socket")), "say what {} is: {err}", path.display());
    assert!(!err.contains("is xtcqd started"), "not a daemon that is down: {err}");
}

#[test]
fn a_socket_path_that_is_a_directory_a_file_or_a_fifo_is_named_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    names_the_path_as_no_socket(dir.path(), "directory");
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    names_the_path_as_no_socket(&file, "regular file");
    let fifo = dir.path().join("fifo");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).expect("mkfifo");
    names_the_path_as_no_socket(&fifo, "FIFO");
}

#[test]
fn a_missing_socket_still_says_the_daemon_is_not_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = run_bounded(xtcq().env("XTCQ_SOCKET", dir.path().join("none.sock")).arg("ls"), None);
    assert_eq!(code(&o), 4);
    assert!(stderr(&o).contains("is xtcqd started"), "{}", stderr(&o));
}
