//! Pushing into a full queue: `xtcq push` and `xtcq produce` wait for room (up to
//! `--timeout`), and say so on stderr. Before, a producer that filled the segment went
//! silent and failed minutes later with no word in between.
//!
//! What is said: the first wait at once (with what is full and what to do), then how long it
//! has waited at 1 s, 2 s, 4 s, … (every 30 s past that), and that it goes on once room is
//! back. Later waits of a producer kept busy by a consumer are short and frequent: only
//! those that last a second are said, so a steady stream does not flood stderr.

use std::time::{Duration, Instant};

use anyhow::Result;
use xtcq_client::Error;

/// The waits of one producer on one queue.
pub struct Room<'a> {
    queue: &'a str,
    timeout: Duration,
    /// Jobs pushed so far (said in the messages).
    pushed: u64,
    /// Whether any wait has been said yet.
    said_once: bool,
}

/// The longest pause between two pushes that found the queue full.
const MAX_PAUSE: Duration = Duration::from_millis(20);
/// The longest gap between two "still waiting" lines.
const MAX_REPORT_GAP: Duration = Duration::from_secs(30);

fn human(d: Duration) -> humantime::FormattedDuration {
    // Whole seconds: "waited 2s", not "waited 2s 310ms 4us".
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

impl<'a> Room<'a> {
    pub fn new(queue: &'a str, timeout: Duration) -> Room<'a> {
        Room { queue, timeout, pushed: 0, said_once: false }
    }

    /// Pushes `payload` with `push`, waiting for room while the queue is full, up to the
    /// timeout; the error then says how far it got.
    pub fn push<F, T>(&mut self, mut push: F, payload: &[u8]) -> Result<T>
    where
        F: FnMut(&[u8]) -> std::result::Result<T, Error>,
    {
        let mut started: Option<Instant> = None;
        // When the next "still waiting" line is due (from `started`).
        let mut next_report = Duration::from_secs(1);
        let mut said = false;
        let mut pause = Duration::from_micros(50);
        loop {
            let full = match push(payload) {
                Ok(h) => {
                    if said {
                        let waited = started.map(|t| t.elapsed()).unwrap_or_default();
                        eprintln!("xtcq: room in {} again after {}; pushing on", self.queue, human(waited));
                    }
                    self.pushed += 1;
                    return Ok(h);
                }
                Err(e @ (Error::QueueFull { .. } | Error::RecordsFull(_))) => e,
                Err(e) => return Err(e.into()),
            };
            let t0 = *started.get_or_insert_with(Instant::now);
            let waited = t0.elapsed();
            if !self.said_once {
                self.said_once = true;
                said = true;
                eprintln!(
                    "xtcq: {full}; {} job(s) pushed so far; waiting for room for up to {} (--timeout): \
                     a consumer makes room (e.g. `xtcq work {} -- CMD`)",
                    self.pushed,
                    humantime::format_duration(self.timeout),
                    self.queue
                );
            }
            if waited >= self.timeout {
                return Err(anyhow::Error::from(full).context(format!(
                    "still full after waiting {} (--timeout); {} job(s) pushed, the rest not",
                    humantime::format_duration(self.timeout),
                    self.pushed
                )));
            }
            if waited >= next_report {
                said = true;
                eprintln!(
                    "xtcq: still waiting for room in {}: {} of {} (--timeout)",
                    self.queue,
                    human(waited),
                    humantime::format_duration(self.timeout)
                );
                next_report = (next_report * 2).min(waited + MAX_REPORT_GAP);
            }
            std::thread::sleep(pause.min(self.timeout.saturating_sub(waited)));
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}
