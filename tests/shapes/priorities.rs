//! Priority levels through real processes: `xtcq push --priority` and `xtcq produce
//! --priority` from several processes at once, consumers (`xtcq steal`, `xtcq work`, a
//! library thief) taking the most urgent level first, aging, and a job's priority kept across
//! a delay, a nack, a holder's kill -9, a daemon's kill -9 and restart, and an export and
//! import; and the C API's create with levels and push at a priority.
//!
//! Payloads are `PRIORITY-SOURCE-N`, so each check reads a job's level from its text.

use std::io::Write;
use std::mem::{offset_of, size_of};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use xtcq_shm::layout::{QueueControl, QueueEntry, SegmentHeader, WaitWord};
use xtcq_testkit::*;

/// Jobs each pushing process pushes.
const PER: usize = 150;

/// The command line's small segment, with room for 4 levels of 2 deques.
fn flags() -> Vec<&'static str> {
    let mut f = SMALL_SEGMENT.to_vec();
    let i = f.iter().position(|&x| x == "--deques-per-queue").expect("--deques-per-queue");
    f[i + 1] = "8";
    f
}

/// The priority a payload names.
fn priority(job: &str) -> u32 {
    job.split('-').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("payload {job:?}"))
}

/// `xtcq ARGS` in the background, fed `input` on stdin.
fn spawn_fed(d: &Daemon, args: &[&str], input: String) -> Child {
    let mut c = d
        .xtcq()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xtcq");
    let mut stdin = c.stdin.take().expect("stdin");
    std::thread::spawn(move || stdin.write_all(input.as_bytes()).expect("feed stdin"));
    c
}

/// Waits for `c`; its stdout lines, after asserting it succeeded.
fn lines_of(c: Child) -> Vec<String> {
    let out = c.wait_with_output().expect("wait");
    ok(&out).lines().map(str::to_string).collect()
}

/// What a background `xtcq steal` took, in its order: it may find nothing (exit 3, empty)
/// when others raced it to every job.
fn taken_by(c: Child) -> Vec<String> {
    let out = c.wait_with_output().expect("wait");
    assert!([0, 3].contains(&code(&out)), "xtcq steal: {}", stderr(&out));
    stdout(&out).lines().map(str::to_string).collect()
}

/// Every job of queue `q`, as one `xtcq steal` process takes them, in its order.
fn steal_all(d: &Daemon, q: &str) -> Vec<String> {
    ok(&d.run(&["steal", q, "--count", "0"])).lines().map(str::to_string).collect()
}

#[test]
fn one_consumer_takes_what_many_processes_pushed_most_urgent_first() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--levels", "4", "--flavor", "fifo"]));
    // Four one-shot pushers (the overflow rings) and two owners (their deques), at once,
    // each at its own priority, more urgent ones starting last.
    let sources = [("a", 3, "push"), ("b", 2, "produce"), ("c", 2, "push"), ("d", 1, "push")];
    let sources = sources.into_iter().chain([("e", 0, "produce"), ("f", 0, "push")]);
    let mut expected = Vec::new();
    let mut pushers = Vec::new();
    for (src, p, how) in sources {
        let jobs: Vec<String> = (0..PER).map(|i| format!("{p}-{src}-{i}")).collect();
        let input = jobs.iter().map(|j| format!("{j}\n")).collect();
        expected.extend(jobs);
        pushers.push(spawn_fed(&d, &[how, "q", "--priority", &p.to_string()], input));
    }
    for c in pushers {
        lines_of(c);
    }
    let got = steal_all(&d, "q");

    let (mut sorted, mut want) = (got.clone(), expected);
    sorted.sort();
    want.sort();
    assert!(sorted == want, "every job once: {} taken of {}", sorted.len(), want.len());
    let levels: Vec<u32> = got.iter().map(|j| priority(j)).collect();
    assert!(levels.windows(2).all(|w| w[0] <= w[1]), "a job taken while a more urgent one waited: {got:?}");
    // FIFO within a level: each source's jobs in the order it pushed them.
    for src in ["a", "b", "c", "d", "e", "f"] {
        let n: Vec<usize> = got
            .iter()
            .filter(|j| j.split('-').nth(1) == Some(src))
            .map(|j| j.rsplit('-').next().and_then(|n| n.parse().ok()).expect("N"))
            .collect();
        assert!(n.windows(2).all(|w| w[0] < w[1]), "source {src} out of order: {n:?}");
    }
}

