//! `xtcq top` under a real terminal (tmux): it shows the queues, refreshes, quits on `q` and
//! on Ctrl-C with status 0, and leaves the terminal as it found it. Skipped, with a message,
//! when tmux is not installed (`.ci/run` installs it).

use xtcq_testkit::*;

use std::time::Duration;

#[test]
fn top_shows_the_queues_and_quits_on_q_or_ctrl_c_restoring_the_terminal() {
    if !Tmux::installed() {
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "farm"]));
    ok(&d.run(&["push", "farm", "a", "b", "c"]));
    for (n, quit) in [&["q"][..], &["C-c"][..]].into_iter().enumerate() {
        let t = Tmux::top(&d, &format!("tmux{n}"));
        let mut screen = String::new();
        wait_until(Duration::from_secs(30), "top to draw the queue", || {
            screen = t.capture();
            screen.lines().any(|l| l.contains("farm") && l.split_whitespace().any(|w| w == "3"))
        });
        assert!(screen.contains("PUSH/s") && screen.contains("OLDEST"), "{screen}");
        // A push shows up on a later refresh.
        ok(&d.run(&["push", "farm", "d"]));
        wait_until(Duration::from_secs(30), "top to refresh", || {
            screen = t.capture();
            screen.lines().any(|l| l.contains("farm") && l.split_whitespace().any(|w| w == "4"))
        });
        t.keys(quit);
        wait_until(Duration::from_secs(30), "top to quit", || {
            screen = t.capture();
            screen.contains("TOP-EXITED")
        });
        assert!(screen.contains("TOP-EXITED 0"), "{screen}");
        // Back on the main screen: the table is gone.
        assert!(!screen.contains("PUSH/s"), "{screen}");
        ok(&d.run(&["steal", "farm", "-n", "1"]));
        ok(&d.run(&["push", "farm", "e"]));
        ok(&d.run(&["steal", "farm", "-n", "1"]));
        ok(&d.run(&["push", "farm", "f"]));
        ok(&d.run(&["steal", "farm", "-n", "1"]));
    }
}

#[test]
fn top_without_a_terminal_points_at_stats_watch() {
    let d = Daemon::start();
    let o = d.run(&["top"]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("stats --watch"), "{}", stderr(&o));
}
