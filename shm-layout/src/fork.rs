//! Fork detection, for `xtcq-client` (which re-exports this module as `xtcq_client::fork`)
//! and the C API: a client or handle inherited across `fork()` shares its parent's process
//! slot and socket, and must not act in the child.
//!
//! - One `pthread_atfork` child hook (installed on first use) bumps a generation; each connection remembers the generation it was made in, and every call
//!   compares the two (one relaxed load, no system call) and refuses to act when they differ
//!   (`Error::Forked` in the client, `XTCQ_E_FORKED` in the C API).
//! - Dropping an inherited client or handle in the child releases nothing the parent still
//!   uses: no `shutdown(2)`, no detach request, no nack. What the parent's copy owns is
//!   leaked in the child on purpose (it goes when the child exits or execs); [`Held`] does
//!   that for a claimed job or batch, which would nack on drop.

use std::mem::ManuallyDrop;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Bumped in each forked child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether the hook is installed: 0 not yet, else the installer's pid, with [`INSTALLED`]
/// set once `pthread_atfork` returned.
static INSTALL: AtomicU64 = AtomicU64::new(0);
const INSTALLED: u64 = 1 << 32;

extern "C" fn in_child_after_fork() {
    // The child's only thread: an atomic add is all a fork hook may safely do here.
    GENERATION.fetch_add(1, Relaxed);
}

/// The current generation, installing the hook on first use: read it before the first
/// `fork()` that must be detected (a client's connect does).
pub fn generation() -> u64 {
    if INSTALL.load(Acquire) & INSTALLED == 0 {
        install_hook();
    }
    GENERATION.load(Relaxed)
}

/// Installs the hook once. Not a `std::sync::Once`: a child forked while another thread of
/// its parent was inside it would wait forever on a copy of that `Once` nobody finishes. An
/// install begun under another pid (the parent's, copied at the fork) is taken over; at
/// worst the hook is then registered twice, which only bumps the generation by two.
#[cold]
fn install_hook() {
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
            // SAFETY: registers a child handler that touches one atomic.
            unsafe { libc::pthread_atfork(None, None, Some(in_child_after_fork)) };
            INSTALL.store(me | INSTALLED, Release);
            return;
        }
    }
}

/// Whether something made at generation `born` is now in a forked child (one relaxed load).
#[inline]
pub fn forked_since(born: u64) -> bool {
    GENERATION.load(Relaxed) != born
}

/// A claim (a [`ClaimedJob`](crate::ClaimedJob), [`OwnedJob`](crate::OwnedJob) or
/// [`ClaimedBatch`](crate::ClaimedBatch), which give their jobs back when dropped) that is
/// used, settled or dropped only in the process that made it: in a forked child each
/// accessor answers `None`, and the drop leaks it, so the parent's job is not given back
/// while the parent still runs it.
pub struct Held<T> {
    inner: ManuallyDrop<T>,
    born: u64,
}

impl<T> Held<T> {
    /// `inner`, made in generation `born`.
    #[inline]
    pub fn new(inner: T, born: u64) -> Self {
        Self { inner: ManuallyDrop::new(inner), born }
    }

    /// The generation it was made in.
    #[inline]
    pub fn born(&self) -> u64 {
        self.born
    }

    /// The claim; `None` in a forked child.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        (!forked_since(self.born)).then_some(&*self.inner)
    }

    /// The claim; `None` in a forked child.
    #[inline]
    pub fn get_mut(&mut self) -> Option<&mut T> {
        (!forked_since(self.born)).then_some(&mut *self.inner)
    }

    /// The claim itself, to settle; in a forked child it is leaked and `None` returned.
    #[inline]
    pub fn take(self) -> Option<T> {
        if forked_since(self.born) {
            return None; // dropped: leaked
        }
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so `inner` is taken once, and its taker drops it.
        Some(unsafe { ManuallyDrop::take(&mut me.inner) })
    }

    /// `f` of the claim, held the same way; `f` runs in a forked child too, so it must not
    /// settle the claim or touch the segment (a conversion, as `into_owned`).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Held<U> {
        let born = self.born;
        let mut me = ManuallyDrop::new(self);
        // SAFETY: as in `take`.
        let t = unsafe { ManuallyDrop::take(&mut me.inner) };
        Held::new(f(t), born)
    }

    /// The claim without the check, for reads of what it copied at its claim (its handle,
    /// id, attempts): never to settle it.
    #[inline]
    pub fn unchecked(&self) -> &T {
        &self.inner
    }
}

impl<T: Default> Default for Held<T> {
    fn default() -> Self {
        Self::new(T::default(), generation())
    }
}

impl<T> Drop for Held<T> {
    fn drop(&mut self) {
        if !forked_since(self.born) {
            // SAFETY: dropped once, here; never used again.
            unsafe { ManuallyDrop::drop(&mut self.inner) };
        }
    }
}
