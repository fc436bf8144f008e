//! Reading a dump, or the jobs of a segment file, back; refusing what this build does not read.

use std::io::{BufRead, Read};
use std::path::Path;

use xtcq_proto as proto;
use xtcq_shm::transfer::copy_segment;
use xtcq_shm::Segment;

use crate::{
    dump_of, Dump, DumpError, JobLine, Line, QueueLine, SegmentId, FIRST_VERSION_WITH_END, FORMAT, VERSION,
};

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
            (Some(_), Line::End { queues, jobs }) => self.take_end(n, queues, jobs)?,
        }
        Ok(())
    }

    /// Takes the end line, number `n`, which counts `queues` and `jobs` lines before it.
    fn take_end(&mut self, n: usize, queues: u64, jobs: u64) -> Result<(), DumpError> {
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
