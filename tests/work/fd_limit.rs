//! Red-team pass 7 on `xtcq work` under a file-descriptor limit too low for any `--jobs`.
//!
//! - Before: with `ulimit -n 64` it advised "lower --jobs to at most 0 or raise the limit",
//!   a value `--jobs` refuses.
//! - Kept here: it says to raise the limit, and to what; and it takes no job.

use std::process::Command;

use xtcq_testkit::*;

#[test]
fn a_limit_too_low_for_one_job_says_to_raise_it() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "kept"]));
    let script = format!(
        "ulimit -Sn 64 && ulimit -Hn 64 && exec {} --socket {} work q --max-jobs 1 -- true",
        xtcq_exe().display(),
        d.socket.display()
    );
    let o = run_bounded(Command::new("sh").arg("-c").arg(&script), None);
    let err = stderr(&o);
    assert_ne!(code(&o), 0, "{err}");
    assert!(!err.contains("at most 0"), "no advice --jobs refuses: {err}");
    assert!(err.contains("raise the limit to at least"), "say what to raise it to: {err}");
    assert_eq!(d.drain("q"), ["kept"], "no job taken");
}
