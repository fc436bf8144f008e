//! The daemon's `/metrics` listener, as tests reach it: the address its start logged, and one
//! scrape.
//!
//! - The address is read from the daemon's log (it binds `127.0.0.1:0`, a port of the
//!   kernel's choosing); the latest start's line wins, so a restarted daemon is found anew.
//! - A scrape that does not answer within 30 s fails the test instead of hanging it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::child::wait_until;
use crate::daemon::Daemon;

/// The `--metrics` flags tests add to a segment size: the kernel picks the port, and each
/// scrape scans (a test that changes something and scrapes sees the change at once).
pub const METRICS_ON_ANY_PORT: [&str; 4] = ["--metrics", "127.0.0.1:0", "--metrics-max-age", "0"];

impl Daemon {
    /// The address (`host:port`) the daemon's latest start logged for `/metrics`; waits up to
    /// 10 s for the line.
    pub fn metrics_addr(&self) -> String {
        let mut found = None;
        wait_until(Duration::from_secs(10), "the metrics address in the log", || {
            let log = self.log_text();
            found = log
                .rsplit("http://")
                .next()
                .filter(|_| log.contains("http://"))
                .and_then(|s| s.split("/metrics").next().map(str::to_string));
            found.is_some()
        });
        found.expect("found above")
    }
}

/// One `GET /metrics` of `addr`: the whole answer (status line, headers, body); fails the
/// test unless it is a 200 within 30 s.
pub fn scrape_metrics(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("a read timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("send the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("an answer within 30 s");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}
