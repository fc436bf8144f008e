//! The requests of wake descriptors: `WakeDescriptor` (a socket to wait on, passed with
//! the reply), `ReleaseWake` (give its bit back).

use tracing::debug;
use xtcq_proto::{ErrorCode, ErrorReply, Response};

use crate::server::connection::Conn;

impl Conn {
    /// `WakeDescriptor`: a socket for this process to wait on for queue `queue`'s work,
    /// passed with the reply.
    pub(crate) fn wake_descriptor(&mut self, queue: String) -> Result<Response, ErrorReply> {
        let Some(slot) = self.slot else {
            return Err(ErrorReply::new(
                ErrorCode::SlotNotHeld,
                format!("attach to queue {queue} as a thief first"),
            ));
        };
        let who = self.access();
        let (fd, bit) = self.st.reg.grant_wake(&queue, slot, &who)?;
        self.reply_fd = Some(fd);
        debug!(slot = slot.slot, queue = %queue, bit, "wake descriptor granted");
        Ok(Response::WakeDescriptor { bit })
    }

    /// `ReleaseWake`: gives back the waiter bit `bit` of queue `queue` this process holds.
    pub(crate) fn release_wake(&mut self, queue: String, bit: u32) -> Result<Response, ErrorReply> {
        let Some(slot) = self.slot else {
            return Err(ErrorReply::new(ErrorCode::SlotNotHeld, "this connection holds no slot"));
        };
        self.st.reg.release_wake(&queue, bit, slot.slot)?;
        Ok(Response::WakeReleased)
    }
}
