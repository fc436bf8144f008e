//! Unique jobs across real processes: 8 pushers pushing the same few keys, some killed with
//! kill -9 (three at the protocol's crash windows, by fail point, two at any moment), while
//! consumers hold each job a while before they ack it.
//!
//! Each process logs what it did to a file of its own, one `write(2)` per line, with
//! CLOCK_MONOTONIC times (one clock for every process): a pusher `P key id t` after a push
//! returned, `D key` after a refusal; a consumer `S key id t` after it claimed a job and
//! `E key id t` before it acks it. A job is surely live from its push's return (or, when its
//! pusher died before logging, its claim) to its consumer's `E`: two such spans of one key
//! that overlap are two live jobs of one key at once.

mod crashes;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xtcq_client::{Client, Error, Flavor, OnDuplicate, Pushed, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "uniq";
const KEYS: usize = 6;
/// Push attempts of each pusher.
const ATTEMPTS: u64 = 400;

#[test]
fn child_main() {
    child_entry(run_role);
}

/// An append-only log, one `write(2)` a line: a killed process leaves whole lines.
struct Log(std::fs::File);

impl Log {
    fn open() -> Log {
        let p = std::env::var("XTCQ_TEST_LOG").expect("XTCQ_TEST_LOG");
        Log(std::fs::OpenOptions::new().create(true).append(true).open(p).expect("log file"))
    }
    fn line(&mut self, s: std::fmt::Arguments<'_>) {
        self.0.write_all(format!("{s}\n").as_bytes()).expect("log write");
    }
}

fn run_role(role: &str) -> Result<(), Error> {
    let c = Client::connect(None)?;
    match role {
        "pusher" => pusher(&c, env_or("XTCQ_TEST_BASE", 0)),
        "consumer" => consumer(&c),
        "holder" => crashes::holder(&c),
        r => Err(Error::Corrupt(format!("unknown role {r}"))),
    }
}

/// Pushes each key in turn, `ATTEMPTS` times, logging what each push did.
fn pusher(c: &Client, base: u64) -> Result<(), Error> {
    let inj = c.attach_injector(QUEUE)?;
    let mut log = Log::open();
    out("attached");
    for i in 0..ATTEMPTS {
        let key = format!("k{}", (base + i) % KEYS as u64);
        match inj.push_with_key(key.as_bytes(), key.as_bytes(), OnDuplicate::Refuse) {
            Ok(Pushed::New(h)) => {
                log.line(format_args!("P {key} {} {}", xtcq_client::JobId::of_push(h), monotonic_ns()))
            }
            Ok(Pushed::Existing(id)) => return Err(Error::Corrupt(format!("refuse mode answered {id}"))),
            Err(Error::DuplicateKey { .. }) => log.line(format_args!("D {key}")),
            Err(Error::RecordsFull(_) | Error::QueueFull { .. }) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e),
        }
        // Paced, so that the pushes span many of the consumers' 2 ms holds.
        std::thread::sleep(Duration::from_micros(500));
    }
    out("done");
    Ok(())
}

/// Claims jobs, holds each 2 ms, acks it; stops once stdin closes and nothing is left.
fn consumer(c: &Client) -> Result<(), Error> {
    let thief = c.attach_thief(QUEUE)?;
    let mut log = Log::open();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        hold();
        s.store(true, Ordering::SeqCst);
    });
    out("attached");
    loop {
        let Some(job) = thief.steal_wait(Some(Duration::from_millis(100)))? else {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            continue;
        };
        let key = String::from_utf8_lossy(&job.payload()?).into_owned();
        log.line(format_args!("S {key} {} {}", job.id(), monotonic_ns()));
        std::thread::sleep(Duration::from_millis(2));
        log.line(format_args!("E {key} {} {}", job.id(), monotonic_ns()));
        job.ack()?;
    }
}

/// The module whose `child_main` runs the roles.
fn roles_module() -> &'static str {
    module_path!()
}

fn queue(c: &Client) {
    let mut p = QueueParams::new(QUEUE);
    p.deques = 2;
    p.capacity = 256;
    p.flavor = Flavor::Fifo;
    c.create_queue(&p).expect("create the queue");
}

/// A daemon whose segment has a key table of `keys` entries, and the queue.
fn daemon(keys: &str) -> Daemon {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--keys", keys]).start();
    queue(&d.client());
    d
}

/// Each key's jobs as the logs tell them: id -> (surely live from, until).
type Spans = BTreeMap<String, BTreeMap<String, (Option<u64>, Option<u64>)>>;

