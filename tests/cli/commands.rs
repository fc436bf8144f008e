//! The `xtcq` command line end to end: a real daemon (the `xtcqd` binary beside `xtcq` when
//! the workspace built it, else the same daemon embedded in `xtcq`), real `xtcq` processes,
//! their stdout, stderr and exit statuses. Every wait is bounded; every daemon is killed when
//! its guard drops.

use std::io::Write;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xtcq_testkit::*;

#[test]
fn create_ls_push_steal_stats_round_trip() {
    let d = Daemon::start();
    ok(&d.run(&["create", "jobs", "--deques", "2", "--capacity", "64"]));
    // Creating it again: an error, unless --exist-ok with the same settings
    // (tests/client/create_exist_ok.rs: other settings).
    let again = d.run(&["create", "jobs"]);
    assert_eq!(code(&again), 1);
    assert!(stderr(&again).contains("queue already exists: jobs"), "{}", stderr(&again));
    ok(&d.run(&["create", "jobs", "--deques", "2", "--capacity", "64", "--exist-ok"]));

    ok(&d.run(&["push", "jobs", "one", "two"]));
    ok(&d.run_in(&["push", "jobs"], b"three\nfour\n\nfive"));
    let ls = ok(&d.run(&["ls"]));
    assert!(ls.lines().any(|l| l.starts_with("jobs ") && l.split_whitespace().nth(6) == Some("6")), "{ls}");

    let stats = ok(&d.run(&["stats", "jobs"]));
    assert!(stats.contains("queue jobs (lifo, 2 deques x 64"), "{stats}");
    assert!(stats.contains("6 queued"), "{stats}");
    let json: serde_json::Value = serde_json::from_str(&ok(&d.run(&["stats", "--json"]))).expect("json");
    assert_eq!(json["records"]["queued"], 6);

    // Pushed to the overflow ring: FIFO order. The empty line is an empty job.
    let got = ok(&d.run(&["steal", "jobs", "--count", "4"]));
    assert_eq!(got, "one\ntwo\nthree\nfour\n");
    let got = ok(&d.run(&["steal", "jobs", "--count", "0"]));
    assert_eq!(got, "\nfive\n");
    let json: serde_json::Value = serde_json::from_str(&ok(&d.run(&["stats", "--json"]))).expect("json");
    assert_eq!(json["records"]["queued"], 0);
    assert_eq!(json["records"]["claimed"], 0, "every printed job was acked");

    // Empty: exit 3, nothing printed; with a timeout, after about that long.
    let e = d.run(&["steal", "jobs"]);
    assert_eq!(code(&e), 3);
    assert_eq!(stdout(&e), "");
    let t0 = Instant::now();
    let e = d.run(&["steal", "jobs", "--timeout", "300ms"]);
    assert_eq!(code(&e), 3);
    assert!(t0.elapsed() >= Duration::from_millis(300));

    let check = ok(&d.run(&["check"]));
    assert!(check.contains("consistent"), "{check}");
}

#[test]
fn a_waiting_steal_is_woken_by_a_push_from_another_process() {
    let d = Daemon::start();
    ok(&d.run(&["create", "w"]));
    let waiter = d
        .xtcq()
        .args(["steal", "w", "--wait", "--timeout", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    ok(&d.run(&["push", "w", "wake up"]));
    let out = waiter.wait_with_output().expect("wait");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "wake up\n");
    assert!(t0.elapsed() < Duration::from_secs(10), "woken by the push, not by the timeout");
}

#[test]
fn errors_are_clear_and_exit_codes_distinct() {
    let d = Daemon::start();
    ok(&d.run(&["create", "small"]));

    let e = d.run(&["push", "nope", "x"]);
    assert_eq!(code(&e), 1);
    assert!(stderr(&e).contains("no such queue: nope"), "{}", stderr(&e));

    let big = "x".repeat(65);
    let e = d.run(&["push", "small", &big]);
    assert_eq!(code(&e), 1);
    assert!(stderr(&e).contains("payload too large: 65 > 64 bytes"), "{}", stderr(&e));

    let e = d.run(&["steal", "small", "--timeout", "banana"]);
    assert_eq!(code(&e), 2, "{}", stderr(&e));
    assert!(stderr(&e).contains("not a duration"), "{}", stderr(&e));
    assert_eq!(code(&d.run(&["steal"])), 2);
    assert_eq!(code(&d.run(&["create", "bad", "--capacity", "1000"])), 1, "not a power of two");

    // No daemon: exit 4, and the message names the socket.
    let gone = d.dir().join("nobody-here.sock");
    let o = run_bounded(Command::new(xtcq_exe()).arg("--socket").arg(&gone).args(["ls"]), None);
    assert_eq!(code(&o), 4);
    assert!(stderr(&o).contains(&gone.display().to_string()), "{}", stderr(&o));
    assert!(stderr(&o).contains("daemon not running"), "{}", stderr(&o));
    // The same through $XTCQ_SOCKET.
    let o = run_bounded(Command::new(xtcq_exe()).env("XTCQ_SOCKET", &gone).args(["stats"]), None);
    assert_eq!(code(&o), 4);

    // A full queue: a clear error once --timeout passes, and the jobs pushed before stay.
    ok(&d.run(&["create", "tiny", "--deques", "1", "--capacity", "2"]));
    let lines: String = (0..5000).map(|i| format!("{i}\n")).collect();
    let e = d.run_in(&["push", "tiny", "--timeout", "100ms"], lines.as_bytes());
    assert_eq!(code(&e), 1);
    assert!(stderr(&e).contains("full"), "{}", stderr(&e));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&d.run(&["stats", "tiny", "--json"]))).expect("json");
    assert!(json["queues"][0]["records"]["queued"].as_u64().unwrap_or(0) > 1000, "{json}");

    // The daemon kept serving through all of it.
    ok(&d.run(&["ls"]));
}

