//! Batches with real `xtcqd` and `xtcq` processes: `xtcq wait --batch` returns once the last
//! job of a sealed batch ended, with its counts, across `kill -9` of workers and of the
//! daemon; the callback job is pushed once; a dead letter makes the wait fail; an open batch
//! never completes; garbage batch words from an attached process hold back no other queue's
//! batch and crash nothing. Knob: `XTCQ_BATCH_JOBS` (5,000).

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use xtcq_testkit::*;

/// Flags of the daemons here: room for the big batch queued at once, a scan every 10 ms.
fn flags() -> Vec<&'static str> {
    let mut f = MEDIUM_SEGMENT.to_vec();
    f.extend(["--lease-scan-interval", "10ms"]);
    f
}

/// `xtcq work QUEUE -j 4`, each command appending its job's payload to `effects`.
fn worker(d: &Daemon, effects: &std::path::Path) -> Child {
    d.xtcq()
        .args(["work", "q", "-j", "4", "--", "sh", "-c", "echo \"$XTCQ_PAYLOAD\" >> \"$EFFECTS\""])
        .env("EFFECTS", effects)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xtcq work")
}

/// The distinct payloads the commands ran.
fn effects(path: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Waits until `n` jobs ran, counting reruns (at most 240 s, or the waiter exits first: a
/// failure). Lines, not distinct payloads: cheap to count every 50 ms.
fn until_ran(path: &std::path::Path, n: usize, waiter: &mut Child, d: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(240);
    let lines = || std::fs::read(path).unwrap_or_default().iter().filter(|&&b| b == b'\n').count();
    while lines() < n {
        assert!(waiter.try_wait().expect("waiter").is_none(), "xtcq wait returned with {n} jobs not yet run");
        assert!(Instant::now() < deadline, "{n} jobs did not run in 240 s\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill9(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn a_batch_completes_once_when_its_last_job_ran_across_worker_and_daemon_kills() {
    let jobs: usize = std::env::var("XTCQ_BATCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(5000);
    // Room for the whole batch queued at once, and its records.
    let room = (jobs + 1024).next_power_of_two().max(16384).to_string();
    let mut flags = flags();
    flags.extend(["--records", room.as_str(), "--overflow-capacity", room.as_str()]);
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--max-attempts", "1000"]));
    ok(&d.run(&["create", "done"]));
    ok(&d.run(&[
        "batch",
        "open",
        "q",
        "farm",
        "--on-complete",
        "farm finished",
        "--on-complete-queue",
        "done",
    ]));
    let payloads: String = (0..jobs).map(|i| format!("j{i}\n")).collect();
    ok(&d.run_in(&["push", "q", "--batch", "farm"], payloads.as_bytes()));
    ok(&d.run(&["batch", "seal", "q", "farm"]));
    let mut waiter = d
        .xtcq()
        .args(["wait", "q", "--batch", "farm"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn xtcq wait");
    let log = d.dir().join("effects");
    let mut w = worker(&d, &log);
    until_ran(&log, jobs / 4, &mut waiter, &d);
    kill9(&mut w);
    w = worker(&d, &log);
    until_ran(&log, jobs / 2, &mut waiter, &d);
    d.kill();
    d.restart_with(&flags, |_| {});
    until_ran(&log, jobs * 3 / 4, &mut waiter, &d);
    kill9(&mut w);
    w = worker(&d, &log);
    let status = wait_timeout(&mut waiter, Duration::from_secs(240)).expect("xtcq wait returned");
    // Every job ran before the wait returned.
    assert_eq!(effects(&log).len(), jobs, "xtcq wait returned before every job ran");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut waiter.stdout.take().expect("stdout"), &mut out).expect("read");
    assert_eq!(status.code(), Some(0), "{out}");
    assert_eq!(
        out.trim(),
        format!("batch farm complete: pushed {jobs} running 0 acked {jobs} dead 0 cancelled 0")
    );
    kill9(&mut w);
    assert_eq!(d.drain("done"), ["farm finished"], "the callback job, at the completion");
    // A daemon adopting the segment after the completion releases no second callback.
    d.kill();
    d.restart_with(&flags, |_| {});
    assert_eq!(d.drain("done"), Vec::<String>::new(), "the callback job, once");
    assert_eq!(d.drain("q"), Vec::<String>::new());
}

#[test]
fn a_batch_with_a_dead_letter_completes_and_its_wait_fails_with_the_counts() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    ok(&d.run_in(&["push", "q", "--batch", "b"], b"ok1\nbad\nok2\n"));
    ok(&d.run(&["batch", "seal", "q", "b"]));
    let mut w = d
        .xtcq()
        .args(["work", "q", "-j", "2", "--", "sh", "-c", "test \"$XTCQ_PAYLOAD\" != bad"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn work");
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "60s"]);
    kill9(&mut w);
    assert_eq!(code(&o), 5, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).trim(), "batch b complete: pushed 3 running 0 acked 2 dead 1 cancelled 0");
}

#[test]
fn an_open_batch_never_completes_and_its_seal_completes_it() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    ok(&d.run_in(&["push", "q", "--batch", "b"], b"x\ny\n"));
    let stats = ok(&d.run(&["stats", "q"]));
    assert!(stats.contains("batch b open: pushed 2 "), "{stats}");
    assert_eq!(d.drain("q"), ["x", "y"]);
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "1s"]);
    assert_eq!(code(&o), 3, "every job ended, but the batch is open: {}", stdout(&o));
    assert!(stdout(&o).starts_with("batch b open: pushed 2"), "{}", stdout(&o));
    ok(&d.run(&["batch", "seal", "q", "b"]));
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "60s"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let refused = d.run_in(&["push", "q", "--batch", "b"], b"late\n");
    assert_eq!(code(&refused), 1);
    assert!(stderr(&refused).contains("the batch is sealed"), "{}", stderr(&refused));
}

/// An attached process scribbles every record's batch word: garbage, and words that name
/// another queue's batch with the right births. That batch still completes, the daemon
/// lives, and its scan (which reads the words) goes on.
#[test]
fn garbage_batch_words_hold_back_no_other_queues_batch() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "a"]));
    ok(&d.run(&["create", "b"]));
    ok(&d.run(&["batch", "open", "a", "x"]));
    ok(&d.run(&["batch", "open", "b", "x"]));
    ok(&d.run_in(&["push", "a", "--batch", "x"], b"1\n2\n3\n"));
    let client = d.client();
    let b = client.batch_progress("b", "x").expect("b's batch");
    let seg = client.segment().expect("segment");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..seg.config().job_records {
        let word = seg.record_batch(i).expect("a word per record");
        let state = seg.records().state(i).expect("state").load();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Queue a's live jobs name b's batch, with their own births; the rest are garbage.
        let forged = u64::from(state.generation() & 0xFF_FFFF) << 40
            | u64::from(b.slot + 1) << 24
            | u64::from(b.generation & 0xFF_FFFF);
        word.store(
            if state.state() == Some(xtcq_shm::State::Queued) { forged } else { rng },
            Ordering::Relaxed,
        );
    }
    ok(&d.run(&["batch", "seal", "b", "x"]));
    let o = d.run(&["wait", "b", "--batch", "x", "--timeout", "30s"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).trim(), "batch x complete: pushed 0 running 0 acked 0 dead 0 cancelled 0");
    ok(&d.run(&["batch", "show", "a", "x"]));
    assert_eq!(d.drain("a"), ["1", "2", "3"]);
}

