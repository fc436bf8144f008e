//! Red team: a forked child that tries to go on with the Rust client handles it inherited
//! is refused (`Error::Forked`, as the C API's `XTCQ_E_FORKED`), and the parent's counts
//! stay exact while it churns. (Written when the client did not refuse them and the child
//! counted in the parent's slot; the engine test `redteam8_fork` still covers engine
//! handles, which are not refused, counting into the shared lane.)
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.
//! - The child only tries to steal and push, and leaves with `_exit`.
//! - The parent bounds its wait for the child and kills it rather than hang.

use std::time::{Duration, Instant};

use xtcq_testkit::*;

/// Pushes, steals and acks until `until`; the jobs pushed.
fn churn(injector: &xtcq_client::InjectorHandle, thief: &xtcq_client::ThiefHandle, until: Instant) -> u64 {
    let mut pushed = 0;
    while Instant::now() < until {
        for _ in 0..32 {
            if injector.push(b"x").is_ok() {
                pushed += 1;
            }
            if let Some(j) = thief.steal().expect("steal") {
                j.ack().expect("ack");
            }
        }
    }
    pushed
}

#[test]
fn a_rust_client_forked_child_loses_no_count_of_its_parent() {
    let d = Daemon::start_with(SMALL_SEGMENT);
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let injector = client.attach_injector("q").unwrap();
    let thief = client.attach_thief("q").unwrap();
    // Binds both handles' lanes to this thread.
    let bind = churn(&injector, &thief, Instant::now() + Duration::from_millis(20));

    let mut fds = [0; 2];
    // SAFETY: a pipe for the child's count.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let until = Instant::now() + Duration::from_millis(600);
    // SAFETY: the child runs the job path, then `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Refused, so it pushes nothing (u64::MAX: it was not refused). A panic here must not
        // unwind into the harness's copy (it would exit 0).
        let refused = |_| {
            matches!(injector.push(b"x"), Err(xtcq_client::Error::Forked))
                && matches!(thief.steal(), Err(xtcq_client::Error::Forked))
        };
        let n = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (0..1000).all(refused)))
            .map_or(u64::MAX, |all| if all { 0 } else { u64::MAX });
        // SAFETY: writes 8 bytes from a live buffer, then leaves without unwinding.
        unsafe {
            libc::write(fds[1], n.to_le_bytes().as_ptr().cast(), 8);
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mine = churn(&injector, &thief, until);
    let start = Instant::now();
    let status = loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status, 0, "the child failed");
    let mut buf = [0u8; 8];
    // SAFETY: reads into a live buffer, then closes our end.
    assert_eq!(unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), 8) }, 8);
    unsafe { libc::close(fds[0]) };
    while let Some(j) = thief.steal().unwrap() {
        j.ack().unwrap();
    }
    let s = d.stats();
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["info"]["name"] == "q").expect("queue");
    let m = &q["metrics"];
    let pushed = m["pushed"].as_u64().unwrap();
    let theirs = u64::from_le_bytes(buf);
    assert_ne!(theirs, u64::MAX, "the child panicked or was not refused");
    assert_eq!(pushed, bind + mine + theirs, "pushes made: {bind} + {mine} here, {theirs} in the child");
    assert_eq!([m["claimed"].as_u64(), m["acked"].as_u64()], [Some(pushed), Some(pushed)], "{m}");
}
