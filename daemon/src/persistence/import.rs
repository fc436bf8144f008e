//! Importing a dump ([`xtcq_dump`]) into the daemon's segment, and `--import-on-start`.
//!
//! Rules kept:
//! - nothing is written when the dump cannot fit ([`xtcq_dump::check`]);
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

use std::path::Path;

use tracing::{info, warn};
use xtcq_proto as proto;
use xtcq_shm::{Injector, Key};

use xtcq_dump::check::{check, room_of};
use xtcq_dump::claim::{claim, finish_file, may_hold_this_segment, read_unclaimed};
use xtcq_dump::{Dump, DumpError, JobState, SegmentId};

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
            reg.import_queue_as(&xtcq_dump::params(q), owner, &q.allow_uids, &q.allow_gids)
                .map_err(refused)?;
            reg.set_queue_limits(&q.name, Some(q.max_records), Some(q.max_dead), None).map_err(refused)?;
            if q.retry_backoff.is_some() {
                reg.set_retry_backoff(&q.name, q.retry_backoff, None).map_err(refused)?;
            }
            if q.max_running != 0 {
                let limits =
                    crate::limits::quota::Limits { max_running: Some(q.max_running), ..Default::default() };
                reg.set_queue_limits_running(&q.name, limits, None).map_err(refused)?;
            }
            if let Some(r) = q.max_rate {
                let limits = crate::limits::quota::Limits { max_rate: Some(r), ..Default::default() };
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
        start_time: crate::server::peer::start_time(pid).unwrap_or(0),
    };
    let slot = reg.register(me, proto::ROLE_INJECTOR, reg.keeper()).map_err(refused)?;
    let result = write_jobs(reg, d, slot.slot);
    reg.recover_process(slot);
    Ok((created, result?))
}

/// Refuses `d` before anything is written when it cannot fit ([`xtcq_dump::check`]), by
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
        let key = j.key_bytes().map_err(|e| bad(e.into()))?;
        let key = key.map(|k| Key::new(&k)).transpose().map_err(|e| bad(e.to_string()))?;
        inj.import(&payload, j.attempts, &j.last_error, j.state == JobState::Dead, j.priority, key.as_ref())
            .map_err(|e| bad(e.to_string()))?;
    }
    Ok(d.jobs.len())
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
        if let Some(why) = may_hold_this_segment(&d, SegmentId::of(reg.segment()), path) {
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

/// Sets `path` aside as `FILE.superseded` and logs `why`; where the rename fails (something
/// in the way), logs that and leaves it: it is not imported either way.
fn set_aside(path: &Path, why: &str) {
    match xtcq_dump::claim::set_aside(path) {
        Ok(kept) => warn!(
            file = %path.display(),
            renamed_to = %kept.display(),
            "--import-on-start: not imported: {why}"
        ),
        Err(e) => warn!(
            file = %path.display(),
            "--import-on-start: not imported: {why}. It keeps its name: it could not be renamed {}.superseded: {e}",
            path.display()
        ),
    }
}