#[test]
fn produce_then_work_runs_every_job_once_and_dead_letters_failures() {
    let d = Daemon::start();
    ok(&d.run(&["create", "farm", "--max-attempts", "2"]));
    let lines: String = (0..200).map(|i| format!("job-{i}\n")).collect();
    ok(&d.run_in(&["produce", "farm"], lines.as_bytes()));

    let out = d.dir().join("ran.txt");
    // Each job appends its payload (from $XTCQ_PAYLOAD and from stdin) to a file; jobs whose
    // number ends in 7 fail.
    let script = format!(
        r#"read -r line; [ "$line" = "$XTCQ_PAYLOAD" ] || exit 9; echo "$line" >> {}; case "$line" in *7) exit 3;; esac"#,
        out.display()
    );
    let w = d.run(&["work", "farm", "--jobs", "3", "--idle-exit", "500ms", "--", "sh", "-c", &script]);
    assert_eq!(code(&w), 5, "some jobs failed: {}", stderr(&w));
    let ran = std::fs::read_to_string(&out).expect("ran");
    let mut counts = std::collections::BTreeMap::new();
    for l in ran.lines() {
        *counts.entry(l.to_string()).or_insert(0) += 1;
    }
    for i in 0..200 {
        let n = counts.get(&format!("job-{i}")).copied().unwrap_or(0);
        let want = if i % 10 == 7 { 2 } else { 1 };
        assert_eq!(n, want, "job-{i} ran {n} times");
    }
    // The 20 failures are dead letters with their last error.
    let dead = ok(&d.run(&["dead", "farm"]));
    assert_eq!(dead.lines().count(), 21, "{dead}");
    assert!(dead.contains("exit 3"), "{dead}");
    assert!(dead.contains("job-17"), "{dead}");

    // Re-queue one by handle; purge the rest.
    let first = dead.lines().nth(1).and_then(|l| l.split_whitespace().next()).expect("a handle").to_string();
    ok(&d.run(&["dead", "farm", "--requeue", &first]));
    let e = d.run(&["dead", "farm", "--requeue", &first]);
    assert_eq!(code(&e), 1, "no longer a dead letter");
    assert!(stderr(&e).contains("not a dead letter"), "{}", stderr(&e));
    let again = ok(&d.run(&["steal", "farm"]));
    assert!(again.starts_with("job-") && again.trim_end().ends_with('7'), "{again}");
    ok(&d.run(&["dead", "farm", "--purge"]));
    assert_eq!(code(&d.run(&["dead", "farm"])), 3, "no dead letters left");
    assert!(ok(&d.run(&["check"])).contains("consistent"));
}

