//! Pause and resume, through real processes: a paused queue's consumers (`xtcq work`, a
//! library thief asleep in `steal_wait`) take none of its jobs while pushes go on being
//! taken; a resume lets every job run once; the state is shown by `ls`, `stats`, `/metrics`,
//! and outlives a daemon killed and restarted and an export and import; only the queue's
//! owner (or root) may pause it.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use xtcq_testkit::*;

/// Jobs queued before the pause, as the task's scenario asks.
const JOBS: usize = 1000;

/// Lines of `path` (none while it does not exist).
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// `xtcq work QUEUE` in the background, appending each payload to `out`.
fn spawn_worker(d: &Daemon, queue: &str, out: &Path) -> Child {
    let script = format!(r#"echo "$XTCQ_PAYLOAD" >> {}"#, out.display());
    d.xtcq()
        .args(["work", queue, "--jobs", "4", "--", "sh", "-c", &script])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xtcq work")
}

fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// The `paused` field of queue `queue` in `stats --json`.
fn paused_in_stats(d: &Daemon, queue: &str) -> bool {
    let s = d.stats();
    let q = s["queues"].as_array().expect("queues").iter().find(|q| q["info"]["name"] == queue).cloned();
    q.unwrap_or_else(|| panic!("queue {queue} in stats: {s}"))["info"]["paused"] == true
}

/// The STATE cell of queue `queue` in `ls` (the 11th column).
fn state_in_ls(d: &Daemon, queue: &str) -> String {
    let ls = ok(&d.run(&["ls"]));
    let row = ls.lines().find(|l| l.starts_with(&format!("{queue} "))).unwrap_or_else(|| panic!("{ls}"));
    row.split_whitespace().nth(10).expect("a STATE column").to_string()
}

#[test]
fn a_paused_queue_runs_nothing_until_resumed_then_everything_once() {
    let d = Daemon::start();
    ok(&d.run(&["create", "jobs"]));
    let input: String = (0..JOBS).map(|i| format!("job-{i}\n")).collect();
    ok(&d.run_in(&["push", "jobs"], input.as_bytes()));
    let said = ok(&d.run(&["pause", "jobs"]));
    assert!(said.contains("queue jobs paused"), "{said}");
    assert!(ok(&d.run(&["pause", "jobs"])).contains("paused already"));
    assert_eq!(state_in_ls(&d, "jobs"), "paused");
    assert!(paused_in_stats(&d, "jobs"));
    assert!(ok(&d.run(&["stats", "jobs"])).contains("paused:"), "stats says so");

    let out = d.dir().join("ran.txt");
    let worker = spawn_worker(&d, "jobs", &out);
    d.wait_attached(worker.id());
    // Pushes are still taken while paused.
    ok(&d.run_in(&["push", "jobs"], b"late\n"));
    // A steal from the command line finds nothing either (exit 3: empty).
    assert_eq!(code(&d.run(&["steal", "jobs"])), 3, "a paused queue gives nothing");
    // The worker has been attached, looking and sleeping, for a while: still nothing ran.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(lines_of(&out).is_empty(), "ran while paused: {:?}", lines_of(&out));
    assert_eq!(d.stats()["records"]["queued"], JOBS as u64 + 1, "every job still queued");

    let said = ok(&d.run(&["resume", "jobs"]));
    assert!(said.contains("queue jobs resumed"), "{said}");
    assert!(ok(&d.run(&["resume", "jobs"])).contains("was not paused"));
    assert_eq!(state_in_ls(&d, "jobs"), "active");
    wait_until(Duration::from_secs(120), "every job ran after the resume", || lines_of(&out).len() > JOBS);
    stop(worker);
    let mut ran = lines_of(&out);
    ran.sort();
    let mut want: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).chain(["late".to_string()]).collect();
    want.sort();
    assert_eq!(ran, want, "each job ran exactly once");
}

#[test]
fn a_sleeping_library_consumer_takes_nothing_while_paused_and_wakes_on_resume() {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&xtcq_client::QueueParams { capacity: 64, ..xtcq_client::QueueParams::new("q") })
        .expect("create");
    assert!(!c.pause_queue("q").expect("pause"));
    let waiter = {
        let socket = d.socket.clone();
        std::thread::spawn(move || {
            let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
            let t = c.attach_thief("q").expect("thief");
            let job =
                t.steal_wait(Some(Duration::from_secs(60))).expect("steal_wait").expect("a job before 60 s");
            let got = String::from_utf8(job.payload().expect("payload")).expect("utf-8");
            job.ack().expect("ack");
            got
        })
    };
    let owner = c.attach_owner("q").expect("owner");
    owner.push(b"held").expect("push while paused");
    std::thread::sleep(Duration::from_millis(800));
    assert!(!waiter.is_finished(), "the consumer took a job of a paused queue");
    assert!(c.resume_queue("q").expect("resume"));
    assert_eq!(waiter.join().expect("waiter"), "held");
}