/// The daemon killed between completing a batch and releasing its callback: the next one
/// releases it when it adopts the segment, once.
#[test]
fn a_callback_the_dead_daemon_did_not_release_is_released_by_the_next_one_once() {
    let flags = flags();
    let mut d = Daemon::builder().flags(&flags).env("XTCQ_FAILPOINTS", "batch.after_complete=kill").start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["batch", "open", "q", "b", "--on-complete", "cb"]));
    ok(&d.run_in(&["push", "q", "--batch", "b"], b"x\n"));
    assert_eq!(d.drain("q"), ["x"]);
    // The seal completes the batch, and the fail point kills the daemon before the callback.
    let _ = d.run(&["batch", "seal", "q", "b"]);
    d.wait_exit(Duration::from_secs(20));
    d.restart_with(&flags, |_| {});
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "30s"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(d.drain("q"), ["cb"], "released by the daemon that adopted the segment");
    d.kill();
    d.restart_with(&flags, |_| {});
    assert_eq!(d.drain("q"), Vec::<String>::new(), "and by no later one");
}

#[test]
fn a_cancelled_job_ends_its_batch_as_cancelled_and_the_wait_fails() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    let ids = ok(&d.run_in(&["push", "q", "--batch", "b", "--print-handle"], b"keep\ndrop\n"));
    let drop_id = ids.lines().nth(1).expect("two ids");
    ok(&d.run(&["cancel", "q", drop_id]));
    ok(&d.run(&["batch", "seal", "q", "b"]));
    assert_eq!(d.drain("q"), ["keep"]);
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "30s"]);
    assert_eq!(code(&o), 5, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).trim(), "batch b complete: pushed 2 running 0 acked 1 dead 0 cancelled 1");
}

