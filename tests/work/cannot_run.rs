//! `xtcq work` with a command that cannot be started: the jobs are not its fault, so none of
//! them may be failed for it. Before, each job was claimed, failed with "cannot run" and
//! counted an attempt; with `--max-attempts 1` every job of the queue became a dead letter.

use std::os::unix::fs::PermissionsExt;

use xtcq_testkit::*;

/// A queue where one counted attempt makes a dead letter, holding two jobs.
fn one_attempt_queue() -> Daemon {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    ok(&d.run(&["push", "q", "a", "b"]));
    d
}

#[test]
fn a_program_that_is_not_there_is_refused_before_a_job_is_taken() {
    let d = one_attempt_queue();
    for program in ["no-such-program-xtcq", "/nonexistent/bin/x"] {
        let o = d.run(&["work", "q", "--idle-exit", "1s", "--", program]);
        assert_eq!(code(&o), 1, "{program}: {}", stderr(&o));
        assert!(stderr(&o).contains("cannot run"), "{program}: {}", stderr(&o));
    }
    let mut left = d.drain("q");
    left.sort();
    assert_eq!(left, ["a", "b"], "the jobs must still be queued, not failed");
}

/// A program that passes the check but whose `exec` fails (its interpreter line names
/// nothing): the job it was taken for goes back uncounted and the worker stops.
#[test]
fn a_program_whose_exec_fails_gives_its_job_back_uncounted() {
    let d = one_attempt_queue();
    let script = d.dir().join("broken");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").expect("write script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = d.run(&["work", "q", "--idle-exit", "1s", "--", script.to_str().expect("utf-8 path")]);
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot run"), "{}", stderr(&o));
    let mut left = d.drain("q");
    left.sort();
    assert_eq!(left, ["a", "b"], "a job was failed for a command that never ran: {}", stderr(&o));
    let o = d.run(&["dead", "q"]);
    assert_eq!(code(&o), 3, "no dead letter expected: {}", stdout(&o));
}
