//! Metrics with a real xtcqd and real `xtcq` processes: `/metrics` and `stats --json` agree
//! with what the test pushed, acked and failed; the totals survive a daemon kill -9 and a
//! consumer kill -9; garbage in the metrics region and hostile HTTP clients crash nothing.

use xtcq_testkit::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

fn metrics_flags() -> Vec<&'static str> {
    let mut f = SMALL_SEGMENT.to_vec();
    f.extend(METRICS_ON_ANY_PORT);
    f
}

/// Sends `request` raw and returns the whole answer.
fn http(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("an answer within 30 s");
    out
}

/// The value of `name{queue="q"}` in a scrape.
fn sample(body: &str, name: &str, queue: &str) -> f64 {
    let key = format!("{name}{{queue=\"{queue}\"}} ");
    let line = body.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("no {key} in {body}"));
    line[key.len()..].parse().expect("a number")
}

fn totals(d: &Daemon, queue: &str) -> serde_json::Value {
    let s = d.stats();
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["info"]["name"] == queue).expect("queue");
    q["metrics"].clone()
}

/// 10 good jobs and 1 bad one that fails both of its attempts.
fn run_some_jobs(d: &Daemon) {
    ok(&d.run(&["create", "q", "--max-attempts", "2"]));
    let mut push = vec!["push", "q", "bad"];
    push.extend(["good"; 10]);
    ok(&d.run(&push));
    let o = d.run(&["work", "q", "--idle-exit", "300ms", "--", "sh", "-c", r#"test "$XTCQ_PAYLOAD" = good"#]);
    assert_eq!(code(&o), 5, "{}", stderr(&o));
}

#[test]
fn the_scrape_and_stats_agree_with_the_jobs_run_and_survive_a_daemon_kill() {
    let mut d = Daemon::builder().in_dir(tempfile::tempdir().unwrap()).flags(metrics_flags()).start();
    run_some_jobs(&d);
    let body = scrape_metrics(&d.metrics_addr());
    assert!(body.contains("# TYPE xtcq_jobs_pushed_total counter"), "{body}");
    assert!(body.contains("# HELP xtcq_oldest_queued_seconds "), "{body}");
    assert_eq!(sample(&body, "xtcq_jobs_pushed_total", "q"), 11.0);
    assert_eq!(sample(&body, "xtcq_jobs_acked_total", "q"), 10.0);
    assert_eq!(sample(&body, "xtcq_jobs_claimed_total", "q"), 12.0);
    let gave_back =
        sample(&body, "xtcq_jobs_nacked_total", "q") + sample(&body, "xtcq_jobs_failed_total", "q");
    assert_eq!(gave_back, 2.0);
    assert_eq!(sample(&body, "xtcq_jobs_dead_total", "q"), 1.0);
    assert_eq!(sample(&body, "xtcq_jobs_dead", "q"), 1.0);
    assert_eq!(sample(&body, "xtcq_jobs_queued", "q"), 0.0);
    assert_eq!(sample(&body, "xtcq_records_in_use", "q"), 1.0);
    let before = totals(&d, "q");
    assert_eq!(before["acked"], 10);
    assert_eq!(before["dead_total"], 1);

    d.kill();
    d.restart_with(&metrics_flags(), |_| {});
    assert_eq!(totals(&d, "q"), before, "{}", d.log_text());
    let body = scrape_metrics(&d.metrics_addr());
    assert_eq!(sample(&body, "xtcq_jobs_acked_total", "q"), 10.0);

    // A queue deleted and created anew starts from zero.
    ok(&d.run(&["delete", "q", "--force"]));
    ok(&d.run(&["create", "q"]));
    assert_eq!(totals(&d, "q")["pushed"], 0);
}

#[test]
fn a_consumer_killed_mid_job_is_counted_once_and_recovered() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "slow"]));
    let started = d.dir().join("started");
    let script = format!("touch {}; sleep 60", started.display());
    let mut w = d
        .xtcq()
        .args(["work", "q", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "the job to start", || started.exists());
    w.kill().unwrap();
    w.wait().unwrap();
    wait_until(Duration::from_secs(30), "the daemon to recover the job", || {
        totals(&d, "q")["recovered"] == 1
    });
    let m = totals(&d, "q");
    assert_eq!(
        (m["pushed"].as_u64(), m["claimed"].as_u64(), m["queued"].as_u64()),
        (Some(1), Some(1), Some(1))
    );
    // New processes (which may get the dead one's slot) add to the totals, never reset them.
    for _ in 0..3 {
        ok(&d.run(&["push", "q", "x"]));
    }
    ok(&d.run(&["steal", "q", "-n", "4"]));
    let m = totals(&d, "q");
    assert_eq!(
        (m["pushed"].as_u64(), m["claimed"].as_u64(), m["acked"].as_u64()),
        (Some(4), Some(5), Some(4))
    );
    assert_eq!(m["recovered"], 1);
}

#[test]
fn garbage_in_the_metrics_region_crashes_nothing() {
    let d = Daemon::builder().in_dir(tempfile::tempdir().unwrap()).flags(metrics_flags()).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "a"]));
    let seg = std::sync::Arc::new(xtcq_shm::Segment::attach(&d.segment).expect("attach"));
    let q = seg.queue_by_name("q").unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in seg.metrics_blocks(q.index).unwrap() {
        for c in &b.counters {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.store(x, std::sync::atomic::Ordering::Relaxed);
        }
    }
    ok(&d.run(&["stats"]));
    ok(&d.run(&["stats", "--json"]));
    scrape_metrics(&d.metrics_addr());
    ok(&d.run(&["push", "q", "b"]));
    ok(&d.run(&["steal", "q", "-n", "2"]));
    ok(&d.run(&["stats", "q"]));
}

#[test]
fn garbage_and_stalled_http_clients_block_no_one() {
    let d = Daemon::builder().in_dir(tempfile::tempdir().unwrap()).flags(metrics_flags()).start();
    ok(&d.run(&["create", "q"]));
    let addr = d.metrics_addr();
    // A client that starts a request and never finishes it, held open meanwhile.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    stalled.write_all(b"GET /metr").unwrap();
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(&addr).unwrap());
    }
    assert!(http(&addr, b"\x00\xffgarbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(http(&addr, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(http(&addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100_000));
    let a = http(&addr, huge.as_bytes());
    assert!(a.is_empty() || a.starts_with("HTTP/1.1 431"), "{a}");
    assert!(scrape_metrics(&addr).contains("xtcq_jobs_queued{queue=\"q\"} 0"));
    // The control socket is unaffected too.
    ok(&d.run(&["push", "q", "x"]));
    drop(silent);
    drop(stalled);
}

#[test]
fn stats_watch_prints_a_line_per_queue_and_ends_when_its_reader_does() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "a", "b", "c"]));
    let script = format!(
        "{} --socket {} stats --watch --interval 100ms | head -n 3",
        xtcq_exe().display(),
        d.socket.display()
    );
    let o = run_bounded(std::process::Command::new("sh").args(["-c", &script]), None);
    let out = ok(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].contains("PUSH/s") && lines[0].contains("OLDEST"), "{out}");
    let cols: Vec<&str> = lines[2].split_whitespace().collect();
    // TIME QUEUE PUSH/s ACK/s FAIL/s QUEUED RUNNING DEAD OLDEST ASLEEP
    assert_eq!((cols[1], cols[5], cols[6]), ("q", "3", "0"), "{out}");
}
