//! Receiving the segment's fd from the daemon: it rides as `SCM_RIGHTS` on the first bytes of
//! the handshake's reply, so the handshake reads that reply with `recvmsg`, keeping the fd.
//!
//! Invariant: at most one fd is kept (the first); any other fd that arrives is closed.

use std::io::{self, IoSliceMut, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

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
