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

/// The daemon's resident memory, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number")
}

/// Connections that come and go (connect, close) leave nothing behind. Before, each one
/// left its entry in the list of connections waiting for a request, with its task's
/// memory, for good, and every accept walked the whole list: 100,000 connections took the
/// daemon from 12 to 208 MB and 83 s of CPU, anyone who can reach the port could go on.
#[test]
fn connections_that_come_and_go_leave_nothing_behind() {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(METRICS_ON_ANY_PORT);
    let d = Daemon::start_with(&flags);
    let addr = d.metrics_addr();
    let to: std::net::SocketAddr = addr.parse().expect("an address");
    // From many loopback addresses, as a flood would come: from one, its own connections
    // pass the per-address limit, whose eviction happened to sweep the list.
    // In rounds of 100, each ended by a scrape: a SYN the listener's queue has no room for
    // is sent again only a second later. Unpaced (and with a queue of 128 then), about 100
    // of the 14,000 were dropped and the test took 34 s, nearly all of it waiting.
    const ROUND: u32 = 100;
    let knock = |n: u32| {
        let rounds = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let (addr, rounds) = (&addr, &rounds);
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
                    for round in 0..n / ROUND {
                        for k in round * ROUND / 4..(round + 1) * ROUND / 4 {
                            let from = std::net::Ipv4Addr::new(
                                127,
                                2 + t,
                                (k / 250 % 250) as u8,
                                (k % 250 + 1) as u8,
                            );
                            drop(connect_from(&rt, from, to).expect("connect"));
                        }
                        // Served in order: once this is answered, the ones before it were taken.
                        if rounds.wait().is_leader() {
                            scrape_metrics(addr);
                        }
                        rounds.wait();
                    }
                });
            }
        });
    };
    knock(2_000);
    let before = rss_kib(d.pid());
    knock(12_000);
    let grown = rss_kib(d.pid()).saturating_sub(before);
    assert!(grown < 8 * 1024, "12,000 closed connections grew xtcqd by {grown} KiB");
}

/// Connects to `to` from the loopback address `from` (any 127.x.y.z is this host's).
fn connect_from(
    rt: &tokio::runtime::Runtime,
    from: std::net::Ipv4Addr,
    to: std::net::SocketAddr,
) -> Option<TcpStream> {
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().ok()?;
        s.bind((from, 0).into()).ok()?;
        let c = s.connect(to).await.ok()?;
        c.into_std().ok()
    })
}

/// A flood of connections that never send a request, from many loopback addresses (so the
/// per-address limit does not apply), each kept open until a newer one of its thread takes
/// its place: each scrape sent meanwhile must still be answered. Idle connections give way
/// to new ones, oldest first, and a scraper's is new only until the flood's next 32: 12 of
/// 30 scrapes were reset (4 threads, 25,000 connections in 20 s). Now a connection whose
/// request is in is never closed while one that sent nothing waits.
#[test]
fn a_flood_of_idle_connections_from_many_addresses_does_not_shut_out_a_scraper() {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(METRICS_ON_ANY_PORT);
    let d = Daemon::start_with(&flags);
    let addr: std::net::SocketAddr = d.metrics_addr().parse().expect("an address");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failed = std::thread::scope(|s| {
        for t in 0..4u8 {
            let stop = &stop;
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
                let mut kept = std::collections::VecDeque::new();
                let mut k = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let from =
                        std::net::Ipv4Addr::new(127, 1 + t, (k / 250 % 250) as u8, (k % 250 + 1) as u8);
                    if let Some(c) = connect_from(&rt, from, addr) {
                        kept.push_back(c);
                    }
                    if kept.len() > 100 {
                        kept.pop_front();
                    }
                    k += 1;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        let mut failed = 0;
        for _ in 0..20 {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
            let mut out = String::new();
            let _ = std::io::Read::read_to_string(&mut s, &mut out);
            if !out.starts_with("HTTP/1.1 200") {
                failed += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        failed
    });
    assert_eq!(failed, 0, "{failed} of 20 scrapes were not answered during the flood");
}

/// Sends SIGCONT to the process when dropped (the test stopped it), so a failing assertion
/// never leaves a daemon stopped.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.0 as i32).expect("a pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
    }
}

/// A burst of scrapers waits in the listener's queue for the daemon instead of being dropped:
/// with the daemon stopped (accepting nothing), 600 connections all complete their handshake.
/// With the standard library's backlog of 128, the 130th SYN was dropped and retried a second
/// later.
#[test]
fn a_burst_of_connections_waits_for_the_daemon_rather_than_being_dropped() {
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if somaxconn < 700 {
        xtcq_testkit::skipped(&format!("net.core.somaxconn is {somaxconn}, below the 700 this test needs"));
        return;
    }
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(METRICS_ON_ANY_PORT);
    let d = Daemon::start_with(&flags);
    let addr = d.metrics_addr();
    let to: std::net::SocketAddr = addr.parse().expect("an address");
    let pid = rustix::process::Pid::from_raw(d.pid() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP");
    let stopped = Continue(d.pid());
    let mut held = Vec::new();
    for i in 0..600 {
        match TcpStream::connect_timeout(&to, Duration::from_millis(700)) {
            Ok(s) => held.push(s),
            Err(e) => panic!("connection {i} of 600 was not let wait for the stopped daemon: {e}"),
        }
    }
    drop(held);
    drop(stopped);
    assert!(scrape_metrics(&addr).contains("xtcq_"), "the daemon serves scrapes after the burst");
}
