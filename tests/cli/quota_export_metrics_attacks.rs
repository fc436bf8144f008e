//! Red-team tests of the quota, export/import and metrics features (dc01f97): each one a
//! break found by hand with the real binaries, shown with a real xtcqd and real `xtcq`
//! processes.

use std::path::Path;
use std::time::Duration;
use xtcq_testkit::*;

const HEADER: &str = r#"{"kind":"header","format":"xtcq-dump","version":1,"layout_version":5}"#;

fn queue_line(name: &str, flavor: &str) -> String {
    format!(
        r#"{{"kind":"queue","name":"{name}","flavor":"{flavor}","deques":4,"capacity":256,"max_attempts":0,"lease_ms":0,"max_records":0,"max_dead":0}}"#
    )
}

fn job_line(queue: &str, payload: &str) -> String {
    format!(
        r#"{{"kind":"job","queue":"{queue}","payload":"{payload}","attempts":0,"state":"queued","last_error":""}}"#
    )
}

fn write(path: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    s.push('\n');
    std::fs::write(path, s).expect("write dump");
}

fn queued(d: &Daemon) -> u64 {
    d.stats()["records"]["queued"].as_u64().unwrap_or_else(|| panic!("no records.queued: {}", d.stats()))
}

/// An empty file has no header: it is not a dump, and importing it must fail, not report
/// "0 job(s) imported" and mark the file imported.
#[test]
fn import_of_an_empty_file_is_refused() {
    let d = Daemon::start();
    let f = d.dir().join("empty.dump");
    std::fs::write(&f, "").expect("write");
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("header"), "the error names the missing header: {}", stderr(&o));
}

/// A queue line with a flavor this build does not know must be refused, not silently
/// created as a LIFO queue (a FIFO dump hand-edited to "FIFO" would change the order).
#[test]
fn import_of_an_unknown_flavor_is_refused() {
    let d = Daemon::start();
    let f = d.dir().join("flavor.dump");
    write(&f, &[HEADER.into(), queue_line("qf", "FIFO"), job_line("qf", "a")]);
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "the error names the flavor: {}", stderr(&o));
    let ls = ok(&d.run(&["ls"]));
    assert!(!ls.contains("qf"), "no queue created from a refused dump: {ls}");
}

/// A dump that does not parse imported nothing: the file must keep its name, so that the
/// user can fix it and import it again (not be told an import was interrupted).
#[test]
fn a_dump_that_does_not_parse_keeps_its_name() {
    let d = Daemon::start();
    let f = d.dir().join("bad.dump");
    std::fs::write(&f, "{\"kind\":\"header\"").expect("write");
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert!(f.exists(), "bad.dump was renamed though nothing was imported: {}", stderr(&o));
    write(&f, &[HEADER.into(), queue_line("qb", "lifo"), job_line("qb", "a")]);
    ok(&d.run(&["import", f.to_str().expect("utf-8")]));
    assert_eq!(queued(&d), 1);
}

/// A payload larger than the segment's payload size is known to fail before any job is
/// written; the import must check it first and write nothing, not import the jobs before
/// it and leave the file half-imported.
#[test]
fn import_with_an_oversized_payload_writes_nothing() {
    let d = Daemon::start();
    let f = d.dir().join("big.dump");
    let big = "x".repeat(1000);
    write(&f, &[HEADER.into(), queue_line("qp", "lifo"), job_line("qp", "small"), job_line("qp", &big)]);
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert_eq!(queued(&d), 0, "a refused import left jobs in: {}", stderr(&o));
    assert!(stderr(&o).contains("1000 bytes"), "the error names the payload's size: {}", stderr(&o));
    assert!(f.exists(), "big.dump was renamed though nothing was imported: {}", stderr(&o));
    let ls = ok(&d.run(&["ls"]));
    assert!(!ls.contains("qp"), "a refused import created its queue: {ls}");
}

/// A dump cut at a line boundary (a copy that stopped early, a disk that filled) parses:
/// the import must notice that jobs are missing instead of reporting success.
#[test]
fn import_of_a_dump_cut_at_a_line_boundary_is_refused() {
    let d = Daemon::start();
    ok(&d.run(&["create", "qt"]));
    ok(&d.run(&["push", "qt", "a", "b", "c"]));
    let f = d.dir().join("cut.dump");
    ok(&d.run(&["export", f.to_str().expect("utf-8")]));
    let text = std::fs::read_to_string(&f).expect("read");
    let kept: Vec<String> = text.lines().take(3).map(String::from).collect();
    write(&f, &kept);
    let e = tempfile::tempdir().expect("tempdir");
    let d2 = Daemon::builder().in_dir(e).start();
    let o = d2.run(&["import", f.to_str().expect("utf-8")]);
    assert_ne!(code(&o), 0, "a cut dump imported as whole: {}", stderr(&o));
}

/// `stats --watch --interval 0` must be refused as a bad argument, not spin printing as
/// fast as the daemon answers.
#[test]
fn stats_watch_interval_zero_is_refused() {
    let d = Daemon::start();
    ok(&d.run(&["create", "qw"]));
    let child = d
        .xtcq()
        .args(["stats", "--watch", "--interval", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let o = wait_bounded(child, Duration::from_secs(20), "xtcq stats --watch --interval 0");
    assert_eq!(code(&o), 2, "stderr: {}", stderr(&o));
}

/// `create --max-records N` with N over the segment's records must fail without leaving a
/// queue behind that has no quota at all.
#[test]
fn create_with_a_quota_over_the_records_leaves_no_queue() {
    let d = Daemon::start();
    let o = d.run(&["create", "qq", "--max-records", "4294967295"]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    let ls = ok(&d.run(&["ls"]));
    assert!(!ls.contains("qq"), "a queue without its quota was left: {ls}");
}

/// `--import-on-start` at a FIFO must fail the start with a clear error, not block the
/// daemon in `open` forever (deaf to SIGTERM, which it catches).
#[test]
fn import_on_start_at_a_fifo_fails_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let mut cmd = xtcqd();
    cmd.arg("--socket")
        .arg(dir.path().join("s"))
        .arg("--segment")
        .arg(dir.path().join("seg"))
        .args(SMALL_SEGMENT)
        .arg("--import-on-start")
        .arg(&fifo)
        .env_remove("NOTIFY_SOCKET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let o =
        wait_bounded(cmd.spawn().expect("xtcqd"), Duration::from_secs(20), "xtcqd --import-on-start FIFO");
    assert_eq!(code(&o), 1, "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("not a regular file"), "stderr: {}", stderr(&o));
}

/// `xtcq export a.dump` wrote through `a.tmp` (`with_extension`), overwriting and then
/// renaming away an unrelated file of that name; the export must leave it alone.
#[test]
fn export_leaves_a_file_named_like_its_temporary_alone() {
    let d = Daemon::start();
    ok(&d.run(&["create", "qe"]));
    let other = d.dir().join("a.tmp");
    std::fs::write(&other, "not mine to touch").expect("write");
    ok(&d.run(&["export", d.dir().join("a.dump").to_str().expect("utf-8")]));
    let left = std::fs::read_to_string(&other).unwrap_or_else(|e| format!("gone: {e}"));
    assert_eq!(left, "not mine to touch");
}
