//! Red team 3 from C: `tests/c/block_boundaries.c`, compiled with the system's `cc` against
//! `include/xtcq.h` and `libxtcq.a`, pushes at every payload class boundary through
//! `xtcq_owner_push` and `xtcq_injector_push`, runs a class dry, and misuses
//! `xtcq_thief_steal_batch` (NULL arguments, n out of range, a forked child); then `xtcq
//! check` finds no payload block held.

use std::process::Command;
use std::time::Duration;

use xtcq_testkit::{compile_c, ok, run_within, Daemon};

/// 100 bytes inline; 2 blocks of each size from 256 B to 64 KiB.
const FLAGS: &[&str] = &[
    "--queues",
    "2",
    "--records",
    "256",
    "--process-slots",
    "16",
    "--payload-bytes",
    "65536",
    "--inline-bytes",
    "100",
    "--payload-blocks",
    "256=2,512=2,1KiB=2,2KiB=2,4KiB=2,8KiB=2,16KiB=2,32KiB=2,64KiB=2",
];

#[test]
fn a_c_caller_at_every_class_boundary_and_misusing_steal_batch_gets_status_codes() {
    let d = Daemon::start_with(FLAGS);
    let exe = compile_c("tests/c/block_boundaries.c", d.dir(), &["-D_POSIX_C_SOURCE=200809L"]);
    let out = run_within(Command::new(&exe).arg(&d.socket), Duration::from_secs(120));
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "block_boundaries failed ({:?}):\n{so}\n{se}\ndaemon log:\n{}",
        out.status,
        d.log_text()
    );
    assert!(so.contains("misuse refused"), "{so}");
    let o = d.run(&["check"]);
    let text = ok(&o);
    assert!(text.contains("consistent") && text.contains("payload blocks: 0 held"), "{text}");
}
