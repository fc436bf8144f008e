//! The registry's side of fencing (`crate::fence`): registering a worker's command for a
//! job its slot holds, under the registry lock so that a recovery or a lease scan sees
//! either no registration or a complete one.

use std::os::fd::OwnedFd;

use xtcq_proto::{ErrorCode, ErrorReply};
use xtcq_shm::record::state::State;

use crate::persistence::state::FenceChange;
use crate::registry::{Registry, SlotId};

impl Registry {
    /// Registers `pid` as the command of the job in record `index` (birth `birth`), which
    /// `slot` (the process `worker` = (pid, uid)) must hold under the claim `generation`;
    /// `cgroup`: the directory and `cgroup.kill` of the cgroup it runs in, if any.
    pub fn register_fence(
        &self,
        slot: SlotId,
        (index, birth, generation): (u32, u32, u32),
        pid: u32,
        worker: (u32, u32),
        cgroup: Option<(OwnedFd, OwnedFd)>,
    ) -> Result<(), ErrorReply> {
        let mut t = self.lock();
        let records = self.seg.records();
        // The claim, not only the job: the same process may hold the job again under a new
        // claim (its lease ran out, it stole it back) while a registration for the old one
        // was on its way.
        let held = match (records.state(index), records.header(index)) {
            (Some(st), Some(hdr)) => {
                let w = st.load();
                w.state() == Some(State::Claimed)
                    && w.holder() == slot.slot
                    && w.generation() == generation
                    && xtcq_shm::dead_letter::job_id(hdr, index).birth == birth
            }
            _ => false,
        };
        if !held {
            return Err(ErrorReply::new(
                ErrorCode::BadRequest,
                format!(
                    "job {index}.{birth} is not held by this process (its lease expired, or it was never \
                     claimed): do not run it"
                ),
            ));
        }
        let superseded = t.fences.register(slot.slot, (index, birth), pid, worker, cgroup).map_err(|e| {
            ErrorReply::new(
                ErrorCode::Unauthorized,
                format!("cannot fence the command of job {index}.{birth}: {e}"),
            )
        })?;
        t.fences.take_changed();
        // WatchedSlot for the next daemon before the worker is answered (and starts the command):
        // a command this daemon could not keep is one a restart would leave unfenced.
        let kept = t
            .fences
            .record(slot.slot, index)
            .is_some_and(|r| self.keep_fence_change(&t, &FenceChange::Add(r)));
        // Forgotten in the state file too (a failed append rewrites it whole from memory).
        for r in superseded {
            self.keep_fence_change(
                &t,
                &FenceChange::Remove { slot: r.slot, index: r.index, birth: r.birth, pid: r.pid },
            );
        }
        if !kept {
            t.fences.unregister(slot.slot, index, birth, pid);
            t.fences.take_changed();
            return Err(ErrorReply::new(
                ErrorCode::Internal,
                format!(
                    "xtcqd cannot write its state file (its log says why), so the command of job \
                     {index}.{birth} would not stay fenced across a restart: do not run it"
                ),
            ));
        }
        Ok(())
    }

    /// Forgets the command `pid` registered for record `index` of `slot`.
    pub fn unregister_fence(&self, slot: SlotId, index: u32, birth: u32, pid: u32) {
        let mut t = self.lock();
        t.fences.unregister(slot.slot, index, birth, pid);
        if t.fences.take_changed() {
            // A removal that is not kept leaves a registration the next daemon re-identifies
            // by pid and start time and finds gone: harmless.
            self.keep_fence_change(&t, &FenceChange::Remove { slot: slot.slot, index, birth, pid });
        }
    }
}
