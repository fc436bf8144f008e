//! `xtcq` at the trust boundary (docs/src/guarantees/threat-model.md): a daemon run by a user this
//! user does not trust is refused with exit 4 and its uid named; names read from the
//! segment are printed escaped; bad queue names are refused before any request.
//!
//! Cross-user tests create their own unprivileged user when run as root and print
//! "skipped" otherwise.

use std::process::{Command, Output};
use std::time::Duration;

use xtcq_testkit::{is_root, run_within, Daemon, SystemUser, TINY_SEGMENT};

fn xtcq(d: &Daemon, args: &[&str]) -> Command {
    let mut c = d.xtcq();
    c.args(args).env_remove("XTCQ_TRUST_UID");
    c
}

/// Runs `c` to completion (bounded), stdin closed.
fn run(c: &mut Command) -> Output {
    run_within(c, Duration::from_secs(30))
}

fn text(o: &Output) -> String {
    format!("stdout: {}\nstderr: {}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_daemon_run_by_an_untrusted_user_is_exit_4_naming_it() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to run a daemon as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let name = format!("xtqc{}", std::process::id() % 100_000);
    let mallory = SystemUser::create(&name, &name);
    let (uid, gid) = (mallory.id("-u"), mallory.id("-g"));
    // Where the victim's socket would be, in a shared sticky directory like /tmp.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let gid_text = gid.to_string();
    let d = Daemon::builder()
        .in_dir(dir)
        .flags(TINY_SEGMENT)
        .flags(["--allow-uid", "0", "--group", &gid_text])
        .command(|c| {
            c.uid(uid).gid(gid);
        })
        .start();
    let o = run(&mut xtcq(&d, &["ls"]));
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains(&format!("uid {uid} ({})", mallory.user)), "{}", text(&o));
    // Pushing to it is refused too, before the payload is sent anywhere.
    let o = run(&mut xtcq(&d, &["push", "jobs", "secret"]));
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    // Trusted by name through the environment, the same daemon is used.
    let o = run(xtcq(&d, &["ls"]).env("XTCQ_TRUST_UID", &mallory.user));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(xtcq(&d, &["ls"]).env("XTCQ_TRUST_UID", "no-such-user-xyz"));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("XTCQ_TRUST_UID: no such user \"no-such-user-xyz\""), "{}", text(&o));
}

#[test]
fn names_read_from_the_segment_are_printed_escaped_and_bad_names_refused() {
    let d = Daemon::start_with(TINY_SEGMENT);
    // An attached process (or an older daemon) wrote a name no check would pass.
    let evil = "evil\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}";
    // The segment's own create refuses it, so it is written over a good name's bytes.
    let placeholder = "q".repeat(evil.len());
    let o = run(&mut xtcq(&d, &["create", &placeholder]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    xtcq_testkit::scribble::replace_first(&d.segment, placeholder.as_bytes(), evil.as_bytes());
    for cmd in ["ls", "stats"] {
        let o = run(&mut xtcq(&d, &[cmd]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}') && !out.contains('\u{202e}'),
            "{cmd}: {out:?}"
        );
        assert!(out.contains("evil\\x1b]0;owned\\x07\\x1b[2J\\u{202e}"), "{cmd}: {out}");
    }
    for bad in ["../../etc", "tab\there", "zero\u{200b}width", &"x".repeat(65)] {
        let o = run(&mut xtcq(&d, &["create", bad]));
        assert_eq!(o.status.code(), Some(1), "{bad:?}: {}", text(&o));
        assert!(text(&o).contains("letters, digits"), "{}", text(&o));
    }
    let o = run(&mut xtcq(&d, &["create", "jobs.v2_high-prio", "--max-attempts", "1"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A consumer's failure reason is kept as the dead letter's last error, as it gave it.
    let o = run(&mut xtcq(&d, &["push", "jobs.v2_high-prio", "one"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("jobs.v2_high-prio").expect("thief");
    let job = thief.steal_wait(Some(Duration::from_secs(10))).expect("steal").expect("a job");
    job.fail("bad\u{1b}[31mred").expect("fail");
    let o = run(&mut xtcq(&d, &["dead", "jobs.v2_high-prio"]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains('\u{1b}') && out.contains("bad\\x1b[31mred"), "{}", text(&o));
}
