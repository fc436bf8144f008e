//! A queue's concurrency limit (`--max-running K`), through real processes: at most K of its
//! jobs run at once across every consumer process, counted by the commands themselves,
//! through `kill -9` of consumers holding jobs and of the daemon; the limit is used (K run at
//! once); a consumer that finds the queue at its limit sleeps and is woken by a job settled
//! elsewhere; bad values are refused naming the flag.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use xtcq_testkit::*;

/// The limit the farm test sets, and how many consumers compete for it.
const LIMIT: usize = 3;
const CONSUMERS: usize = 8;
const JOBS: usize = 60;

/// A command that records how many commands of the farm are alive as it starts: it leaves
/// a marker named by its pid in `live/`, counts the markers whose process is alive (not
/// gone, not a zombie: a command the fence killed leaves its marker), writes the count to
/// `seen`, works a little, removes its marker and writes its payload to `done`.
fn counting_script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"touch {d}/live/$$; n=0
for f in {d}/live/*; do p=${{f##*/}}; s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ] && n=$((n+1)); done
echo $n >> {d}/seen; sleep 0.3; rm -f {d}/live/$$; echo "$XTCQ_PAYLOAD" >> {d}/done"#
    )
}

fn spawn_worker(d: &Daemon, script: &str) -> Child {
    d.xtcq()
        .args(["work", "farm", "--jobs", "1", "--", "sh", "-c", script])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xtcq work")
}

fn numbers(path: &Path) -> Vec<usize> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn distinct_done(path: &Path) -> usize {
    let mut v: Vec<String> =
        std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect();
    v.sort();
    v.dedup();
    v.len()
}

/// Whether `worker` runs a job's command now: a child of any of its threads.
fn has_running_command(worker: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{worker}/task")) else { return false };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("children")).is_ok_and(|c| !c.trim().is_empty()))
}

#[test]
fn eight_consumers_never_run_more_than_the_limit_through_kills_and_a_restart() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "farm", "--max-running", &LIMIT.to_string()]));
    let stats = ok(&d.run(&["stats", "farm"]));
    assert!(stats.contains(&format!("running:  0 of at most {LIMIT} at once")), "{stats}");
    let dir: PathBuf = d.dir().join("farm");
    std::fs::create_dir_all(dir.join("live")).expect("mkdir");
    let input: String = (0..JOBS).map(|i| format!("job-{i}\n")).collect();
    ok(&d.run_in(&["push", "farm"], input.as_bytes()));
    let script = counting_script(&dir);
    let mut workers: Vec<Child> = (0..CONSUMERS).map(|_| spawn_worker(&d, &script)).collect();
    let done = dir.join("done");
    wait_until(Duration::from_secs(120), "a first few jobs done", || distinct_done(&done) >= 10);

    // kill -9 of two consumers that hold a job (their commands are fenced by the daemon).
    let mut killed = 0;
    wait_until(Duration::from_secs(60), "two holders killed", || {
        if let Some(i) = workers.iter().position(|w| has_running_command(w.id())) {
            let mut w = workers.swap_remove(i);
            let _ = w.kill();
            let _ = w.wait();
            killed += 1;
        }
        killed == 2
    });
    workers.extend((0..2).map(|_| spawn_worker(&d, &script)));

    // kill -9 of the daemon while jobs run; the count is in the segment it adopts again.
    wait_until(Duration::from_secs(60), "jobs running", || {
        workers.iter().any(|w| has_running_command(w.id()))
    });
    d.kill();
    std::thread::sleep(Duration::from_millis(300));
    d.restart_with(SMALL_SEGMENT, |_| {});

    wait_until(Duration::from_secs(180), "every job done", || distinct_done(&done) == JOBS);
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    let seen = numbers(&dir.join("seen"));
    let most = seen.iter().copied().max().unwrap_or(0);
    assert!(
        most <= LIMIT,
        "{most} commands ran at once under --max-running {LIMIT}: {seen:?}\n{}",
        d.log_text()
    );
    assert_eq!(most, LIMIT, "the limit was never used in full: {seen:?}");
    assert!(seen.len() >= JOBS, "each job's command counted: {}", seen.len());
    let s = d.stats();
    let q = &s["queues"][0]["quota"];
    assert_eq!(q["max_running"], LIMIT as u64, "{s}");
    wait_until(Duration::from_secs(30), "every slot given back", || {
        d.stats()["queues"][0]["quota"]["running"] == 0
    });
}

#[test]
fn a_consumer_at_the_limit_takes_nothing_and_is_woken_by_a_job_settled_elsewhere() {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&xtcq_client::QueueParams { capacity: 64, ..xtcq_client::QueueParams::new("q") })
        .expect("create");
    c.set_max_running("q", 2).expect("limit");
    let owner = c.attach_owner("q").expect("owner");
    for i in 0..4 {
        owner.push(format!("j{i}").as_bytes()).expect("push");
    }
    let thief = c.attach_thief("q").expect("thief");
    let a = thief.steal().expect("steal").expect("first job");
    let b = thief.steal().expect("steal").expect("second job");
    assert!(thief.steal().expect("steal").is_none(), "a third job taken under a limit of 2");
    assert!(owner.pop().expect("pop").is_none(), "an owner's pop is limited too");
    let waiter = {
        let socket = d.socket.clone();
        std::thread::spawn(move || {
            let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
            let t = c.attach_thief("q").expect("thief");
            let job =
                t.steal_wait(Some(Duration::from_secs(60))).expect("steal_wait").expect("a job before 60 s");
            job.ack().expect("ack");
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(!waiter.is_finished(), "a consumer took a job past the limit");
    a.ack().expect("ack");
    waiter.join().expect("woken by the ack, it took one job");
    b.nack().expect("nack");
    // No limit: everything left can be taken at once.
    c.set_max_running("q", 0).expect("no limit");
    let rest: Vec<_> = std::iter::from_fn(|| thief.steal().expect("steal")).collect();
    assert_eq!(rest.len(), 2, "with no limit, the two jobs left are taken together");
}

#[test]
fn bad_limits_are_refused_naming_the_flag() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    for bad in ["0", "-1", "9999999999", "lots", "2/s"] {
        let o = d.run(&["limits", "q", "--max-running", bad]);
        assert_eq!(code(&o), 2, "--max-running {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--max-running"), "{}", stderr(&o));
    }
    let o = d.run(&["create", "r", "--max-running", "0"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-running"), "{}", stderr(&o));
    // `none` removes it; a count sets it.
    assert!(ok(&d.run(&["limits", "q", "--max-running", "4"])).contains("running:  0 of at most 4"));
    assert!(!ok(&d.run(&["limits", "q", "--max-running", "none"])).contains("running:"));
    // Over the wire too (a client that skips the CLI's check).
    let e = d.client().set_max_running("q", xtcq_proto::MAX_RUNNING_LIMIT + 1).expect_err("refused");
    assert!(e.to_string().contains("--max-running"), "{e}");
}
