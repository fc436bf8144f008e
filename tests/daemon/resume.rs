//! A process that lives on across daemon restarts keeps *one* process slot: when its client
//! library reconnects, it asks for its slot back (`Request::Resume`) and the daemon gives it
//! only to that very process (kernel pid, start time, uid) at that epoch. Real `xtcqd`
//! processes, killed with SIGKILL and restarted on the same segment, and real client
//! processes (this test binary re-run in a role, see [`child_main`]).
//!
//! - more restarts than the segment has spare slots, the client keeps working with its old
//!   and new handles, one slot all along; killed, its claimed jobs come back exactly once;
//! - a connection naming a slot that is not its own (another process's, a wrong epoch, out
//!   of range, free) is refused with `SlotNotHeld`, takes nothing, and the daemon serves on;
//! - a process whose slot a restarted daemon recovered (it took it for dead) is told once,
//!   then gets a fresh slot.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use xtcq_client::{Client, Error, Flavor, Job, QueueParams};
use xtcq_proto::{frame, ErrorCode, Hello, HelloReply, Request, RequestFrame, Response, ServerMessage};
use xtcq_testkit::*;

const QUEUE: &str = "rq";
const T: Duration = Duration::from_secs(10);

/// The entry point of child processes; an ordinary (empty) test when `XTCQ_TEST_ROLE` is
/// unset.
#[test]
fn child_main() {
    child_entry(run_role);
}

fn parse_id(j: &Job<'_>) -> Result<u64, Error> {
    let p = j.payload()?;
    String::from_utf8_lossy(&p).parse().map_err(|_| Error::Corrupt(format!("bad payload {p:?}")))
}

fn run_role(role: &str) -> Result<(), Error> {
    let c = Client::connect(None)?;
    match role {
        // Owner and thief of QUEUE, then obeys one command per stdin line until stdin closes:
        // `round K` (a request, which reconnects after a daemon restart; 10 pushes on the old
        // owner handle; a new thief handle; 5 steals and acks on the old one), `claim` (3 steals
        // held unacked), `ping`, `attach` (a new thief handle), `old` (a push and a steal on the first handles).
        "resumer" => {
            let owner = c.attach_owner(QUEUE)?;
            let thief = c.attach_thief(QUEUE)?;
            out(format_args!("slot {} epoch {}", owner.process_slot(), owner.lease().attachment.slot_epoch));
            let mut held = Vec::new();
            for line in std::io::stdin().lock().lines() {
                let line = line.map_err(|e| Error::Corrupt(format!("stdin: {e}")))?;
                let mut w = line.split(' ');
                match w.next() {
                    Some("round") => {
                        let k: u64 = w.next().and_then(|k| k.parse().ok()).unwrap_or(0);
                        c.ping()?;
                        for i in 0..10 {
                            owner.push((k * 10 + i).to_string().as_bytes())?;
                        }
                        let t2 = c.attach_thief(QUEUE)?;
                        let mut acked = Vec::new();
                        for _ in 0..5 {
                            let j = thief.steal()?.ok_or(Error::Corrupt("nothing to steal".into()))?;
                            acked.push(parse_id(&j)?.to_string());
                            j.ack()?;
                        }
                        out(format_args!(
                            "ok {k} slot {} reconnects {} acked {}",
                            t2.process_slot(),
                            c.reconnects(),
                            acked.join(",")
                        ));
                    }
                    Some("claim") => {
                        let mut ids = Vec::new();
                        for _ in 0..3 {
                            let j = thief.steal()?.ok_or(Error::Corrupt("nothing to claim".into()))?;
                            ids.push(parse_id(&j)?.to_string());
                            held.push(j);
                        }
                        out(format_args!("claimed {}", ids.join(",")));
                    }
                    Some("ping") => match c.ping() {
                        Ok(()) => out("ping ok"),
                        Err(e) => out(format_args!("ping error {:?} {e}", e.code())),
                    },
                    // The handles attached at the start, used again.
                    Some("old") => {
                        let say = |what: &str, r: Result<(), Error>| match r {
                            Ok(()) => format!("{what} ok"),
                            Err(e) => format!("{what} error {:?}", e.code()),
                        };
                        let push = say("push", owner.push(b"1").map(|_| ()));
                        let steal = say("steal", thief.steal().map(|_| ()));
                        out(format_args!("old {push}; {steal}"));
                    }
                    Some("attach") => {
                        let t = c.attach_thief(QUEUE)?;
                        let epoch = c
                            .stats(None)?
                            .processes
                            .iter()
                            .find(|p| p.slot == t.process_slot())
                            .map(|p| p.epoch);
                        out(format_args!("attached {} epoch {}", t.process_slot(), epoch.unwrap_or(0)));
                    }
                    _ => return Err(Error::Corrupt(format!("unknown command {line:?}"))),
                }
            }
            Ok(())
        }
        other => Err(Error::Corrupt(format!("unknown role {other}"))),
    }
}

