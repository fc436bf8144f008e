//! The `Stats` request: counts over the whole segment, or one queue.

use std::sync::atomic::Ordering;

use xtcq_proto::{ErrorCode, ErrorReply, Response};

use crate::server::connection::Conn;

impl Conn {
    /// `Stats`: counts over the whole segment, or one queue.
    pub(crate) async fn stats(&self, queue: Option<String>) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let n = self.st.connections.load(Ordering::Relaxed);
        let r = tokio::task::spawn_blocking(move || reg.stats(queue.as_deref(), n)).await;
        match r {
            Ok(s) => s.map(|mut s| {
                for q in &mut s.queues {
                    q.info.retry_backoff = self.st.reg.retry_backoff(q.info.index, &q.info.name);
                }
                Response::Stats(s)
            }),
            Err(e) => Err(ErrorReply::new(ErrorCode::Internal, format!("stats failed: {e}"))),
        }
    }
}
