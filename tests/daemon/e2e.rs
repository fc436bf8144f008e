//! Multi-process tests over the real `xtcqd`: owner, thief and injector processes (this test
//! binary re-run in a role chosen by `XTCQ_TEST_ROLE`, see [`child_main`]), exactly-once
//! delivery, leases that outlive connections but not processes, recovery of a killed
//! consumer's job, futex wake-ups across processes, and a daemon restart with jobs queued.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_testkit::*;

const N: usize = 10_000;

/// The entry point of child processes; an ordinary (empty) test when `XTCQ_TEST_ROLE` is
/// unset.
#[test]
fn child_main() {
    child_entry(run_role);
}

fn run_role(role: &str) -> Result<(), Error> {
    let queue = std::env::var("XTCQ_TEST_QUEUE").unwrap_or_else(|_| "jobs".into());
    let n = env_or("XTCQ_TEST_N", N);
    let c = Client::connect(None)?;
    match role {
        "owner-push" => owner_push(&c, &queue, n),
        "thief-drain" => thief_drain(&c, &queue, n),
        // Own a deque, say so, and hold it until stdin closes (or we are killed).
        "owner-hold" => {
            let owner = c.attach_owner(&queue)?;
            out(format_args!("deque {}", owner.deque()));
            hold();
            Ok(())
        }
        "claim-and-die" => claim_and_die(&c, &queue),
        "waiter" => waiter(&c, &queue, n),
        // Try to connect (as whatever uid we were started with) and report the error.
        "connect" => {
            out("connected");
            c.ping()
        }
        other => Err(Error::Corrupt(format!("unknown role {other}"))),
    }
}

/// Pushes n jobs (payload: the job number) from our own deque, then exits (or holds).
fn owner_push(c: &Client, queue: &str, n: usize) -> Result<(), Error> {
    let owner = c.attach_owner(queue)?;
    out(format_args!("deque {}", owner.deque()));
    for i in 0..n {
        let p = i.to_string();
        loop {
            match owner.push(p.as_bytes()) {
                Ok(_) => break,
                Err(Error::QueueFull { .. } | Error::RecordsFull(_)) => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Err(e) => return Err(e),
            }
        }
    }
    out(format_args!("pushed {n}"));
    if std::env::var_os("XTCQ_TEST_HOLD").is_some() {
        hold();
    }
    Ok(())
}