/// What the logs in `dir` say: the spans, the ids pushed, the ids claimed (with repeats), and
/// the refusals.
fn read_logs(dir: &Path) -> (Spans, BTreeSet<String>, Vec<String>, usize) {
    let (mut spans, mut pushed, mut started, mut refused) = (Spans::new(), BTreeSet::new(), Vec::new(), 0);
    for entry in std::fs::read_dir(dir).expect("log dir") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("a log");
        for l in text.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let t = || f[3].parse::<u64>().expect("a time");
            match f[0] {
                "D" => refused += 1,
                "P" => {
                    pushed.insert(f[2].to_string());
                    spans.entry(f[1].into()).or_default().entry(f[2].into()).or_default().0 = Some(t());
                }
                "S" => {
                    started.push(f[2].to_string());
                    let s = spans.entry(f[1].into()).or_default().entry(f[2].into()).or_default();
                    s.0 = Some(s.0.map_or(t(), |p| p.min(t())));
                }
                "E" => spans.entry(f[1].into()).or_default().entry(f[2].into()).or_default().1 = Some(t()),
                other => panic!("bad log line {other:?}"),
            }
        }
    }
    (spans, pushed, started, refused)
}

/// Never two live jobs of one key: each key's spans, in order, each end before the next one
/// begins.
fn assert_one_live_job_per_key(spans: &Spans) {
    for (key, jobs) in spans {
        let mut v: Vec<(u64, u64, &String)> = jobs
            .iter()
            .map(|(id, (from, to))| {
                let to = to.unwrap_or_else(|| panic!("job {id} of key {key} never ran to its ack"));
                (from.expect("a start"), to, id)
            })
            .collect();
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[1].0 > w[0].1,
                "key {key}: job {} was live from {} while job {} was, until {}",
                w[1].2,
                w[1].0,
                w[0].2,
                w[0].1
            );
        }
    }
}

fn spawn_pusher(d: &Daemon, logs: &Path, n: usize, failpoint: Option<&str>) -> Role {
    let mut env = vec![
        ("XTCQ_TEST_LOG", logs.join(format!("pusher{n}")).display().to_string()),
        ("XTCQ_TEST_BASE", n.to_string()),
    ];
    if let Some(f) = failpoint {
        env.push(("XTCQ_FAILPOINTS", f.to_string()));
    }
    let r = spawn_role(module_path!(), "pusher", &d.socket, &env);
    assert_eq!(r.line(Duration::from_secs(30)), "attached");
    r
}

fn drained(d: &Daemon) -> bool {
    let r = &d.stats()["records"];
    ["queued", "claimed", "filling", "delayed"].iter().all(|k| r[*k] == 0)
}

#[test]
fn unique_keys_hold_under_eight_pushers_with_kill9() {
    let d = daemon("256");
    let logs = tempfile::tempdir().expect("log dir");
    let mut consumers: Vec<Role> = (0..3)
        .map(|n| {
            let env = [("XTCQ_TEST_LOG", logs.path().join(format!("consumer{n}")).display().to_string())];
            let r = spawn_role(module_path!(), "consumer", &d.socket, &env);
            assert_eq!(r.line(Duration::from_secs(30)), "attached");
            r
        })
        .collect();
    // Three die inside the protocol's windows, at a push of theirs well into the run.
    let points = ["key.locked=kill@40", "key.writing=kill@3", "key.after_bind=kill@10"];
    let mut doomed: Vec<Role> =
        points.iter().enumerate().map(|(n, p)| spawn_pusher(&d, logs.path(), n, Some(p))).collect();
    let mut pushers: Vec<Role> = (3..8).map(|n| spawn_pusher(&d, logs.path(), n, None)).collect();
    // Two more killed wherever they are, and replaced, so eight keep pushing.
    for (n, victim) in [(8, 3), (9, 4)] {
        std::thread::sleep(Duration::from_millis(20));
        pushers[victim - 3].kill9();
        pushers.push(spawn_pusher(&d, logs.path(), n, None));
    }
    for (r, p) in doomed.iter_mut().zip(points) {
        let st = r.wait_dead(Duration::from_secs(60));
        assert_eq!(st.signal(), Some(9), "the pusher with {p} should have died there: {st:?}");
    }
    for r in pushers.iter_mut().filter(|r| r.child.is_some()) {
        r.finish(Duration::from_secs(120));
    }
    wait_until(Duration::from_secs(60), "the queue drained", || drained(&d));
    for c in &mut consumers {
        c.finish(Duration::from_secs(30));
    }
    let (spans, pushed, started, refused) = read_logs(logs.path());
    assert_one_live_job_per_key(&spans);
    assert!(
        refused > 0 && pushed.len() > KEYS,
        "the pushers raced: {refused} refused, {} pushed",
        pushed.len()
    );
    let mut runs: BTreeMap<&String, usize> = BTreeMap::new();
    started.iter().for_each(|id| *runs.entry(id).or_default() += 1);
    for id in &pushed {
        assert_eq!(runs.get(id), Some(&1), "job {id} was pushed and ran {:?} times", runs.get(id));
    }
    // No key is left held by a job that is gone (a pusher killed after binding it).
    let inj = d.client().attach_injector(QUEUE).expect("injector");
    for k in 0..KEYS {
        let key = format!("k{k}");
        let p = inj.push_with_key(b"last", key.as_bytes(), OnDuplicate::ReturnExisting).expect("push");
        assert!(matches!(p, Pushed::New(_)), "key {key} still held after the queue drained: {p:?}");
    }
    assert!(d.client().check(false).expect("check").problems.is_empty());
}