// ---------------------------------------------------------------------------------------
// The parent side.

/// [`MEDIUM_SEGMENT`] with `--process-slots n`.
fn sizes_with_slots(n: &'static str) -> Vec<&'static str> {
    let mut v = MEDIUM_SEGMENT.to_vec();
    let at = v.iter().position(|f| *f == "--process-slots").expect("MEDIUM_SEGMENT sets --process-slots") + 1;
    v[at] = n;
    v
}

fn create_queue(c: &Client) {
    c.create_queue(&QueueParams {
        name: QUEUE.into(),
        deques: 2,
        capacity: 1024,
        flavor: Flavor::Lifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    })
    .expect("create queue");
}

/// `kill -9` of `d`, and a new daemon on the same socket and segment.
fn kill_and_restart(d: Daemon, dir: &Path, sizes: &[&str]) -> Daemon {
    let mut d = d;
    if let Some(mut child) = d.child.take() {
        child.kill().expect("kill xtcqd");
        child.wait().expect("reap xtcqd");
    }
    Daemon::builder().at(dir).flags(sizes).start()
}

fn send(r: &mut Role, line: &str) {
    let stdin = r.child.as_mut().and_then(|c| c.stdin.as_mut()).expect("the child's stdin");
    writeln!(stdin, "{line}").expect("write to the child");
}

/// `slot S epoch E` -> `(S, E)`.
fn slot_line(line: &str) -> (u32, u64) {
    let w: Vec<&str> = line.split(' ').collect();
    match w.as_slice() {
        [_, s, "epoch", e] => (s.parse().expect("slot"), e.parse().expect("epoch")),
        _ => panic!("unexpected line {line:?}"),
    }
}

/// The processes the daemon has registered for `pid`.
fn slots_of(c: &Client, pid: u32) -> Vec<xtcq_proto::ProcessInfo> {
    c.stats(None).expect("stats").processes.into_iter().filter(|p| p.pid == pid).collect()
}

/// Sends `round k` and checks the answer: the child kept `slot` and reconnected
/// `reconnects` times. Returns the ids it acked.
fn round(r: &mut Role, d: &Daemon, k: u64, slot: u32, reconnects: u64) -> Vec<u64> {
    send(r, &format!("round {k}"));
    let line = r.line(T);
    let want = format!("ok {k} slot {slot} reconnects {reconnects} acked ");
    assert!(
        line.starts_with(&want),
        "round {k}: expected {want:?}, got {line:?}\ndaemon log:\n{}",
        d.log_text()
    );
    line[want.len()..].split(',').map(|id| id.parse().expect("id")).collect()
}

/// Has the child claim three jobs and hold them; returns their ids.
fn claim(r: &mut Role) -> Vec<u64> {
    send(r, "claim");
    let line = r.line(T);
    line.strip_prefix("claimed ")
        .unwrap_or_else(|| panic!("unexpected {line:?}"))
        .split(',')
        .map(|id| id.parse().expect("id"))
        .collect()
}

/// Kills the child holding `claimed`, and checks that `d` recovers its slot exactly once and
/// that draining the queue acks each of `0..total` once, with the claimed ones re-run.
fn killed_and_recovered_once(
    d: &Daemon,
    c: &Client,
    r: &mut Role,
    slot: u32,
    claimed: &[u64],
    acked_by_child: &[u64],
    total: u64,
) {
    let pid = r.pid();
    r.kill9();
    eventually(T, || slots_of(c, pid).is_empty().then_some(()))
        .unwrap_or_else(|| panic!("the killed client's slot was not recovered; log:\n{}", d.log_text()));
    // Stats sees the slot free only once its recovery (logged under the same lock) is done;
    // a second recovery, by a watcher that should have stood down, would follow at once.
    std::thread::sleep(Duration::from_millis(300));
    let log = d.log_text();
    let recoveries: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("recovered jobs of an exited process") || l.contains("process exited; slot freed")
        })
        .filter(|l| l.contains(&format!("slot={slot} ")))
        .collect();
    assert_eq!(recoveries.len(), 1, "one recovery of slot {slot}: {recoveries:?}");
    assert!(recoveries[0].contains(&format!("requeued={}", claimed.len())), "{}", recoveries[0]);

    // Drain: every job acked exactly once; those it held come back with an attempt more.
    let thief = c.attach_thief(QUEUE).expect("a slot is free again for the drain");
    let mut acks: BTreeMap<u64, u32> = acked_by_child.iter().map(|id| (*id, 1)).collect();
    while let Some(j) = thief.steal().expect("steal") {
        let id = parse_id(&j).expect("id");
        assert_eq!(j.attempts(), u32::from(claimed.contains(&id)), "job {id}");
        *acks.entry(id).or_default() += 1;
        j.ack().expect("ack");
    }
    assert!(acks.values().all(|n| *n == 1), "acked more than once: {acks:?}");
    assert_eq!(acks.keys().copied().collect::<Vec<_>>(), (0..total).collect::<Vec<_>>(), "lost jobs");
    drop(thief);
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach segment");
    let report = xtcq_shm::check::check_segment(&seg, true);
    assert!(report.is_consistent(), "check_segment: {:#?}", report.problems);
}