#[test]
fn racing_consumers_take_no_waiting_urgent_job_after_a_less_urgent_one() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--levels", "3", "--flavor", "fifo"]));
    // The least urgent first: a queue that ignored levels would hand them out first.
    let batch = |p: u32| -> String { (0..PER).map(|i| format!("{p}-pre-{i}\n")).collect() };
    ok(&d.run_in(&["push", "q", "--priority", "2"], batch(2).as_bytes()));
    ok(&d.run_in(&["push", "q", "--priority", "0"], batch(0).as_bytes()));
    // Three consumers race, while another process pushes at priority 1.
    let consumers: Vec<Child> =
        (0..3).map(|_| spawn_fed(&d, &["steal", "q", "--count", "0"], String::new())).collect();
    let late: String = (0..PER).map(|i| format!("1-late-{i}\n")).collect();
    let pusher = spawn_fed(&d, &["push", "q", "--priority", "1"], late);
    lines_of(pusher);
    let views: Vec<Vec<String>> = consumers.into_iter().map(taken_by).collect();
    let rest = d.drain("q");

    let mut all: Vec<String> = views.iter().flatten().cloned().chain(rest).collect();
    all.sort();
    let mut want: Vec<String> = [(2, "pre"), (0, "pre"), (1, "late")]
        .iter()
        .flat_map(|(p, s)| (0..PER).map(move |i| format!("{p}-{s}-{i}")))
        .collect();
    want.sort();
    assert!(all == want, "every job once: {} taken of {}", all.len(), want.len());
    // Every priority-0 job was queued before any consumer started, so none may come after a
    // priority-2 job in a consumer's own order: by then it had seen level 0 empty.
    for view in &views {
        if let Some(first_low) = view.iter().position(|j| priority(j) == 2) {
            let after = view[first_low..].iter().find(|j| priority(j) == 0);
            assert!(after.is_none(), "{after:?} taken after {}: {view:?}", view[first_low]);
        }
    }
    assert!(views.iter().flatten().any(|j| priority(j) == 0), "the consumers took the urgent jobs");
}

#[test]
fn aging_takes_a_waiting_low_job_every_nth_take() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--levels", "4", "--aging", "5", "--flavor", "fifo"]));
    ok(&d.run_in(&["push", "q", "--priority", "3"], b"3-low-0\n3-low-1\n3-low-2\n"));
    let urgent: String = (0..20).map(|i| format!("0-hot-{i}\n")).collect();
    ok(&d.run_in(&["push", "q"], urgent.as_bytes()));
    let got = steal_all(&d, "q");
    assert_eq!(got.len(), 23);
    let low: Vec<usize> = got.iter().enumerate().filter(|(_, j)| priority(j) == 3).map(|(i, _)| i).collect();
    assert_eq!(low, [4, 9, 14], "the 5th, 10th and 15th takes are aged: {got:?}");
    let stats = ok(&d.run(&["stats", "q"]));
    assert!(stats.contains("aging every 5 takes"), "{stats}");
}

/// The order the jobs of the survival test must come out in: by level, and within one the
/// re-queued job before the fresh one pushed after it.
const SURVIVED: [&str; 7] = ["0-fresh", "1-killed", "1-fresh", "2-nacked", "2-fresh", "3-delayed", "3-fresh"];

#[test]
fn a_priority_survives_a_delay_a_nack_a_killed_holder_a_daemon_restart_and_an_export() {
    let flags = flags();
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--levels", "4", "--flavor", "fifo"]));
    ok(&d.run(&["push", "q", "--priority", "3", "--delay", "1s", "3-delayed"]));
    ok(&d.run(&["push", "q", "--priority", "2", "2-nacked"]));
    {
        // A nack from a library consumer.
        let thief = d.client().attach_thief("q").expect("thief");
        let j = thief.steal().expect("steal").expect("a job");
        assert_eq!(j.payload().expect("payload"), b"2-nacked");
        j.nack().expect("nack");
    }
    ok(&d.run(&["push", "q", "--priority", "1", "1-killed"]));
    // A holder killed mid-job: `xtcq work` takes the most urgent job and is killed with it.
    let mut holder = d
        .xtcq()
        .args(["work", "q", "--", "sleep", "1000"])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xtcq work");
    let claimed = |d: &Daemon| d.stats()["records"]["claimed"].as_u64().unwrap_or(0);
    wait_until(Duration::from_secs(20), "xtcq work claims a job", || claimed(&d) == 1);
    // SAFETY: kill(2) of the process group we made for the holder.
    unsafe { libc::kill(-(holder.id() as libc::pid_t), libc::SIGKILL) };
    holder.wait().expect("reap xtcq work");
    wait_until(Duration::from_secs(20), "the killed holder's job is re-queued", || claimed(&d) == 0);
    let depths = d.stats()["queues"][0]["level_depths"].clone();
    assert_eq!(depths, serde_json::json!([0, 1, 1, 0]), "1-killed and 2-nacked back at their levels");
    let delayed = |d: &Daemon| d.stats()["records"]["delayed"].as_u64().unwrap_or(1);
    wait_until(Duration::from_secs(20), "the delayed job is due", || delayed(&d) == 0);
    for p in 0..4 {
        ok(&d.run(&["push", "q", "--priority", &p.to_string(), &format!("{p}-fresh")]));
    }
    let dump = d.dir().join("dump.jsonl");
    ok(&d.run(&["export", dump.to_str().expect("utf-8 path")]));

    d.kill();
    d.restart_with(&flags, |_| {});
    assert_eq!(steal_all(&d, "q"), SURVIVED, "after a daemon's kill -9 and restart");

    // An import queues the jobs in the dump's order: each level's, not their order within it.
    let e = Daemon::start_with(&flags);
    ok(&e.run(&["import", dump.to_str().expect("utf-8 path")]));
    let q = &e.stats()["queues"][0]["info"];
    assert_eq!((q["levels"].as_u64(), q["aging"].as_u64()), (Some(4), Some(0)), "{q}");
    let got = steal_all(&e, "q");
    let levels: Vec<u32> = got.iter().map(|j| priority(j)).collect();
    assert_eq!(levels, [0, 1, 1, 2, 2, 3, 3], "after an export and import: {got:?}");
}

