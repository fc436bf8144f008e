//! Importing a dump ([`crate::dump`]) into the daemon's segment, and `--import-on-start`.
//!
//! Rules kept:
//! - nothing is written when the dump cannot fit ([`crate::dump_check`]);
//! - a queue the segment already has is used as it is; a missing one is created with the
//!   dump's definition, limits, owner, grants and retry backoff (a dump that names no owner,
//!   older or from `xtcq export`, gives it to the daemon's uid, with a warning);
//! - `--import-on-start` never imports a dump of the very segment the daemon adopted (a
//!   plain restart, where the segment survived): those jobs are in it already, or ran; the
//!   file becomes `FILE.superseded` (or keeps its name, when something is in the way) and
//!   the log says so. A dump that names no segment (an older build's) is taken for one of
//!   the adopted segment when it was written after that segment was made;
//! - `--import-on-start` naming the daemon's own segment file is refused: the claim would
//!   rename the segment away;
//! - the jobs are written as a process slot the daemon registers for itself and releases
//!   after (recovered like any dead process's if the daemon dies meanwhile), each with its
//!   attempts and last error, queued or dead as in the dump;
//! - `FILE` becomes `FILE.importing` before the first job and `FILE.imported` after the
//!   last: never imported twice; an interrupted import is refused, not guessed at.

use std::path::{Path, PathBuf};

use tracing::{info, warn};
use xtcq_proto as proto;
use xtcq_shm::Injector;

use crate::dump::{self, Dump, DumpError, JobState};
use crate::dump_check::{check, room_of};
use crate::registry::{ProcessId, Registry};

/// Imports `d` into `reg`'s segment; returns (queues created, jobs imported).
pub fn import(reg: &Registry, d: &Dump) -> Result<(usize, usize), DumpError> {
    let refused = |e: proto::ErrorReply| DumpError::Import(e.message);
    let mut created = 0;
    let me = rustix::process::getuid().as_raw();
    for q in &d.queues {
        if reg.queue(&q.name).is_err() {
            let owner = q.owner.unwrap_or_else(|| {
                warn!(queue = %q.name, "the dump names no owner of this queue (an older dump, or one `xtcq export` \
                      wrote): xtcqd's own uid owns it now; delete it and create it again to share it");
                me
            });
            reg.import_queue_as(&dump::params(q), owner, &q.allow_uids, &q.allow_gids).map_err(refused)?;
            reg.set_queue_limits(&q.name, Some(q.max_records), Some(q.max_dead), None).map_err(refused)?;
            if q.retry_backoff.is_some() {
                reg.set_retry_backoff(&q.name, q.retry_backoff, None).map_err(refused)?;
            }
            if q.max_running != 0 {
                let limits =
                    crate::registry::Limits { max_running: Some(q.max_running), ..Default::default() };
                reg.set_queue_limits_running(&q.name, limits, None).map_err(refused)?;
            }
            if q.paused {
                reg.set_paused(&q.name, true, None).map_err(refused)?;
            }
            created += 1;
        }
    }
    let pid = std::process::id();
    let me = ProcessId {
        pid,
        uid: rustix::process::getuid().as_raw(),
        start_time: crate::peer::start_time(pid).unwrap_or(0),
    };
    let slot = reg.register(me, proto::ROLE_INJECTOR, reg.keeper()).map_err(refused)?;
    let result = write_jobs(reg, d, slot.slot);
    reg.recover_process(slot);
    Ok((created, result?))
}

/// Refuses `d` before anything is written when it cannot fit ([`crate::dump_check`]), by
/// the daemon's own stats (each queue's dead letters as counted now, not as the last scan
/// counted them, which an adopted segment's first scan has not yet done).
fn check_room(reg: &Registry, d: &Dump) -> Result<(), DumpError> {
    let stats = reg.stats(None, 0).map_err(|e| DumpError::Import(e.message))?;
    let seg = reg.segment();
    let mut room = room_of(&stats);
    // Counted exactly here: a queue being deleted holds its entry too.
    room.queues.free_entries = (0..seg.config().queues)
        .filter(|&i| seg.queue_state(i) == Some(xtcq_shm::layout::QUEUE_FREE))
        .count() as u64;
    check(d, &room)
}

