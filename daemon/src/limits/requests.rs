//! The `SetQueueLimits` request: a queue's record quota, dead-letter cap and concurrency limit.

use tracing::info;
use xtcq_proto::{ErrorReply, Response};

use crate::limits::quota::Limits;

use crate::server::connection::Conn;

impl Conn {
    /// `SetQueueLimits`: changes what is given, for those who may administer the queue.
    pub(crate) fn set_queue_limits(&mut self, queue: String, limits: Limits) -> Result<Response, ErrorReply> {
        let who = self.access();
        let (max_running, max_rate) = (limits.max_running, limits.max_rate);
        let q = self.st.reg.set_queue_limits_running(&queue, limits, Some(&who))?;
        info!(
            queue = %queue,
            max_records = q.max_records,
            max_dead = q.max_dead,
            ?max_running,
            ?max_rate,
            pid = self.peer.pid,
            "queue limits set"
        );
        Ok(Response::LimitsSet)
    }
}
