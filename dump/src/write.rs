//! Writing a dump: whole or not at all, under a name nobody can plant anything at.

use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use xtcq_shm::transfer::copy_segment;
use xtcq_shm::Segment;

use crate::{dump_of, Dump, DumpError, Line, QueueGrants, SegmentId, FORMAT, VERSION};

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
/// `grants` knows of each queue; returns the copy's (queues, jobs, skipped).
pub fn export(
    seg: &Segment,
    path: &Path,
    grants: impl Fn(&str) -> Option<QueueGrants>,
) -> Result<(usize, usize, u32), DumpError> {
    let copy = copy_segment(seg);
    let dump = Dump { segment: Some(SegmentId::of(seg)), ..dump_of(&copy, grants) };
    write(&dump, seg.descriptor().layout_version, path)?;
    Ok((dump.queues.len(), dump.jobs.len(), copy.skipped))
}

/// Copies the jobs of the segment file at `segment` (a read-only copy of it; this or an
/// older readable layout version) into a dump at `path`; as [`export`], without owners
/// (they live in the daemon, not the segment).
pub fn export_file(segment: &Path, path: &Path) -> Result<(usize, usize, u32), DumpError> {
    export(&Segment::open_read_only(segment)?, path, |_| None)
}