/// A producer killed between publishing a job of a batch and counting it as pushed: the job
/// is in the batch all the same (the records are the count), and the batch completes once it
/// ran; only the `pushed` shown is one short, as the book says.
#[test]
fn a_producer_killed_before_counting_its_push_leaves_the_completion_right() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    let o = run_bounded(
        d.xtcq()
            .args(["push", "q", "--batch", "b"])
            .env("XTCQ_FAILPOINTS", "batch.before_count_pushed=kill@3"),
        Some(b"1\n2\n3\n4\n"),
    );
    assert_ne!(code(&o), 0, "the fail point killed the push");
    ok(&d.run(&["batch", "seal", "q", "b"]));
    let client = d.client();
    let thief = client.attach_thief("q").expect("thief");
    let mut ran = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ran.len() < 3 {
        assert!(Instant::now() < deadline, "the three published jobs did not all come: {ran:?}");
        let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "0s"]);
        assert_eq!(code(&o), 3, "complete with {ran:?} run: {}", stdout(&o));
        if let Some(j) = thief.steal_wait(Some(Duration::from_millis(100))).expect("steal") {
            ran.push(String::from_utf8(j.payload().expect("payload")).expect("utf-8"));
            j.ack().expect("ack");
        }
    }
    ran.sort();
    assert_eq!(ran, ["1", "2", "3"]);
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "30s"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).trim(), "batch b complete: pushed 2 running 0 acked 2 dead 0 cancelled 0");
}

#[test]
fn the_c_api_opens_pushes_into_seals_and_waits_for_a_batch() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "c"]));
    let exe = compile_c("tests/c/batches.c", d.dir(), &[]);
    let out = run_within(std::process::Command::new(&exe).arg(&d.socket).arg("c"), Duration::from_secs(60));
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        stdout(&out),
        "status 1 pushed 3\nstatus 3 pushed 3 acked 3 dead 0 cancelled 0\ncallback done\n"
    );
}

