//! A job's fate by id ([`crate::msg::Request::JobFate`]): what `xtcq job QUEUE ID` prints.
//!
//! Rules kept:
//! - a job is named by its stable id (`index.birth`, [`crate::dead::JobRef`] with the birth
//!   as its number), as `push --print-handle` prints it; the daemon reads the record and
//!   answers [`JobState::Unknown`] for a record that is another job's now;
//! - a finished job is known only until its record is reused: nothing else remembers it.

use serde::{Deserialize, Serialize};

/// What became of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// No job of that id in that queue: never was, or it finished and its record was reused.
    Unknown,
    /// Its push is under way.
    BeingPushed,
    /// Waiting in line.
    Queued {
        /// Runs given back so far.
        attempts: u32,
    },
    /// Waiting for its due time.
    Delayed {
        /// Milliseconds until it joins the line (0: due now).
        due_in_ms: u64,
        /// Runs given back so far.
        attempts: u32,
    },
    /// Claimed by a consumer.
    Running {
        /// The consumer's pid, as the daemon knows it (`None`: taken back by the daemon,
        /// which is stopping its command, or a process it does not watch).
        pid: Option<u32>,
        /// Milliseconds left on its lease (`None`: no lease; 0: expired, being taken back).
        lease_left_ms: Option<u64>,
        /// Runs given back before this one.
        attempts: u32,
    },
    /// A dead letter.
    Dead {
        /// Runs.
        attempts: u32,
        /// Why it last failed.
        last_error: String,
    },
    /// Acked (or purged as a dead letter); its record was not reused yet.
    Finished,
    /// Cancelled (`xtcq cancel`); its record was not reused yet.
    Cancelled,
}

/// Milliseconds past which a delayed job is held, not delayed (100 years: a delay is at most
/// 10; a batch's callback has no due time at all).
const HELD_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

impl JobState {
    /// One line for a human.
    pub fn describe(&self) -> String {
        match self {
            JobState::Unknown => {
                "unknown: no such job in this queue (or it finished and its record was reused)".into()
            }
            JobState::BeingPushed => "being pushed".into(),
            JobState::Queued { attempts } => format!("queued ({attempts} earlier attempt(s))"),
            // Only a batch's callback waits that long (a delay is at most 10 years): it has
            // no due time, its batch's completion releases it.
            JobState::Delayed { due_in_ms, .. } if *due_in_ms > HELD_MS => {
                "held: a batch's callback job, in line once its batch completes".into()
            }
            JobState::Delayed { due_in_ms, attempts } => {
                format!("delayed: due in {due_in_ms} ms ({attempts} earlier attempt(s))")
            }
            JobState::Running { pid, lease_left_ms, attempts } => {
                let by = pid.map_or("a consumer being stopped by xtcqd".to_string(), |p| format!("pid {p}"));
                let lease =
                    lease_left_ms.map_or("no lease".to_string(), |ms| format!("{ms} ms of lease left"));
                format!("running: by {by}, {lease} ({attempts} earlier attempt(s))")
            }
            JobState::Dead { attempts, last_error } => {
                format!(
                    "dead after {attempts} attempt(s): {}",
                    if last_error.is_empty() { "no reason given" } else { last_error }
                )
            }
            JobState::Finished => "finished: acked (or purged as a dead letter)".into(),
            JobState::Cancelled => "cancelled".into(),
        }
    }
}
