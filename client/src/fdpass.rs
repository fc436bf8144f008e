//! Descriptors over the control socket, as `SCM_RIGHTS` on a frame's first bytes: the
//! segment's fd received from the daemon on the handshake's reply (read with `recvmsg`,
//! keeping the fd), and a command's cgroup descriptors sent to it with a fence request.
//!
//! Invariant: at most one fd is kept (the first); any other fd that arrives is closed.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags,
};
use xtcq_proto::frame::{self, FrameError};
use xtcq_proto::RequestFrame;

/// The most descriptors one request carries.
const MAX_SENT_FDS: usize = 2;

/// Writes `msg` as one frame on `stream`, with `fds` riding on its first bytes (the daemon
/// takes descriptors that arrive inside a frame's bytes as that frame's).
pub(crate) fn write_frame_with_fds(
    stream: &UnixStream,
    msg: &RequestFrame,
    fds: &[BorrowedFd<'_>],
) -> Result<(), FrameError> {
    if fds.len() > MAX_SENT_FDS {
        return Err(FrameError::Encode(format!("at most {MAX_SENT_FDS} descriptors ride on a request")));
    }
    let bytes = frame::encode(msg)?;
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SENT_FDS))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    anc.push(SendAncillaryMessage::ScmRights(fds));
    let sent = loop {
        match rustix::net::sendmsg(stream, &[IoSlice::new(&bytes)], &mut anc, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r.map_err(io::Error::from)?,
        }
    };
    let mut rest = stream;
    rest.write_all(&bytes[sent..])?;
    Ok(())
}

/// A reader over `stream` that keeps the first fd passed with the bytes it reads.
pub(crate) struct FdReader<'a> {
    stream: &'a UnixStream,
    /// The fd received, if any.
    pub(crate) fd: Option<OwnedFd>,
}

impl<'a> FdReader<'a> {
    pub(crate) fn new(stream: &'a UnixStream) -> Self {
        Self { stream, fd: None }
    }
}

impl Read for FdReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            self.stream,
            &mut [IoSliceMut::new(buf)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                for fd in fds {
                    if self.fd.is_none() {
                        self.fd = Some(fd);
                    }
                }
            }
        }
        Ok(r.bytes)
    }
}