#[test]
fn produce_pushes_into_a_batch_and_seals_it_at_the_end_of_its_input() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    ok(&d.run_in(&["produce", "q", "--batch", "b", "--seal"], b"1\n2\n3\n"));
    let shown = ok(&d.run(&["batch", "show", "q", "b", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&shown).expect("json");
    assert_eq!((v["status"].as_str(), v["pushed"].as_u64()), (Some("sealed"), Some(3)), "{shown}");
    assert_eq!(d.drain("q"), ["1", "2", "3"]);
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "30s"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

/// A queue deleted with its batches open: a queue created anew at its place has none of
/// them, and the callback waiting in another queue is gone with them.
#[test]
fn a_deleted_queue_takes_its_batches_and_their_callbacks_with_it() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["create", "cb"]));
    ok(&d.run(&["batch", "open", "q", "x", "--on-complete", "never", "--on-complete-queue", "cb"]));
    ok(&d.run_in(&["push", "q", "--batch", "x"], b"1\n"));
    let delayed = |d: &Daemon| {
        d.stats()["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .find(|q| q["info"]["name"] == "cb")
            .map(|q| q["records"]["delayed"].clone())
    };
    assert_eq!(delayed(&d), Some(serde_json::json!(1)), "the held callback");
    ok(&d.run(&["delete", "q", "--force"]));
    ok(&d.run(&["create", "q"]));
    let o = d.run(&["batch", "show", "q", "x"]);
    assert_eq!(code(&o), 1, "the old batch is shown for the new queue: {}", stdout(&o));
    assert!(stderr(&o).contains("no such batch: the queue has no batch \"x\""), "{}", stderr(&o));
    assert_eq!(delayed(&d), Some(serde_json::json!(0)), "the callback outlived its batch");
    ok(&d.run(&["batch", "open", "q", "x"]));
}

/// Per-queue permissions: a user the queue is not shared with may not open, seal, look at,
/// push into or wait for its batches, nor aim a callback at it.
#[test]
fn only_users_of_a_queue_may_touch_its_batches() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !is_root() {
        skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqs{tag}");
    let alice = SystemUser::create(&format!("xtcqsa{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqsb{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let users = ["--group", group.as_str(), "--allow-uid", &alice.user, "--allow-uid", &bob.user];
    let d = Daemon::builder().in_dir(dir).flags([SMALL_SEGMENT, &users[..]].concat()).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let as_user = |u: &SystemUser, args: &[&str]| {
        let mut c = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        run_bounded(&mut c, Some(b"x\n"))
    };
    ok(&as_user(&alice, &["create", "private"]));
    ok(&as_user(&alice, &["batch", "open", "private", "b"]));
    ok(&as_user(&bob, &["create", "mine"]));
    for args in [
        &["batch", "open", "private", "c"][..],
        &["batch", "seal", "private", "b"],
        &["batch", "show", "private", "b"],
        &["push", "private", "--batch", "b"],
        &["wait", "private", "--batch", "b", "--timeout", "1s"],
        &["batch", "open", "mine", "m", "--on-complete", "x", "--on-complete-queue", "private"],
    ] {
        let o = as_user(&bob, args);
        assert_eq!(code(&o), 4, "bob may not {args:?}: {}{}", stdout(&o), stderr(&o));
    }
    ok(&as_user(&alice, &["push", "private", "--batch", "b"]));
    ok(&as_user(&alice, &["batch", "seal", "private", "b"]));
    let shown = ok(&as_user(&alice, &["batch", "show", "private", "b"]));
    assert!(shown.starts_with("batch b sealed: pushed 1 "), "{shown}");
    assert_eq!(code(&as_user(&bob, &["batch", "show", "mine", "m"])), 1, "bob's refused open made no batch");
}

/// An operator moves a segment with `xtcq export` and `xtcq import` (an upgrade) while a
/// batch is open: batches are not carried, so its callback, held until a completion that
/// now never comes, must not be imported as a job to run at once.
#[test]
fn an_export_and_import_does_not_run_the_callback_of_an_open_batch() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["create", "cb"]));
    ok(&d.run(&["batch", "open", "q", "b", "--on-complete", "report b", "--on-complete-queue", "cb"]));
    ok(&d.run_in(&["push", "q", "--batch", "b"], b"1\n2\n"));
    let dump = d.dir().join("dump");
    ok(&d.run(&["export", dump.to_str().expect("utf-8")]));
    let other = Daemon::start_with(&flags());
    ok(&other.run(&["import", dump.to_str().expect("utf-8")]));
    assert_eq!(other.drain("q"), ["1", "2"], "the batch's jobs, as jobs of no batch");
    assert_eq!(other.drain("cb"), Vec::<String>::new(), "the callback of a batch that never completed ran");
}

