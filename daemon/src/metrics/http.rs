//! `xtcqd --metrics ADDR`: the queues' totals and gauges in the Prometheus text format at
//! `GET /metrics` over plain HTTP/1.x (one request per connection, then close).
//!
//! Anyone who can reach ADDR can talk to this listener, users the daemon does not serve
//! included; so nothing they do may slow the job path or recovery, or shut out a real
//! scraper:
//! - Opt-in: without `--metrics` nothing listens. The port is bound before anything else
//!   is made (`startup`): one taken by someone else stops the start at once, naming it.
//! - One full record scan per `--metrics-max-age` at most, whatever the number of
//!   scrapers: a scrape within that age of the last scan gets the last answer, and
//!   scrapes that arrive during a scan wait for that one scan.
//! - A request is read up to [`MAX_REQUEST`] bytes and for at most [`REQUEST_TIMEOUT`]; a
//!   bigger, slower or garbled one gets a 4xx (or is dropped), never a stall. At most
//!   [`MAX_WAITING`] connections wait for their request, [`MAX_WAITING_PER_PEER`] of one
//!   address; past either, the oldest waiting connection that has sent nothing (of that
//!   address, or of all) is closed for the new one. A connection whose request bytes are in
//!   is never closed while one that sent nothing waits, so a flood of idle connections,
//!   from however many addresses, cannot shut out a scraper that sends its request at once.
//!   A place to be answered in ([`MAX_CLIENTS`] at once) is taken only once the request is
//!   read: waiting for a request holds none.
//! - Queue names go into label values escaped as the format says (`\\`, `\"`, `\n`).
//! - Payload blocks are per segment, not per queue: one series per block size (label
//!   `size`, in bytes) for each class the segment has blocks of.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};
use xtcq_proto::msg::{BlockClassStats, QueueMetrics, Stats};

use crate::registry::Registry;

/// The most bytes of a request read (request line and headers).
pub const MAX_REQUEST: usize = 8 * 1024;
/// How long a client has to send its whole request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections answered at once.
pub const MAX_CLIENTS: usize = 32;
/// Connections waiting for their request at once.
pub const MAX_WAITING: usize = 32;
/// Connections of one address waiting for their request at once.
pub const MAX_WAITING_PER_PEER: usize = 8;

/// A scan's text, or why there is none.
type ScanText = Result<Arc<String>, String>;

/// The last answer, and how many scans were made.
struct Scans {
    max_age: Duration,
    last: tokio::sync::Mutex<Option<(Instant, ScanText)>>,
    made: AtomicU64,
}

impl Scans {
    /// The text of a scan at most `max_age` old; makes one if there is none.
    async fn text(&self, reg: &Registry) -> std::io::Result<ScanText> {
        // Held across the scan: scrapes that come meanwhile wait for this one's answer.
        let mut last = self.last.lock().await;
        if let Some((at, text)) = &*last {
            if at.elapsed() < self.max_age {
                return Ok(text.clone());
            }
        }
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        let reg = reg.clone();
        let text = tokio::task::spawn_blocking(move || reg.stats(None, 0).map(|s| render(&s, made)))
            .await
            .map_err(std::io::Error::other)?
            .map(Arc::new)
            .map_err(|e| e.message);
        *last = Some((Instant::now(), text.clone()));
        Ok(text)
    }
}

/// A connection still waiting for its request: it may be closed for a newer one.
struct Waiting {
    peer: IpAddr,
    reading: Arc<AtomicBool>,
    task: AbortHandle,
    /// A second descriptor of the connection, to look (never read) whether its client has
    /// sent anything yet.
    look: std::net::TcpStream,
}

impl Waiting {
    fn live(&self) -> bool {
        self.reading.load(Ordering::Relaxed) && !self.task.is_finished()
    }

    /// Whether the client has sent nothing yet. The descriptor shares the connection's
    /// non-blocking mode, so the peek never waits.
    fn sent_nothing(&self) -> bool {
        let mut b = [0u8; 1];
        !matches!(self.look.peek(&mut b), Ok(n) if n > 0)
    }
}

/// The connections waiting for their request, oldest first.
#[derive(Default)]
struct WaitingList(Mutex<VecDeque<Waiting>>);

impl WaitingList {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting>> {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Dropping the entries of connections no longer waiting: kept, each held its task's
        // memory (and here a descriptor) for good and made every accept's walk longer.
        list.retain(Waiting::live);
        list
    }

    /// Closes the oldest waiting connection of `peer` (`None`: of anyone) that sent
    /// nothing, or if every one sent something, the oldest; whether it closed one.
    fn evict_oldest(&self, peer: Option<IpAddr>) -> bool {
        let mut list = self.lock();
        let of_peer = |w: &Waiting| peer.is_none_or(|p| p == w.peer);
        let pick = list
            .iter()
            .position(|w| of_peer(w) && w.sent_nothing())
            .or_else(|| list.iter().position(of_peer));
        match pick.and_then(|i| list.remove(i)) {
            Some(w) => {
                w.task.abort();
                true
            }
            None => false,
        }
    }

