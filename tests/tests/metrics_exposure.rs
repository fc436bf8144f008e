//! The `--metrics` listener as a local user the daemon does not serve meets it: anyone who
//! can reach the port. Before, such a user stopped xtcqd from starting by binding the port
//! first, shut out every scraper with 40 idle connections, and with 32 looping scrapes (a
//! full record scan each) slowed recovery and `xtcq ls` several times over.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use xtcq_testkit::*;

/// The value of the unlabelled series `name` in a scrape.
fn series(body: &str, name: &str) -> u64 {
    let line = body
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in {body}"));
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number")
}

/// A port someone else holds: the start fails at once, names the port and the flag, and
/// leaves no segment and no socket behind.
#[test]
fn a_taken_port_stops_the_start_before_anything_is_made() {
    let squatter = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let (sock, seg) = (dir.path().join("s.sock"), dir.path().join("seg"));
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--metrics", &addr]);
    let (st, log) = run_daemon_once(&sock, &seg, &flags);
    assert!(!st.success(), "xtcqd started without its metrics port: {log}");
    assert!(log.contains(&addr) && log.contains("--metrics"), "name the port and the flag: {log}");
    assert!(!seg.exists(), "a segment was made before the port was found taken");
    assert!(!sock.exists(), "a socket was left behind");
}

/// 40 connections that never send a request, then 10 real scrapes: each is answered.
#[test]
fn idle_connections_do_not_shut_out_a_scraper() {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(METRICS_ON_ANY_PORT);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q"]));
    let addr = d.metrics_addr();
    let idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(&addr).expect("connect")).collect();
    // Give the daemon time to accept them all, as an attacker would.
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        let body = scrape_metrics(&addr);
        assert!(body.contains("xtcq_jobs_queued{queue=\"q\"} 0"), "{body}");
    }
    // A slow sender, one byte at a time, is no better placed than an idle one.
    let mut slow = TcpStream::connect(&addr).expect("connect");
    slow.write_all(b"GET /met").expect("write");
    assert!(scrape_metrics(&addr).contains("xtcq_jobs_queued"));
    drop(idle);
    assert!(ok(&d.run(&["ls"])).contains("q"), "the control socket serves too");
}

/// 8 scrapers in tight loops: the daemon scans at most once per `--metrics-max-age` (1 s
/// here, the default), whatever the number of scrapes, and each scrape is still answered.
#[test]
fn scrapers_in_a_loop_make_at_most_one_scan_per_max_age() {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--metrics", "127.0.0.1:0"]);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q"]));
    let addr = d.metrics_addr();
    let before = series(&scrape_metrics(&addr), "xtcq_metrics_scans_total");
    let start = Instant::now();
    let scrapes: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while start.elapsed() < Duration::from_millis(1500) {
                        scrape_metrics(&addr);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("scraper")).sum()
    });
    let elapsed = start.elapsed();
    let scans = series(&scrape_metrics(&addr), "xtcq_metrics_scans_total") - before;
    // One scan may start in each started second of the run, plus the last scrape's.
    let most = elapsed.as_secs() + 2;
    assert!(scans <= most, "{scans} scans for {scrapes} scrapes in {elapsed:?}: at most {most}");
    assert!(scrapes > scans as usize, "the scrapes shared scans: {scrapes} scrapes, {scans} scans");
}
