//! The sealed memfd segment kept in systemd's fd store, with this test playing systemd: a
//! `NOTIFY_SOCKET` that keeps the fds sent with `FDSTORE=1`, then a restart (after
//! `kill -9`) with `LISTEN_PID` / `LISTEN_FDS` / `LISTEN_FDNAMES` and the stored fd at 3.
//! Every wait is bounded; every daemon is killed when its guard drops.

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xtcq_client::{Client, Flavor, QueueParams};
use xtcq_testkit::*;

/// Waits (at most 20 s) for a datagram on `rx` that carries `FDSTORE=1` and an fd.
fn stored_fd(rx: &UnixDatagram) -> (String, OwnedFd) {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    rx.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no FDSTORE=1 with an fd in 20 s");
        let mut buf = [0u8; 512];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let Ok(r) =
            rustix::net::recvmsg(rx, &mut [std::io::IoSliceMut::new(&mut buf)], &mut anc, RecvFlags::empty())
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&buf[..r.bytes]).into_owned();
        let mut fds = Vec::new();
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(f) = m {
                fds.extend(f);
            }
        }
        if text.contains("FDSTORE=1") {
            if let Some(fd) = fds.pop() {
                return (text, fd);
            }
        }
    }
}

/// Starts xtcqd under a notify socket at `notify` with an fd store, and `stored` (if any)
/// passed back at fd 3 as `LISTEN_FDS=1`. `LISTEN_PID` must be the daemon's own pid, which a
/// shell sets before it execs the daemon.
fn start(dir: &Path, notify: &Path, log: &str, stored: Option<&OwnedFd>) -> Child {
    let logf = std::fs::File::create(dir.join(log)).expect("log");
    let mut c = Command::new("sh");
    c.arg("-c").arg(r#"[ -n "$PASS_FD" ] && export LISTEN_PID=$$; exec "$0" "$@""#);
    c.arg(xtcqd_exe())
        .arg("--socket")
        .arg(dir.join("xtcqd.sock"))
        .arg("--segment")
        .arg(dir.join("segment"))
        .args(MEDIUM_SEGMENT)
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", notify)
        .env("FDSTORE", "4")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf);
    if let Some(fd) = stored {
        let raw = fd.as_raw_fd();
        c.env("PASS_FD", "1").env("LISTEN_FDS", "1").env("LISTEN_FDNAMES", "xtcq-segment");
        // SAFETY: dup2 is async-signal-safe; it only puts the stored fd at 3 (without
        // close-on-exec) in the child between fork and exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = c.spawn().expect("spawn xtcqd");
    let socket = dir.join("xtcqd.sock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        let l = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        assert!(Instant::now() < deadline, "xtcqd not ready in 10 s: {l}");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_fd_store_keeps_a_sealed_segment_and_its_jobs_across_a_kill_9() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let notify = dir.join("notify");
    let rx = UnixDatagram::bind(&notify).expect("notify socket");
    let mut d = Kill(start(dir, &notify, "first.log", None));
    let (msg, fd) = stored_fd(&rx);
    assert!(msg.contains("FDNAME=xtcq-segment"), "{msg}");
    // No file at --segment: nothing to truncate, unlink or plant.
    assert!(!dir.join("segment").exists(), "a memfd segment leaves no file");
    // The memfd is sealed: even its holder cannot change its size.
    let e = rustix::fs::ftruncate(&fd, 0).expect_err("a sealed segment cannot shrink");
    assert_eq!(e, rustix::io::Errno::PERM, "{e}");

    let socket = dir.join("xtcqd.sock");
    {
        let c = Client::connect(Some(&socket)).expect("connect");
        c.create_queue(&QueueParams {
            name: "kept".into(),
            deques: 2,
            capacity: 256,
            flavor: Flavor::Fifo,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        })
        .expect("create queue");
        let owner = c.attach_owner("kept").expect("attach");
        for i in 0..100 {
            owner.push(format!("{i}").as_bytes()).expect("push");
        }
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(d.0.id() as libc::pid_t, libc::SIGKILL) };
    let _ = wait_timeout(&mut d.0, Duration::from_secs(10)).expect("xtcqd killed");

    let _d2 = Kill(start(dir, &notify, "second.log", Some(&fd)));
    let log = std::fs::read_to_string(dir.join("second.log")).unwrap_or_default();
    assert!(log.contains("adopting the segment kept in systemd's fd store"), "{log}");
    let c = Client::connect(Some(&socket)).expect("connect after the restart");
    let t = c.attach_thief("kept").expect("attach thief");
    let mut got = BTreeSet::new();
    while let Some(j) = t.steal().expect("steal") {
        let id: usize = String::from_utf8(j.payload().expect("payload")).expect("utf8").parse().expect("id");
        assert!(got.insert(id), "job {id} twice");
        j.ack().expect("ack");
    }
    assert_eq!(got, (0..100).collect(), "every job survived the kill -9 through the fd store");
}
