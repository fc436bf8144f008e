//! An idle daemon costs nothing measurable whatever its segment's size: its periodic scan
//! walks the records only when something moved (and every few seconds as a backstop), and
//! between walks looks only at the claims due and the strays it already saw. What a walk
//! would have found must still be found on an idle daemon: a stray left by a thief stopped
//! after its steal, a claim whose lease runs out while nothing else happens, a lease
//! extended while nothing else happens.

use std::time::Duration;

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "idle";

#[test]
fn child_main() {
    child_entry(run_role);
}

fn run_role(role: &str) -> Result<(), Error> {
    let c = Client::connect(None)?;
    let thief = c.attach_thief(QUEUE)?;
    match role {
        // Steals; the fail point stops it between the CAS on `top` and its claim.
        "steal" => {
            let j = thief.steal()?;
            out(format_args!("stole {}", j.is_some()));
            hold();
            Ok(())
        }
        r => Err(Error::Corrupt(format!("unknown role {r}"))),
    }
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields 14 and 15, counted after the `)` that ends the command name.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

#[test]
fn an_idle_daemon_with_a_million_records_uses_almost_no_cpu() {
    // No queue, no client, the default 100 ms scan; a million records, the book's sizing example.
    let d = Daemon::builder().flags(["--records", "1000000"]).start();
    // Its first walks (at start) are over well before this.
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (t0, c0) = (std::time::Instant::now(), cpu_ticks(d.pid()));
    std::thread::sleep(Duration::from_secs(3));
    let (t1, c1) = (std::time::Instant::now(), cpu_ticks(d.pid()));
    let share = (c1 - c0) as f64 / hz / (t1 - t0).as_secs_f64();
    eprintln!("idle xtcqd with 1 M records: {:.2}% of a core", share * 100.0);
    // A walk of every record every 100 ms took 40% of a core (release) and more than all of
    // it (this debug build); what is left is the runtime's timer and the file checks.
    assert!(share < 0.10, "an idle daemon used {:.1}% of a core", share * 100.0);
}

fn queue(c: &Client, lease_ms: u32) {
    let mut p = QueueParams::new(QUEUE);
    p.deques = 1;
    p.capacity = 64;
    p.flavor = Flavor::Fifo;
    p.lease_ms = lease_ms;
    c.create_queue(&p).expect("create");
}

#[test]
fn on_an_idle_daemon_a_thief_stopped_after_its_steal_leaves_no_stray() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--lease-scan-interval", "20ms"]).start();
    let c = d.client();
    queue(&c, 0);
    // In the deque (an owner's push), so the thief's steal moves `top` past it.
    let owner = c.attach_owner(QUEUE).expect("owner");
    owner.push(b"J").expect("push");
    let env = [("XTCQ_FAILPOINTS", "steal.after_cas=sleep:600000".to_string())];
    let mut stopped = spawn_role(module_path!(), "steal", &d.socket, &env);
    // Until its steal moved `top` past the job (it is stopped right after).
    let seg = c.segment().expect("segment");
    let q = seg.queue_by_name(QUEUE).expect("queue");
    let dq = seg.deque(&q, 0).expect("deque");
    eventually(Duration::from_secs(20), || {
        let (top, bottom) = dq.indices();
        (top == bottom).then_some(())
    })
    .expect("the thief never stole the job");
    // Nothing else happens: the job, queued and in no index, must be put back by the daemon.
    let thief = c.attach_thief(QUEUE).expect("thief");
    let j = thief
        .steal_wait(Some(Duration::from_secs(20)))
        .expect("steal")
        .expect("the stray the stopped thief left comes back");
    assert_eq!(j.payload().expect("payload"), b"J");
    j.ack().expect("ack");
    stopped.kill9();
}

#[test]
fn on_an_idle_daemon_a_quiet_consumers_lease_expires_and_an_extension_holds() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--lease-scan-interval", "20ms"]).start();
    let c = d.client();
    queue(&c, 300);
    let inj = c.attach_injector(QUEUE).expect("injector");
    let thief = c.attach_thief(QUEUE).expect("thief");

    // Extended right after the claim, then nothing for five leases: the daemon must look at
    // the claim's new deadline, not expire it at the old one.
    inj.push(b"extended").expect("push");
    let j = thief.steal().expect("steal").expect("a job");
    j.extend_lease(Duration::from_secs(120)).expect("extend");
    std::thread::sleep(Duration::from_millis(1500));
    j.ack().expect("an extended lease was taken back at its first deadline");

    // Held and forgotten: nothing moves but the clock; the job comes back after its lease.
    inj.push(b"held").expect("push");
    let held = thief.steal().expect("steal").expect("a job");
    let again = thief
        .steal_wait(Some(Duration::from_secs(20)))
        .expect("steal")
        .expect("the held job comes back once its lease ran out");
    assert_eq!(again.payload().expect("payload"), b"held");
    assert_eq!(again.attempts(), 1, "the expired attempt is counted");
    again.ack().expect("ack");
    assert!(held.ack().is_err(), "the first holder's lease was taken back");
}