#[test]
fn a_job_whose_output_fails_is_requeued_not_lost() {
    let d = Daemon::start();
    ok(&d.run(&["create", "p"]));
    ok(&d.run(&["push", "p", "a", "b", "c"]));
    // stdout is a closed pipe: the first job cannot be written, so it is given back.
    let mut child = d
        .xtcq()
        .args(["steal", "p", "--count", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(code(&out), 1, "nothing was written: an error");
    assert!(stderr(&out).contains("cannot write the job to stdout; it was re-queued"), "{}", stderr(&out));
    let got = ok(&d.run(&["steal", "p", "--count", "0"]));
    // The given-back job went to the back of the line.
    let mut jobs: Vec<&str> = got.lines().collect();
    jobs.sort_unstable();
    assert_eq!(jobs, ["a", "b", "c"], "{got}");
}

#[test]
fn check_finds_a_corrupted_segment() {
    let d = Daemon::start();
    ok(&d.run(&["create", "c", "--deques", "1", "--capacity", "64"]));
    ok(&d.run(&["push", "c", "x"]));
    let copy = d.dir().join("copy");
    std::fs::copy(&d.segment, &copy).expect("copy segment");
    let o = run_bounded(Command::new(xtcq_exe()).args(["check", "--segment"]).arg(&copy), None);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    {
        let seg = xtcq_shm::Segment::attach(&copy).expect("attach copy");
        let h = seg.deque_header(0, 0).expect("deque 0");
        let top = h.top.load(std::sync::atomic::Ordering::Relaxed);
        h.bottom.store(top + 100_000, std::sync::atomic::Ordering::Relaxed);
    }
    let o = run_bounded(Command::new(xtcq_exe()).args(["check", "--segment"]).arg(&copy), None);
    assert_eq!(code(&o), 5, "{}", stdout(&o));
    assert!(stdout(&o).contains("INCONSISTENT"), "{}", stdout(&o));
    std::fs::write(&copy, b"not a segment").expect("overwrite");
    let o = run_bounded(Command::new(xtcq_exe()).args(["check", "--segment"]).arg(&copy), None);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("not a valid xtcq segment"), "{}", stderr(&o));
}

#[test]
fn shutdown_stops_the_daemon() {
    let mut d = Daemon::start();
    ok(&d.run(&["shutdown"]));
    let mut child = d.child.take().expect("daemon");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            assert!(st.success(), "{st}");
            break;
        }
        assert!(Instant::now() < deadline, "xtcqd did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn demo_farms_jobs_exactly_once() {
    // The defaults: 100,000 jobs, one producer process, three worker processes.
    let o = run_bounded(Command::new(xtcq_exe()).args(["demo"]).env_remove("XTCQ_SOCKET"), None);
    let out = ok(&o);
    assert!(out.contains("-> 3 worker process(es)"), "{out}");
    assert!(
        out.contains("exactly once 100000 of 100000 ids acked once; 0 missing, 0 more than once"),
        "{out}"
    );
    assert!(out.contains("result       ok"), "{out}");
}

#[test]
fn the_client_library_reconnects_after_a_daemon_restart_and_keeps_its_lease() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "r", "--deques", "1", "--capacity", "64"]));
    let client = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let owner = client.attach_owner("r").expect("owner");
    for i in 0..10u32 {
        owner.push(&i.to_le_bytes()).expect("push");
    }
    // kill -9 the daemon, start another on the same socket and segment.
    let mut child = d.child.take().expect("daemon");
    child.kill().expect("kill");
    child.wait().expect("reap");
    let first_pid = client.daemon().daemon_pid;
    d.restart_with(SMALL_SEGMENT, |_| {});

    // The owner never needed the daemon: it keeps pushing into its deque.
    for i in 10..20u32 {
        owner.push(&i.to_le_bytes()).expect("push while the daemon is away");
    }
    // The next request reconnects by itself; the new daemon adopted our lease.
    let stats = client.stats(Some("r")).expect("stats after the restart");
    assert_eq!(client.reconnects(), 1);
    assert_ne!(client.daemon().daemon_pid, first_pid);
    assert_eq!(stats.queues[0].records.queued, 20);
    assert_eq!(stats.queues[0].deques[0].owner_slot, Some(owner.process_slot()), "lease kept");
    // A second owner is refused: the deque is still ours.
    let other = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    assert!(matches!(other.attach_owner("r"), Err(xtcq_client::Error::NoFreeDeque { .. })));
    // New attachments work over the new connection.
    let thief = client.attach_thief("r").expect("thief after the restart");
    let mut got = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        got.push(u32::from_le_bytes(j.payload().expect("payload")[..4].try_into().expect("4 bytes")));
        j.ack().expect("ack");
    }
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    // The lease taken over the first connection is given back over the second.
    owner.detach().expect("detach after the restart");
    other.attach_owner("r").expect("the deque is free again");

    // A daemon restarted with --recreate serves a new segment: requests say so, and so do
    // this client's handles on the old one (they check the segment's retired mark), instead
    // of feeding a segment nobody reads. A consumer asleep in steal_wait is woken to say it.
    let owner = client.attach_owner("r").expect("owner");
    let injector = client.attach_injector("r").expect("injector");
    let mut d = d;
    let mut child = d.child.take().expect("daemon");
    child.kill().expect("kill");
    child.wait().expect("reap");
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let thief = &thief;
        s.spawn(move || {
            let t0 = Instant::now();
            let r = thief.steal_wait(Some(Duration::from_secs(60))).map(|j| j.is_some());
            let _ = tx.send((r, t0.elapsed()));
        });
        // Asleep by now (it looks for 20 µs, then sleeps).
        std::thread::sleep(Duration::from_millis(200));
        let mut flags = SMALL_SEGMENT.to_vec();
        flags.push("--recreate");
        d.restart_with(&flags, |_| {});
        let (r, waited) = rx.recv_timeout(Duration::from_secs(20)).expect("the sleeping steal was not woken");
        assert!(matches!(r, Err(xtcq_client::Error::SegmentReplaced { .. })), "{r:?} after {waited:?}");
        let e = owner.push(b"x").expect_err("a push into the retired segment");
        assert!(matches!(e, xtcq_client::Error::SegmentReplaced { .. }), "{e:?}");
        assert!(matches!(owner.pop(), Err(xtcq_client::Error::SegmentReplaced { .. })));
        assert!(matches!(injector.push(b"x"), Err(xtcq_client::Error::SegmentReplaced { .. })));
        assert!(matches!(thief.steal_batch(4), Err(xtcq_client::Error::SegmentReplaced { .. })));
        let e = client.stats(None).expect_err("the segment was replaced");
        assert!(matches!(e, xtcq_client::Error::SegmentReplaced { .. }), "{e:?}");
        assert!(e.to_string().contains("new segment"), "{e}");
    });
}