fn write_jobs(reg: &Registry, d: &Dump, slot: u32) -> Result<usize, DumpError> {
    let mut injectors: Vec<(String, Injector)> = Vec::new();
    for (n, j) in d.jobs.iter().enumerate() {
        let bad = |what: String| {
            DumpError::Import(format!("job {} of the dump (queue {}): {what}", n + 1, j.queue))
        };
        if !injectors.iter().any(|(name, _)| *name == j.queue) {
            let q = reg.queue(&j.queue).map_err(|e| bad(e.message))?;
            let inj = Injector::new(reg.segment().clone(), &q, slot).map_err(|e| bad(e.to_string()))?;
            injectors.push((j.queue.clone(), inj));
        }
        let Some((_, inj)) = injectors.iter().find(|(name, _)| *name == j.queue) else { continue };
        let payload = j.payload_bytes().ok_or_else(|| bad("no payload, or bad hex".into()))?;
        inj.import(&payload, j.attempts, &j.last_error, j.state == JobState::Dead)
            .map_err(|e| bad(e.to_string()))?;
    }
    Ok(d.jobs.len())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

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
fn read_unclaimed(path: &Path) -> Result<Option<Dump>, DumpError> {
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
    dump::read(path).map(Some)
}

/// Renames `path` to `FILE.importing`; returns that name.
fn claim(path: &Path) -> Result<PathBuf, DumpError> {
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

/// `--import-on-start FILE`: imports `FILE` (a dump, or a segment file of this or an older
/// readable layout) once. A missing file is nothing to import; the daemon's own segment file
/// is refused; a dump that may be of the segment the daemon `adopted` is set aside, not
/// imported (see the module docs).
pub fn import_on_start(reg: &Registry, path: &Path, adopted: bool) -> Result<(), DumpError> {
    refuse_own_segment(reg, path)?;
    let Some(d) = read_unclaimed(path)? else {
        info!(file = %path.display(), "--import-on-start: no such file, nothing to import");
        return Ok(());
    };
    if adopted {
        if let Some(why) = may_hold_this_segment(&d, dump::SegmentId::of(reg.segment()), path) {
            set_aside(path, why);
            return Ok(());
        }
    }
    check_room(reg, &d)?;
    claim(path)?;
    let (created, jobs) = import(reg, &d)?;
    let done = finish_file(path)?;
    info!(file = %path.display(), queues_created = created, jobs, renamed_to = %done.display(), "imported");
    Ok(())
}

/// Refuses `path` when it is the segment file `reg` serves (any spelling, or a link to it):
/// the claim would rename the segment itself away, and its jobs with it.
fn refuse_own_segment(reg: &Registry, path: &Path) -> Result<(), DumpError> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(file), Ok(seg)) = (std::fs::metadata(path), reg.segment().file().metadata()) else {
        return Ok(());
    };
    if (file.dev(), file.ino()) == (seg.dev(), seg.ino()) {
        return Err(DumpError::Import(format!(
            "--import-on-start {} is this daemon's own segment (--segment): importing it would rename \
             the segment away; give the dump file (--export-on-stop, `xtcq export`) or another, older \
             segment file",
            path.display()
        )));
    }
    Ok(())
}

/// Why the dump `d` at `path` may hold the jobs of the segment `here` (adopted, so they are
/// in it still, or ran), if it may: it names that segment; or it names none (an older
/// build wrote it) and was written after `here` was made.
fn may_hold_this_segment(d: &Dump, here: dump::SegmentId, path: &Path) -> Option<&'static str> {
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

/// Renames `path` to `FILE.superseded` and logs `why`; where the rename fails (something in
/// the way), logs that and leaves it: it is not imported either way.
fn set_aside(path: &Path, why: &str) {
    let kept = with_suffix(path, ".superseded");
    match std::fs::rename(path, &kept) {
        Ok(()) => warn!(
            file = %path.display(),
            renamed_to = %kept.display(),
            "--import-on-start: not imported: {why}"
        ),
        Err(e) => warn!(
            file = %path.display(),
            "--import-on-start: not imported: {why}. It keeps its name: it could not be renamed {}: {e}",
            kept.display()
        ),
    }
}
