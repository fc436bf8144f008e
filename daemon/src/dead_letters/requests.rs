//! The requests of dead letters: `DeadLetters` (a page of them), `ActOnDead` (re-queue or
//! purge many).

use tracing::info;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply, Response};

use crate::server::connection::Conn;

impl Conn {
    /// `DeadLetters`: a page of the queue's dead letters, for a peer that may use it.
    pub(crate) async fn dead_letters(&mut self, queue: String, from: u32) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let who = self.access();
        let q = reg.check_use(&queue, &who)?;
        let page = tokio::task::spawn_blocking(move || reg.dead_letter_page(&q, from))
            .await
            .map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("listing dead letters failed: {e}")))?;
        Ok(Response::DeadLetters(page))
    }

    /// `ActOnDead`: re-queue or purge many dead letters. The peer is attached to the queue as
    /// an injector first, as a producer would be: that checks it may use the queue, and gives
    /// the process slot a re-queue writes as (recovery finishes the job if that process dies).
    pub(crate) async fn act_on_dead(
        &mut self,
        queue: String,
        action: proto::DeadAction,
        jobs: Option<Vec<proto::JobRef>>,
    ) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let who = self.access();
        reg.check_use(&queue, &who)?;
        let slot = self.ensure_slot(proto::ROLE_INJECTOR)?;
        let q = reg.attach_as(&queue, slot, proto::ROLE_INJECTOR, Some(&who))?;
        let named = jobs.as_ref().map(Vec::len);
        let done =
            tokio::task::spawn_blocking(move || reg.act_on_dead(&q, action, jobs.as_deref(), slot.slot))
                .await
                .map_err(|e| {
                    ErrorReply::new(ErrorCode::Internal, format!("acting on dead letters failed: {e}"))
                })??;
        info!(queue = %queue, ?action, ?named, done = done.done, gone = done.gone, pid = self.peer.pid, "dead letters acted on");
        Ok(Response::DeadActedOn(done))
    }
}