#[test]
fn work_extends_the_lease_of_a_job_that_outlives_it() {
    let d = Daemon::start();
    // A 300 ms lease, and a job that takes 1.2 s: without heartbeats the daemon would
    // re-queue it after 300 ms and a second worker would run it again.
    ok(&d.run(&["create", "slow", "--lease", "300ms"]));
    ok(&d.run(&["push", "slow", "long job"]));
    let out = d.dir().join("ran.txt");
    let script = format!(r#"echo "$XTCQ_PAYLOAD" >> {}; sleep 1.2"#, out.display());
    let w = d.run(&["work", "slow", "--jobs", "2", "--idle-exit", "1s", "--", "sh", "-c", &script]);
    assert_eq!(code(&w), 0, "{}", stderr(&w));
    assert!(!stderr(&w).contains("lease expired"), "{}", stderr(&w));
    assert_eq!(std::fs::read_to_string(&out).expect("ran"), "long job\n", "run exactly once");
    let json: serde_json::Value = serde_json::from_str(&ok(&d.run(&["stats", "--json"]))).expect("json");
    assert_eq!(json["records"]["queued"], 0);
    assert_eq!(json["records"]["claimed"], 0);
}

#[test]
fn work_runs_a_payload_larger_than_a_pipe_and_the_environment_allow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flags = [
        "--queues",
        "1",
        "--deques-per-queue",
        "1",
        "--deque-capacity",
        "2",
        "--records",
        "8",
        "--payload-bytes",
        "200000",
        "--process-slots",
        "8",
        "--overflow-capacity",
        "8",
    ];
    let d = Daemon::builder().in_dir(dir).flags(flags).start();
    ok(&d.run(&["create", "big", "--deques", "1", "--capacity", "2", "--lease", "300ms"]));
    // 150,000 bytes: more than a pipe holds (64 KiB) and than one environment string may be
    // (128 KiB).
    let payload = "x".repeat(150_000);
    ok(&d.run_in(&["push", "big"], format!("{payload}\n").as_bytes()));
    let out = d.dir().join("out.txt");
    // The command reads nothing for 1.2 s (4 leases): the payload write must not hold up
    // the heartbeats, or the job would be re-queued and run twice.
    let script = format!(r#"sleep 1.2; n=$(wc -c); echo "$n ${{#XTCQ_PAYLOAD}}" >> {}"#, out.display());
    let w = d.run(&["work", "big", "--jobs", "2", "--idle-exit", "1s", "--", "sh", "-c", &script]);
    assert_eq!(code(&w), 0, "{}", stderr(&w));
    assert_eq!(
        std::fs::read_to_string(&out).expect("ran"),
        "150000 0\n",
        "once, whole payload on stdin only"
    );
}

#[test]
fn a_first_interrupt_lets_running_jobs_finish_a_second_gives_them_back() {
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    ok(&d.run(&["create", "int", "--max-attempts", "1"]));
    ok(&d.run(&["push", "int", "short", "long"]));
    let out = d.dir().join("out.txt");
    // As from a terminal: `work` leads a process group, and Ctrl-C signals the whole group.
    let script = format!(
        r#"case "$XTCQ_PAYLOAD" in short) sleep 0.8;; long) sleep 30;; esac; echo "$XTCQ_PAYLOAD" >> {}"#,
        out.display()
    );
    let spawn = || {
        d.xtcq()
            .args(["work", "int", "--", "sh", "-c", &script])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn work")
    };
    let interrupt = |c: &Child| {
        let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("pid");
        rustix::process::kill_process_group(pid, rustix::process::Signal::INT).expect("SIGINT");
    };
    let wait = |c: Child| -> (i32, String) {
        let o = wait_bounded(c, Duration::from_secs(20), "xtcq work");
        (code(&o), stderr(&o))
    };
    let queued = || {
        let j: serde_json::Value = serde_json::from_str(&ok(&d.run(&["stats", "--json"]))).expect("json");
        (j["records"]["queued"].as_u64(), j["records"]["claimed"].as_u64())
    };

    // One job at a time: "short" (FIFO from the ring) first. Ctrl-C while it runs: it finishes.
    let w = spawn();
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&w);
    let (code1, err1) = wait(w);
    assert_eq!(code1, 0, "{err1}");
    assert_eq!(std::fs::read_to_string(&out).expect("ran"), "short\n");
    assert_eq!(queued(), (Some(1), Some(0)), "short acked, long never taken");

    // "long": a first Ctrl-C waits for it; a second kills it, and it goes back to the queue.
    let w = spawn();
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&w);
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&w);
    let (code2, err2) = wait(w);
    assert_eq!(code2, 0, "the killed job was given back, not failed: {err2}");
    assert!(err2.contains("interrupted"), "{err2}");
    assert_eq!(std::fs::read_to_string(&out).expect("ran"), "short\n", "long never finished");
    assert_eq!(queued(), (Some(1), Some(0)), "long is back in the queue");
    // Not counted as an attempt: the queue allows one, and "long" is not a dead letter.
    assert!(err2.contains("not counted as an attempt"), "{err2}");
    assert_eq!(ok(&d.run(&["steal", "int"])), "long\n");
}

