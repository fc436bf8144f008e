//! The C API's promise that push, pop, steal, reading the payload and ack allocate nothing
//! once a job handle has been used: the entry points are called as C calls them (through
//! `xtcq-capi`'s `extern "C"` functions), under a global allocator that counts.

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
fn push_steal_read_and_ack_allocate_nothing_in_steady_state() {
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
    let payload = [7u8; 48];
    let mut out = [0u8; 64];
    let mut round = |steal: bool| {
        let mut len = 0usize;
        // SAFETY: live handles from above; buffers valid for their lengths.
        unsafe {
            ok(xtcq_owner_push(owner, payload.as_ptr(), payload.len()), "push");
            if steal {
                ok(xtcq_thief_steal(thief, job), "steal");
            } else {
                ok(xtcq_owner_pop(owner, job), "pop");
            }
            ok(xtcq_job_copy_payload(job, out.as_mut_ptr(), out.len(), &mut len), "payload");
            ok(xtcq_job_ack(job), "ack");
        }
        assert_eq!(&out[..len], &payload[..]);
    };
    round(true); // the job handle's payload buffer grows once
    COUNTING.with(|on| on.set(true));
    for i in 0..10_000 {
        round(i % 2 == 0);
    }
    COUNTING.with(|on| on.set(false));
    let allocations = ALLOCATIONS.with(Cell::get);
    assert_eq!(
        allocations, 0,
        "10,000 push / steal-or-pop / read / ack rounds allocated {allocations} times"
    );
    // SAFETY: live handles, freed once.
    unsafe {
        xtcq_job_free(job);
        xtcq_thief_free(thief);
        xtcq_owner_free(owner);
        xtcq_client_free(client);
    }
}