#[test]
fn a_priority_past_the_levels_is_refused_naming_the_flags() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--levels", "4"]));
    let o = d.run(&["push", "q", "--priority", "4", "x"]);
    assert_ne!(code(&o), 0);
    let e = stderr(&o);
    assert!(e.contains("--priority 4") && e.contains("--levels 4"), "{e}");
    let o = d.run(&["create", "wide", "--levels", "9"]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("--levels"), "{}", stderr(&o));
    ok(&d.run(&["push", "q", "--priority", "3", "3-x"]));
    let s = d.stats();
    assert_eq!(s["queues"][0]["level_depths"], serde_json::json!([0, 0, 0, 1]), "{s}");
}

#[test]
fn the_c_api_creates_levels_and_pushes_at_a_priority() {
    let d = Daemon::start_with(&flags());
    let exe = compile_c("tests/c/priorities.c", d.dir(), &[]);
    let out = run_within(std::process::Command::new(&exe).arg(&d.socket).arg("c"), Duration::from_secs(60));
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // By level; within one, each producer's jobs FIFO and the ring before the owner's deque.
    assert_eq!(stdout(&out), "0-injector\n0-owner\n1-owner\n2-injector\n3-owner\n");
}

/// Offsets in a queue-table entry of its hint word and its level count.
const HINTS: usize = offset_of!(QueueEntry, wait) + offset_of!(WaitWord, hints);
const LEVELS: usize = offset_of!(QueueEntry, control) + offset_of!(QueueControl, levels);

/// Where queue `name`'s table entry starts in the segment.
fn entry_of(d: &Daemon, name: &str) -> u64 {
    let s = d.stats();
    let q = s["queues"].as_array().expect("queues").iter().find(|q| q["info"]["name"] == name).cloned();
    let index = q.unwrap_or_else(|| panic!("queue {name} in {s}"))["info"]["index"].as_u64().expect("index");
    size_of::<SegmentHeader>() as u64 + index * size_of::<QueueEntry>() as u64
}

/// Writes `word` at offset `at` of the queue-table entry at `entry`, into the segment file, as
/// a process with write access to it could.
fn scribble(d: &Daemon, entry: u64, at: usize, word: u32) {
    scribble::write_at(&d.segment, entry + at as u64, &word.to_ne_bytes());
}

#[test]
fn garbage_in_a_queues_hint_word_or_level_count_loses_no_job_of_it_or_another_queue() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q", "--levels", "4", "--flavor", "fifo"]));
    ok(&d.run(&["create", "other"]));
    for p in 0..4 {
        let jobs: String = (0..10).map(|i| format!("{p}-q-{i}\n")).collect();
        ok(&d.run_in(&["push", "q", "--priority", &p.to_string()], jobs.as_bytes()));
    }
    ok(&d.run_in(&["push", "other"], b"o1\no2\no3\n"));
    let q = entry_of(&d, "q");
    let take = |n: &str| -> Vec<u32> { ok(&d.run(&["steal", "q", "-n", n])).lines().map(priority).collect() };
    // Every bit set: the empty levels cost looks. No bit set: the levels are found anyway.
    scribble(&d, q, HINTS, u32::MAX);
    assert_eq!(take("10"), [0; 10]);
    scribble(&d, q, HINTS, 0);
    assert_eq!(take("10"), [1; 10]);
    // A level count no create writes: the queue reads as corrupt, and the other one as it was.
    scribble(&d, q, LEVELS, 1000);
    let o = d.run(&["steal", "q"]);
    assert!(![0, 101, -1].contains(&code(&o)), "refused, not taken or crashed: {}", stderr(&o));
    assert_eq!(d.drain("other"), ["o1", "o2", "o3"]);
    scribble(&d, q, LEVELS, 4);
    let rest = take("0");
    assert_eq!(rest, [[2; 10], [3; 10]].concat(), "every job once, still by level");
    assert!(d.stats()["records"]["queued"] == 0, "{}", d.stats());
}