/// `xtcq steal` that cannot write the job (its stdout is a pipe nobody reads) gives it back
/// without counting an attempt: with `--max-attempts 1`, a counted give-back would have made
/// it a dead letter.
#[test]
fn steal_to_a_closed_pipe_gives_the_job_back_uncounted() {
    let d = Daemon::start();
    ok(&d.run(&["create", "p", "--max-attempts", "1"]));
    ok(&d.run(&["push", "p", "only"]));
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let child = d
        .xtcq()
        .args(["steal", "p"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steal");
    let o = wait_bounded(child, Duration::from_secs(20), "xtcq steal");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write the job to stdout; it was re-queued"), "{err}");
    let dead = d.run(&["dead", "p"]);
    assert!(!stdout(&dead).contains("only"), "a dead letter: {}", stdout(&dead));
    assert_eq!(ok(&d.run(&["steal", "p"])), "only\n");
}

/// `xtcq demo` runs the daemon built into `xtcq`, whatever sits beside it: here an `xtcqd`
/// that is another build (a stand-in that fails at once, as a daemon of another segment
/// layout would for this `xtcq`), and then `xtcq` alone in a directory.
#[test]
fn demo_runs_its_own_daemon_whatever_xtcqd_is_beside_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let alone = dir.path().join("xtcq");
    std::fs::copy(xtcq_exe(), &alone).expect("copy xtcq");
    // A child another test thread forked while the copy's file was open for writing holds
    // it open until that child execs: running the copy meanwhile fails with ETXTBSY.
    let ran = eventually(Duration::from_secs(30), || match Command::new(&alone).arg("--version").output() {
        Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => None,
        r => Some(r),
    });
    ran.expect("the copy never stopped being busy").expect("run the copy");
    let demo = || {
        run_bounded(
            Command::new(&alone).args(["demo", "--jobs", "5000", "--workers", "2"]).env_remove("XTCQ_SOCKET"),
            None,
        )
    };
    let out = ok(&demo());
    assert!(out.contains("exactly once 5000 of 5000 ids acked once; 0 missing, 0 more than once"), "{out}");
    let other = dir.path().join("xtcqd");
    std::fs::write(&other, "#!/bin/sh\necho 'another build' >&2\nexit 1\n").expect("write a stand-in");
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = ok(&demo());
    assert!(out.contains("exactly once 5000 of 5000 ids acked once; 0 missing, 0 more than once"), "{out}");
}

/// `xtcq __xtcqd` takes the global `--socket` like any other subcommand, and serves there.
#[test]
fn the_embedded_daemon_serves_on_the_socket_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("s.sock");
    let mut flags: Vec<String> = vec!["--segment".into(), dir.path().join("seg").display().to_string()];
    flags.extend(SMALL_SEGMENT.iter().map(|s| s.to_string()));
    let mut child = Command::new(xtcq_exe())
        .arg("--socket")
        .arg(&socket)
        .arg("__xtcqd")
        .args(&flags)
        .env_remove("XTCQ_SOCKET")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the embedded daemon is not serving {}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = run_bounded(Command::new(xtcq_exe()).arg("--socket").arg(&socket).arg("shutdown"), None);
    ok(&o);
    let st = child.wait().expect("wait");
    assert!(st.success(), "{st}");
}

