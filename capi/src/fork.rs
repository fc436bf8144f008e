//! Fork detection: a handle inherited across `fork()` shares its parent's process slot and
//! socket, and must not act in the child.
//!
//! - A `pthread_atfork` child hook bumps [`FORK_GENERATION`]; each handle remembers the
//!   generation it was made in, and every call compares the two (one relaxed load, no system
//!   call) and returns `XTCQ_E_FORKED` when they differ.
//! - Freeing an inherited handle in the child releases nothing the parent still uses: no
//!   `shutdown(2)`, no detach request, no nack. The child's copy is leaked on purpose (its
//!   memory goes when the child exits or execs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

extern "C" fn in_child_after_fork() {
    // Async-signal-safe: one atomic add, in the only thread the child has.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The current generation, installing the hook on first use.
pub(crate) fn generation() -> u64 {
    INSTALL.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child_after_fork)) };
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// Whether a handle made at `born` is now in a forked child.
#[inline]
pub(crate) fn forked_since(born: u64) -> bool {
    FORK_GENERATION.load(Ordering::Relaxed) != born
}
