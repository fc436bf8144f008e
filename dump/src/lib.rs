//! The dump file of `xtcq export`, `xtcqd --export-on-stop` and `--import-on-start`: the
//! queues and jobs of a segment, for a reboot (`/dev/shm` is emptied) or an upgrade to a
//! build with another layout version.
//!
//! Rules kept:
//! - JSON lines: a header first (`{"kind":"header","format":"xtcq-dump","version":3,...}`),
//!   then one line per queue and one per job; a reader refuses another format and a newer
//!   version, and names the line of any error;
//! - from version 3 the header names the segment the jobs were copied from ([`SegmentId`]):
//!   a daemon that adopted that very segment (it survived the restart) already holds those
//!   jobs, or what became of them, and never imports them a second time; and each queue line
//!   keeps its owner, the users and groups it is shared with and its retry backoff, where the
//!   writer knew them (`--export-on-stop`);
//! - a dump is readable by its writer only (0600): it holds every payload, and the segment it
//!   came from is no more open than that to those outside the daemon's group;
//! - from version 2 the last line is `{"kind":"end","queues":N,"jobs":M}`: a dump cut at a
//!   line boundary (a copy that stopped early, a full disk) parses, and only the missing end
//!   line (or its counts) tells; a reader refuses it. Version 1 dumps have no end line;
//! - a line is at most [`MAX_LINE`] bytes: a reader refuses a longer one without holding it;
//! - a payload that is UTF-8 is written as a JSON string (`payload`), any other as hex
//!   (`payload_hex`);
//! - a dump is written to `FILE.tmp.RANDOM`, synced, then renamed: a crash never leaves half a
//!   dump under the name; that name is unpredictable and created exclusively (`O_EXCL`,
//!   never through a link), so nothing planted ahead of it (a directory, a link) can stop or
//!   redirect the write; a `FILE` that exists and is not a regular file (a device, a FIFO, a
//!   link, a directory) is refused first, never replaced;
//! - an import at start renames `FILE` to `FILE.importing` first and to `FILE.imported` once
//!   every job is in: a restart never imports a file twice, and a start that finds
//!   `FILE.importing` (a daemon killed during the import) refuses to guess which of its jobs
//!   are in and says what to do;
//! - `--import-on-start` also takes a segment file of this or an older readable layout
//!   (`xtcq_shm::segment::READABLE_LAYOUT_VERSIONS`), mapped read-only.
//!
//! The daemon (`--export-on-stop`, `--import-on-start`) and the command line (`xtcq export`,
//! `xtcq import`) both read and write dumps through this crate: [`read`], [`write`],
//! [`export`]; [`check`] refuses a dump a segment has no room for before anything is
//! written; [`claim`] renames the file as an import goes.

pub mod check;
pub mod claim;
mod read;
mod write;

pub use read::{read, MAX_LINE};
pub use write::{export, export_file, write};

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use xtcq_proto as proto;
use xtcq_shm::transfer::SegmentCopy;
use xtcq_shm::{Flavor, Segment};

/// The `format` of a dump's header.
pub const FORMAT: &str = "xtcq-dump";
/// The dump version this build writes and the newest it reads.
pub const VERSION: u32 = 3;
/// The first version that ends with [`Line::End`].
pub(crate) const FIRST_VERSION_WITH_END: u32 = 2;

/// One line of a dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// First line.
    Header {
        /// [`FORMAT`].
        format: String,
        /// [`VERSION`].
        version: u32,
        /// Layout version of the segment the jobs came from.
        layout_version: u32,
        /// The segment the jobs came from (version 3 on).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        segment: Option<SegmentId>,
    },
    /// A queue.
    Queue(QueueLine),
    /// A job.
    Job(JobLine),
    /// Last line (version 2 on): how many queue and job lines came before it.
    End {
        /// Queue lines.
        queues: u64,
        /// Job lines.
        jobs: u64,
    },
}

