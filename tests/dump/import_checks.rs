//! An import refused before it writes anything: a dump that does not fit the segment (too
//! many jobs for its records or for a queue's overflow ring) and a dump whose end line is
//! missing, miscounted or followed by more lines. Each refused dump keeps its name, creates
//! no queue and queues no job; real xtcqd, real `xtcq import` and `--import-on-start`.

use std::path::Path;
use std::time::Duration;
use xtcq_testkit::*;

fn header(version: u32) -> String {
    format!(r#"{{"kind":"header","format":"xtcq-dump","version":{version},"layout_version":6}}"#)
}

fn queue_line(name: &str) -> String {
    format!(
        r#"{{"kind":"queue","name":"{name}","flavor":"fifo","deques":1,"capacity":64,"max_attempts":0,"lease_ms":0}}"#
    )
}

fn job_lines(queue: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(r#"{{"kind":"job","queue":"{queue}","payload":"job-{i}","attempts":0,"state":"queued"}}"#)
        })
        .collect()
}

fn end_line(queues: usize, jobs: usize) -> String {
    format!(r#"{{"kind":"end","queues":{queues},"jobs":{jobs}}}"#)
}

fn write(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").expect("write dump");
}

/// A version-2 dump of `jobs` jobs in queue `q`, with its end line.
fn dump(q: &str, jobs: usize) -> Vec<String> {
    let mut lines = vec![header(2), queue_line(q)];
    lines.extend(job_lines(q, jobs));
    lines.push(end_line(1, jobs));
    lines
}

/// Imports `f` and expects a refusal that wrote nothing; returns stderr.
fn refused(d: &Daemon, f: &Path, queue: &str) -> String {
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert!(f.exists(), "{} was renamed though nothing was imported: {}", f.display(), stderr(&o));
    let ls = ok(&d.run(&["ls"]));
    assert!(!ls.contains(queue), "a refused import created queue {queue}: {ls}");
    assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(0), "a refused import queued jobs");
    stderr(&o)
}

#[test]
fn more_jobs_than_free_records_is_refused_whole() {
    let d = Daemon::builder().flags(["--records", "64"]).start();
    let f = d.dir().join("many.dump");
    write(&f, &dump("qr", 65));
    let e = refused(&d, &f, "qr");
    assert!(e.contains("65 jobs") && e.contains("--records"), "the error says what to raise: {e}");
    write(&f, &dump("qr", 60));
    ok(&d.run(&["import", f.to_str().expect("utf-8")]));
    assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(60));
}

#[test]
fn more_jobs_than_the_overflow_ring_takes_is_refused_whole() {
    let d = Daemon::builder().flags(["--records", "512", "--overflow-capacity", "32"]).start();
    let f = d.dir().join("ring.dump");
    write(&f, &dump("qo", 40));
    let e = refused(&d, &f, "qo");
    assert!(e.contains("--overflow-capacity"), "the error names the flag: {e}");
}

#[test]
fn a_missing_end_line_is_refused() {
    let d = Daemon::start();
    let f = d.dir().join("cut.dump");
    let mut lines = dump("qe", 3);
    lines.pop();
    write(&f, &lines);
    let e = refused(&d, &f, "qe");
    assert!(e.contains("no end line"), "the error says what is missing: {e}");
}

#[test]
fn an_end_line_that_miscounts_is_refused() {
    let d = Daemon::start();
    let f = d.dir().join("miscount.dump");
    let mut lines = dump("qm", 3);
    lines.remove(3);
    write(&f, &lines);
    let e = refused(&d, &f, "qm");
    assert!(e.contains("3 jobs") && e.contains("lines are missing"), "the error counts: {e}");
}

#[test]
fn a_line_after_the_end_line_is_refused() {
    let d = Daemon::start();
    let f = d.dir().join("after.dump");
    let mut lines = dump("qa", 2);
    lines.extend(job_lines("qa", 1));
    write(&f, &lines);
    let e = refused(&d, &f, "qa");
    assert!(e.contains("after the end line"), "the error names the line: {e}");
}

/// Dumps written before the end line existed (version 1) still import.
#[test]
fn a_version_1_dump_without_an_end_line_imports() {
    let d = Daemon::start();
    let f = d.dir().join("old.dump");
    let mut lines = vec![header(1), queue_line("q1")];
    lines.extend(job_lines("q1", 4));
    write(&f, &lines);
    ok(&d.run(&["import", f.to_str().expect("utf-8")]));
    assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(4));
}

/// `--import-on-start` checks the same way: the daemon does not start on a dump that does
/// not fit, and the file keeps its name.
#[test]
fn import_on_start_of_a_dump_that_does_not_fit_fails_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("start.dump");
    write(&f, &dump("qs", 100));
    let mut cmd = xtcqd();
    cmd.arg("--socket")
        .arg(dir.path().join("s"))
        .arg("--segment")
        .arg(dir.path().join("seg"))
        .args(["--records", "64", "--import-on-start"])
        .arg(&f)
        .env_remove("NOTIFY_SOCKET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let o = wait_bounded(cmd.spawn().expect("xtcqd"), Duration::from_secs(20), "xtcqd --import-on-start");
    assert_ne!(code(&o), 0, "xtcqd started with a dump it cannot hold: {}", stderr(&o));
    assert!(stderr(&o).contains("100 jobs"), "the error counts the jobs: {}", stderr(&o));
    assert!(f.exists(), "start.dump was renamed though nothing was imported");
}
