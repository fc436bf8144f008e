//! A counter block's handle lane: the half of a (process slot, queue) block that one thread
//! of one handle, in the process holding the slot, counts into with a plain load and store.
//!
//! - The shared lane takes a `lock xadd` per count, because every thread of the process may
//!   count into it. On the one-thread push + pop + ack pair those three locked instructions
//!   cost about 4 ns of 42 (benches/results/2026-12-04.md, "Counting without a locked instruction").
//! - A lane has one writer at a time. A process-wide registry hands it to the first handle
//!   (`Owner`, `Injector`, `Thief`) of its (segment, queue, slot) and takes it back when that
//!   handle is dropped; later handles of the same triple count into the shared lane. The
//!   registry's mutex orders one holder's last store before the next holder's first load.
//! - Within the handle, the lane is bound to the first thread that counts through it (a
//!   thief may be shared by threads; a job may be acked on another thread than the one that
//!   claimed it). Every other thread counts into the shared lane. Thread ids are never
//!   reused, so a lane has one writer for its whole life.
//! - A forked child shares its parent's slot through the handles it inherits (the C API
//!   refuses them, the engine and the Rust client do not): it must not write the parent's
//!   lanes. A `pthread_atfork` child hook gives the forking thread a fresh id (so no lane
//!   bound before the fork is its) and bumps a generation that `bind` checks (so no lane
//!   taken before the fork is bound in the child); a child gives a new handle a lane only
//!   for a slot the daemon registered to the child's own pid (not for the parent's slot,
//!   which a handle the child makes from what it inherited names): the child counts into
//!   the shared lane of the parent's slot.
//! - The registry's lock is taken before a fork and let go after it, in the parent and the
//!   child: a child forked while another thread held it (making or dropping a handle) would
//!   otherwise hang on its first handle, the holder not being there to let it go.
//! - Nothing read is trusted: readers add the two lanes with saturation.

use std::cell::Cell;
use std::cell::RefCell;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::{Mutex, MutexGuard};

use crate::layout::MetricsBlock;
use crate::metrics::Counter;
use crate::segment::Segment;
use crate::sync::Ordering;

/// Which block a lane is: the segment (its creator and creation time), the queue, the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LaneKey {
    created_unix_ns: u64,
    creator_pid: u32,
    queue: u32,
    slot: u32,
}

/// The lanes held in this process. A handful at a time: a `Vec` searched linearly.
static HELD: Mutex<Vec<LaneKey>> = Mutex::new(Vec::new());

/// The registry, locked. A poisoned lock only means a holder panicked; the list is whole.
fn held() -> MutexGuard<'static, Vec<LaneKey>> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// The next thread id: 0 means "none yet", in a thread and in a lane.
static NEXT_THREAD_ID: StdAtomicU64 = StdAtomicU64::new(1);

thread_local! {
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
    /// The registry's lock, held by the forking thread across `fork()`.
    static HELD_ACROSS_FORK: RefCell<Option<MutexGuard<'static, Vec<LaneKey>>>> =
        const { RefCell::new(None) };
}

/// Bumped in each forked child: a lane taken in another generation is not this process's.
static FORK_GENERATION: StdAtomicU64 = StdAtomicU64::new(0);

/// Before a fork: no other thread is inside the registry when the child's copy is made.
extern "C" fn before_fork() {
    // `try_with`: a fork from a thread-local destructor just goes without the lock.
    let _ = HELD_ACROSS_FORK.try_with(|h| {
        // Already held: the hooks were registered twice (see `install_fork_hooks`).
        if let Ok(mut h) = h.try_borrow_mut() {
            if h.is_none() {
                *h = Some(held());
            }
        }
    });
}

/// After a fork, in the parent or the child: the lock `before_fork` took is let go.
fn release_after_fork() {
    let _ = HELD_ACROSS_FORK.try_with(|h| h.try_borrow_mut().map(|mut h| drop(h.take())));
}

extern "C" fn in_parent_after_fork() {
    release_after_fork();
}

extern "C" fn in_child_after_fork() {
    // The child's only thread, the copy of the forking one: an unlock (an atomic swap, a
    // futex wake at most), an atomic add, a store to a thread-local cell. Its id was the
    // forking thread's: a fresh one is drawn later.
    release_after_fork();
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    THREAD_ID.with(|id| id.set(0));
}

/// Whether the fork hooks are installed: 0 not yet, else the installer's pid, with
/// [`INSTALLED`] set once `pthread_atfork` returned.
static INSTALL: StdAtomicU64 = StdAtomicU64::new(0);
const INSTALLED: u64 = 1 << 32;