/// A queue definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueLine {
    /// Name.
    pub name: String,
    /// `lifo` or `fifo`.
    pub flavor: String,
    /// Deques.
    pub deques: u32,
    /// Slots per deque.
    pub capacity: u32,
    /// Attempts before dead-lettering (0: no limit).
    pub max_attempts: u32,
    /// Claim lease, ms (0: none).
    pub lease_ms: u32,
    /// Record quota (0: none).
    #[serde(default)]
    pub max_records: u32,
    /// Dead-letter cap (0: none).
    #[serde(default)]
    pub max_dead: u32,
    /// The uid that owns it (version 3 on, where the writer knew it; else the importer owns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<u32>,
    /// Further uids allowed to use it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_uids: Vec<u32>,
    /// Gids whose members may use it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_gids: Vec<u32>,
    /// Its retry backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<proto::RetryBackoff>,
    /// Concurrency limit (0: none). Absent (none) from older dumps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_running: u32,
    /// Rate limit. Absent (none) from older dumps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<proto::RateLimit>,
    /// Paused (`xtcq pause`): imported paused. Absent (not paused) from older dumps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Priority levels. Absent (1) from older dumps and for a queue of one level.
    #[serde(default = "proto::one_level", skip_serializing_if = "is_one")]
    pub levels: u32,
    /// Aging (0: none). Absent (0) from older dumps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub aging: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What the daemon keeps of a queue outside the segment, and a dump carries: who owns it,
/// whom it is shared with, its retry backoff.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueGrants {
    /// The uid that owns it.
    pub owner: u32,
    /// Further uids allowed to use it.
    pub uids: Vec<u32>,
    /// Gids whose members may use it.
    pub gids: Vec<u32>,
    /// Its retry backoff (`None`: retried at once).
    pub retry_backoff: Option<proto::RetryBackoff>,
}

/// Which segment a dump was copied from: its creation time and creator's pid, as its
/// descriptor holds them, which no two segments share (a segment made anew, `--recreate`
/// or after a reboot, has another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentId {
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// The creator's pid.
    pub creator_pid: u32,
}

impl SegmentId {
    /// The identity of `seg`.
    pub fn of(seg: &Segment) -> SegmentId {
        let d = seg.descriptor();
        SegmentId { created_unix_ns: d.created_unix_ns, creator_pid: d.creator_pid }
    }
}

/// A job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLine {
    /// Its queue's name.
    pub queue: String,
    /// Its payload, when UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// Its payload in hex, when not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_hex: Option<String>,
    /// Times it was run and given back.
    pub attempts: u32,
    /// `queued` or `dead`.
    pub state: JobState,
    /// Why it last failed.
    #[serde(default)]
    pub last_error: String,
    /// The priority it was pushed at. Absent (0, the most urgent) from older dumps and for
    /// a job at priority 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: u32,
    /// The key it held (a unique job), when UTF-8. Absent (keyless) from older dumps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The key it held in hex, when not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_hex: Option<String>,
}

/// Where a job was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting to run (or running, or delayed, when copied).
    Queued,
    /// A dead letter.
    Dead,
}

/// A dump read back: its queues and jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// The segment the jobs came from, when the dump says (version 3 on).
    pub segment: Option<SegmentId>,
    /// Queue definitions.
    pub queues: Vec<QueueLine>,
    /// Jobs.
    pub jobs: Vec<JobLine>,
}

/// What went wrong with a dump.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// Reading or writing the file.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Not a dump this build reads.
    #[error("{path} line {line}: {what}")]
    Format {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// The dump's path names something a dump must not replace.
    #[error(
        "{path} is a {kind}, not a regular file: a dump is written whole and renamed over its \
         path, which would replace the {kind} itself; give the path of a new file (or of an \
         older dump to replace)"
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What is there.
        kind: &'static str,
    },
    /// A segment file that could not be read.
    #[error(transparent)]
    Segment(#[from] xtcq_shm::SegmentError),
    /// A job or queue the daemon refused.
    #[error("import into the segment failed: {0}")]
    Import(String),
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

impl JobLine {
    /// The key's bytes: `Ok(None)` for a job without one, `Err` for bad hex or both fields.
    pub fn key_bytes(&self) -> Result<Option<Vec<u8>>, &'static str> {
        match (&self.key, &self.key_hex) {
            (None, None) => Ok(None),
            (Some(s), None) => Ok(Some(s.clone().into_bytes())),
            (None, Some(h)) => unhex(h).map(Some).ok_or("bad hex in key_hex"),
            _ => Err("both key and key_hex"),
        }
    }

    /// The payload bytes (`None`: neither field, or bad hex).
    pub fn payload_bytes(&self) -> Option<Vec<u8>> {
        match (&self.payload, &self.payload_hex) {
            (Some(s), None) => Some(s.clone().into_bytes()),
            (None, Some(h)) => unhex(h),
            _ => None,
        }
    }
}

