//! What the cross-process benches share: CPU pinning, a page of counters mapped by producer
//! and consumers, settings from the environment, and the daemon to start.
//!
//! - A bench pins each process to one CPU so that a figure describes one placement; the
//!   CPU count is read from sysconf, not from the (pinned) affinity mask.
//! - The shared page is a plain file mapped `MAP_SHARED`: its type must be atomics only, so
//!   that a zeroed file is a valid value and no process can see a torn write.

/// The yardstick of hand-offs (in xtcq-testkit, whose unit tests need none of the benches'
/// dev-dependencies).
pub use xtcq_testkit::line_chain;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The segment every cross-process bench runs over (flags as `xtcqd` takes them): deques
/// deep enough that a producer running ahead never spills to the overflow ring, records for
/// twice that, 64-byte payloads, process slots for up to 30 consumers.
pub const BENCH_SEGMENT: &[&str] = &[
    "--queues",
    "2",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "65536",
    "--records",
    "131072",
    "--payload-bytes",
    "64",
    "--process-slots",
    "64",
    "--overflow-capacity",
    "65536",
];

pub use xtcq_testkit::cpu::{ncpus, pin};

/// `$k` as a number, `None` when unset or not a number.
pub fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

/// The daemon a bench starts: `$XTCQ_BENCH_DAEMON` (a bench copied to another machine with
/// its daemon), else `xtcq-bench-daemon` beside the bench.
pub fn daemon_exe() -> PathBuf {
    std::env::var_os("XTCQ_BENCH_DAEMON")
        .map(PathBuf::from)
        .unwrap_or_else(|| xtcq_testkit::artifact_dir().join("xtcq-bench-daemon"))
}

/// Starts the bench daemon with `sizes`, its files under /dev/shm when there is one (where
/// xtcqd puts its segment by default, so the figure is the one users get).
pub fn start_daemon(sizes: &[&str]) -> xtcq_testkit::Daemon {
    let base = Path::new("/dev/shm");
    let dir = if base.is_dir() { tempfile::tempdir_in(base) } else { tempfile::tempdir() }
        .expect("temporary directory");
    xtcq_testkit::Daemon::builder().exe(daemon_exe()).in_dir(dir).flags(sizes).start()
}

/// Creates the one queue a cross-process bench runs over, `name`: FIFO (the consumers take
/// jobs in the order pushed), one deque of 65,536 slots (a producer running ahead does not
/// spill to the overflow ring), and attaches this process as its owner.
pub fn bench_queue(client: &xtcq_client::Client, name: &str) -> xtcq_client::OwnerHandle {
    let mut params = xtcq_client::QueueParams::new(name);
    params.deques = 1;
    params.capacity = 65536;
    params.flavor = xtcq_client::Flavor::Fifo;
    client.create_queue(&params).expect("create queue");
    client.attach_owner(name).expect("attach_owner")
}

/// Spins until `f` holds, looking every 65,536 turns whether a consumer exited (the run
/// fails, saying so) or `limit` passed (the consumers are killed and the run fails). A spin,
/// not a sleep: the benches wait with it inside their timed phases.
pub fn wait_for(
    consumers: &mut [&mut std::process::Child],
    what: &str,
    limit: std::time::Duration,
    f: impl Fn() -> bool,
) {
    let deadline = std::time::Instant::now() + limit;
    let mut k = 0u32;
    while !f() {
        std::hint::spin_loop();
        k = k.wrapping_add(1);
        if k & 0xffff == 0 {
            for c in consumers.iter_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("a consumer exited ({st}) while waiting for {what}");
                }
            }
            if std::time::Instant::now() > deadline {
                for c in consumers.iter_mut() {
                    let _ = c.kill();
                }
                panic!("timed out waiting for {what}");
            }
        }
    }
}

/// A `T` in a file that several processes map: `T` must be made of atomics only (a zeroed
/// file is then every counter at 0).
pub struct SharedPage<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> SharedPage<T> {
    /// Maps `path`, creating it (zeroed, whole pages) when `create`.
    pub fn open(path: &Path, create: bool) -> SharedPage<T> {
        let len = std::mem::size_of::<T>().next_multiple_of(4096);
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(create)
            .open(path)
            .unwrap_or_else(|e| panic!("shared page {}: {e}", path.display()));
        if create {
            f.set_len(len as u64).expect("size the shared page");
        }
        // SAFETY: a shared mapping of a file of at least `len` bytes that we hold open while
        // mapping it; unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap {}: {}", path.display(), std::io::Error::last_os_error());
        SharedPage { ptr: p.cast(), len }
    }

    /// The shared value.
    pub fn get(&self) -> &T {
        // SAFETY: the mapping is live, page-aligned and at least size_of::<T>(); T is atomics
        // only (the type's contract), so shared references across processes are sound.
        unsafe { &*self.ptr }
    }
}

impl<T> Drop for SharedPage<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
