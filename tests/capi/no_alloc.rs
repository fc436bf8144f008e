//! The C API's promise that push, batch push, pop, steal, reading the payload and ack
//! allocate nothing once a job handle has been used: the entry points are called as C calls
//! them (through `xtcq-capi`'s `extern "C"` functions), under a global allocator that counts
//! (and a test that it does count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::CString;
use std::ptr;

use xtcq::*;
use xtcq_testkit::Daemon;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts, on this thread, while enabled.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = COUNTING.try_with(|on| {
            if on.get() {
                ALLOCATIONS.with(|n| n.set(n.get() + 1));
            }
        });
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from `alloc` above, i.e. from System.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn ok(rc: i32, what: &str) {
    assert_eq!(rc, XTCQ_OK, "{what}: {rc}");
}

/// A daemon, and a connection, owner, thief and job handle on its queue "q", as C gets them.
struct Handles {
    _daemon: Daemon,
    client: *mut xtcq_client,
    owner: *mut xtcq_owner,
    thief: *mut xtcq_thief,
    job: *mut xtcq_job,
}

impl Handles {
    fn attach() -> Handles {
        let daemon = Daemon::builder().daemon_defaults().start();
        let socket = CString::new(daemon.socket.to_str().expect("utf-8 path")).expect("no NUL");
        let queue = CString::new("q").expect("no NUL");
        let (mut client, mut owner, mut thief, mut job) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: valid pointers and NUL-terminated strings, as C would pass them.
        unsafe {
            ok(xtcq_connect(socket.as_ptr(), &mut client), "connect");
            ok(xtcq_create_queue(client, queue.as_ptr(), 1, 0, 0, 0, 0), "create");
            ok(xtcq_owner_attach(client, queue.as_ptr(), &mut owner), "owner");
            ok(xtcq_thief_attach(client, queue.as_ptr(), &mut thief), "thief");
            ok(xtcq_job_new(&mut job), "job_new");
        }
        Handles { _daemon: daemon, client, owner, thief, job }
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: live handles from `attach`, freed once.
        unsafe {
            xtcq_job_free(self.job);
            xtcq_thief_free(self.thief);
            xtcq_owner_free(self.owner);
            xtcq_client_free(self.client);
        }
    }
}

/// Allocations on this thread while `f` runs.
fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|on| on.set(true));
    f();
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(Cell::get) - before
}

/// The counter is not blind: a test that allocates nothing proves something only if one
/// that allocates is seen to.
#[test]
fn the_counting_allocator_counts() {
    let n = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(n, 1);
}

#[test]
fn push_steal_read_and_ack_allocate_nothing_in_steady_state() {
    let h = Handles::attach();
    let payload = [7u8; 48];
    let mut out = [0u8; 64];
    let mut round = |steal: bool| {
        let mut len = 0usize;
        // SAFETY: live handles; buffers valid for their lengths.
        unsafe {
            ok(xtcq_owner_push(h.owner, payload.as_ptr(), payload.len()), "push");
            if steal {
                ok(xtcq_thief_steal(h.thief, h.job), "steal");
            } else {
                ok(xtcq_owner_pop(h.owner, h.job), "pop");
            }
            ok(xtcq_job_copy_payload(h.job, out.as_mut_ptr(), out.len(), &mut len), "payload");
            ok(xtcq_job_ack(h.job), "ack");
        }
        assert_eq!(&out[..len], &payload[..]);
    };
    round(true); // the job handle's payload buffer grows once
    let allocations = allocations_during(|| {
        for i in 0..10_000 {
            round(i % 2 == 0);
        }
    });
    assert_eq!(
        allocations, 0,
        "10,000 push / steal-or-pop / read / ack rounds allocated {allocations} times"
    );
}

#[test]
fn a_batch_push_allocates_nothing_in_steady_state() {
    let h = Handles::attach();
    // 200 jobs a round: two chunks (128 and 72) into the deque of 1,024.
    let bytes = [7u8; 48];
    let payloads = [bytes.as_ptr(); 200];
    let lens = [bytes.len(); 200];
    let round = || {
        let mut queued = 0usize;
        // SAFETY: live handles; arrays of 200, each payload valid for its length.
        unsafe {
            ok(
                xtcq_owner_push_batch(h.owner, payloads.as_ptr(), lens.as_ptr(), 200, &mut queued),
                "push_batch",
            );
            assert_eq!(queued, 200);
            for _ in 0..200 {
                ok(xtcq_thief_steal(h.thief, h.job), "steal");
                ok(xtcq_job_ack(h.job), "ack");
            }
        }
    };
    round();
    let allocations = allocations_during(|| {
        for _ in 0..100 {
            round();
        }
    });
    assert_eq!(allocations, 0, "100 rounds of a 200-job batch push allocated {allocations} times");
}