#[test]
fn a_process_keeps_one_slot_across_more_daemon_restarts_than_there_are_spare_slots() {
    // Two slots: the client's, and one for this test's drain at the end. Without Resume,
    // every restart costs the client one more slot, and the second round fails NoFreeSlot.
    let sizes = sizes_with_slots("2");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let mut d = Daemon::builder().at(&dir).flags(&sizes).start();
    let c = d.client(); // never attaches: holds no slot
    create_queue(&c);
    let mut r = spawn_role(module_path!(), "resumer", &d.socket, &[]);
    let (slot, epoch) = slot_line(&r.line(T));
    let pid = r.pid();
    assert_eq!(slots_of(&c, pid).len(), 1);

    const ROUNDS: u64 = 4;
    let mut acked_by_child = Vec::new();
    for k in 0..ROUNDS {
        d = kill_and_restart(d, &dir, &sizes);
        acked_by_child.extend(round(&mut r, &d, k, slot, k + 1));
        // One slot for the child, the one it had, at the same epoch, bound to its new
        // connection; nothing else registered.
        let s = c.stats(None).expect("stats");
        assert_eq!(s.processes.len(), 1, "round {k}: {:?}", s.processes);
        let p = &s.processes[0];
        assert_eq!((p.pid, p.slot, p.epoch), (pid, slot, epoch), "round {k}: {p:?}");
        assert!(p.connected, "round {k}: the resumed slot is bound to the new connection: {p:?}");
        assert_eq!(p.roles, xtcq_proto::ROLE_OWNER | xtcq_proto::ROLE_THIEF);
        assert_eq!(
            s.queues.iter().find(|q| q.info.name == QUEUE).map(|q| q.deques[0].owner_slot),
            Some(Some(slot))
        );
        assert!(d.log_text().contains("process resumed its slot"), "{}", d.log_text());
    }

    // It claims three jobs and is killed holding them: the daemon recovers them, once (the
    // resumed connection's watch; the watcher of the adopted slot stands down).
    let claimed = claim(&mut r);
    killed_and_recovered_once(&d, &c, &mut r, slot, &claimed, &acked_by_child, ROUNDS * 10);
}

#[test]
fn a_client_killed_before_it_reconnects_to_a_second_restart_is_recovered_once() {
    let sizes = sizes_with_slots("2");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let mut d = Daemon::builder().at(&dir).flags(&sizes).start();
    let c = d.client();
    create_queue(&c);
    let mut r = spawn_role(module_path!(), "resumer", &d.socket, &[]);
    let (slot, _) = slot_line(&r.line(T));
    let pid = r.pid();
    // Resumed over the second daemon, where it claims three jobs; the third daemon adopts
    // the slot, and the process dies before it speaks to it.
    d = kill_and_restart(d, &dir, &sizes);
    let acked = round(&mut r, &d, 0, slot, 1);
    let claimed = claim(&mut r);
    d = kill_and_restart(d, &dir, &sizes);
    let s = slots_of(&c, pid);
    assert_eq!((s.len(), s[0].slot, s[0].connected), (1, slot, false), "adopted, not reconnected: {s:?}");
    killed_and_recovered_once(&d, &c, &mut r, slot, &claimed, &acked, 10);
}

