//! `xtcq_injector_push_many` from C (`tests/c/inject_many.c`) against a real daemon: every
//! job a call says it queued comes out exactly once with the id the call stored, none it did
//! not; arguments a C caller can get wrong are refused before anything is queued; a push
//! into a full segment stops part way and says how many went in.

use std::process::Command;
use std::time::Duration;

use xtcq_testkit::{compile_c, run_within, Daemon};

/// Runs the C program with `args`; fails the test with its output unless it exits 0.
fn run_ok(daemon: &Daemon, args: &[&str]) -> String {
    let exe = compile_c("tests/c/inject_many.c", daemon.dir(), &[]);
    let out = run_within(Command::new(exe).arg(&daemon.socket).args(args), Duration::from_secs(120));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "inject_many {args:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout.into_owned()
}

#[test]
fn jobs_pushed_many_at_once_come_once_each_with_their_ids() {
    let daemon = Daemon::start();
    let out = run_ok(&daemon, &["round", "many", "1000"]);
    assert!(out.contains("pushed and stole 1000 jobs, each once, with its id"), "{out}");
    let report = daemon.client().check(true).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check: {:?}", report.problems);
}

#[test]
fn a_push_of_many_refuses_bad_arguments_before_queueing() {
    let daemon = Daemon::start();
    let out = run_ok(&daemon, &["edges", "edges", "300"]);
    assert!(out.contains("edges as documented"), "{out}");
}

#[test]
fn a_push_of_many_into_a_full_segment_says_how_many_went_in() {
    let daemon = Daemon::builder()
        .flags(["--queues", "2", "--records", "100", "--payload-bytes", "64", "--process-slots", "8"])
        .flags(["--overflow-capacity", "256"])
        .start();
    let out = run_ok(&daemon, &["full", "full", "300"]);
    assert!(out.contains("of 300, then full"), "{out}");
}

/// A pusher killed (its fail point: `kill -9` of itself) at job 170 of a push of 300: at
/// each step of a job's push (allocated; published, not yet in the ring; in the ring, `tail`
/// not yet moved). Each job published before the kill comes once, none after: the same
/// states a run of single pushes leaves, which recovery knows. A push of many publishes 64
/// jobs (jobs 128 to 191 here) before it puts them in the ring, so a kill at the 170th cell
/// finds 192 published.
#[test]
fn a_pusher_killed_inside_a_push_of_many_leaves_each_published_job_exactly_once() {
    use std::os::unix::process::ExitStatusExt;
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/inject_many.c", daemon.dir(), &[]);
    let points = [
        ("alloc.after_begin_fill", 169u64),
        ("publish.before_index", 170),
        ("overflow.push.after_cell", 192),
    ];
    for (round, (point, published)) in points.into_iter().enumerate() {
        let queue = format!("crash{round}");
        let out = run_within(
            Command::new(&exe)
                .arg(&daemon.socket)
                .args(["round", &queue, "300"])
                .env("XTCQ_FAILPOINTS", format!("{point}=kill@170")),
            Duration::from_secs(60),
        );
        assert_eq!(out.status.signal(), Some(libc::SIGKILL), "the pusher was to kill itself at {point}");
        let mut got = super::push_batch::collect(&daemon, &queue, published as usize);
        got.sort_unstable();
        assert_eq!(got, (0..published).collect::<Vec<_>>(), "{point}: each published job once, no other");
    }
    let report = daemon.client().check(true).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check: {:?}", report.problems);
}
