//! Cancelling jobs by id (`xtcq cancel QUEUE JOB...`, `Client::cancel_job`), with real
//! processes: a queued and a delayed job never run; a running `xtcq work` command is stopped
//! before the cancel returns and the worker goes on with the next job; a library holder sees
//! `cancelled()` and its ack says so; a job finished, dead or unknown is left as it is and
//! said so; cancelled jobs are counted, not dead letters.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::*;

fn push(d: &Daemon, args: &[&str]) -> String {
    ok(&d.run(&[&["push", "--print-handle"], args].concat())).trim().to_string()
}

fn id(s: &str) -> xtcq_client::JobId {
    let (i, b) = s.split_once('.').expect("an id");
    xtcq_client::JobId { index: i.parse().expect("index"), birth: b.parse().expect("birth") }
}

#[test]
fn queued_and_delayed_jobs_never_run_and_a_second_cancel_says_they_finished() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let queued = push(&d, &["q", "queued"]);
    let later = push(&d, &["q", "--delay", "1h", "later"]);
    let kept = push(&d, &["q", "kept"]);
    let o = d.run(&["cancel", "q", &queued, &later]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(&format!("job {queued} of q: cancelled (it was queued")), "{}", stdout(&o));
    assert!(stdout(&o).contains(&format!("job {later} of q: cancelled (it was delayed")), "{}", stdout(&o));
    assert_eq!(d.drain("q"), ["kept"], "only the job not cancelled runs");
    let o = d.run(&["cancel", "q", &queued, "9999.1"]);
    assert_eq!(code(&o), 3, "nothing to cancel: {}", stdout(&o));
    assert!(stdout(&o).contains("had finished already"), "{}", stdout(&o));
    assert!(stdout(&o).contains("no job with this id"), "{}", stdout(&o));
    let s = d.stats();
    let m = &s["queues"][0]["metrics"];
    assert_eq!((m["cancelled"].as_u64(), m["dead_total"].as_u64()), (Some(2), Some(0)), "{s}");
    assert_eq!(code(&d.run(&["cancel", "q", "nonsense"])), 2);
    assert_eq!(code(&d.run(&["cancel", "q"])), 2, "an id is required");
    let _ = kept;
}

#[test]
fn a_running_command_is_stopped_before_the_cancel_returns_and_the_worker_goes_on() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--lease", "1h"]));
    let pids = d.dir().join("pids");
    let script = format!(
        r#"echo $$ >> {p}; case "$XTCQ_PAYLOAD" in long) sleep 300;; *) echo "$XTCQ_PAYLOAD" >> {p}.done;; esac"#,
        p = pids.display()
    );
    let worker = d
        .xtcq()
        .args(["work", "q", "--max-jobs", "2", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn work");
    let long = push(&d, &["q", "long"]);
    let pid: i32 = eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(&pids).ok().and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
    })
    .expect("the long command started");
    let o = d.run(&["cancel", "q", &long]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("cancelled (it was running by pid"), "{}", stdout(&o));
    // Stopped before the cancel returned: gone, or a zombie its worker has yet to reap.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next().map(str::to_string)));
    assert!(matches!(state.as_deref(), None | Some("Z")), "the command still runs: {state:?}");
    // The worker goes on: the next job runs.
    push(&d, &["q", "next"]);
    let out = wait_bounded(worker, Duration::from_secs(60), "worker");
    let done = std::fs::read_to_string(pids.with_extension("done")).unwrap_or_default();
    assert_eq!(done.trim(), "next", "the job after the cancelled one ran: {}", stderr(&out));
    assert!(out.status.success(), "a cancelled job is no failure of the worker: {}", stderr(&out));
    assert!(stderr(&out).contains(&format!("job {long} attempt 1 of q: cancelled")), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 job(s) ok, 0 failed, 0 dead, 0 given back, 1 cancelled;"),
        "{}",
        stderr(&out)
    );
    let s = d.stats();
    assert_eq!(s["queues"][0]["metrics"]["cancelled"], 1, "{s}");
    assert_eq!(s["queues"][0]["metrics"]["dead_total"], 0, "a cancelled job is not a dead letter: {s}");
}

