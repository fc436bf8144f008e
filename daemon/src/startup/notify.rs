//! systemd's readiness protocol (`Type=notify`): one datagram to `$NOTIFY_SOCKET`.
//!
//! The address is a filesystem path, or an abstract socket when it starts with `@`. We write
//! the datagram ourselves; no crate is needed for it.
//!
//! Invariant: a missing or unreachable `$NOTIFY_SOCKET` never stops the daemon; the caller
//! logs the error and carries on.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `"READY=1"`) to `$NOTIFY_SOCKET`. `Ok(false)` when it is not set.
pub fn sd_notify(state: &str) -> io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    notify_to(&path, state)?;
    Ok(true)
}

/// Sends `state` to the notify socket `path` (a path, or `@name` for an abstract socket).
pub fn notify_to(path: &std::ffi::OsStr, state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}

/// Sends `state` with `fd` attached (`SCM_RIGHTS`) to `$NOTIFY_SOCKET`, as `FDSTORE=1`
/// needs. `Ok(false)` when it is not set.
pub fn sd_notify_with_fd(state: &str, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        sock.connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)?;
    } else {
        sock.connect(&path)?;
    }
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(&sock, &[io::IoSlice::new(state.as_bytes())], &mut anc, SendFlags::empty())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;

    use super::notify_to;

    #[test]
    fn ready_reaches_a_listening_socket() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notify");
        let rx = UnixDatagram::bind(&p).unwrap();
        notify_to(p.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let name = format!("xtcq-notify-test-{}", std::process::id());
        let addr = {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
        };
        let rx2 = UnixDatagram::bind_addr(&addr).unwrap();
        notify_to(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let n = rx2.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
