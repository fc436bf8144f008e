//! The C API from C: programs compiled with the system's `cc` against `include/xtcq.h` and
//! the `libxtcq.a` built with this package, run against a real daemon.
//!
//! - `examples/c/pool/pool.c`: a postmaster-like parent, forked backends, one kill -9ed
//!   holding a job; every job acked exactly once and the segment consistent.
//! - `tests/c/status_codes.c`: every status code a correct caller can meet, produced once.
//! - `tests/c/steal_batch.c`: `xtcq_thief_steal_batch` takes a FIFO queue's jobs in
//!   batches, each once and oldest first, and refuses bad handle arrays.

use std::process::Command;
use std::time::Duration;

use xtcq_testkit::{compile_c, run_within, workspace_root, Daemon};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_forked_pool_of_backends_acks_every_job_once_when_one_is_killed() {
    let daemon = Daemon::builder().daemon_defaults().start();
    let pool = compile_c("examples/c/pool/pool.c", daemon.dir(), &[]);
    let out =
        run_within(Command::new(&pool).arg(&daemon.socket).args(["10000", "3"]), Duration::from_secs(180));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "pool failed ({}):\n{stdout}\n{stderr}\ndaemon log:\n{}",
        out.status,
        daemon.log_text()
    );
    assert!(stdout.contains("backend 1: inherited handle refused"), "{stdout}");
    assert!(stdout.contains("backend 0 was killed (signal 9) holding job"), "{stdout}");
    assert!(stdout.contains("10000 jobs acked exactly once by 3 backends"), "{stdout}");
    let report = daemon.client().check(false).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check after the pool: {:?}", report.problems);
}

/// A backend that forked a helper (no exec) and was then `kill -9`ed: the helper holds the
/// inherited control connection open, but the job comes back at the backend's death, not
/// the helper's.
#[test]
fn a_killed_backends_job_comes_back_while_its_forked_child_lives() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let daemon = Daemon::builder().daemon_defaults().start();
    let exe = compile_c("tests/c/fork_holder.c", daemon.dir(), &[]);
    let client = daemon.client();
    let mut q = xtcq_client::QueueParams::new("held");
    q.deques = 1;
    client.create_queue(&q).expect("create");
    let owner = client.attach_owner("held").expect("owner");
    owner.push(b"job").expect("push");
    let mut holder = Command::new(&exe)
        .arg(&daemon.socket)
        .arg("held")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fork_holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    let child: i32 =
        line.trim().rsplit(' ').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    holder.kill().expect("kill -9 the backend");
    holder.wait().expect("reap");
    let thief = client.attach_thief("held").expect("thief");
    let back = thief.steal_wait(Some(Duration::from_secs(30))).expect("steal");
    // SAFETY: kill(2) with signal 0 only probes; `child` is the helper's pid.
    let child_alive = unsafe { libc::kill(child, 0) } == 0;
    // SAFETY: as above, SIGKILL to the helper this test made.
    unsafe { libc::kill(child, libc::SIGKILL) };
    let job = back
        .unwrap_or_else(|| panic!("the job did not come back in 30 s; daemon log:\n{}", daemon.log_text()));
    assert!(child_alive, "the helper child was gone before the job came back: the test proved nothing");
    assert_eq!(job.attempts(), 1);
    job.ack().expect("ack");
}

/// Codes a correct caller cannot be shown: a caught panic is a bug; a corrupt or replaced
/// segment needs a hostile writer or a daemon restarted with --recreate (the Rust tests
/// cover those paths); OTHER is the catch-all for errors without a code of their own.
const NOT_PRODUCED: &[&str] = &["XTCQ_E_PANIC", "XTCQ_E_SEGMENT", "XTCQ_E_OTHER"];

