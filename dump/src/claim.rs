//! The names a dump file takes as it is imported: `FILE` becomes `FILE.importing` before the
//! first job is written and `FILE.imported` after the last, so a file is never imported
//! twice and an interrupted import is refused, not guessed at; a dump of the very segment a
//! daemon adopted becomes `FILE.superseded` (its jobs are in that segment already).

use std::path::{Path, PathBuf};

use crate::{read, Dump, DumpError, SegmentId};

/// Takes `path` for an import: refuses when `FILE.importing` exists (an interrupted import),
/// reads the dump, refuses it when `check` does (nothing imported, so it keeps its name),
/// renames `FILE` to `FILE.importing` and returns that name and the dump; `None` when `FILE`
/// does not exist. A file that does not read as a dump keeps its name
/// (nothing of it was imported), so it can be fixed and imported again.
pub fn claim_file(
    path: &Path,
    check: impl FnOnce(&Dump) -> Result<(), DumpError>,
) -> Result<Option<(PathBuf, Dump)>, DumpError> {
    let Some(d) = read_unclaimed(path)? else { return Ok(None) };
    check(&d)?;
    Ok(Some((claim(path)?, d)))
}

/// The dump at `path`, unless an import of it was interrupted (an error) or there is no
/// such file (`None`); the file keeps its name.
pub fn read_unclaimed(path: &Path) -> Result<Option<Dump>, DumpError> {
    let importing = with_suffix(path, ".importing");
    if importing.exists() {
        return Err(DumpError::Import(format!(
            "{} exists: another import of it is running, or an earlier one was interrupted and some of its \
             jobs may be in the segment already; wait for the other, or check them (`xtcq stats`, \
             `xtcq dead`), then remove or rename that file and try again",
            importing.display()
        )));
    }
    if !path.exists() {
        return Ok(None);
    }
    // A FIFO or a device would block the open (the daemon's start, deaf to SIGTERM, which
    // it catches) or read without end; a directory is no dump either.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Err(DumpError::Import(format!(
            "{} is not a regular file; give the dump file `xtcq export` or --export-on-stop wrote",
            path.display()
        )));
    }
    read(path).map(Some)
}

/// Renames `path` to `FILE.importing`; returns that name.
pub fn claim(path: &Path) -> Result<PathBuf, DumpError> {
    let importing = with_suffix(path, ".importing");
    std::fs::rename(path, &importing).map_err(|source| match source.kind() {
        // Read and checked here, but renamed by another import in between: that one imports it.
        std::io::ErrorKind::NotFound => DumpError::Import(format!(
            "{} was taken by another import meanwhile (it is now {}); nothing was imported here, \
             a file is imported once",
            path.display(),
            importing.display()
        )),
        _ => DumpError::Io { what: "cannot rename", path: path.to_path_buf(), source },
    })?;
    Ok(importing)
}

/// Renames `FILE.importing` (from [`claim_file`]) to `FILE.imported`; returns the new name.
pub fn finish_file(path: &Path) -> Result<PathBuf, DumpError> {
    let (importing, done) = (with_suffix(path, ".importing"), with_suffix(path, ".imported"));
    std::fs::rename(&importing, &done).map_err(|source| DumpError::Io {
        what: "cannot rename",
        path: importing.clone(),
        source,
    })?;
    Ok(done)
}

/// Why the dump `d` at `path` may hold the jobs of the segment `here` (adopted, so they are
/// in it still, or ran), if it may: it names that segment; or it names none (an older
/// build wrote it) and was written after `here` was made.
pub fn may_hold_this_segment(d: &Dump, here: SegmentId, path: &Path) -> Option<&'static str> {
    match d.segment {
        Some(id) if id == here => Some(
            "the dump was taken of this very segment, which survived the restart and still holds its jobs \
             (or what became of them); importing it would run them twice",
        ),
        Some(_) => None,
        None => {
            let written = std::fs::metadata(path).and_then(|m| m.modified()).ok();
            let ns = written.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_nanos());
            // Unknown: assume it may, as the safe side (the file is kept).
            ns.is_none_or(|ns| ns >= u128::from(here.created_unix_ns)).then_some(
                "the dump names no segment (an older xtcq wrote it) and was written after the segment this \
                 daemon adopted was made, so it may be of this segment, whose jobs are still here (or ran); \
                 importing it could run them twice. If its jobs are not in the segment, import it by hand \
                 (xtcq import FILE)",
            )
        }
    }
}

/// Renames `path` to `FILE.superseded` (a dump not to import); returns the new name.
pub fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let kept = with_suffix(path, ".superseded");
    std::fs::rename(path, &kept)?;
    Ok(kept)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
