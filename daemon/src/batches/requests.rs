//! The request of batches: `Batch` (open, seal, or look at one).

use xtcq_proto::{BatchAction, ErrorReply, Response};

use crate::server::connection::Conn;

impl Conn {
    /// `Batch`: opens, seals or looks at a batch, for a user who may use its queue.
    pub(crate) fn batch(
        &mut self,
        queue: String,
        name: String,
        action: BatchAction,
    ) -> Result<Response, ErrorReply> {
        let who = self.access();
        let reg = self.st.reg.clone();
        match action {
            BatchAction::Open { on_complete } => reg.open_batch(&queue, &name, on_complete, &who),
            BatchAction::Seal => reg.seal_batch(&queue, &name, &who),
            BatchAction::Progress => reg.batch_progress(&queue, &name, &who),
        }
        .map(Response::Batch)
    }
}