/// `xtcq check` on the daemon's segment: exit 0, "consistent".
#[track_caller]
fn check_ok(d: &Daemon) {
    let c = ok(&d.run(&["check"]));
    assert!(c.contains("consistent") && !c.contains("INCONSISTENT"), "{c}");
}

/// Names of the queues `xtcq ls` lists.
fn queues(d: &Daemon) -> Vec<String> {
    ok(&d.run(&["ls"]))
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Spawns `xtcq ARGS` in the background; stdin piped (held open by the returned child).
fn spawn_xtcq(d: &Daemon, args: &[&str]) -> Child {
    d.xtcq()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xtcq")
}

#[test]
fn delete_refuses_jobs_unless_forced_then_the_name_is_created_anew_and_empty() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--deques", "2", "--capacity", "64", "--max-attempts", "1"]));
    ok(&d.run(&["create", "other"]));
    ok(&d.run(&["push", "other", "stays"]));
    let pushed = ok(&d.run(&["push", "q", "--print-handle", "a", "b", "c"]));
    let old_handles: Vec<&str> = pushed.lines().collect();
    assert_eq!(old_handles.len(), 3, "{pushed}");
    // One job fails once, at the queue's limit of one attempt: a dead letter.
    let w = d.run(&["work", "q", "--max-jobs", "1", "--idle-exit", "300ms", "--", "sh", "-c", "exit 1"]);
    assert_eq!(code(&w), 5, "{}", stderr(&w));
    let dead = ok(&d.run(&["dead", "q"]));
    let dead_handle =
        dead.lines().nth(1).and_then(|l| l.split_whitespace().next()).expect("dead").to_string();
    check_ok(&d);

    // Jobs: refused, saying how many and what to do; nothing changed.
    let e = d.run(&["delete", "q"]);
    assert_eq!(code(&e), 1, "{}", stderr(&e));
    let msg = stderr(&e);
    assert!(
        msg.starts_with("xtcq: error: queue q still holds 2 queued job(s) and 1 dead letter(s)"),
        "{msg}"
    );
    assert!(msg.contains("--force"), "{msg}");
    assert_eq!(queues(&d), ["q", "other"]);
    check_ok(&d);

    // Forced: the jobs and the dead letter are dropped, and the queue is gone.
    let f = d.run(&["delete", "q", "--force"]);
    assert_eq!(code(&f), 0, "{}", stderr(&f));
    assert!(stderr(&f).contains("dropping 2 queued job(s) and 1 dead letter(s)"), "{}", stderr(&f));
    assert_eq!(queues(&d), ["other"]);
    let e = d.run(&["stats", "q"]);
    assert_eq!(code(&e), 1);
    assert!(stderr(&e).contains("no such queue: q"), "{}", stderr(&e));
    assert_eq!(code(&d.run(&["steal", "q"])), 1, "nothing to steal from");
    check_ok(&d);
    let json: serde_json::Value = serde_json::from_str(&ok(&d.run(&["stats", "--json"]))).expect("json");
    assert_eq!((json["records"]["queued"].as_u64(), json["records"]["dead"].as_u64()), (Some(1), Some(0)));

    // The same name, another spec: a new queue, empty.
    ok(&d.run(&["create", "q", "--deques", "1", "--capacity", "4", "--flavor", "fifo"]));
    let ls = ok(&d.run(&["ls"]));
    let row: Vec<&str> =
        ls.lines().find(|l| l.starts_with("q ")).expect("q listed").split_whitespace().collect();
    assert_eq!(row[..7], ["q", "fifo", "1", "4", "-", "-", "0"], "{ls}");
    assert_eq!(code(&d.run(&["steal", "q"])), 3, "the new queue starts empty");
    assert_eq!(code(&d.run(&["dead", "q"])), 3, "and without dead letters");
    check_ok(&d);
    // Every free record filled by the new queue, so the old jobs' records are reused.
    let lines: String = (0..4095).map(|i| format!("new-{i}\n")).collect();
    ok(&d.run_in(&["push", "q"], lines.as_bytes()));
    // Handles from before the delete act on nothing.
    for h in old_handles.iter().copied().chain([dead_handle.as_str()]) {
        for verb in ["--requeue", "--purge"] {
            let e = d.run(&["dead", "q", verb, h]);
            assert_eq!(code(&e), 1, "{verb} {h}: {}", stderr(&e));
            assert!(stderr(&e).contains("not a dead letter"), "{}", stderr(&e));
        }
    }
    check_ok(&d);
    // Only the new jobs come out.
    let got = ok(&d.run(&["steal", "q", "--count", "0"]));
    assert_eq!(got.lines().count(), 4095);
    assert!(got.lines().all(|l| l.starts_with("new-")), "{got}");
    assert_eq!(ok(&d.run(&["steal", "other"])), "stays\n", "the other queue kept its job");
    ok(&d.run(&["delete", "q"]));
    ok(&d.run(&["delete", "other"]));
    assert!(queues(&d).is_empty());
    check_ok(&d);
}