#[test]
fn every_status_code_a_c_caller_can_meet_is_produced() {
    let daemon = Daemon::builder()
        .daemon_defaults()
        .flags(["--records", "4096", "--overflow-capacity", "256"])
        .start();
    // Admits only uid 65534 and group 65534, so this process is refused whoever runs it.
    let refusing = Daemon::builder()
        .daemon_defaults()
        .flags(["--no-allow-self", "--allow-uid", "65534", "--group", "65534"])
        .start();
    let exe = compile_c("tests/c/status_codes.c", daemon.dir(), &[]);
    let out =
        run_within(Command::new(&exe).arg(&daemon.socket).arg(&refusing.socket), Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "status_codes failed:\n{stdout}\n{stderr}\ndaemon log:\n{}",
        daemon.log_text()
    );

    let header = std::fs::read_to_string(workspace_root().join("include/xtcq.h")).expect("include/xtcq.h");
    let codes: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with("XTCQ_E_") || *name == "XTCQ_EMPTY")
        .collect();
    assert!(codes.len() >= 10, "too few status codes found in xtcq.h: {codes:?}");
    for code in codes.iter().filter(|c| !NOT_PRODUCED.contains(c)) {
        assert!(
            stdout.contains(&format!("produced {code} ")),
            "{code} was never produced:\n{stdout}\n{stderr}"
        );
    }
    assert!(stdout.contains("strerror(-999): unknown status"), "{stdout}");
    assert!(
        stdout.contains("late calls returned"),
        "a failing call in an atexit handler must return:\n{stdout}"
    );
}

#[test]
fn a_c_batch_steal_takes_each_job_once_oldest_first() {
    let daemon = Daemon::builder().daemon_defaults().start();
    let exe = compile_c("tests/c/steal_batch.c", daemon.dir(), &[]);
    let out = run_within(Command::new(&exe).arg(&daemon.socket), Duration::from_secs(60));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "steal_batch failed:\n{stdout}\n{stderr}\ndaemon log:\n{}",
        daemon.log_text()
    );
    assert!(stdout.contains("batches of 4, 4, 2, each once"), "{stdout}");
}

/// `examples/c/epoll_wait/epoll_wait.c`: a C consumer waiting in epoll on its thief's wake
/// descriptor and a timerfd together, as a PostgreSQL backend waits on a socket and its
/// latch; jobs pushed by other processes (`xtcq push`) at gaps wake it, and every one is acked.
#[test]
fn a_c_consumer_waits_in_epoll_on_its_wake_descriptor_and_a_timer() {
    let daemon = Daemon::start();
    let exe = compile_c("examples/c/epoll_wait/epoll_wait.c", daemon.dir(), &[]);
    let client = daemon.client();
    client
        .create_queue(&xtcq_client::QueueParams { capacity: 64, ..xtcq_client::QueueParams::new("w") })
        .expect("create");
    let consumer = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["w", "200"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn epoll_wait");
    for batch in 0..20 {
        std::thread::sleep(Duration::from_millis(30));
        let jobs: String = (0..10).map(|i| format!("{batch}-{i}\n")).collect();
        let out = daemon.run_in(&["push", "w"], jobs.as_bytes());
        assert!(out.status.success(), "push: {}", text(&out.stderr));
    }
    let out = xtcq_testkit::wait_bounded(consumer, Duration::from_secs(120), "epoll_wait");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "epoll_wait failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.starts_with("acked 200 jobs"), "{stdout}");
    let wakes: u64 =
        stdout.rsplit(", ").next().and_then(|w| w.split(' ').next()?.parse().ok()).expect("wakes");
    assert!(wakes > 0, "it never slept on the descriptor: {stdout}");
    assert_eq!(daemon.stats()["records"]["queued"].as_u64(), Some(0));
}

/// The daemon killed while the C consumer sleeps in epoll: the descriptor wakes it, and
/// `xtcq_thief_wait_clear` says the daemon is unreachable.
#[test]
fn a_c_consumer_in_epoll_notices_the_daemon_going_away() {
    let mut daemon = Daemon::start();
    let exe = compile_c("examples/c/epoll_wait/epoll_wait.c", daemon.dir(), &[]);
    daemon
        .client()
        .create_queue(&xtcq_client::QueueParams { capacity: 64, ..xtcq_client::QueueParams::new("w") })
        .expect("create");
    let consumer = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["w", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn epoll_wait");
    let pid = consumer.id();
    xtcq_testkit::wait_until(Duration::from_secs(30), "the consumer attached", || {
        daemon.stats()["processes"].as_array().is_some_and(|ps| ps.iter().any(|p| p["pid"] == pid))
    });
    std::thread::sleep(Duration::from_millis(200));
    daemon.kill();
    let out = xtcq_testkit::wait_bounded(consumer, Duration::from_secs(60), "epoll_wait");
    assert!(
        out.status.success() && text(&out.stdout).contains("daemon gone"),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
