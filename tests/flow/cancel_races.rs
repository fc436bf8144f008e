//! Red-team pass on cancelling jobs: a cancel that meets the holder in the middle of its
//! own give-back (a nack or fail holds the record `Writing` while it stores the attempt
//! count, the error and the due time). Revoked there, the record was freed under those
//! stores, which then landed on the record's next job. Real xtcqd; the holder is a child
//! process held in `Writing` by the `give_back.writing` fail point, as a SIGSTOP would.

use std::time::Duration;

use xtcq_client::{Client, Error};
use xtcq_testkit::*;

const QUEUE: &str = "racy";

#[test]
fn child_main() {
    child_entry(run_role);
}

fn run_role(role: &str) -> Result<(), Error> {
    let c = Client::connect(None)?;
    let thief = c.attach_thief(QUEUE)?;
    match role {
        // Claims one job and fails it; the fail point holds it in `Writing` a while.
        "fail" => {
            let j = thief
                .steal_wait(Some(Duration::from_secs(30)))?
                .ok_or_else(|| Error::Corrupt("no job within 30 s".into()))?;
            out(format_args!("claimed {}.{}", j.id().index, j.id().birth));
            let r = j.fail("boom");
            out(format_args!("failed {}", if r.is_ok() { "ok" } else { "refused" }));
            Ok(())
        }
        r => Err(Error::Corrupt(format!("unknown role {r}"))),
    }
}

#[test]
fn a_cancel_during_the_holders_give_back_never_writes_into_the_next_job() {
    // Fewer records than the overflow ring holds: the loop below reaches a freed record
    // before the ring is full.
    let d = Daemon::start_with(&[
        "--queues",
        "2",
        "--deques-per-queue",
        "1",
        "--deque-capacity",
        "64",
        "--records",
        "64",
        "--payload-bytes",
        "64",
        "--process-slots",
        "16",
        "--overflow-capacity",
        "256",
    ]);
    ok(&d.run(&["create", QUEUE]));
    let c = d.client();
    let inj = c.attach_injector(QUEUE).expect("injector");
    let first = xtcq_client::JobId::of_push(inj.push(b"first").expect("push"));
    let env = [("XTCQ_FAILPOINTS", "give_back.writing=sleep:500".to_string())];
    let mut holder = spawn_role(module_path!(), "fail", &d.socket, &env);
    assert_eq!(holder.line(Duration::from_secs(30)), format!("claimed {}.{}", first.index, first.birth));
    let seg = c.segment().expect("segment");
    let st = seg.records().state(first.index).expect("its record");
    wait_until(Duration::from_secs(30), "the holder in its give-back", || {
        st.load().state() == Some(xtcq_shm::State::Writing)
    });
    // A cancel that waited out its patience while the holder wrote says so: try again, as a
    // user would.
    let outcome = eventually(Duration::from_secs(30), || {
        let o = c.cancel_job(QUEUE, first).expect("cancel");
        (o != xtcq_proto::CancelOutcome::Busy).then_some(o)
    })
    .expect("a cancel that is not busy");
    // Fill records until the cancelled job's is used again (at once if it was freed).
    let mut pushed = Vec::new();
    for i in 0..seg.records().len() {
        let h = inj.push(format!("next{i}").as_bytes()).expect("push");
        pushed.push(format!("next{i}"));
        if h.index == first.index {
            break;
        }
    }
    let done = holder.line(Duration::from_secs(30));
    holder.finish(Duration::from_secs(30));
    let thief = c.attach_thief(QUEUE).expect("thief");
    let mut seen = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        let payload = String::from_utf8_lossy(&j.payload().expect("payload")).to_string();
        let attempts = j.attempts();
        j.ack().expect("ack");
        if payload == "first" {
            assert!(
                !matches!(
                    outcome,
                    xtcq_proto::CancelOutcome::WasQueued | xtcq_proto::CancelOutcome::WasRunning { .. }
                ),
                "job cancelled ({outcome:?}) ran again"
            );
            continue;
        }
        assert_eq!(
            attempts, 0,
            "{payload}: a fresh job with another's attempt count ({outcome:?}, holder {done})"
        );
        seen.push(payload);
    }
    eprintln!("a cancel during the holder's give-back: {outcome:?}; the holder's fail: {done}");
    seen.sort();
    pushed.sort();
    assert_eq!(seen, pushed, "every job pushed after the cancel, once");
}