    /// How many connections wait: of `peer`, and in all.
    fn count(&self, peer: IpAddr) -> (usize, usize) {
        let list = self.lock();
        (list.iter().filter(|w| w.peer == peer).count(), list.len())
    }

    fn push(&self, w: Waiting) {
        self.lock().push_back(w);
    }
}

/// Accepts scrapes on `listener` until `stop` says so; a scan serves scrapes for `max_age`.
pub async fn run(
    reg: Registry,
    listener: TcpListener,
    max_age: Duration,
    mut stop: watch::Receiver<Option<String>>,
) {
    if let Ok(a) = listener.local_addr() {
        info!(addr = %a, "serving metrics at http://{a}/metrics");
    }
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    let scans = Arc::new(Scans { max_age, last: tokio::sync::Mutex::new(None), made: AtomicU64::new(0) });
    let waiting = Arc::new(WaitingList::default());
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
        let (of_peer, all) = waiting.count(peer.ip());
        if of_peer >= MAX_WAITING_PER_PEER {
            waiting.evict_oldest(Some(peer.ip()));
        } else if all >= MAX_WAITING && !waiting.evict_oldest(None) {
            debug!(%peer, "metrics: every waiting place is taken, closing");
            continue;
        }
        let look = match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => std::net::TcpStream::from(fd),
            Err(e) => {
                warn!("metrics listener: cannot duplicate a connection: {e}");
                continue;
            }
        };
        let reading = Arc::new(AtomicBool::new(true));
        let (reg, scans, slots, flag) = (reg.clone(), scans.clone(), slots.clone(), reading.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = serve_one(&reg, &scans, &slots, stream, &flag).await {
                debug!(%peer, "metrics client: {e}");
            }
        });
        waiting.push(Waiting { peer: peer.ip(), reading, task: task.abort_handle(), look });
    }
}

/// Reads one request, writes one answer, closes; clears `reading` once the request is in.
async fn serve_one(
    reg: &Registry,
    scans: &Scans,
    slots: &Semaphore,
    mut stream: TcpStream,
    reading: &AtomicBool,
) -> std::io::Result<()> {
    let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await;
    reading.store(false, Ordering::Relaxed);
    let Ok(Ok(_answering)) = tokio::time::timeout(REQUEST_TIMEOUT, slots.acquire()).await else {
        return Ok(());
    };
    let head = match head {
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
        Route::Metrics => match scans.text(reg).await? {
            Ok(b) => respond_with(&mut stream, "200 OK", "text/plain; version=0.0.4", &b, body).await,
            Err(e) => respond(&mut stream, "500 Internal Server Error", &format!("{e}\n")).await,
        },
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

const FAMILIES: [Family; 15] = [
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
    ("xtcq_jobs_cancelled_total", "counter", "Jobs cancelled (queued, delayed or running).", |m| {
        m.cancelled.to_string()
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

/// The Prometheus text exposition of `s`, the `scans`-th scan made for a scrape.
pub fn render(s: &Stats, scans: u64) -> String {
    let mut out = String::new();
    let name = "xtcq_metrics_scans_total";
    let _ = writeln!(
        out,
        "# HELP {name} Record scans made to answer scrapes.\n# TYPE {name} counter\n{name} {scans}"
    );
    for (name, kind, help, value) in FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for q in &s.queues {
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", label(&q.info.name), value(&q.metrics));
        }
    }
    let name = "xtcq_queue_paused";
    let _ = writeln!(
        out,
        "# HELP {name} 1 while the queue is paused (its consumers take nothing).\n# TYPE {name} gauge"
    );
    for q in &s.queues {
        let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", label(&q.info.name), u8::from(q.info.paused));
    }
    let limits: [LimitFamily; 2] = [
        ("xtcq_queue_max_running", "Most of the queue's jobs claimed at once (0: no limit).", |q| {
            q.max_running
        }),
        ("xtcq_queue_running", "Slots of the queue's concurrency limit taken now.", |q| q.running),
    ];
    for (name, help, value) in limits {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for q in &s.queues {
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", label(&q.info.name), value(&q.quota));
        }
    }
    let name = "xtcq_queue_max_rate";
    let _ = writeln!(
        out,
        "# HELP {name} Most of the queue's claims started per second at the rate limit's pace (0: no limit).\n\
         # TYPE {name} gauge"
    );
    for q in &s.queues {
        let r = q.quota.max_rate;
        let per_s = if r.interval_ns == 0 { 0.0 } else { 1e9 / r.interval_ns as f64 };
        let _ = writeln!(out, "{name}{{queue=\"{}\"}} {per_s}", label(&q.info.name));
    }
    for (name, help, value) in BLOCK_FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for b in &s.payload_blocks {
            let _ = writeln!(out, "{name}{{size=\"{}\"}} {}", b.size, value(b));
        }
    }
    out
}

/// A concurrency-limit gauge: name, help, and how to read it from a queue's quota figures.
type LimitFamily = (&'static str, &'static str, fn(&xtcq_proto::QuotaStats) -> u32);

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
    use super::{label, route, Route};

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