// ---- Raw protocol, as a hostile or confused peer would speak it.

fn raw(d: &Daemon) -> UnixStream {
    let mut s = UnixStream::connect(&d.socket).expect("connect");
    s.set_read_timeout(Some(T)).expect("timeout");
    frame::write_frame(&mut s, &Hello::new("raw", std::process::id())).expect("hello");
    match frame::read_frame::<_, HelloReply>(&mut s).expect("hello reply") {
        HelloReply::Ok(_) => s,
        other => panic!("{other:?}"),
    }
}

fn call(s: &mut UnixStream, id: u64, request: Request) -> Result<Response, xtcq_proto::ErrorReply> {
    frame::write_frame(s, &RequestFrame { id, request }).expect("write");
    match frame::read_frame::<_, ServerMessage>(s).expect("reply") {
        ServerMessage::Reply { id: got, result } => {
            assert_eq!(got, id);
            result
        }
        other => panic!("{other:?}"),
    }
}

fn resume(slot: u32, slot_epoch: u64) -> Request {
    Request::Resume { slot, slot_epoch }
}

#[track_caller]
fn refused(r: Result<Response, xtcq_proto::ErrorReply>, says: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.code, ErrorCode::SlotNotHeld, "{e:?}");
            assert!(e.message.contains(says), "{:?} does not say {says:?}", e.message);
        }
        Ok(r) => panic!("a resume that should be refused was granted: {r:?}"),
    }
}

#[test]
fn a_connection_naming_a_slot_that_is_not_its_own_is_refused_and_takes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let mut d = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    create_queue(&c);
    // The victim: owner of deque 0 and thief, holding a claimed job.
    let mut victim = spawn_role(module_path!(), "resumer", &d.socket, &[]);
    let (slot, epoch) = slot_line(&victim.line(T));
    let vpid = victim.pid();
    send(&mut victim, "round 0");
    assert!(victim.line(T).starts_with(&format!("ok 0 slot {slot} ")));
    send(&mut victim, "claim");
    assert!(victim.line(T).starts_with("claimed "));

    let n = c.stats(None).expect("stats").segment.process_slots;
    let mut s = raw(&d);
    refused(call(&mut s, 1, resume(slot, epoch)), "registered to another process");
    refused(call(&mut s, 2, resume(slot, epoch + 1)), "registered again since");
    refused(call(&mut s, 3, resume(slot, epoch.wrapping_sub(1))), "registered again since");
    refused(call(&mut s, 4, resume(n, 1)), &format!("the segment has {n} process slots"));
    refused(call(&mut s, 5, resume(u32::MAX, u64::MAX)), "process slots");
    refused(call(&mut s, 6, resume(slot + 1, 1)), "not registered");
    // The same connection serves on; its own attach takes a fresh slot, after which a
    // resume of anything else is a bad request.
    assert_eq!(call(&mut s, 7, Request::Ping), Ok(Response::Pong));
    let mine = match call(&mut s, 8, Request::AttachThief { queue: QUEUE.into() }) {
        Ok(Response::ThiefAttached(a)) => a,
        other => panic!("{other:?}"),
    };
    assert_ne!(mine.process_slot, slot);
    match call(&mut s, 9, resume(slot, epoch)) {
        Err(e) => assert_eq!(e.code, ErrorCode::BadRequest, "{e:?}"),
        Ok(r) => panic!("{r:?}"),
    }
    assert_eq!(
        call(&mut s, 10, resume(mine.process_slot, mine.slot_epoch)),
        Ok(Response::Resumed { process_slot: mine.process_slot, slot_epoch: mine.slot_epoch }),
        "naming the slot it holds is a no-op"
    );

    // This process resumes its own slot over a new connection (its first one stays open:
    // the newer connection takes the slot over), but only at the right epoch.
    let mut s2 = raw(&d);
    refused(call(&mut s2, 1, resume(mine.process_slot, mine.slot_epoch + 1)), "registered again since");
    assert_eq!(
        call(&mut s2, 2, resume(mine.process_slot, mine.slot_epoch)),
        Ok(Response::Resumed { process_slot: mine.process_slot, slot_epoch: mine.slot_epoch })
    );

    // Nothing of the victim's moved: its slot, its connection, its lease.
    let check_victim = |c: &Client, when: &str| {
        let st = c.stats(Some(QUEUE)).expect("stats");
        let v: Vec<_> = st.processes.iter().filter(|p| p.pid == vpid).collect();
        assert_eq!(v.len(), 1, "{when}: {:?}", st.processes);
        assert_eq!((v[0].slot, v[0].epoch), (slot, epoch), "{when}");
        assert_eq!(st.queues[0].deques[0].owner_slot, Some(slot), "{when}");
        assert_eq!(st.queues[0].records.claimed, 3, "{when}: the victim's claims stand");
    };
    check_victim(&c, "after the refusals");
    assert!(matches!(c.attach_owner_deque(QUEUE, 0), Err(Error::NoFreeDeque { .. })));
    assert!(d.log_text().contains("resume refused"), "{}", d.log_text());

    // After a daemon restart (the victim's slot adopted, not yet resumed) the same.
    drop((s, s2));
    d = kill_and_restart(d, &dir, MEDIUM_SEGMENT);
    let c = d.client();
    let mut s = raw(&d);
    refused(call(&mut s, 1, resume(slot, epoch)), "registered to another process");
    assert_eq!(call(&mut s, 2, Request::Ping), Ok(Response::Pong));
    check_victim(&c, "after the restart");

    // The victim, killed, is recovered once, by the watcher of its adopted slot: the claims
    // come back.
    victim.kill9();
    eventually(T, || slots_of(&c, vpid).is_empty().then_some(()))
        .unwrap_or_else(|| panic!("the victim was not recovered; log:\n{}", d.log_text()));
    let st = c.stats(Some(QUEUE)).expect("stats");
    assert_eq!((st.queues[0].records.claimed, st.queues[0].deques[0].owner_slot), (0, None));
    c.ping().expect("the daemon serves on");
}