#[test]
fn delete_of_no_such_queue_is_exit_1_and_bad_arguments_exit_2() {
    let d = Daemon::start();
    let e = d.run(&["delete", "nope"]);
    assert_eq!(code(&e), 1);
    assert_eq!(stderr(&e), "xtcq: error: no such queue: nope\n");
    let e = d.run(&["delete", "nope", "--force"]);
    assert_eq!(code(&e), 1);
    assert!(stderr(&e).contains("no such queue: nope"), "{}", stderr(&e));
    ok(&d.run(&["create", "q"]));
    for args in [&["delete"][..], &["delete", "q", "r"], &["delete", "q", "--forse"], &["delete", "--force"]]
    {
        let e = d.run(args);
        assert_eq!(code(&e), 2, "{args:?}: {}", stderr(&e));
    }
    assert_eq!(queues(&d), ["q"], "no bad invocation deleted anything");
    // Twice: the second finds nothing.
    ok(&d.run(&["delete", "q"]));
    assert_eq!(code(&d.run(&["delete", "q"])), 1);
    let gone = d.dir().join("nobody-here.sock");
    let o = run_bounded(Command::new(xtcq_exe()).arg("--socket").arg(&gone).args(["delete", "q"]), None);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    check_ok(&d);
}

#[test]
fn delete_is_refused_while_a_thief_or_an_owner_process_is_attached() {
    let d = Daemon::start();
    ok(&d.run(&["create", "t"]));
    ok(&d.run(&["create", "o", "--deques", "1"]));

    // A thief waiting for jobs: attached until it exits.
    let mut thief = spawn_xtcq(&d, &["steal", "t", "--wait", "--timeout", "60s"]);
    d.wait_attached(thief.id());
    for force in [&["delete", "t"][..], &["delete", "t", "--force"]] {
        let e = d.run(force);
        assert_eq!(code(&e), 1, "{}", stderr(&e));
        let msg = stderr(&e);
        assert!(msg.contains("queue t is in use"), "{msg}");
        assert!(msg.contains(&format!("pid {} (thief)", thief.id())), "{msg}");
        assert!(msg.contains("stop those processes"), "{msg}");
    }
    // Another queue is not in its way.
    ok(&d.run(&["create", "spare"]));
    ok(&d.run(&["delete", "spare"]));
    check_ok(&d);
    thief.kill().expect("kill thief");
    thief.wait().expect("reap thief");
    // Right after it exited: the daemon gives back its slot and the delete goes through.
    ok(&d.run(&["delete", "t"]));
    check_ok(&d);

    // A producer owning a deque, still running (its stdin open).
    let mut owner = spawn_xtcq(&d, &["produce", "o"]);
    owner.stdin.as_mut().expect("stdin").write_all(b"one job\n").expect("write");
    d.wait_attached(owner.id());
    let e = d.run(&["delete", "o", "--force"]);
    assert_eq!(code(&e), 1, "{}", stderr(&e));
    assert!(stderr(&e).contains(&format!("pid {} (owner of deque 0)", owner.id())), "{}", stderr(&e));
    assert_eq!(queues(&d), ["o"]);
    check_ok(&d);
    // It finishes (stdin closed) and exits: its job stays, so only --force deletes the queue.
    drop(owner.stdin.take());
    let st = owner.wait().expect("reap producer");
    assert!(st.success(), "{st}");
    let e = d.run(&["delete", "o"]);
    assert_eq!(code(&e), 1, "{}", stderr(&e));
    assert!(stderr(&e).contains("1 queued job(s) and 0 dead letter(s)"), "{}", stderr(&e));
    ok(&d.run(&["delete", "o", "--force"]));
    assert!(queues(&d).is_empty());
    check_ok(&d);
}