/// The fork generation now, the child hook installed first (once per process); also what
/// [`crate::fork`] compares.
pub(crate) fn fork_generation() -> u64 {
    if INSTALL.load(std::sync::atomic::Ordering::Acquire) & INSTALLED == 0 {
        install_fork_hooks();
    }
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Installs the hooks once. Not a `std::sync::Once`: a child forked while another thread of
/// its parent was inside it would wait forever on a copy of that `Once` nobody finishes. An
/// install begun under another pid (the parent's, copied at the fork) is taken over; at
/// worst the hooks are then registered twice, which they allow.
#[cold]
fn install_fork_hooks() {
    use std::sync::atomic::Ordering::{Acquire, Release};
    let me = u64::from(std::process::id());
    loop {
        let state = INSTALL.load(Acquire);
        if state & INSTALLED != 0 {
            return;
        }
        if state == me {
            // Another thread of this process is installing: it finishes soon.
            std::thread::yield_now();
            continue;
        }
        if INSTALL.compare_exchange(state, me, Acquire, Acquire).is_ok() {
            // SAFETY: registers handlers that take and let go the registry's lock and touch
            // an atomic and thread-local cells.
            unsafe {
                libc::pthread_atfork(Some(before_fork), Some(in_parent_after_fork), Some(in_child_after_fork))
            };
            INSTALL.store(me | INSTALLED, Release);
            return;
        }
    }
}

/// The fork generation now, without the install (one relaxed load).
#[inline]
pub(crate) fn fork_generation_now() -> u64 {
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// This thread's id, unique in the process for its life (never reused).
#[inline]
fn thread_id() -> u64 {
    match THREAD_ID.with(Cell::get) {
        0 => new_thread_id(),
        known => known,
    }
}

/// A first call on this thread: its id is drawn.
#[cold]
#[inline(never)]
fn new_thread_id() -> u64 {
    let new = NEXT_THREAD_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    THREAD_ID.with(|id| id.set(new));
    new
}

/// Whether the segment shows process slot `slot` registered to this process's pid (asked
/// only in a forked child, whose parent's slot it must not count into by a lane).
fn registered_to_this_process(seg: &Segment, slot: u32) -> bool {
    seg.process_slot(slot).is_some_and(|p| p.pid.load(Ordering::Relaxed) == std::process::id())
}

/// Exclusive use, in this process, of one block's handle lane; given back on drop.
#[derive(Debug)]
pub(crate) struct HandleLane<'a> {
    block: &'a MetricsBlock,
    key: LaneKey,
    /// The thread that counts into the lane (0: none yet).
    thread: StdAtomicU64,
    /// The fork generation the lane was taken in: a forked child never binds it.
    born: u64,
}

impl<'a> HandleLane<'a> {
    /// The handle lane of process slot `slot`'s block of `queue`, unless another handle of
    /// this process holds it (or there is no such block).
    pub(crate) fn take(seg: &'a Segment, queue: u32, slot: u32) -> Option<Self> {
        let block = seg.slot_metrics(queue, slot)?;
        let d = seg.descriptor();
        let key = LaneKey { created_unix_ns: d.created_unix_ns, creator_pid: d.creator_pid, queue, slot };
        let born = fork_generation();
        if born != 0 && !registered_to_this_process(seg, slot) {
            return None;
        }
        let mut held = held();
        if held.contains(&key) {
            return None;
        }
        held.push(key);
        Some(Self { block, key, thread: StdAtomicU64::new(0), born })
    }

    /// The slot whose block this is.
    pub(crate) fn slot(&self) -> u32 {
        self.key.slot
    }

    /// Adds `n` to `c` when this thread is the lane's (binding it to this thread if no
    /// thread is yet): one load and one store, no locked instruction, since nobody else
    /// writes the lane; a reader in another process sees the old or the new total. `false`:
    /// another thread's lane, count into the shared one.
    #[inline(always)]
    pub(crate) fn add(&self, c: Counter, n: u64) -> bool {
        // Relaxed: a thread only compares the id with its own; `bind` writes it once.
        if self.thread.load(std::sync::atomic::Ordering::Relaxed) != thread_id() && !self.bind() {
            return false;
        }
        let cell = &self.block.handle_lane[c as usize];
        cell.store(cell.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        true
    }

    /// Binds the lane to this thread if no thread has it yet (and this is the process that
    /// took it, not a forked child).
    #[cold]
    #[inline(never)]
    fn bind(&self) -> bool {
        let me = thread_id();
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        if FORK_GENERATION.load(relaxed) != self.born {
            return false;
        }
        match self.thread.compare_exchange(0, me, relaxed, relaxed) {
            Ok(_) => true,
            Err(bound) => bound == me,
        }
    }
}

impl Drop for HandleLane<'_> {
    fn drop(&mut self) {
        held().retain(|k| *k != self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SegmentConfig;

    /// A segment of two queues in a directory of its own (kept while the test runs).
    fn segment() -> (tempfile::TempDir, Segment) {
        let dir = tempfile::tempdir().unwrap();
        let config = SegmentConfig::small().with_queues(2, 1).with_records(16);
        let seg = Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap();
        (dir, seg)
    }

    #[test]
    fn one_handle_at_a_time_holds_a_lane() {
        let (_dir, seg) = segment();
        let first = HandleLane::take(&seg, 0, 1).expect("a free lane");
        assert!(HandleLane::take(&seg, 0, 1).is_none(), "held by the first");
        let other_slot = HandleLane::take(&seg, 0, 2).expect("another slot's lane");
        let other_queue = HandleLane::take(&seg, 1, 1).expect("another queue's lane");
        drop(first);
        let again = HandleLane::take(&seg, 0, 1).expect("given back on drop");
        assert!(again.add(Counter::Pushed, 3));
        assert!(other_slot.add(Counter::Pushed, 1));
        drop(other_queue);
        assert_eq!(seg.queue_totals(0).get(Counter::Pushed), 4);
    }

    #[test]
    fn a_lane_counts_for_the_first_thread_only() {
        let (_dir, seg) = segment();
        let lane = HandleLane::take(&seg, 0, 0).expect("a free lane");
        assert!(lane.add(Counter::Acked, 1), "the first thread binds it");
        std::thread::scope(|s| {
            s.spawn(|| assert!(!lane.add(Counter::Acked, 1), "another thread: the shared lane"));
        });
        assert!(lane.add(Counter::Acked, 1), "still the first thread's");
        assert_eq!(seg.queue_totals(0).get(Counter::Acked), 2);
    }
}