#[test]
fn a_process_whose_slot_a_restarted_daemon_recovered_is_told_once_then_gets_a_fresh_slot() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let mut d = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    create_queue(&c);
    let mut r = spawn_role(module_path!(), "resumer", &d.socket, &[]);
    let (slot, epoch) = slot_line(&r.line(T));
    let pid = r.pid();
    // While no daemon runs, the slot's start time in the daemon's own record (its state file;
    // the segment's copy is not trusted) changes: to the next daemon the process looks dead
    // (its pid reused), so it recovers the slot although the process lives.
    let mut dead = d;
    if let Some(mut child) = dead.child.take() {
        child.kill().expect("kill");
        child.wait().expect("reap");
    }
    {
        let path = dir.join("xtcqd.sock.state");
        let mut st: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("state file")).expect("json");
        let t = &mut st["slots"][slot.to_string()]["start_time"];
        *t = serde_json::json!(t.as_u64().expect("a start time") + 1);
        std::fs::write(&path, serde_json::to_vec(&st).expect("json")).expect("write the state file");
    }
    d = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
    eventually(T, || slots_of(&c, pid).is_empty().then_some(())).expect("the slot recovered");

    // Before it makes any request (a pure producer or worker never does), its handles see in
    // the segment that the slot is no longer theirs, and refuse.
    send(&mut r, "old");
    assert_eq!(r.line(T), "old push error Some(SlotNotHeld); steal error Some(SlotNotHeld)");
    send(&mut r, "ping");
    let line = r.line(T);
    assert!(
        line.starts_with("ping error Some(SlotNotHeld) ") && line.contains(&format!("slot {slot} ")),
        "{line}\ndaemon log:\n{}",
        d.log_text()
    );
    assert!(line.contains("drop them and attach again"), "{line}");
    send(&mut r, "ping");
    assert_eq!(r.line(T), "ping ok", "told once");
    // Its handles from before act for a slot it no longer holds: they refuse.
    send(&mut r, "old");
    assert_eq!(r.line(T), "old push error Some(SlotNotHeld); steal error Some(SlotNotHeld)");
    send(&mut r, "attach");
    let (_, new_epoch) = slot_line(&r.line(T));
    assert_ne!(new_epoch, epoch, "a fresh registration");
    assert_eq!(slots_of(&c, pid).len(), 1);
    r.release();
    let _ = r.finish(T);
    drop(dead);
}