#[test]
fn the_pause_outlives_a_daemon_killed_and_restarted_and_an_export_and_import() {
    let flags = [SMALL_SEGMENT, &METRICS_ON_ANY_PORT[..]].concat();
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "p"]));
    ok(&d.run(&["create", "other"]));
    ok(&d.run_in(&["push", "p"], b"a\nb\n"));
    ok(&d.run(&["pause", "p"]));
    let m = scrape_metrics(&d.metrics_addr());
    assert!(m.contains("xtcq_queue_paused{queue=\"p\"} 1"), "{m}");
    assert!(m.contains("xtcq_queue_paused{queue=\"other\"} 0"), "{m}");

    d.kill();
    d.restart_with(&flags, |_| {});
    assert_eq!(state_in_ls(&d, "p"), "paused", "kept by the segment across a kill -9");
    assert_eq!(state_in_ls(&d, "other"), "active");
    assert_eq!(code(&d.run(&["steal", "p"])), 3);
    let m = scrape_metrics(&d.metrics_addr());
    assert!(m.contains("xtcq_queue_paused{queue=\"p\"} 1"), "{m}");

    let dump = d.dir().join("dump.jsonl");
    ok(&d.run(&["export", dump.to_str().expect("utf-8 path")]));
    let e = Daemon::start();
    ok(&e.run(&["import", dump.to_str().expect("utf-8 path")]));
    assert_eq!(state_in_ls(&e, "p"), "paused", "imported paused");
    assert_eq!(state_in_ls(&e, "other"), "active");
    assert_eq!(code(&e.run(&["steal", "p"])), 3);
    ok(&e.run(&["resume", "p"]));
    assert_eq!(e.drain("p"), ["a", "b"]);
}

#[test]
fn pausing_a_queue_that_does_not_exist_names_it() {
    let d = Daemon::start();
    let o = d.run(&["pause", "nosuch"]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("nosuch"), "{}", stderr(&o));
    let o = d.run(&["resume", "nosuch"]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("nosuch"), "{}", stderr(&o));
}

#[test]
fn only_the_owner_or_root_may_pause_a_shared_queue() {
    if !is_root() {
        skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqf{tag}");
    let alice = SystemUser::create(&format!("xtcqfa{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqfb{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let users = ["--group", group.as_str(), "--allow-uid", &alice.user, "--allow-uid", &bob.user];
    let d = Daemon::builder().in_dir(dir).flags([SMALL_SEGMENT, &users[..]].concat()).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let as_user_in = |u: &SystemUser, args: &[&str], stdin: Option<&[u8]>| {
        let mut c = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        run_bounded(&mut c, stdin)
    };
    let as_user = |u: &SystemUser, args: &[&str]| as_user_in(u, args, None);
    ok(&as_user(&alice, &["create", "shared", "--allow-uid", &bob.user]));
    // bob may use the queue, not pause or resume it.
    ok(&as_user_in(&bob, &["push", "shared"], Some(b"x\n")));
    for verb in ["pause", "resume"] {
        let o = as_user(&bob, &[verb, "shared"]);
        assert_eq!(code(&o), 4, "{verb} by bob: {}", stderr(&o));
        assert!(
            stderr(&o).contains("may not pause, resume or cancel the jobs of queue shared"),
            "{}",
            stderr(&o)
        );
    }
    assert_eq!(state_in_ls(&d, "shared"), "active", "bob's refused pause changed nothing");
    ok(&as_user(&alice, &["pause", "shared"]));
    assert_eq!(state_in_ls(&d, "shared"), "paused");
    ok(&d.run(&["resume", "shared"]));
    assert_eq!(state_in_ls(&d, "shared"), "active", "root may too");
}

#[test]
fn the_c_api_pauses_and_resumes_and_says_what_it_was() {
    let d = Daemon::start();
    ok(&d.run(&["create", "c"]));
    let exe = compile_c("tests/c/flow_pause.c", d.dir(), &[]);
    let out = run_within(std::process::Command::new(&exe).arg(&d.socket).arg("c"), Duration::from_secs(60));
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out), "paused\nresumed\n");
    assert_eq!(state_in_ls(&d, "c"), "active");
}
