//! Red-team pass 5 on writing a dump: `xtcqd --export-on-stop FILE` writes `FILE.tmp.PID`
//! first, a name anyone who may write FILE's directory can predict (the daemon's pid is
//! public). A link planted there must not make the daemon (often root) write through it
//! into another file; the dump is still written. Real xtcqd.

use std::time::Duration;
use xtcq_testkit::*;

#[test]
fn a_link_planted_at_the_temporary_name_is_not_written_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("jobs.dump");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    let flags: Vec<&str> =
        SMALL_SEGMENT.iter().copied().chain(["--export-on-stop", dump.to_str().expect("utf-8")]).collect();
    let mut d = Daemon::builder().in_dir(dir).flags(flags).start();
    ok(&d.run(&["create", "keep5"]));
    ok(&d.run(&["push", "keep5", "a", "b"]));
    let planted = d.dir().join(format!("jobs.dump.tmp.{}", d.pid()));
    std::os::unix::fs::symlink(&victim, &planted).expect("plant the link");
    d.signal(libc::SIGTERM);
    let status = d.wait_exit(Duration::from_secs(20));
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious\n", "written through the link");
    assert!(status.success(), "the stop failed: {}", d.log_text());
    let text = std::fs::read_to_string(&dump).expect("the dump was written");
    assert!(text.contains("\"keep5\"") && text.contains(r#""kind":"end""#), "{text}");
}
