//! The requests of delayed jobs and retry backoff: `Schedule` (a job made `Delayed`, for the
//! timer) and `SetRetryBackoff`.

use tracing::info;
use xtcq_proto::{ErrorReply, Response, RetryBackoff};

use crate::server::connection::Conn;

impl Conn {
    /// `Schedule`: a job this process made `Delayed`, for the daemon's timer.
    pub(crate) fn schedule(&self, index: u32, generation: u32) -> Result<Response, ErrorReply> {
        self.st.reg.schedule(xtcq_shm::JobHandle { index, generation }).map(|()| Response::Scheduled)
    }

    /// `SetRetryBackoff`: a queue's retry backoff, for those who may administer it.
    pub(crate) fn set_retry_backoff(
        &mut self,
        queue: String,
        backoff: Option<RetryBackoff>,
    ) -> Result<Response, ErrorReply> {
        let who = self.access();
        self.st.reg.set_retry_backoff(&queue, backoff, Some(&who))?;
        info!(queue = %queue, ?backoff, pid = self.peer.pid, "retry backoff set");
        Ok(Response::BackoffSet)
    }
}