#[test]
fn a_library_holder_sees_its_job_cancelled_and_its_ack_says_so() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let first = push(&d, &["q", "first"]);
    let c = d.client();
    let thief = c.attach_thief("q").expect("thief");
    let job = thief.steal().expect("steal").expect("the job");
    assert!(!job.cancelled(), "held and not cancelled");
    // Cancelled by another process: the command line.
    let o = d.run(&["cancel", "q", &first]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!("cancelled (it was running by pid {}", std::process::id())),
        "{}",
        stdout(&o)
    );
    assert!(job.cancelled(), "the holder sees the cancel");
    assert!(stdout(&d.run(&["job", "q", &first])).contains("cancelled"), "xtcq job says cancelled");
    assert_eq!(c.job_state("q", id(&first)).expect("state"), xtcq_proto::JobState::Cancelled);
    let e = job.extend_lease(Duration::from_secs(5)).expect_err("a lease extension of a cancelled job");
    assert!(matches!(e, xtcq_client::Error::Job(xtcq_shm::JobError::Cancelled { .. })), "{e}");
    let e = job.ack().expect_err("the holder's ack of a cancelled job");
    assert!(matches!(e, xtcq_client::Error::Job(xtcq_shm::JobError::Cancelled { .. })), "{e}");
    assert!(e.to_string().contains("was cancelled"), "{e}");
    assert_eq!(c.cancel_job("q", id(&first)).expect("cancel"), xtcq_proto::CancelOutcome::Finished);
    assert!(thief.steal().expect("steal").is_none(), "a cancelled job never comes back");
}

#[test]
fn a_dead_letter_is_not_cancelled_and_only_the_owner_or_root_may_cancel() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    let doomed = push(&d, &["q", "doomed"]);
    let c = d.client();
    let thief = c.attach_thief("q").expect("thief");
    thief.steal().expect("steal").expect("the job").fail("broken").expect("fail");
    let o = d.run(&["cancel", "q", &doomed]);
    assert_eq!(code(&o), 3, "{}", stdout(&o));
    assert!(stdout(&o).contains("dead letter"), "{}", stdout(&o));
    if !is_root() {
        skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqc{tag}");
    let alice = SystemUser::create(&format!("xtcqca{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqcb{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let users = ["--group", group.as_str(), "--allow-uid", &alice.user, "--allow-uid", &bob.user];
    let d = Daemon::builder().in_dir(dir).flags([SMALL_SEGMENT, &users[..]].concat()).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let as_user = |u: &SystemUser, args: &[&str]| {
        let mut c = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        run_bounded(&mut c, None)
    };
    ok(&as_user(&alice, &["create", "shared", "--allow-uid", &bob.user]));
    let job = ok(&as_user(&alice, &["push", "--print-handle", "shared", "mine"])).trim().to_string();
    let o = as_user(&bob, &["cancel", "shared", &job]);
    assert_eq!(code(&o), 4, "a user the queue is shared with may not cancel: {}", stderr(&o));
    assert!(
        stderr(&o).contains("may not pause, resume or cancel the jobs of queue shared"),
        "{}",
        stderr(&o)
    );
    assert_eq!(d.drain("shared"), ["mine"], "bob's refused cancel changed nothing");
    let job = ok(&as_user(&alice, &["push", "--print-handle", "shared", "again"])).trim().to_string();
    ok(&as_user(&alice, &["cancel", "shared", &job]));
    assert!(d.drain("shared").is_empty(), "the owner's cancel took it");
}

#[test]
fn the_c_api_cancels_and_sets_the_limits() {
    let d = Daemon::start();
    ok(&d.run(&["create", "c"]));
    let queued = push(&d, &["c", "queued"]);
    let (index, birth) = queued.split_once('.').expect("an id");
    let exe = compile_c("tests/c/flow_cancel.c", d.dir(), &[]);
    let out = run_within(
        std::process::Command::new(&exe).arg(&d.socket).args(["c", index, birth]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out), "cancelled\nheld and cancelled\nlimited\n");
    let stats = ok(&d.run(&["stats", "c"]));
    assert!(stats.contains("running:  0 of at most 3 at once"), "{stats}");
    assert!(stats.contains("rate:     at most 200/s, burst 4"), "{stats}");
    assert!(d.drain("c").is_empty(), "the cancelled job never ran");
}
