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

use std::io::{BufRead, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xtcq_proto as proto;
use xtcq_shm::transfer::{copy_segment, SegmentCopy};
use xtcq_shm::{Flavor, Segment};

use crate::state::QueueAcl;

/// The `format` of a dump's header.
pub const FORMAT: &str = "xtcq-dump";
/// The dump version this build writes and the newest it reads.
pub const VERSION: u32 = 3;
/// The first version that ends with [`Line::End`].
const FIRST_VERSION_WITH_END: u32 = 2;

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
    /// Paused (`xtcq pause`): imported paused. Absent (not paused) from older dumps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    /// The payload bytes (`None`: neither field, or bad hex).
    pub fn payload_bytes(&self) -> Option<Vec<u8>> {
        match (&self.payload, &self.payload_hex) {
            (Some(s), None) => Some(s.clone().into_bytes()),
            (None, Some(h)) => unhex(h),
            _ => None,
        }
    }
}

/// The dump of a copied segment, each queue with the owner, grants and backoff `acl` knows
/// of it (the daemon's own record, by queue name).
pub fn dump_of(copy: &SegmentCopy, acl: impl Fn(&str) -> Option<QueueAcl>) -> Dump {
    let name = |i: u32| copy.queues.iter().find(|(q, _)| q.index == i).map(|(q, _)| q.spec.name.clone());
    let queues = copy
        .queues
        .iter()
        .map(|(q, l)| {
            let acl = acl(&q.spec.name);
            QueueLine {
                name: q.spec.name.clone(),
                flavor: if q.spec.flavor == Flavor::Fifo { "fifo" } else { "lifo" }.into(),
                deques: q.spec.deques,
                capacity: q.spec.capacity,
                max_attempts: q.spec.max_attempts,
                lease_ms: q.spec.lease_ms,
                max_records: l.quota.max_records,
                max_dead: l.quota.max_dead,
                owner: acl.as_ref().map(|a| a.owner),
                allow_uids: acl.as_ref().map(|a| a.uids.clone()).unwrap_or_default(),
                allow_gids: acl.as_ref().map(|a| a.gids.clone()).unwrap_or_default(),
                retry_backoff: acl.and_then(|a| a.retry_backoff),
                max_running: l.max_running,
                paused: copy.paused.contains(&q.index),
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
            Some(JobLine {
                queue: name(j.queue)?,
                payload,
                payload_hex,
                attempts: j.attempts,
                state: if j.dead { JobState::Dead } else { JobState::Queued },
                last_error: j.last_error.clone(),
            })
        })
        .collect();
    Dump { segment: None, queues, jobs }
}

/// Writes `dump` to `path` (through `path.tmp.RANDOM`, synced, then renamed).
pub fn write(dump: &Dump, layout_version: u32, path: &Path) -> Result<(), DumpError> {
    refuse_non_file(path)?;
    let io = |what, p: &Path| {
        let p = p.to_path_buf();
        move |source| DumpError::Io { what, path: p, source }
    };
    let (tmp, f) = create_temporary(path).map_err(io("cannot create a temporary file beside", path))?;
    let written = write_lines(dump, layout_version, &tmp, f)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io("cannot rename into place", path)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Writes the lines of `dump` to `f` (the temporary `tmp`) and syncs it.
fn write_lines(dump: &Dump, layout_version: u32, tmp: &Path, f: std::fs::File) -> Result<(), DumpError> {
    let io = |what| move |source| DumpError::Io { what, path: tmp.to_path_buf(), source };
    let mut w = BufWriter::new(f);
    let header =
        Line::Header { format: FORMAT.into(), version: VERSION, layout_version, segment: dump.segment };
    let lines = std::iter::once(header)
        .chain(dump.queues.iter().cloned().map(Line::Queue))
        .chain(dump.jobs.iter().cloned().map(Line::Job))
        .chain(std::iter::once(Line::End { queues: dump.queues.len() as u64, jobs: dump.jobs.len() as u64 }));
    for l in lines {
        let s = serde_json::to_string(&l).map_err(|e| DumpError::Import(e.to_string()))?;
        writeln!(w, "{s}").map_err(io("cannot write"))?;
    }
    let f = w.into_inner().map_err(|e| io("cannot write")(e.into_error()))?;
    f.sync_all().map_err(io("cannot sync"))
}

/// Refuses a `path` that exists and is not a regular file: the rename would replace it
/// itself (a device such as `/dev/null` when run as root, a FIFO, a link's own name).
fn refuse_non_file(path: &Path) -> Result<(), DumpError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if meta.file_type().is_file() {
        return Ok(());
    }
    Err(DumpError::NotAFile {
        path: path.to_path_buf(),
        kind: xtcq_proto::paths::file_kind(meta.file_type()),
    })
}

/// Creates `FILE.tmp.RANDOM` beside `path`, owner-only (0600, whatever the umask), with a
/// name nobody can plant anything at ahead of time: 64 random bits, `O_EXCL` (which never
/// follows a link) and `O_NOFOLLOW`, and a fresh name if one is taken all the same. A suffix,
/// not `with_extension`, which made a.dump's temporary a.tmp, clobbering an unrelated file.
fn create_temporary(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut last = None;
    for _ in 0..8 {
        let mut r = [0u8; 8];
        rustix::rand::getrandom(&mut r, rustix::rand::GetRandomFlags::empty())?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp.{:016x}", u64::from_ne_bytes(r)));
        let tmp = PathBuf::from(tmp);
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp);
        match opened {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// Copies the jobs of `seg` into a dump at `path`, with the owner, grants and backoff
/// `acl` knows of each queue; returns the copy's (queues, jobs, skipped).
pub fn export(
    seg: &Segment,
    path: &Path,
    acl: impl Fn(&str) -> Option<QueueAcl>,
) -> Result<(usize, usize, u32), DumpError> {
    let copy = copy_segment(seg);
    let dump = Dump { segment: Some(SegmentId::of(seg)), ..dump_of(&copy, acl) };
    write(&dump, seg.descriptor().layout_version, path)?;
    Ok((dump.queues.len(), dump.jobs.len(), copy.skipped))
}

/// Copies the jobs of the segment file at `segment` (a read-only copy of it; this or an
/// older readable layout version) into a dump at `path`; as [`export`], without owners
/// (they live in the daemon, not the segment).
pub fn export_file(segment: &Path, path: &Path) -> Result<(usize, usize, u32), DumpError> {
    export(&Segment::open_read_only(segment)?, path, |_| None)
}

/// Reads the dump at `path`, or the jobs of the segment file at `path` (by its magic).
pub fn read(path: &Path) -> Result<Dump, DumpError> {
    let io = |what| move |source| DumpError::Io { what, path: path.to_path_buf(), source };
    let mut f = std::fs::File::open(path).map_err(io("cannot open"))?;
    let mut magic = [0u8; 8];
    let n = std::io::Read::read(&mut f, &mut magic).map_err(io("cannot read"))?;
    if n == 8 && magic == xtcq_shm::layout::MAGIC {
        let seg = Segment::open_read_only(path)?;
        return Ok(Dump { segment: Some(SegmentId::of(&seg)), ..dump_of(&copy_segment(&seg), |_| None) });
    }
    let f = std::fs::File::open(path).map_err(io("cannot open"))?;
    let mut reader = LineReader { path, version: None, end: None, last: 0, dump: Dump::default() };
    let mut file = std::io::BufReader::new(f);
    let mut buf = Vec::new();
    for n in 1.. {
        buf.clear();
        // At most one byte past the longest line: a file with no newline for gigabytes (a
        // sparse or corrupt file) is refused after MAX_LINE bytes, not read whole into memory.
        let got =
            (&mut file).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf).map_err(io("cannot read"))?;
        if got == 0 {
            break;
        }
        if buf.len() > MAX_LINE {
            return Err(
                reader.bad(n, format!("longer than {MAX_LINE} bytes: not a line `xtcq export` writes"))
            );
        }
        let l = std::str::from_utf8(&buf).map_err(|e| reader.bad(n, format!("not UTF-8: {e}")))?;
        // Blank lines are skipped, so "first" is the first line with text, not line 1.
        if !l.trim().is_empty() {
            let line: Line = serde_json::from_str(l).map_err(|e| reader.bad(n, e.to_string()))?;
            reader.take(n, line)?;
        }
    }
    reader.finish()
}

/// The longest line a reader takes: a job of the largest payload a segment holds
/// (`MAX_BLOCK`), every byte escaped as `\u00XX` (6 bytes), and a margin for its other fields.
pub const MAX_LINE: usize = 6 * xtcq_shm::layout::payload::MAX_BLOCK as usize + (1 << 20);

/// The lines of a dump file read so far.
struct LineReader<'p> {
    path: &'p Path,
    /// The header's version, once the header is read.
    version: Option<u32>,
    /// The end line's counts, once read.
    end: Option<(u64, u64)>,
    /// The number of the last line with text.
    last: usize,
    dump: Dump,
}

impl LineReader<'_> {
    fn bad(&self, line: usize, what: String) -> DumpError {
        DumpError::Format { path: self.path.to_path_buf(), line, what }
    }

    /// Takes line number `n`.
    fn take(&mut self, n: usize, line: Line) -> Result<(), DumpError> {
        if self.end.is_some() {
            return Err(self.bad(n, "a line after the end line".into()));
        }
        self.last = n;
        match (self.version, line) {
            (None, Line::Header { format, version, segment, .. }) => {
                if format != FORMAT || version > VERSION {
                    return Err(self.bad(n, format!(
                        "a {format:?} dump of version {version}; this xtcq reads {FORMAT:?} dumps up to version {VERSION}"
                    )));
                }
                self.version = Some(version);
                self.dump.segment = segment;
            }
            (None, _) => return Err(self.bad(n, format!("no header: not an {FORMAT} file"))),
            (Some(_), Line::Header { .. }) => return Err(self.bad(n, "a second header".into())),
            (Some(_), Line::Queue(q)) if q.flavor != "lifo" && q.flavor != "fifo" => {
                return Err(self
                    .bad(n, format!("queue {}: flavor {:?}; give \"lifo\" or \"fifo\"", q.name, q.flavor)))
            }
            // The rule every create keeps: a name from a file is no more trusted than one
            // typed (a `../` or a right-to-left override would reach logs, paths and screens).
            (Some(_), Line::Queue(QueueLine { name, .. }) | Line::Job(JobLine { queue: name, .. }))
                if proto::queue_name::check(&name).is_err() =>
            {
                let why = proto::queue_name::check(&name).err().map(|e| e.to_string()).unwrap_or_default();
                return Err(self.bad(
                    n,
                    format!(
                        "queue {}: {why}; rename it in the dump (its queue line and its jobs' lines)",
                        proto::queue_name::escaped(&name)
                    ),
                ));
            }
            // Checked here, not when the queue is made: the import would have made the
            // queues before it, and left the file claimed.
            (Some(_), Line::Queue(q)) if q.retry_backoff.is_some_and(|b| b.validate().is_err()) => {
                let why = q.retry_backoff.and_then(|b| b.validate().err()).map(|e| e.to_string());
                return Err(self.bad(
                    n,
                    format!(
                        "queue {}: retry_backoff: {}; fix base_ms / max_ms in the dump",
                        q.name,
                        why.unwrap_or_default()
                    ),
                ));
            }
            (Some(_), Line::Queue(q)) => self.dump.queues.push(q),
            (Some(_), Line::Job(j)) => self.dump.jobs.push(j),
            (Some(_), Line::End { queues, jobs }) => {
                let (have_q, have_j) = (self.dump.queues.len() as u64, self.dump.jobs.len() as u64);
                if (queues, jobs) != (have_q, have_j) {
                    return Err(self.bad(
                        n,
                        format!(
                        "the end line counts {queues} queues and {jobs} jobs, but {have_q} and {have_j} came \
                         before it: lines are missing; use the whole file `xtcq export` wrote"
                    ),
                    ));
                }
                self.end = Some((queues, jobs));
            }
        }
        Ok(())
    }

    /// The dump, once every line is read.
    fn finish(self) -> Result<Dump, DumpError> {
        match self.version {
            // No line with text (an empty file) has no header and is no dump.
            None => Err(self.bad(1, format!("empty: no header, not an {FORMAT} file"))),
            Some(v) if v >= FIRST_VERSION_WITH_END && self.end.is_none() => Err(self.bad(
                self.last + 1,
                "no end line: the file was cut short (a copy that stopped early, a full disk); \
                 nothing was imported; use the whole file `xtcq export` wrote"
                    .into(),
            )),
            Some(_) => Ok(self.dump),
        }
    }
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
    }
}
