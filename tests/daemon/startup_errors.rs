//! Red-team pass 7 on how `xtcqd` words a startup error.
//!
//! - Before: an error whose message already quotes its cause was printed with that cause
//!   again ("cannot open the segment DIR: Is a directory (os error 21): Is a directory (os
//!   error 21)", "--group: no such group ...: no such group ..."), which reads as two
//!   failures.
//! - Kept here: each cause is said once.

use xtcq_testkit::*;

#[track_caller]
fn said_once(flags: &[&str], segment_is_dir: bool, cause: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = if segment_is_dir { dir.path().to_path_buf() } else { dir.path().join("segment") };
    let (st, err) = run_daemon_once(&dir.path().join("s.sock"), &segment, flags);
    assert!(!st.success(), "{err}");
    assert_eq!(err.matches(cause).count(), 1, "the cause {cause:?} said once:\n{err}");
}

#[test]
fn a_segment_that_is_a_directory_is_said_once() {
    said_once(&[], true, "Is a directory");
}

#[test]
fn an_unknown_group_is_said_once() {
    said_once(&["--group", "no-such-group-xyz"], false, "no such group \"no-such-group-xyz\"");
}

/// A `--segment` in a directory that does not exist says so and what to do, not only
/// "cannot create: No such file or directory" (red team 7 noticed it).
#[test]
fn a_segment_in_a_missing_directory_says_to_create_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = dir.path().join("no-such-dir").join("segment");
    let (st, err) = run_daemon_once(&dir.path().join("s.sock"), &segment, &[]);
    assert!(!st.success(), "{err}");
    assert!(err.contains("a directory that does not exist (create the directory first)"), "{err}");
}
