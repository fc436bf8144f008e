//! Descriptors a client passes with a request (`SCM_RIGHTS`, e.g. a command's cgroup with
//! `FenceCgroup`): the connection reads its stream with `recvmsg`, and each descriptor is
//! kept with the stream offset of the last byte of the read that brought it, so that it
//! belongs to the frame whose bytes hold that offset and to no other. (The kernel may glue
//! bytes written before the descriptors to the front of that read, but ends the read with
//! the write that carried them: its last byte is one of that write's, and a client sends
//! descriptors with the first bytes of the one frame they are for.)
//!
//! Rules kept:
//! - a descriptor goes only to the request whose frame it arrived inside; those that arrived
//!   inside an earlier frame (which did not take them) are closed when a later frame is read;
//! - at most `MAX_PENDING` wait at once, and at most `MAX_PER_READ` come with one read (the
//!   kernel closes the rest): a client cannot make the daemon hold descriptors it never uses;
//! - nothing here reads a descriptor: what one is, is checked by the request that takes it.

use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::net::UnixStream;

/// The most descriptors kept waiting for their frame.
const MAX_PENDING: usize = 4;
/// The most descriptors one read takes in.
const MAX_PER_READ: usize = 4;

/// The descriptors received on one connection, by stream offset.
#[derive(Default)]
pub struct FdInbox {
    /// Bytes read from the stream so far.
    read: u64,
    fds: VecDeque<(u64, OwnedFd)>,
}

impl FdInbox {
    /// A reader of `stream` that keeps the descriptors it receives here.
    pub fn reader<'a>(&'a mut self, stream: &'a UnixStream) -> FdRecv<'a> {
        FdRecv { stream, inbox: self }
    }

    /// The descriptors that came with the bytes `start..end` of the stream (a frame's);
    /// those from before `start` are closed.
    pub fn take(&mut self, start: u64, end: u64) -> Vec<OwnedFd> {
        let mut out = Vec::new();
        while self.fds.front().is_some_and(|(at, _)| *at < end) {
            if let Some((at, fd)) = self.fds.pop_front() {
                if at >= start {
                    out.push(fd);
                }
            }
        }
        out
    }
}

/// An [`AsyncRead`] over a Unix stream that reads with `recvmsg`, keeping passed descriptors.
pub struct FdRecv<'a> {
    stream: &'a UnixStream,
    inbox: &'a mut FdInbox,
}

impl AsyncRead for FdRecv<'_> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            ready!(me.stream.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PER_READ))];
            let mut anc = RecvAncillaryBuffer::new(&mut space);
            let stream = me.stream;
            let got = stream.try_io(Interest::READABLE, || {
                let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
                Ok(rustix::net::recvmsg(stream, &mut [IoSliceMut::new(unfilled)], &mut anc, flags)?.bytes)
            });
            match got {
                Ok(n) => {
                    // n is 0 only at the end of the stream, which brings no descriptor.
                    let at = me.inbox.read + (n as u64).saturating_sub(1);
                    for m in anc.drain() {
                        if let RecvAncillaryMessage::ScmRights(fds) = m {
                            for fd in fds {
                                if me.inbox.fds.len() < MAX_PENDING {
                                    me.inbox.fds.push_back((at, fd));
                                }
                            }
                        }
                    }
                    me.inbox.read += n as u64;
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use super::FdInbox;

    fn fd() -> OwnedFd {
        std::fs::File::open("/dev/null").expect("open").into()
    }

    #[test]
    fn a_descriptor_goes_only_to_the_frame_it_came_inside() {
        let mut inbox = FdInbox::default();
        inbox.fds.push_back((0, fd())); // inside the first frame (0..10), not taken by it
        inbox.fds.push_back((12, fd())); // inside the second (10..20)
        inbox.fds.push_back((20, fd())); // the third's
        assert_eq!(inbox.take(10, 20).len(), 1, "the earlier one is closed, the later one waits");
        assert_eq!(inbox.fds.len(), 1);
        assert_eq!(inbox.take(20, 30).len(), 1);
        assert!(inbox.take(30, 40).is_empty());
    }
}
