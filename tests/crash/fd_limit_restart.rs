//! A daemon restarted with a low file-descriptor limit, while 40 workers are alive and each
//! runs a job, must not take any of them for dead: a pidfd it cannot open (EMFILE) means
//! "unknown", never "exited". Before, it re-queued the claims of the ones it had no pidfd
//! for, and idle workers ran those jobs a second time while the first runs went on.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::Duration;
use xtcq_testkit::*;

const BUSY: usize = 40;
const IDLE: usize = 4;

/// Sets RLIMIT_NOFILE (soft and hard: it cannot be raised) of the child to `n`.
fn with_nofile(cmd: &mut std::process::Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(move || {
            let l = rustix::process::Rlimit { current: Some(n), maximum: Some(n) };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, l)
                .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))
        });
    }
}

fn claimed(seg: &xtcq_shm::Segment) -> usize {
    let r = seg.records();
    (0..r.len())
        .filter(|&i| r.state(i).is_some_and(|s| s.load().state() == Some(xtcq_shm::State::Claimed)))
        .count()
}

#[test]
fn a_restart_under_a_low_fd_limit_takes_no_live_worker_for_dead() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q", "--deques", "1", "--capacity", "64"]));
    let jobs: Vec<String> = (0..BUSY).map(|i| format!("j{i}")).collect();
    let mut args = vec!["push", "q"];
    args.extend(jobs.iter().map(String::as_str));
    ok(&d.run(&args));
    let dir = d.dir().to_path_buf();
    let log = dir.join("runs");
    let go = dir.join("go");
    // Each command logs its start, waits for `go`, logs its end.
    let script = format!(
        r#"echo "start $XTCQ_PAYLOAD" >> {log}; while [ ! -e {go} ]; do sleep 0.1; done; echo "end $XTCQ_PAYLOAD" >> {log}"#,
        log = log.display(),
        go = go.display()
    );
    let spawn = |extra: &[&str]| -> Child {
        d.xtcq()
            .args(["work", "q"])
            .args(extra)
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn work")
    };
    let mut workers: Vec<Child> = (0..BUSY).map(|_| spawn(&["--max-jobs", "1"])).collect();
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("segment");
    wait_until(Duration::from_secs(60), "every busy worker claimed its job", || claimed(&seg) == BUSY);
    // Idle workers, ready to take any job that comes back.
    workers.extend((0..IDLE).map(|_| spawn(&["--idle-exit", "4s"])));
    std::thread::sleep(Duration::from_millis(300));
    d.kill();
    let before = d.log_text().len();
    d.restart_with(SMALL_SEGMENT, |c| with_nofile(c, 40));
    // Give the restarted daemon time to adopt (and, before the fix, to recover the "dead").
    std::thread::sleep(Duration::from_secs(2));
    let log_after = d.log_text()[before..].to_string();
    assert_eq!(claimed(&seg), BUSY, "a live worker's claim was taken back: {log_after}");
    assert!(!log_after.contains("recovered jobs of an exited process"), "{log_after}");
    std::fs::write(&go, b"").expect("go");
    for mut w in workers {
        let out = wait_bounded(
            std::mem::replace(&mut w, std::process::Command::new("true").spawn().expect("true")),
            Duration::from_secs(60),
            "work",
        );
        let _ = w.wait();
        let _ = out;
    }
    let runs = std::fs::read_to_string(&log).expect("runs");
    let mut starts: BTreeMap<&str, usize> = BTreeMap::new();
    for l in runs.lines().filter_map(|l| l.strip_prefix("start ")) {
        *starts.entry(l).or_default() += 1;
    }
    let twice: Vec<_> = starts.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "jobs run twice: {twice:?}\n{log_after}");
    assert_eq!(starts.len(), BUSY, "{runs}");
}

/// `xtcq` with no file descriptor left for its socket says so and exits 1 (an error of
/// this process), not 4 ("xtcqd not reachable"), which would send the operator to a daemon
/// that is fine. The limit that leaves the loader and the runtime their fds but not the
/// socket depends on the environment, so every limit from 3 up to one that works is tried.
#[test]
fn a_cli_out_of_fds_exits_1_not_unreachable() {
    let d = Daemon::start();
    let mut connect_failed = 0;
    for n in 3..=16 {
        let mut cmd = d.xtcq();
        cmd.arg("stats");
        with_nofile(&mut cmd, n);
        let o = run_bounded(&mut cmd, None);
        if code(&o) == 0 {
            break;
        }
        let err = stderr(&o);
        if err.contains("cannot connect") && err.contains("Too many open files") {
            connect_failed += 1;
            assert_eq!(code(&o), 1, "limit {n}: {err}");
        }
        assert_ne!(code(&o), 4, "limit {n}: the daemon is fine, but: {err}");
    }
    // The client needs one descriptor at a time, as the loader does: no `ulimit -n` leaves
    // the loader its descriptor but not the socket. So the limit is also lowered from within,
    // once loaded, to the descriptors open then.
    let mut cmd = d.xtcq();
    cmd.arg("stats").env("XTCQ_TEST_NOFILE_AFTER_START", "1");
    let o = run_bounded(&mut cmd, None);
    let err = stderr(&o);
    assert!(err.contains("Too many open files"), "the socket's open did not fail with EMFILE: {err}");
    connect_failed += 1;
    assert_eq!(code(&o), 1, "out of fds at connect: {err}");
    assert!(connect_failed > 0);
}
