//! The C API's promise that a push allocates nothing holds for `xtcq_owner_push_batch`: a
//! batch longer than one chunk, called as C calls it, under a global allocator that counts.

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

#[test]
fn a_batch_push_allocates_nothing_in_steady_state() {
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
    // 200 jobs a round: two chunks (128 and 72) into the deque of 1,024.
    let bytes = [7u8; 48];
    let payloads = [bytes.as_ptr(); 200];
    let lens = [bytes.len(); 200];
    let round = || {
        let mut queued = 0usize;
        // SAFETY: live handles from above; arrays of 200, each payload valid for its length.
        unsafe {
            ok(
                xtcq_owner_push_batch(owner, payloads.as_ptr(), lens.as_ptr(), 200, &mut queued),
                "push_batch",
            );
            assert_eq!(queued, 200);
            for _ in 0..200 {
                ok(xtcq_thief_steal(thief, job), "steal");
                ok(xtcq_job_ack(job), "ack");
            }
        }
    };
    round();
    COUNTING.with(|on| on.set(true));
    for _ in 0..100 {
        round();
    }
    COUNTING.with(|on| on.set(false));
    let allocations = ALLOCATIONS.with(Cell::get);
    assert_eq!(allocations, 0, "100 rounds of a 200-job batch push allocated {allocations} times");
    // SAFETY: live handles, freed once.
    unsafe {
        xtcq_job_free(job);
        xtcq_thief_free(thief);
        xtcq_owner_free(owner);
        xtcq_client_free(client);
    }
}
