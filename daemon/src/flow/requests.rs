//! The requests of flow: `SetPaused` (pause or resume a queue) and `JobFate` (what became
//! of a job).

use tracing::info;
use xtcq_proto::{self as proto, ErrorReply, Response};

use crate::server::connection::Conn;

impl Conn {
    /// `SetPaused`: pauses or resumes a queue, for those who may administer it.
    pub(crate) fn set_paused(&mut self, queue: String, paused: bool) -> Result<Response, ErrorReply> {
        let who = self.access();
        let was_paused = self.st.reg.set_paused(&queue, paused, Some(&who))?;
        info!(queue = %queue, paused, was_paused, pid = self.peer.pid, "queue pause state set");
        Ok(Response::PausedSet { was_paused })
    }

    /// `JobFate`: a job's record, for a user who may use its queue.
    pub(crate) fn job_fate(&mut self, queue: String, job: proto::JobRef) -> Result<Response, ErrorReply> {
        let who = self.access();
        self.st.reg.job_state(&queue, job, &who).map(Response::JobFate)
    }
}
