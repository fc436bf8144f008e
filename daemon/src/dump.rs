//! The dump file of `xtcq export`, `xtcqd --export-on-stop` and `--import-on-start`: the
//! queues and jobs of a segment, for a reboot (`/dev/shm` is emptied) or an upgrade to a
//! build with another layout version.
//!
//! Rules kept:
//! - JSON lines: a header first (`{"kind":"header","format":"xtcq-dump","version":2,...}`),
//!   then one line per queue and one per job; a reader refuses another format and a newer
//!   version, and names the line of any error;
//! - from version 2 the last line is `{"kind":"end","queues":N,"jobs":M}`: a dump cut at a
//!   line boundary (a copy that stopped early, a full disk) parses, and only the missing end
//!   line (or its counts) tells; a reader refuses it. Version 1 dumps have no end line;
//! - a line is at most [`MAX_LINE`] bytes: a reader refuses a longer one without holding it;
//! - a payload that is UTF-8 is written as a JSON string (`payload`), any other as hex
//!   (`payload_hex`);
//! - a dump is written to `FILE.tmp.PID`, synced, then renamed: a crash never leaves half a dump
//!   under the name; that name is created exclusively (`O_EXCL`), never through a link
//!   planted there; a `FILE` that exists and is not a regular file (a device, a FIFO, a
//!   link, a directory) is refused first, never replaced;
//! - an import at start renames `FILE` to `FILE.importing` first and to `FILE.imported` once
//!   every job is in: a restart never imports a file twice, and a start that finds
//!   `FILE.importing` (a daemon killed during the import) refuses to guess which of its jobs
//!   are in and says what to do;
//! - `--import-on-start` also takes a segment file of this or an older readable layout
//!   (`xtcq_shm::segment::READABLE_LAYOUT_VERSIONS`), mapped read-only.

use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xtcq_proto as proto;
use xtcq_shm::transfer::{copy_segment, SegmentCopy};
use xtcq_shm::{Flavor, Segment};

/// The `format` of a dump's header.
pub const FORMAT: &str = "xtcq-dump";
/// The dump version this build writes and the newest it reads.
pub const VERSION: u32 = 2;
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

/// The dump of a copied segment.
pub fn dump_of(copy: &SegmentCopy) -> Dump {
    let name = |i: u32| copy.queues.iter().find(|(q, _)| q.index == i).map(|(q, _)| q.spec.name.clone());
    let queues = copy
        .queues
        .iter()
        .map(|(q, l)| QueueLine {
            name: q.spec.name.clone(),
            flavor: if q.spec.flavor == Flavor::Fifo { "fifo" } else { "lifo" }.into(),
            deques: q.spec.deques,
            capacity: q.spec.capacity,
            max_attempts: q.spec.max_attempts,
            lease_ms: q.spec.lease_ms,
            max_records: l.quota.max_records,
            max_dead: l.quota.max_dead,
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
    Dump { queues, jobs }
}

/// Writes `dump` to `path` (through `path.tmp.PID`, synced, then renamed).
pub fn write(dump: &Dump, layout_version: u32, path: &Path) -> Result<(), DumpError> {
    refuse_non_file(path)?;
    // FILE.tmp.PID: a suffix, not `with_extension` (which made a.dump's temporary a.tmp,
    // clobbering an unrelated file), and the pid keeps two exports apart.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let io = |what, p: &Path| {
        let p = p.to_path_buf();
        move |source| DumpError::Io { what, path: p, source }
    };
    let f = create_new(&tmp).map_err(io("cannot create", &tmp))?;
    let mut w = BufWriter::new(f);
    let header = Line::Header { format: FORMAT.into(), version: VERSION, layout_version };
    let lines = std::iter::once(header)
        .chain(dump.queues.iter().cloned().map(Line::Queue))
        .chain(dump.jobs.iter().cloned().map(Line::Job))
        .chain(std::iter::once(Line::End { queues: dump.queues.len() as u64, jobs: dump.jobs.len() as u64 }));
    for l in lines {
        let s = serde_json::to_string(&l).map_err(|e| DumpError::Import(e.to_string()))?;
        writeln!(w, "{s}").map_err(io("cannot write", &tmp))?;
    }
    let f = w.into_inner().map_err(|e| DumpError::Io {
        what: "cannot write",
        path: tmp.clone(),
        source: e.into_error(),
    })?;
    f.sync_all().map_err(io("cannot sync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("cannot rename into place", path))
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

/// Creates `tmp`, a file that must not exist: `O_EXCL` never follows a link planted at the
/// name (the pid in it is public, and the writer often root), so what is there (a link, a
/// leftover of an earlier process of the same pid) is removed, itself, and the creation
/// tried once more.
fn create_new(tmp: &Path) -> std::io::Result<std::fs::File> {
    let open = || std::fs::OpenOptions::new().write(true).create_new(true).open(tmp);
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            open()
        }
        r => r,
    }
}

/// Copies the jobs of `seg` into a dump at `path`; returns the copy's (queues, jobs, skipped).
pub fn export(seg: &Segment, path: &Path) -> Result<(usize, usize, u32), DumpError> {
    let copy = copy_segment(seg);
    let dump = dump_of(&copy);
    write(&dump, seg.descriptor().layout_version, path)?;
    Ok((dump.queues.len(), dump.jobs.len(), copy.skipped))
}

/// Copies the jobs of the segment file at `segment` (mapped read-only; this or an older
/// readable layout version) into a dump at `path`; as [`export`].
pub fn export_file(segment: &Path, path: &Path) -> Result<(usize, usize, u32), DumpError> {
    export(&Segment::open_read_only(segment)?, path)
}

/// Reads the dump at `path`, or the jobs of the segment file at `path` (by its magic).
pub fn read(path: &Path) -> Result<Dump, DumpError> {
    let io = |what| move |source| DumpError::Io { what, path: path.to_path_buf(), source };
    let mut f = std::fs::File::open(path).map_err(io("cannot open"))?;
    let mut magic = [0u8; 8];
    let n = std::io::Read::read(&mut f, &mut magic).map_err(io("cannot read"))?;
    if n == 8 && magic == xtcq_shm::layout::MAGIC {
        let seg = Segment::open_read_only(path)?;
        return Ok(dump_of(&copy_segment(&seg)));
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
            (None, Line::Header { format, version, .. }) => {
                if format != FORMAT || version > VERSION {
                    return Err(self.bad(n, format!(
                        "a {format:?} dump of version {version}; this xtcq reads {FORMAT:?} dumps up to version {VERSION}"
                    )));
                }
                self.version = Some(version);
            }
            (None, _) => return Err(self.bad(n, format!("no header: not an {FORMAT} file"))),
            (Some(_), Line::Header { .. }) => return Err(self.bad(n, "a second header".into())),
            (Some(_), Line::Queue(q)) if q.flavor != "lifo" && q.flavor != "fifo" => {
                return Err(self
                    .bad(n, format!("queue {}: flavor {:?}; give \"lifo\" or \"fifo\"", q.name, q.flavor)))
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