/// An operator re-queues a dead letter of a complete batch, then thinks better of it and
/// cancels it: the batch was complete, so its counts stay as they were (the job is not
/// counted dead and cancelled both, nor an acked job taken off).
#[test]
fn a_cancel_after_its_batch_completed_changes_no_count() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    let ids = ok(&d.run_in(&["push", "q", "--batch", "b", "--print-handle"], b"bad\nok\n"));
    let bad = ids.lines().next().expect("two ids").to_string();
    ok(&d.run(&["batch", "seal", "q", "b"]));
    let mut w = d
        .xtcq()
        .args(["work", "q", "-j", "2", "--", "sh", "-c", "test \"$XTCQ_PAYLOAD\" != bad"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn work");
    let o = d.run(&["wait", "q", "--batch", "b", "--timeout", "60s"]);
    kill9(&mut w);
    let counts = "batch b complete: pushed 2 running 0 acked 1 dead 1 cancelled 0";
    assert_eq!((code(&o), stdout(&o).trim()), (5, counts), "{}", stderr(&o));
    ok(&d.run(&["dead", "q", "--requeue"]));
    ok(&d.run(&["cancel", "q", &bad]));
    assert_eq!(ok(&d.run(&["batch", "show", "q", "b"])).trim(), counts, "counts moved after the completion");
}

/// A user of a queue names a batch with a terminal escape and a right-to-left override; the
/// operator's `xtcq stats`, `batch show` and `wait` print the name escaped, as they print
/// queue names read from the segment, never the raw bytes that drive their terminal.
#[test]
fn a_batch_name_with_terminal_escapes_is_printed_escaped() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    let name = "x\u{1b}[2J\u{1b}]0;owned\u{7}\u{202e}y";
    ok(&d.run(&["batch", "open", "q", name]));
    ok(&d.run(&["batch", "seal", "q", name]));
    for args in
        [&["stats"][..], &["stats", "q"], &["batch", "show", "q", name], &["wait", "q", "--batch", name]]
    {
        let o = d.run(args);
        let out = stdout(&o);
        assert!(!out.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{args:?} printed the raw name: {out:?}");
        assert!(out.contains("batch x\\x1b[2J\\x1b]0;owned\\x07\\u{202e}y "), "{args:?}: {out:?}");
    }
}

/// An attached process scribbles every batch-table entry but one real batch's: random status
/// words (some naming the real batch's queue), counts, name lengths and bytes, and callback
/// handles. The daemon's scans, `stats`, `batch show` and a restart read them all and crash
/// on none; the real batch completes with its counts, and its callback comes once.
#[test]
fn scribbled_batch_entries_crash_nothing_and_hold_back_no_other_batch() {
    let flags = flags();
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["create", "cb"]));
    ok(&d.run(&["batch", "open", "q", "real", "--on-complete", "done", "--on-complete-queue", "cb"]));
    ok(&d.run_in(&["push", "q", "--batch", "real"], b"1\n2\n3\n"));
    let client = d.client();
    let real = client.batch_progress("q", "real").expect("the real batch");
    let seg = client.segment().expect("segment");
    let q = seg.queues().into_iter().flatten().find(|i| i.spec.name == "q").expect("q").index;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for slot in (0..xtcq_shm::layout::BATCH_SLOTS).filter(|&s| s != real.slot) {
        let e = seg.batch_entry(slot).expect("an entry");
        let r = next();
        // Half name the real batch's queue, with a status of 0 to 7 (4 to 7 are no status).
        let queue = if r & 1 == 0 { u64::from(q) } else { r >> 40 & 0xFF_FFFF };
        e.word.store((next() & 0xFFFF_FFFF_0000_0000) | (r >> 8 & 7) << 24 | queue, Ordering::Relaxed);
        e.name_len.store(next() as u32 % 100, Ordering::Relaxed);
        for w in &e.name {
            w.store(next(), Ordering::Relaxed);
        }
        for c in [&e.pushed, &e.live, &e.dead, &e.cancelled] {
            c.store(next(), Ordering::Relaxed);
        }
        // Handles of records in the table, at random generations.
        e.callback.store((next() & 0xFFFF_FFFF_0000_0000) | (next() % 16384), Ordering::Relaxed);
        e.seq.store(next() as u32, Ordering::Relaxed);
    }
    drop(seg);
    drop(client);
    for args in [&["stats"][..], &["stats", "q", "--json"], &["batch", "show", "q", "real"]] {
        ok(&d.run(args));
    }
    let _ = d.run(&["batch", "open", "q", "another"]);
    ok(&d.run(&["batch", "seal", "q", "real"]));
    assert_eq!(d.drain("q"), ["1", "2", "3"]);
    let o = d.run(&["wait", "q", "--batch", "real", "--timeout", "30s"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).trim(), "batch real complete: pushed 3 running 0 acked 3 dead 0 cancelled 0");
    assert_eq!(d.drain("cb"), ["done"]);
    // A daemon adopting the scribbled table (it releases complete batches' callbacks).
    d.kill();
    d.restart_with(&flags, |_| {});
    ok(&d.run(&["stats"]));
    assert_eq!(d.drain("cb"), Vec::<String>::new(), "the callback, once");
    ok(&d.run(&["push", "q", "still-serving"]));
    assert_eq!(d.drain("q"), ["still-serving"]);
}