/// Steals n jobs with two threads (one single steals with futex waits, one batches), acks
/// each, reports every job number.
fn thief_drain(c: &Client, queue: &str, n: usize) -> Result<(), Error> {
    let thief = c.attach_thief(queue)?;
    out("attached");
    let seen = Mutex::new(Vec::with_capacity(n));
    let count = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(25);
    let errors = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let (thief, seen, count) = (thief.clone(), &seen, &count);
                s.spawn(move || -> Result<(), Error> {
                    let mut mine = Vec::new();
                    while count.load(Ordering::Relaxed) < n && Instant::now() < deadline {
                        let jobs = if w == 0 {
                            thief.steal_wait(Some(Duration::from_millis(100)))?.into_iter().collect()
                        } else {
                            thief.steal_batch(16)?
                        };
                        if jobs.is_empty() && w == 1 {
                            std::thread::yield_now();
                        }
                        for j in jobs {
                            let p = j.payload()?;
                            let id: usize = String::from_utf8_lossy(&p)
                                .parse()
                                .map_err(|_| Error::Corrupt(format!("bad payload {p:?}")))?;
                            j.ack()?;
                            mine.push(id);
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    seen.lock().unwrap().extend(mine);
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().map(|h| h.join().expect("worker panicked")).collect::<Vec<_>>()
    });
    for e in errors {
        e?;
    }
    let seen = seen.into_inner().unwrap();
    // Nothing more to find: every job was delivered once.
    if let Some(extra) = thief.steal()? {
        return Err(Error::Corrupt(format!("job {:?} delivered after the last", extra.payload()?)));
    }
    out(format_args!("count {}", seen.len()));
    for id in seen.iter() {
        out(format_args!("job {id}"));
    }
    Ok(())
}

/// Claims one job and dies without acking it.
fn claim_and_die(c: &Client, queue: &str) -> Result<(), Error> {
    let thief = c.attach_thief(queue)?;
    let j = thief.steal_wait(Some(Duration::from_secs(10)))?.ok_or(Error::Corrupt("no job".into()))?;
    out(format_args!("claimed {}", String::from_utf8_lossy(&j.payload()?)));
    let _ = std::io::stdout().flush();
    // SAFETY: _exit(2) ends the process at once: no destructor runs, so the claimed job is
    // neither acked nor nacked, as after a crash.
    unsafe { libc::_exit(0) }
}

/// Rounds of: say "waiting k", block in steal_wait, report how long it took.
fn waiter(c: &Client, queue: &str, n: usize) -> Result<(), Error> {
    let thief = c.attach_thief(queue)?;
    for k in 0..n {
        out(format_args!("waiting {k}"));
        let t0 = Instant::now();
        let j = thief
            .steal_wait(Some(Duration::from_secs(5)))?
            .ok_or_else(|| Error::Corrupt(format!("round {k}: no job within 5 s (lost wake-up)")))?;
        let p = j.payload()?;
        j.ack()?;
        out(format_args!("got {} {}", String::from_utf8_lossy(&p), t0.elapsed().as_micros()));
    }
    Ok(())
}

fn queue(c: &Client, name: &str, deques: u32, capacity: u32) {
    c.create_queue(&QueueParams {
        name: name.into(),
        deques,
        capacity,
        flavor: Flavor::Lifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    })
    .expect("create queue");
}

fn qenv(q: &str, n: usize) -> Vec<(&'static str, String)> {
    vec![("XTCQ_TEST_QUEUE", q.to_string()), ("XTCQ_TEST_N", n.to_string())]
}

#[test]
fn ten_thousand_jobs_from_an_owner_process_to_a_thief_process_exactly_once() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    // Small deques, so the owner also spills into the overflow ring.
    queue(&c, "jobs", 2, 256);
    let mut thief = spawn_role(module_path!(), "thief-drain", &d.socket, &qenv("jobs", N));
    assert_eq!(thief.line(Duration::from_secs(10)), "attached");
    let mut owner = spawn_role(module_path!(), "owner-push", &d.socket, &qenv("jobs", N));
    assert!(owner.line(Duration::from_secs(10)).starts_with("deque "));
    let o = owner.finish(Duration::from_secs(25));
    assert_eq!(o.last().map(String::as_str), Some("pushed 10000"), "{o:?}");
    let lines = thief.finish(Duration::from_secs(30));
    assert_eq!(lines.first().map(String::as_str), Some("count 10000"), "{:?}", &lines[..lines.len().min(3)]);
    let ids: Vec<usize> = lines.iter().filter_map(|l| l.strip_prefix("job ")?.parse().ok()).collect();
    assert_eq!(ids.len(), N, "each job delivered once");
    let set: BTreeSet<usize> = ids.iter().copied().collect();
    assert_eq!(set.len(), N, "no job delivered twice");
    assert_eq!(set.iter().next_back(), Some(&(N - 1)));

    // Both processes exited: their slots are freed and the lease is released.
    let s = eventually(Duration::from_secs(5), || {
        let s = c.stats(Some("jobs")).ok()?;
        s.processes.iter().all(|p| p.pid == std::process::id()).then_some(s)
    })
    .expect("the children's slots are freed after they exit");
    assert!(s.queues[0].deques.iter().all(|dq| dq.owner_slot.is_none() && dq.len == 0));
    assert_eq!(s.queues[0].overflow_len, 0);
    assert_eq!(s.records.free, 16384, "every record acked and free: {:?}", s.records);
}

#[test]
fn an_owner_lease_outlives_its_connection_but_not_its_process() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    queue(&c, "one", 1, 64);
    queue(&c, "two", 1, 64);

    // This process takes the lease of "one" over a raw connection and closes it: we are
    // alive, so the lease stays ours and nobody else gets the deque.
    {
        use xtcq_proto::{frame, Hello, HelloReply, Request, RequestFrame, Response, ServerMessage};
        let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        frame::write_frame(&mut s, &Hello::new("raw", std::process::id())).unwrap();
        assert!(matches!(frame::read_frame::<_, HelloReply>(&mut s).unwrap(), HelloReply::Ok(_)));
        frame::write_frame(
            &mut s,
            &RequestFrame { id: 1, request: Request::AttachOwner { queue: "one".into(), deque: None } },
        )
        .unwrap();
        match frame::read_frame::<_, ServerMessage>(&mut s).unwrap() {
            ServerMessage::Reply { result: Ok(Response::OwnerAttached(l)), .. } => assert_eq!(l.deque, 0),
            other => panic!("{other:?}"),
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let e = c.attach_owner("one").unwrap_err();
    assert!(matches!(e, Error::NoFreeDeque { .. }), "a live owner's lease must not move: {e:?}");

    // A child owns "two"; while it lives nobody else gets it; once it is killed, the lease
    // is released and the deque can be owned again.
    let mut child = spawn_role(module_path!(), "owner-hold", &d.socket, &qenv("two", 0));
    assert_eq!(child.line(Duration::from_secs(10)), "deque 0");
    assert!(matches!(c.attach_owner("two").unwrap_err(), Error::NoFreeDeque { .. }));
    let pid = child.pid();
    child.kill9();
    let owner = eventually(Duration::from_secs(5), || c.attach_owner("two").ok())
        .expect("the lease is released once the owner process has died");
    assert_eq!(owner.deque(), 0);
    assert!(eventually(Duration::from_secs(5), || d
        .log_text()
        .contains(&format!("pid={pid}"))
        .then_some(()))
    .is_some());
}

#[test]
fn the_claimed_job_of_a_killed_thief_is_requeued() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    queue(&c, "work", 2, 64);
    let owner = c.attach_owner("work").unwrap();
    owner.push(b"job-A").unwrap();
    let mut dying = spawn_role(module_path!(), "claim-and-die", &d.socket, &qenv("work", 1));
    assert_eq!(dying.line(Duration::from_secs(10)), "claimed job-A");
    let _ = dying.finish(Duration::from_secs(10));
    let thief = c.attach_thief("work").unwrap();
    let j =
        thief.steal_wait(Some(Duration::from_secs(5))).unwrap().expect("the job comes back after recovery");
    assert_eq!(j.payload().unwrap(), b"job-A");
    assert_eq!(j.attempts(), 1, "recovery counts the lost attempt");
    j.ack().unwrap();
    assert!(eventually(Duration::from_secs(5), || d
        .log_text()
        .contains("recovered jobs of an exited process")
        .then_some(()))
    .is_some());
}

#[test]
fn a_blocking_steal_is_woken_by_pushes_from_another_process() {
    const ROUNDS: usize = 100;
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    queue(&c, "wake", 2, 64);
    let owner = c.attach_owner("wake").unwrap();
    let mut waiter = spawn_role(module_path!(), "waiter", &d.socket, &qenv("wake", ROUNDS));
    let mut worst = Duration::ZERO;
    for k in 0..ROUNDS {
        assert_eq!(waiter.line(Duration::from_secs(10)), format!("waiting {k}"));
        // Vary the moment of the push around the waiter's sleep, to race with it.
        match k % 4 {
            0 => {}
            1 => std::thread::yield_now(),
            2 => std::thread::sleep(Duration::from_micros(50 * (k as u64 % 7))),
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
        let t0 = Instant::now();
        owner.push(format!("{k}").as_bytes()).unwrap();
        let got = waiter.line(Duration::from_secs(10));
        let took = t0.elapsed();
        worst = worst.max(took);
        assert!(got.starts_with(&format!("got {k} ")), "{got}");
        // A lost wake-up would show as the waiter's 5 s timeout.
        assert!(took < Duration::from_secs(2), "round {k}: woken after {took:?}");
    }
    let _ = waiter.finish(Duration::from_secs(10));
    eprintln!("worst wake-up round trip over {ROUNDS} rounds: {worst:?}");
}

#[test]
fn a_daemon_restart_keeps_queued_jobs() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    {
        let c = d.client();
        queue(&c, "durable", 2, 64);
        let mut p = spawn_role(module_path!(), "owner-push", &d.socket, &qenv("durable", 500));
        let lines = p.finish(Duration::from_secs(20));
        assert_eq!(lines.last().map(String::as_str), Some("pushed 500"));
    }
    assert!(d.stop().success());
    let mut d2 = Daemon::builder().at(d.dir()).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    let c = d2.client();
    let t = c.attach_thief("durable").unwrap();
    let mut got = BTreeSet::new();
    while let Some(j) = t.steal().unwrap() {
        let id: usize = String::from_utf8(j.payload().unwrap()).unwrap().parse().unwrap();
        assert!(got.insert(id), "job {id} twice");
        j.ack().unwrap();
    }
    assert_eq!(got, (0..500).collect(), "no job lost across the restart");
}

#[test]
fn a_process_of_a_disallowed_uid_is_unauthorized() {
    if rustix::process::getuid().as_raw() != 0 {
        xtcq_testkit::skipped("needs root to start a client under another uid");
        return;
    }
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    // Let uid 65534 reach the socket file, so that the daemon's own check is what refuses.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut nobody = spawn_role_with(module_path!(), "connect", &d.socket, &[], |c| {
        use std::os::unix::process::CommandExt;
        c.uid(65534).gid(65534);
    });
    let line = nobody.line(Duration::from_secs(10));
    assert!(line.starts_with("error not authorized: uid 65534"), "{line}");
    let _ = nobody.child.take().map(|mut ch| wait_timeout(&mut ch, Duration::from_secs(5)));
    // Still serving the allowed uid.
    d.client().ping().unwrap();
}

#[test]
fn a_stop_ends_every_task_of_the_daemon_without_waiting_it_out() {
    // Each background task (scans, the segment's watch) ends on the stop; one that did not
    // held the stop for its 3 s grace and logged a warning.
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.list_queues().expect("ls");
    drop(c);
    assert!(d.stop().success());
    let log = d.log_text();
    assert!(!log.contains("did not close in time"), "{log}");
}
