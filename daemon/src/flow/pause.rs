//! The registry's side of pausing a queue (the flow word, `xtcq_shm::segment` `flow`).
//!
//! Rules kept:
//! - only those who may administer the queue (its owner, root, xtcqd's uid) pause or resume
//!   it, checked under the registry's lock like every change of a queue's settings;
//! - the state lives in the segment, not in the daemon's state file: a daemon that adopts
//!   the segment finds it as it was, and a dump carries it (`xtcq_dump`).

use xtcq_proto as proto;

use crate::registry::{Access, Op, Registry};

impl Registry {
    /// Pauses (`paused`) or resumes queue `name`, if `who` may administer it (`None`: the
    /// daemon itself, an import); whether it was paused before.
    pub fn set_paused(
        &self,
        name: &str,
        paused: bool,
        who: Option<&Access>,
    ) -> Result<bool, proto::ErrorReply> {
        let t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, who, Op::Administer)?;
        Ok(self.seg.set_paused(q.index, paused))
    }

    /// `info` with its pause state filled in from the segment.
    pub fn with_flow(&self, mut info: proto::QueueInfo) -> proto::QueueInfo {
        info.paused = self.seg.is_paused(info.index);
        info
    }
}
