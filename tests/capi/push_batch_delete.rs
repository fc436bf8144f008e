//! Red-team pass 5 on `xtcq_owner_push_batch` (C API): an operator's `delete --force` (and
//! a create of the name) under an attached C owner cannot pull its queue from under it;
//! real xtcqd, real `xtcq`, a real C program (`tests/c/push_batch.c`, mode `hold`).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use xtcq_testkit::{code, compile_c, first_line_seen, stderr, wait_bounded, Daemon};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the holder on `queue` until it stole its first batch, runs `between` (the operator's
/// steps), lets it go on, and returns its report (acks, then the second batch's status).
fn hold_across(daemon: &Daemon, queue: &str, between: impl FnOnce()) -> String {
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let mut holder = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["hold", queue])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    assert!(first_line_seen(&mut holder), "the holder exited early; daemon log:\n{}", daemon.log_text());
    between();
    holder.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let out = wait_bounded(holder, Duration::from_secs(60), "the holder");
    let report = text(&out.stdout);
    // The holder's own checks (the first batch) passed; what came after is in the report.
    assert!(out.status.code().is_some(), "the holder died of a signal: {report}\n{}", text(&out.stderr));
    report
}

/// `delete --force` with the holder attached (owner, thief, 10 jobs running) is refused, so
/// the holder's acks and its next batch go on in the queue it attached to.
#[test]
fn a_force_delete_under_an_attached_c_owner_is_refused_and_its_batch_goes_on() {
    let daemon = Daemon::start();
    let report = hold_across(&daemon, "gone5", || {
        let o = daemon.run(&["delete", "gone5", "--force"]);
        assert_eq!(code(&o), 1, "a force delete under an attached owner: {}", stderr(&o));
        assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    });
    assert!(report.contains("push_batch after 0 queued 10"), "{report}");
    let mut want: Vec<String> = (10..20).map(|i| i.to_string()).collect();
    want.sort();
    assert_eq!(daemon.drain("gone5"), want, "{report}");
    let check = daemon.client().check(true).expect("xtcq check");
    assert!(check.is_consistent(), "xtcq check: {:?}", check.problems);
}
