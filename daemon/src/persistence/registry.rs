//! The registry's side of the state file (`crate::persistence::state`): what this daemon knows, written
//! under the registry lock before a change is answered, and read back on adopt.

use std::sync::atomic::Ordering;

use tracing::warn;

use crate::persistence::state::{self, DaemonState, Served, SlotRecord};
use crate::registry::{Bookkeeping, Registry};

impl Registry {
    /// Writes what this daemon knows to the state file (called under the lock after every
    /// change, before the change is answered). A failure is logged (and returned `false`):
    /// the next daemon then reclaims the slots it cannot verify, which is safe, if unkind.
    pub(crate) fn persist(&self, t: &Bookkeeping) -> bool {
        let Some(f) = &self.state else { return true };
        let st = DaemonState {
            segment: state::file_id(self.seg.file()),
            slots: t
                .slots
                .iter()
                .map(|(&i, k)| {
                    let p = k.process;
                    (i, SlotRecord { epoch: k.epoch, pid: p.pid, uid: p.uid, start_time: p.start_time })
                })
                .collect(),
            queues: t.queues.clone(),
            fences: t.fences.records(),
            daemon_epoch: Some(self.seg.header_live().daemon_epoch.load(Ordering::Acquire)),
            served: Some(Served {
                path: self.seg.path().to_path_buf(),
                pid: std::process::id(),
                boot_id: crate::persistence::state::boot_id(),
            }),
        };
        match f.save(&st) {
            Ok(()) => true,
            Err(e) => {
                warn!(file = %f.path().display(), error = %e, "cannot write xtcqd's state file");
                false
            }
        }
    }

    /// Keeps one fence change in the state file: appended to its journal, or the whole
    /// state written. `false` when neither could be done.
    pub(crate) fn keep_fence_change(&self, t: &Bookkeeping, change: &state::FenceChange) -> bool {
        let Some(f) = &self.state else { return true };
        match f.append(change) {
            Ok(true) => true,
            Ok(false) => self.persist(t),
            Err(e) => {
                warn!(file = %f.path().display(), error = %e, "cannot append to xtcqd's state file; rewriting it");
                self.persist(t)
            }
        }
    }

    /// What the previous daemon recorded for this segment, and whether there was such a
    /// record: `false` when this daemon keeps a state file but found none it trusts for this
    /// segment (missing, not its own, or describing another segment).
    pub(crate) fn load_state(&self) -> (DaemonState, bool) {
        let Some(f) = &self.state else { return (DaemonState::default(), true) };
        let id = state::file_id(self.seg.file());
        // This daemon's start moved the epoch on by one: the file is the last daemon's only
        // if it was written at the epoch before.
        let now = self.seg.header_live().daemon_epoch.load(Ordering::Acquire);
        match f.load() {
            Some(s) if s.segment == id && s.daemon_epoch.is_some_and(|e| e.wrapping_add(1) != now) => {
                warn!(
                    file = %f.path().display(),
                    written_at_epoch = s.daemon_epoch,
                    segment_epoch = now,
                    "xtcqd's state file is stale: another daemon served the segment since it was written \
                     (with another --state); ignoring it"
                );
                (DaemonState::default(), false)
            }
            Some(s) if s.segment == id => (s, true),
            Some(_) => {
                warn!(file = %f.path().display(), "xtcqd's state file describes another segment; ignoring it");
                (DaemonState::default(), false)
            }
            None => (DaemonState::default(), false),
        }
    }

    /// Starts a state file for a segment created now (a leftover one may describe a file
    /// that had the same inode).
    pub fn reset_state(&self) {
        let t = self.lock();
        self.persist(&t);
    }
}
