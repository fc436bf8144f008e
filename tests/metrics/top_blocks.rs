//! `xtcq top` under a real terminal (tmux) shows the payload blocks in use per size on its
//! second line, and follows a push of a large job. Skipped, with a message, when tmux is not
//! installed (`.ci/run` installs it).

use std::time::Duration;

use xtcq_testkit::*;

#[test]
fn top_shows_the_blocks_in_use_per_size() {
    if !Tmux::installed() {
        return;
    }
    let d = Daemon::start_with(&[
        "--records",
        "256",
        "--payload-bytes",
        "65536",
        "--payload-blocks",
        "4KiB=8,64KiB=3",
        "--process-slots",
        "16",
    ]);
    ok(&d.run(&["create", "big"]));
    ok(&d.run_in(&["push", "big", "-0"], &vec![b'x'; 65536]));
    let t = Tmux::top(&d, "tmux");
    let mut screen = String::new();
    wait_until(Duration::from_secs(30), "top to show the blocks", || {
        screen = t.capture();
        screen.contains("payload blocks in use: 4KiB 0/8, 64KiB 1/3")
    });
    // Two more fill the 64 KiB blocks: a later refresh says so.
    ok(&d.run_in(&["push", "big", "-0"], &[vec![b'y'; 65536], vec![b'z'; 65536]].join(&0u8)));
    wait_until(Duration::from_secs(30), "top to show the 64 KiB blocks full", || {
        screen = t.capture();
        screen.contains("64KiB 3/3 FULL")
    });
}