#[test]
fn a_full_batch_table_or_callback_queue_is_no_room_not_a_refusal() {
    let d = Daemon::start();
    ok(&d.run(&["create", "t"]));
    ok(&d.run(&["create", "cb", "--max-records", "1"]));
    ok(&d.run(&["push", "cb", "filler"]));
    let o = d.run(&["batch", "open", "t", "called", "--on-complete", "x", "--on-complete-queue", "cb"]);
    assert_eq!(code(&o), 1, "a full callback queue is no refusal: {}", stderr(&o));
    assert!(stderr(&o).contains("callback job") && !stderr(&o).contains("refused"), "{}", stderr(&o));
    let c = d.client();
    for i in 0..1024 {
        c.open_batch("t", &format!("b{i}"), None).expect("a free entry of the batch table");
    }
    let o = d.run(&["batch", "open", "t", "one-too-many"]);
    assert_eq!(code(&o), 1, "a full batch table is no refusal: {}", stderr(&o));
    assert!(stderr(&o).contains("full") && !stderr(&o).contains("refused"), "{}", stderr(&o));
    let e = c.open_batch("t", "again", None).expect_err("the table is full");
    assert!(matches!(e, xtcq_client::Error::NoRoom(_)) && !e.is_refused(), "{e:?}");
}

#[test]
fn a_push_with_a_key_joins_the_batch_it_names_and_takes_no_other_priority() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--levels", "3"]));
    ok(&d.run(&["batch", "open", "q", "b"]));
    ok(&d.run(&["push", "q", "--batch", "b", "--priority", "2", "low"]));
    ok(&d.run(&["push", "q", "--batch", "b", "--key", "k1", "keyed"]));
    let o = d.run(&["push", "q", "--batch", "b", "--key", "k2", "--priority", "1", "x"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("priority 0"), "{}", stderr(&o));
    ok(&d.run(&["batch", "seal", "q", "b"]));
    let show = ok(&d.run(&["batch", "show", "q", "b", "--json"]));
    assert!(show.contains(r#""pushed":2"#), "the keyed job is in the batch: {show}");
    // Both jobs run, then the batch completes with both acked.
    assert_eq!(d.drain("q"), ["keyed", "low"]);
    let waited = ok(&d.run(&["wait", "q", "--batch", "b", "--timeout", "30s"]));
    assert!(waited.contains("acked 2"), "{waited}");
}

#[test]
fn a_batch_callback_waiting_for_its_batch_says_it_is_held() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["create", "cb"]));
    ok(&d.run(&["batch", "open", "q", "b", "--on-complete", "report", "--on-complete-queue", "cb"]));
    // The callback is the fresh segment's first job.
    let o = ok(&d.run(&["job", "cb", "0.1"]));
    assert!(o.contains("held: a batch's callback job"), "{o}");
    assert!(!o.contains("due in"), "{o}");
}
