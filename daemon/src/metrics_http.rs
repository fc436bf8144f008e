//! `xtcqd --metrics ADDR`: the queues' totals and gauges in the Prometheus text format at
//! `GET /metrics` over plain HTTP/1.x (one request per connection, then close).
//!
//! - Opt-in: without `--metrics` nothing listens.
//! - A request is read up to [`MAX_REQUEST`] bytes and for at most [`REQUEST_TIMEOUT`]; a
//!   bigger, slower or garbled one gets a 4xx (or is dropped), never a stall: each
//!   connection is its own task, and at most [`MAX_CLIENTS`] run at once (more are closed
//!   at once), so a client that never finishes holds one task for a few seconds and nothing
//!   else.
//! - The figures are a `stats` answer (a record scan), computed on a blocking thread so the
//!   runtime's other tasks go on meanwhile.
//! - Queue names go into label values escaped as the format says (`\\`, `\"`, `\n`).
//! - Payload blocks are per segment, not per queue: one series per block size (label
//!   `size`, in bytes) for each class the segment has blocks of.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};
use xtcq_proto::msg::{BlockClassStats, QueueMetrics, Stats};

use crate::registry::Registry;

/// The most bytes of a request read (request line and headers).
pub const MAX_REQUEST: usize = 8 * 1024;
/// How long a client has to send its whole request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CLIENTS: usize = 32;

/// Accepts scrapes on `listener` until `stop` says so.
pub async fn run(reg: Registry, listener: TcpListener, mut stop: watch::Receiver<Option<String>>) {
    if let Ok(a) = listener.local_addr() {
        info!(addr = %a, "serving metrics at http://{a}/metrics");
    }
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and the like: wait rather than spin.
                warn!("metrics listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "metrics: too many clients, closing");
            continue;
        };
        let reg = reg.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = serve_one(reg, stream).await {
                debug!(%peer, "metrics client: {e}");
            }
        });
    }
}

/// Reads one request, writes one answer, closes.
async fn serve_one(reg: Registry, mut stream: TcpStream) -> std::io::Result<()> {
    let head = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return respond(&mut stream, "408 Request Timeout", "request not finished in time\n", true).await
        }
    };
    let Some(head) = head else {
        return respond(&mut stream, "431 Request Header Fields Too Large", "request too large\n", true)
            .await;
    };
    // A HEAD answer has the headers a GET would get and no body (RFC 9110 9.3.2).
    let body = !head.starts_with(b"HEAD ");
    let respond = |stream, status, text| respond(stream, status, text, body);
    match route(&head) {
        Route::Metrics => {
            let text = tokio::task::spawn_blocking(move || reg.stats(None, 0).map(|s| render(&s)))
                .await
                .map_err(std::io::Error::other)?;
            match text {
                Ok(b) => respond_with(&mut stream, "200 OK", "text/plain; version=0.0.4", &b, body).await,
                Err(e) => {
                    respond(&mut stream, "500 Internal Server Error", &format!("{}\n", e.message)).await
                }
            }
        }
        Route::NotFound => respond(&mut stream, "404 Not Found", "not found; try /metrics\n").await,
        Route::BadMethod => respond(&mut stream, "405 Method Not Allowed", "GET only\n").await,
        Route::Garbage => respond(&mut stream, "400 Bad Request", "not an HTTP request\n").await,
    }
}

/// The request's bytes up to the blank line; `None` past [`MAX_REQUEST`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            // Closed early: answer what came (a request line alone is enough for us).
            return Ok(Some(buf));
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(buf));
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
    Garbage,
}

/// What the request line asks for.
fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else { return Route::Garbage };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Route::Garbage;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Route::Garbage;
    }
    if method != "GET" && method != "HEAD" {
        return Route::BadMethod;
    }
    match target.split('?').next() {
        Some("/metrics") => Route::Metrics,
        _ => Route::NotFound,
    }
}

/// A plain-text answer; `with_body` false for a HEAD request (the headers alone).
async fn respond(stream: &mut TcpStream, status: &str, body: &str, with_body: bool) -> std::io::Result<()> {
    respond_with(stream, status, "text/plain; charset=utf-8", body, with_body).await
}

async fn respond_with(
    stream: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // A client that stops reading cannot hold the task for long either.
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        if with_body {
            stream.write_all(body.as_bytes()).await?;
        }
        stream.shutdown().await
    };
    tokio::time::timeout(REQUEST_TIMEOUT, write).await.unwrap_or(Ok(()))
}

/// One metric family: name, type, help, and how to read it from a queue's figures.
type Family = (&'static str, &'static str, &'static str, fn(&QueueMetrics) -> String);

const FAMILIES: [Family; 14] = [
    ("xtcq_jobs_pushed_total", "counter", "Jobs pushed.", |m| m.pushed.to_string()),
    ("xtcq_jobs_claimed_total", "counter", "Claims won by consumers.", |m| m.claimed.to_string()),
    ("xtcq_jobs_acked_total", "counter", "Jobs acked.", |m| m.acked.to_string()),
    ("xtcq_jobs_nacked_total", "counter", "Jobs given back by nack.", |m| m.nacked.to_string()),
    ("xtcq_jobs_failed_total", "counter", "Jobs given back by fail, with a reason.", |m| {
        m.failed.to_string()
    }),
    ("xtcq_jobs_dead_total", "counter", "Jobs that became dead letters.", |m| m.dead_total.to_string()),
    ("xtcq_lease_expiries_total", "counter", "Claims revoked when their lease ran out.", |m| {
        m.lease_expiries.to_string()
    }),
    ("xtcq_jobs_recovered_total", "counter", "Claims of dead processes given back.", |m| {
        m.recovered.to_string()
    }),
    ("xtcq_jobs_queued", "gauge", "Jobs waiting in line.", |m| m.queued.to_string()),
    ("xtcq_jobs_running", "gauge", "Jobs claimed now.", |m| m.running.to_string()),
    ("xtcq_jobs_dead", "gauge", "Dead letters kept now.", |m| m.dead.to_string()),
    ("xtcq_records_in_use", "gauge", "Job records the queue holds.", |m| m.records_in_use.to_string()),
    ("xtcq_oldest_queued_seconds", "gauge", "Age of the oldest queued job (0: none).", |m| {
        format!("{:.3}", m.oldest_queued_ns as f64 / 1e9)
    }),
    ("xtcq_sleepers", "gauge", "Consumers asleep waiting for a job.", |m| m.sleepers.to_string()),
];

/// The Prometheus text exposition of `s`.
pub fn render(s: &Stats) -> String {
    let mut out = String::new();
    for (name, kind, help, value) in FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for q in &s.queues {
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", label(&q.info.name), value(&q.metrics));
        }
    }
    for (name, help, value) in BLOCK_FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for b in &s.payload_blocks {
            let _ = writeln!(out, "{name}{{size=\"{}\"}} {}", b.size, value(b));
        }
    }
    out
}

/// A payload-block gauge: name, help, and how to read it from a class's figures.
type BlockFamily = (&'static str, &'static str, fn(&BlockClassStats) -> u32);

const BLOCK_FAMILIES: [BlockFamily; 2] = [
    ("xtcq_payload_blocks", "Payload blocks the segment has, by block size in bytes.", |b| b.total),
    (
        "xtcq_payload_blocks_in_use",
        "Payload blocks held by a job's payload now, by block size in bytes.",
        |b| b.in_use,
    ),
];

/// A label value escaped for the text format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(b"\xff\xfe garbage"), Route::Garbage);
        assert_eq!(route(b""), Route::Garbage);
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
