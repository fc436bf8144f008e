//! The requests of flow: `SetPaused` (pause or resume a queue), `JobFate` (what became of
//! a job) and `CancelJob`.

use tracing::info;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply, Response};

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

    /// `CancelJob`: a job withdrawn, or taken from its holder with its command stopped, for
    /// those who may administer its queue.
    pub(crate) async fn cancel_job(
        &mut self,
        queue: String,
        job: proto::JobRef,
    ) -> Result<Response, ErrorReply> {
        let who = self.access();
        let reg = self.st.reg.clone();
        // A running job's command is stopped by the fence, which waits for its group to
        // exit: off the async threads.
        tokio::task::spawn_blocking(move || reg.cancel_job(&queue, job, &who))
            .await
            .map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("cancel failed: {e}")))?
            .map(Response::JobCancelled)
    }
}
