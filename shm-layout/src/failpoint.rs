//! Fail points: named places in the protocols where a crash matters, at which a test can make
//! the process die (or stall). Compiled in only with the `failpoints` cargo feature; without
//! it [`fail_point!`](crate::fail_point) expands to nothing, so release builds carry no trace.
//!
//! Configured by the environment of the process that should die:
//! `XTCQ_FAILPOINTS=name=action[@n][,name=action[@n]...]`, where `action` is `abort`
//! (SIGABRT), `kill` (SIGKILL to ourselves, as `kill -9` would) or `sleep:MS`, taken on the
//! `n`-th time (default 1st) the process reaches the point. Unknown names are refused at the
//! first hit with a message, so a typo cannot make a crash test pass vacuously.

/// Every fail point, with the window it stands in.
pub const POINTS: &[(&str, &str)] = &[
    ("alloc.after_begin_fill", "a producer allocated a record (Filling) and has not published it"),
    ("publish.before_index", "a job is published (Queued) but in no deque or overflow ring yet"),
    ("push.after_slot_write", "an owner wrote a deque slot and has not advanced bottom"),
    ("pop.after_bottom_decrement", "an owner's LIFO pop lowered bottom and has not re-read top"),
    ("steal.after_cas", "a thief won the CAS on top and has not claimed the record"),
    ("steal_batch.after_cas", "a thief took a batch of handles with one CAS and has claimed none"),
    ("search.after_begin", "a consumer in a wait counted itself a searcher and has not looked"),
    ("claim.after_cas", "a consumer claimed a job and has not read its payload"),
    ("overflow.push.after_cell", "a pusher filled an overflow cell and has not advanced tail"),
    ("overflow.pop.after_cell", "a popper emptied an overflow cell and has not claimed the record"),
    ("ack.before_cas", "a consumer finished a job and has not acked it"),
    ("ack_batch.mid", "a consumer acked the first job of a batch and holds the rest claimed"),
    ("ack.before_block_release", "a consumer acked a job (Free) and has not given its payload block back"),
    ("block.after_alloc", "a producer took a payload block for its Filling record and has not published it"),
    ("give_back.writing", "a consumer giving a job back holds it in Writing and has not re-queued it"),
    ("nack.after_requeue", "a consumer re-queued a job (Queued) and has not indexed it"),
    ("delay.after_publish", "a producer or nacker left a job Delayed and has not told the daemon"),
    ("delay.after_release", "the daemon made a due job Queued and has not indexed it"),
    ("daemon.recovery.mid", "the daemon is half-way through recovering a dead process"),
    ("batch.before_count_pushed", "a producer published a job of a batch and has not counted it as pushed"),
    ("batch.after_complete", "the daemon completed a batch and has not released its callback job"),
    ("key.locked", "a pusher with a key holds its home entry's lock and has bound nothing"),
    ("key.writing", "a pusher with a key claimed a key entry (Writing) and has not bound it"),
    ("key.after_bind", "a pusher bound its key to its Filling record and has not published it"),
];

/// Fails at the named point if the environment asks for it. Use through `fail_point!`.
#[cfg(all(feature = "failpoints", not(xtcq_loom)))]
pub fn hit(name: &'static str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    struct Point {
        name: String,
        action: String,
        nth: u64,
        hits: AtomicU64,
    }
    static CONFIG: OnceLock<Vec<Point>> = OnceLock::new();
    let points = CONFIG.get_or_init(|| {
        let spec = std::env::var("XTCQ_FAILPOINTS").unwrap_or_default();
        let mut out = Vec::new();
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let (name, rest) = item.split_once('=').unwrap_or((item, "abort"));
            let (action, nth) = match rest.split_once('@') {
                Some((a, n)) => (a, n.parse().unwrap_or(1)),
                None => (rest, 1),
            };
            if !POINTS.iter().any(|(p, _)| *p == name) {
                eprintln!("XTCQ_FAILPOINTS: unknown fail point {name:?}; known: {POINTS:?}");
                std::process::abort();
            }
            out.push(Point { name: name.into(), action: action.into(), nth, hits: AtomicU64::new(0) });
        }
        out
    });
    for p in points.iter().filter(|p| p.name == name) {
        if p.hits.fetch_add(1, Ordering::Relaxed) + 1 != p.nth {
            continue;
        }
        match p.action.as_str() {
            "kill" => {
                let _ =
                    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
                std::process::abort();
            }
            a if a.starts_with("sleep:") => {
                let ms = a["sleep:".len()..].parse().unwrap_or(1000);
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            _ => std::process::abort(),
        }
    }
}

/// A fail point for other crates (the daemon): active when this crate was built with the
/// `failpoints` feature, whichever crate asked for it; otherwise nothing.
#[inline]
pub fn point(name: &'static str) {
    #[cfg(all(feature = "failpoints", not(xtcq_loom)))]
    hit(name);
    let _ = name;
}

/// Marks a fail point (see the module docs). Nothing without the `failpoints` feature.
#[macro_export]
macro_rules! fail_point {
    ($name:literal) => {
        #[cfg(all(feature = "failpoints", not(xtcq_loom)))]
        $crate::failpoint::hit($name);
    };
}
