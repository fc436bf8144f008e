//! A delayed job outlives the process that made it when that process is `kill -9`ed right
//! after writing it, before it told the daemon (fail point `delay.after_publish`, armed to
//! `kill`): the real xtcqd finds the `Delayed` record when it recovers the dead process and
//! puts it in line once due, for a pushed job and for a job given back with a retry delay.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use xtcq_client::{Client, Due, Error, Flavor, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "later";
const DELAY: Duration = Duration::from_millis(800);

#[test]
fn child_main() {
    child_entry(run_role);
}

fn run_role(role: &str) -> Result<(), Error> {
    let c = Client::connect(None)?;
    match role {
        "push" => {
            c.attach_injector(QUEUE)?.push_delayed(b"pushed", Due::In(DELAY))?;
        }
        "retry" => {
            let thief = c.attach_thief(QUEUE)?;
            let job = thief.steal_wait(Some(Duration::from_secs(10)))?.expect("a job");
            job.fail_after(Some("boom"), DELAY)?;
        }
        r => return Err(Error::Corrupt(format!("unknown role {r}"))),
    }
    out(format_args!("not killed"));
    Ok(())
}

fn queue(c: &Client) {
    let mut p = QueueParams::new(QUEUE);
    p.deques = 1;
    p.capacity = 64;
    p.flavor = Flavor::Fifo;
    c.create_queue(&p).unwrap();
}

/// Runs `role` to its death at the fail point; then the job comes back no sooner than
/// `DELAY` after `t0`, with `attempts`.
fn killed_then_found(d: &Daemon, role: &str, payload: &[u8], attempts: u32) {
    let c = d.client();
    let t0 = Instant::now();
    let env = [("XTCQ_FAILPOINTS", "delay.after_publish=kill".to_string())];
    let mut r = spawn_role(module_path!(), role, &d.socket, &env);
    let st = r.wait_dead(Duration::from_secs(20));
    assert_eq!(st.signal(), Some(9), "the {role} child should have been killed at the fail point: {st:?}");
    let thief = c.attach_thief(QUEUE).unwrap();
    let j = thief.steal_wait(Some(Duration::from_secs(20))).unwrap().expect("the delayed job was lost");
    assert!(t0.elapsed() >= DELAY, "put in line {:?} after the push, before its {DELAY:?}", t0.elapsed());
    assert_eq!(j.payload().unwrap(), payload);
    assert_eq!(j.attempts(), attempts);
    j.ack().unwrap();
    let report = c.check(false).unwrap();
    assert!(report.is_consistent(), "{:?}", report.problems);
}

#[test]
fn a_pusher_killed_right_after_writing_a_delayed_job_loses_nothing() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    queue(&d.client());
    killed_then_found(&d, "push", b"pushed", 0);
}

#[test]
fn a_worker_killed_right_after_a_delayed_give_back_loses_nothing() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    queue(&c);
    c.attach_injector(QUEUE).unwrap().push(b"job").unwrap();
    killed_then_found(&d, "retry", b"job", 1);
}

#[test]
fn a_daemon_killed_after_releasing_a_due_job_before_indexing_it_loses_nothing() {
    let mut d = Daemon::builder()
        .flags(MEDIUM_SEGMENT)
        .envs([("XTCQ_FAILPOINTS", "delay.after_release=kill")])
        .start();
    let dir = d.dir().to_path_buf();
    queue(&d.client());
    let t0 = Instant::now();
    d.client().attach_injector(QUEUE).unwrap().push_delayed(b"due", Due::In(DELAY)).unwrap();
    let st = d.wait_exit(Duration::from_secs(20));
    assert_eq!(st.signal(), Some(9), "the daemon should die at its fail point: {st:?}\n{}", d.log_text());
    // The job is Queued now, in no index: the next daemon's stray recovery puts it in line.
    let mut d2 = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    let c = d2.client();
    let thief = c.attach_thief(QUEUE).unwrap();
    let j = thief.steal_wait(Some(Duration::from_secs(20))).unwrap().expect("lost");
    assert!(t0.elapsed() >= DELAY);
    assert_eq!(j.payload().unwrap(), b"due");
    j.ack().unwrap();
    let report = c.check(false).unwrap();
    assert!(report.is_consistent(), "{:?}", report.problems);
}