#[test]
fn after_a_daemon_restart_a_process_attached_before_it_blocks_every_delete_until_it_exits() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "used"]));
    ok(&d.run(&["create", "unused"]));
    let mut thief = spawn_xtcq(&d, &["steal", "used", "--wait", "--timeout", "60s"]);
    d.wait_attached(thief.id());
    ok(&d.run(&["create", "before"]));
    let e = d.run(&["delete", "used"]);
    assert_eq!(code(&e), 1);
    ok(&d.run(&["delete", "unused"]));
    ok(&d.run(&["create", "unused"]));

    // kill -9 the daemon; a new one adopts the segment and the live thief's slot, but not the
    // knowledge of which queue the thief uses.
    let mut child = d.child.take().expect("daemon");
    child.kill().expect("kill");
    child.wait().expect("reap");
    d.restart_with(SMALL_SEGMENT, |_| {});
    for q in ["unused", "before", "used"] {
        let e = d.run(&["delete", q]);
        assert_eq!(code(&e), 1, "{q}: {}", stderr(&e));
        let msg = stderr(&e);
        assert!(msg.contains(&format!("pid {} (attached before xtcqd restarted", thief.id())), "{msg}");
    }
    assert_eq!(queues(&d), ["used", "unused", "before"]);
    check_ok(&d);
    thief.kill().expect("kill thief");
    thief.wait().expect("reap thief");
    for q in ["unused", "before", "used"] {
        ok(&d.run(&["delete", q]));
    }
    assert!(queues(&d).is_empty());
    check_ok(&d);
}

#[test]
fn users_and_groups_are_named_through_the_name_service() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create a user and a group");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tag = std::process::id() % 100_000;
    let (alice, farm, bob) = (format!("xtcqa{tag}"), format!("xtcqf{tag}"), format!("xtcqb{tag}"));
    let alice = SystemUser::create(&alice, &farm);
    let bob = SystemUser::create(&bob, &format!("xtcqo{tag}"));

    // A name that does not exist is a clear error naming it, and leaves nothing behind.
    let dir = tempfile::tempdir().unwrap();
    let bad = run_bounded(
        xtcqd()
            .arg("--socket")
            .arg(dir.path().join("s.sock"))
            .arg("--segment")
            .arg(dir.path().join("seg"))
            .args(["--allow-uid", "no-such-user-xyz"]),
        None,
    );
    assert_ne!(code(&bad), 0);
    assert!(stderr(&bad).contains("--allow-uid: no such user \"no-such-user-xyz\""), "{}", stderr(&bad));

    // The daemon shares with the group by name and allows alice by name.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--group", &alice.group, "--allow-uid", &alice.user]);
    let d = Daemon::builder().in_dir(dir).flags(&flags).start();
    // The queue is root's; alice may use it because it is shared with her by name.
    ok(&d.run(&["create", "named", "--allow-uid", &alice.user]));
    let as_user = |u: &SystemUser, args: &[&str]| {
        let mut c = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        c
    };
    ok(&run_bounded(&mut as_user(&alice, &["push", "named"]), Some(b"one\n")));
    // A consumer of alice's waits, attached, while root reads the process table.
    let waiter = as_user(&alice, &["steal", "named", "--wait", "--timeout", "30s", "--count", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steal");
    let shown = (0..500)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            ok(&d.run(&["stats"]))
        })
        .find(|s| s.contains(&format!("({})", alice.user)));
    assert!(shown.is_some(), "stats never showed {}'s name: {}", alice.user, ok(&d.run(&["stats"])));
    ok(&d.run_in(&["push", "named"], b"two\n"));
    let got = wait_bounded(waiter, Duration::from_secs(60), "alice's steal");
    assert_eq!(stdout(&got), "one\ntwo\n", "{}", stderr(&got));

    // bob is in neither list: refused, and the message names him and what is allowed. (The
    // socket is opened to all first, so that the daemon's own check is what refuses him.)
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let refused = run_bounded(&mut as_user(&bob, &["ls"]), None);
    assert_ne!(code(&refused), 0, "{}", stderr(&refused));
    let text = stderr(&refused);
    for want in [
        format!("uid {} ({})", bob.id("-u"), bob.user),
        format!("uid {} ({})", alice.id("-u"), alice.user),
        format!("gid {} ({})", alice.id("-g"), alice.group),
    ] {
        assert!(text.contains(&want), "{want:?} missing from: {text}");
    }
}