/// A running job cancelled under `--max-running 2` gives its slot back once: one more job
/// may start, not two, and the holder's failed ack gives nothing back again; every slot is
/// back once the rest are settled.
#[test]
fn a_cancelled_running_job_gives_its_slot_back_exactly_once() {
    let d = Daemon::start();
    ok(&d.run(&["create", QUEUE, "--max-running", "2"]));
    let c = d.client();
    let inj = c.attach_injector(QUEUE).expect("injector");
    for i in 0..5 {
        inj.push(format!("j{i}").as_bytes()).expect("push");
    }
    let thief = c.attach_thief(QUEUE).expect("thief");
    let a = thief.steal().expect("steal").expect("a first job");
    let b = thief.steal().expect("steal").expect("a second job");
    assert!(thief.steal().expect("steal").is_none(), "a third job under a limit of 2");
    let out = c.cancel_job(QUEUE, a.id()).expect("cancel");
    assert!(matches!(out, xtcq_proto::CancelOutcome::WasRunning { .. }), "{out:?}");
    assert!(a.ack().is_err(), "the holder's ack of a cancelled job");
    let cc = thief.steal().expect("steal").expect("the cancelled job's slot, given back");
    assert!(
        thief.steal().expect("steal").is_none(),
        "two running and a third taken: a slot given back twice"
    );
    assert!(c.cancel_job(QUEUE, cc.id()).is_ok());
    assert!(cc.nack().is_err(), "the holder's nack of a cancelled job");
    let e = thief.steal().expect("steal").expect("a slot again");
    assert!(thief.steal().expect("steal").is_none(), "past the limit after a nack of a cancelled job");
    b.ack().expect("ack");
    e.ack().expect("ack");
    wait_until(Duration::from_secs(30), "every slot back", || {
        d.stats()["queues"][0]["quota"]["running"] == 0
    });
    let rest: Vec<_> = std::iter::from_fn(|| thief.steal().expect("steal")).collect();
    assert_eq!(rest.len(), 1, "the one job neither run nor cancelled");
}

