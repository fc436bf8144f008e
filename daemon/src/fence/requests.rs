//! The requests of fencing: `FenceCommand` and `FenceCgroup` (a command a worker runs for
//! a job it holds, to be stopped before the job can run again), `Unfence` (it exited).

use std::os::fd::OwnedFd;

use tracing::debug;
use xtcq_proto::{ErrorCode, ErrorReply, Response};

use crate::server::connection::Conn;

impl Conn {
    /// `FenceCommand`, or with `in_cgroup` `FenceCgroup` (its two descriptors came with the
    /// frame): a command this worker runs for a job it holds (see `crate::fence`).
    pub(crate) async fn fence_command(
        &mut self,
        (index, birth, generation): (u32, u32, u32),
        pid: u32,
        in_cgroup: bool,
    ) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        let slot = self.slot.ok_or_else(|| {
            ErrorReply::new(ErrorCode::BadRequest, "attach (and claim the job) before fencing its command")
        })?;
        let cgroup = if in_cgroup {
            let fds = std::mem::take(&mut self.frame_fds);
            let Ok::<[OwnedFd; 2], _>([dir, kill]) = fds.try_into() else {
                return Err(ErrorReply::new(
                    ErrorCode::BadRequest,
                    "FenceCgroup needs two descriptors passed with it (the cgroup's directory and its cgroup.kill)",
                ));
            };
            Some((dir, kill))
        } else {
            None
        };
        let worker = (self.peer.pid, self.peer.uid);
        tokio::task::spawn_blocking(move || {
            reg.register_fence(slot, (index, birth, generation), pid, worker, cgroup)
        })
        .await
        .map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("fence failed: {e}")))??;
        debug!(slot = slot.slot, index, birth, pid, in_cgroup, "command registered for fencing");
        Ok(Response::Fenced)
    }

    /// `Unfence`: the command of a job exited and was reaped.
    pub(crate) fn unfence(&self, index: u32, birth: u32, pid: u32) -> Result<Response, ErrorReply> {
        let reg = self.st.reg.clone();
        if let Some(slot) = self.slot {
            reg.unregister_fence(slot, index, birth, pid);
        }
        Ok(Response::Unfenced)
    }
}
