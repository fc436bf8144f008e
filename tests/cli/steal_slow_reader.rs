//! `xtcq steal` whose stdout is read too slowly for the queue's lease: the job being written
//! is re-queued while the write waits, so the copy written is not the one that counts. The
//! error must say the job was written and will come again (red team 7: it said only "its
//! result was not recorded", which reads as "not delivered").

use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::*;

#[test]
fn a_job_written_after_its_lease_ran_out_is_said_to_come_again() {
    let d =
        Daemon::start_with(&["--lease-scan-interval", "10ms", "--payload-bytes", "448", "--records", "4096"]);
    ok(&d.run(&["create", "q", "--lease", "1ms"]));
    // Far more than a pipe holds, so that a write waits for the reader.
    let jobs: Vec<String> = (0..600).map(|i| format!("{i:0>200}")).collect();
    let mut args = vec!["push", "q"];
    args.extend(jobs.iter().map(String::as_str));
    ok(&d.run(&args));
    let mut child = d
        .xtcq()
        .args(["steal", "q", "--count", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steal");
    // Not reading yet: once the pipe is full, the write of a job blocks, and its 1 ms lease
    // runs out (the scan runs every 10 ms) while it waits.
    let mut stdout = child.stdout.take().expect("stdout");
    let full = eventually(Duration::from_secs(60), || (queued_bytes(&stdout) >= 60_000).then_some(()));
    assert!(full.is_some(), "steal never filled its stdout pipe");
    std::thread::sleep(Duration::from_millis(200));
    let mut out = Vec::new();
    stdout.read_to_end(&mut out).expect("read stdout");
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read stderr");
    let st = child.wait().expect("wait steal");
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("was written to stdout, but the queue will deliver it again"), "{err}");
}

/// Bytes waiting in the pipe behind `r` (FIONREAD).
fn queued_bytes(r: &std::process::ChildStdout) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer; the fd is open for the call.
    let rc = unsafe { libc::ioctl(r.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        n as usize
    } else {
        0
    }
}
