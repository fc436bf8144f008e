//! Red-team pass 7 on `xtcqd --metrics`: HTTP clients the earlier passes did not try.
//!
//! - A `HEAD /metrics` answer must not carry a body (RFC 9110 §9.3.2): before, the daemon
//!   sent the whole exposition after the headers, which a client reusing the connection
//!   would read as the start of its next answer.
//! - Garbage, an over-long head and a request split across writes get a 4xx or their answer,
//!   and the daemon goes on serving (a scrape and the control socket after them).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use xtcq_testkit::*;

fn daemon_with_metrics() -> (Daemon, String) {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(METRICS_ON_ANY_PORT);
    let d = Daemon::start_with(&flags);
    let mut addr = None;
    wait_until(Duration::from_secs(10), "the metrics address in the log", || {
        let log = d.log_text();
        addr = log.split("http://").nth(1).and_then(|s| s.split("/metrics").next()).map(str::to_string);
        addr.is_some()
    });
    let addr = addr.expect("address");
    (d, addr)
}

/// Writes each of `parts` (a short pause between, so they arrive apart), then reads the
/// whole answer.
fn http(addr: &str, parts: &[&[u8]]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    for p in parts {
        s.write_all(p).expect("write");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn head_answers_headers_only() {
    let (d, addr) = daemon_with_metrics();
    ok(&d.run(&["create", "q"]));
    let a = http(&addr, &[b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"]);
    assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    let (head, body) = a.split_once("\r\n\r\n").expect("a blank line after the headers");
    assert_eq!(body, "", "HEAD carries no body (headers: {head})");
    assert!(head.contains("Content-Length: "), "the length a GET would get: {head}");
}

#[test]
fn garbage_split_and_oversized_requests_leave_the_daemon_serving() {
    let (d, addr) = daemon_with_metrics();
    ok(&d.run(&["create", "q"]));
    assert!(http(&addr, &[b"\x00\xff\r\n\r\n"]).starts_with("HTTP/1.1 400"));
    let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let a = http(&addr, &[long.as_bytes()]);
    assert!(a.is_empty() || a.starts_with("HTTP/1.1 431"), "{a}");
    let a = http(&addr, &[b"GET /met", b"rics HTTP/1.1\r\n", b"Host: x\r\n\r\n"]);
    assert!(a.starts_with("HTTP/1.1 200") && a.contains("xtcq_jobs_queued{queue=\"q\"}"), "{a}");
    ok(&d.run(&["push", "q", "still-served"]));
    assert_eq!(d.drain("q"), ["still-served"]);
}