/// The dump of a copied segment, each queue with the owner, grants and backoff `grants` knows
/// of it (the daemon's own record, by queue name).
pub fn dump_of(copy: &SegmentCopy, grants: impl Fn(&str) -> Option<QueueGrants>) -> Dump {
    let name = |i: u32| copy.queues.iter().find(|(q, _)| q.index == i).map(|(q, _)| q.spec.name.clone());
    let queues = copy
        .queues
        .iter()
        .map(|(q, l)| {
            let kept = grants(&q.spec.name);
            QueueLine {
                name: q.spec.name.clone(),
                flavor: if q.spec.flavor == Flavor::Fifo { "fifo" } else { "lifo" }.into(),
                deques: q.spec.deques,
                capacity: q.spec.capacity,
                max_attempts: q.spec.max_attempts,
                lease_ms: q.spec.lease_ms,
                max_records: l.quota.max_records,
                max_dead: l.quota.max_dead,
                owner: kept.as_ref().map(|g| g.owner),
                allow_uids: kept.as_ref().map(|g| g.uids.clone()).unwrap_or_default(),
                allow_gids: kept.as_ref().map(|g| g.gids.clone()).unwrap_or_default(),
                retry_backoff: kept.and_then(|g| g.retry_backoff),
                // Read from words any attached process can rewrite: clamped to what a flag can
                // set, so that one queue's garbage cannot make the whole dump unimportable
                // (the importer refuses a limit no flag makes, and with it every queue after).
                max_running: l.max_running.min(proto::MAX_RUNNING_LIMIT),
                max_rate: (l.max_rate.interval_ns != 0).then_some(proto::RateLimit {
                    interval_ns: l.max_rate.interval_ns.min(proto::MAX_RATE_INTERVAL_NS),
                    burst: l.max_rate.burst.clamp(1, proto::MAX_RATE_BURST),
                }),
                paused: copy.paused.contains(&q.index),
                levels: q.spec.levels,
                aging: q.spec.aging,
            }
        })
        .collect();
    let jobs = copy
        .jobs
        .iter()
        .filter_map(|j| {
            let (payload, payload_hex) = match std::str::from_utf8(&j.payload) {
                Ok(s) => (Some(s.to_string()), None),
                Err(_) => (None, Some(hex(&j.payload))),
            };
            let (key, key_hex) = match j.key.as_deref().map(std::str::from_utf8) {
                None => (None, None),
                Some(Ok(s)) => (Some(s.to_string()), None),
                Some(Err(_)) => (None, j.key.as_deref().map(hex)),
            };
            Some(JobLine {
                queue: name(j.queue)?,
                payload,
                payload_hex,
                attempts: j.attempts,
                state: if j.dead { JobState::Dead } else { JobState::Queued },
                last_error: j.last_error.clone(),
                priority: j.priority,
                key,
                key_hex,
            })
        })
        .collect();
    Dump { segment: None, queues, jobs }
}

/// The params to create a dumped queue with.
pub fn params(q: &QueueLine) -> proto::QueueParams {
    proto::QueueParams {
        name: q.name.clone(),
        deques: q.deques,
        capacity: q.capacity,
        flavor: if q.flavor == "fifo" { proto::Flavor::Fifo } else { proto::Flavor::Lifo },
        max_attempts: q.max_attempts,
        lease_ms: q.lease_ms,
        levels: q.levels,
        aging: q.aging,
    }
}

/// The segment's flavor of a dumped queue (`fifo`, else `lifo`: the reader refuses others).
pub fn flavor(q: &QueueLine) -> Flavor {
    if q.flavor == "fifo" {
        Flavor::Fifo
    } else {
        Flavor::Lifo
    }
}
