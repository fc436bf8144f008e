//! `xtcq` for this package's tests: the command line's own `main`, built as a binary of this
//! package so that cargo builds it for these tests.
//!
//! `XTCQ_TEST_NOFILE_AFTER_START=1`: once loaded, the process lowers its own open-file
//! limit to its lowest free descriptor, so that the command's first open (its socket)
//! fails with EMFILE — a window `ulimit -n` cannot reach, since the loader needs as many
//! descriptors at once as the command does.

fn main() {
    if std::env::var_os("XTCQ_TEST_NOFILE_AFTER_START").is_some() {
        // The lowest free descriptor: a limit at it makes the next open fail (EMFILE).
        // SAFETY: F_GETFD on any number only asks whether it is open.
        let open = (0..1024).find(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1).unwrap_or(3) as u64;
        let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit/setrlimit with a valid struct.
        unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
            l.rlim_cur = open;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
    xtcq_cli::main()
}