/// Ids of another queue, of no job, and of no shape: each refused or left alone, naming
/// what was wrong, never a panic; the job of the other queue still runs.
#[test]
fn ids_of_another_queue_and_garbage_ids_cancel_nothing() {
    let d = Daemon::start();
    ok(&d.run(&["create", QUEUE]));
    ok(&d.run(&["create", "elsewhere"]));
    let theirs = ok(&d.run(&["push", "--print-handle", "elsewhere", "theirs"])).trim().to_string();
    let o = d.run(&["cancel", QUEUE, &theirs, "4294967295.4294967295", "0.0"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(!stdout(&o).contains("cancelled ("), "{}", stdout(&o));
    assert_eq!(d.drain("elsewhere"), ["theirs"], "a cancel through another queue took it");
    for bad in ["1.", ".1", "1.2.3", "-1.1", "4294967296.1", "1.-1", "0x1.2", "", " 1.2", "1 .2"] {
        let o = d.run(&["cancel", QUEUE, "--", bad]);
        assert_eq!(code(&o), 2, "cancel {bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("is not a job id"), "cancel {bad:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
}

/// `xtcq work -j 4` on 24 jobs whose commands ignore SIGTERM (as their children do), with
/// every third job cancelled while the workers run: each job either ran exactly once to its
/// end or was cancelled (then, if it was queued, it never started), none twice, none lost;
/// the worker exits 0.
#[test]
fn work_j4_with_cancels_runs_each_job_once_to_its_end_or_cancels_it() {
    const JOBS: usize = 24;
    let d = Daemon::start();
    ok(&d.run(&["create", QUEUE, "--lease", "1h"]));
    let log = d.dir().join("log");
    let ids: Vec<String> = (0..JOBS)
        .map(|i| ok(&d.run(&["push", "--print-handle", QUEUE, &format!("j{i}")])).trim().to_string())
        .collect();
    let script = format!(
        r#"trap '' TERM; echo "start $XTCQ_PAYLOAD" >> {l}; sleep 0.2; echo "end $XTCQ_PAYLOAD" >> {l}"#,
        l = log.display()
    );
    let worker = d
        .xtcq()
        .args(["work", QUEUE, "-j", "4", "--idle-exit", "1s", "--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn work");
    // Cancels from the time the first jobs run: some running, some queued, some done.
    wait_until(Duration::from_secs(60), "four jobs started", || {
        std::fs::read_to_string(&log).unwrap_or_default().lines().filter(|l| l.starts_with("start")).count()
            >= 4
    });
    let mut outcomes = vec![None; JOBS];
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| i % 3 == 1) {
        let o = d.run(&["cancel", QUEUE, id]);
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        outcomes[i] = Some(stdout(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    let cancelled = outcomes.iter().flatten().filter(|o| o.contains(": cancelled (")).count();
    // The worker stops once the queue stays empty: every job run or cancelled.
    let out = wait_bounded(worker, Duration::from_secs(120), "worker");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let count = |what: &str, i: usize| text.lines().filter(|l| *l == format!("{what} j{i}")).count();
    for (i, outcome) in outcomes.iter().enumerate() {
        let (started, ended) = (count("start", i), count("end", i));
        assert!(started <= 1 && ended <= 1, "j{i} ran twice: {text}");
        match outcome {
            Some(o) if o.contains("(it was queued") => {
                assert_eq!(started, 0, "j{i} ran after its cancel: {o}")
            }
            // Claimed: its command may have been stopped before it printed anything, or held
            // until its registration, which the cancel refused (so it never ran).
            Some(o) if o.contains("(it was running") => {}
            Some(o) => assert_eq!(ended, 1, "j{i} neither cancelled nor run to its end: {o}\n{text}"),
            None => assert_eq!(ended, 1, "j{i} lost: {text}\n{}", stderr(&out)),
        }
    }
    assert!(out.status.success(), "cancelled jobs are no failure of the worker: {}", stderr(&out));
    let s = d.stats();
    assert_eq!(s["queues"][0]["metrics"]["cancelled"], cancelled as u64, "{s}");
    assert_eq!(s["queues"][0]["metrics"]["dead_total"], 0, "{s}");
}

/// A holder stopped in the middle of its own give-back for longer than the cancel waits (a
/// SIGSTOP there, here the fail point): the cancel gives up, and must not say the queue has
/// no such job, which it has.
#[test]
fn a_cancel_that_gives_up_on_a_stuck_holder_does_not_call_the_job_unknown() {
    let d = Daemon::start();
    ok(&d.run(&["create", QUEUE]));
    let c = d.client();
    let inj = c.attach_injector(QUEUE).expect("injector");
    let first = xtcq_client::JobId::of_push(inj.push(b"first").expect("push"));
    let env = [("XTCQ_FAILPOINTS", "give_back.writing=sleep:6000".to_string())];
    let mut holder = spawn_role(module_path!(), "fail", &d.socket, &env);
    assert_eq!(holder.line(Duration::from_secs(30)), format!("claimed {}.{}", first.index, first.birth));
    let seg = c.segment().expect("segment");
    let st = seg.records().state(first.index).expect("its record");
    wait_until(Duration::from_secs(30), "the holder in its give-back", || {
        st.load().state() == Some(xtcq_shm::State::Writing)
    });
    let outcome = c.cancel_job(QUEUE, first).expect("cancel");
    let still = st.load().state() == Some(xtcq_shm::State::Writing);
    holder.finish(Duration::from_secs(30));
    if still {
        assert_eq!(outcome, xtcq_proto::CancelOutcome::Busy, "the job exists, held in its give-back");
    }
}
