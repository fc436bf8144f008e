//! `xtcq top` under a real terminal (tmux) shows the payload blocks in use per size on its
//! second line, and follows a push of a large job. Skipped, with a message, when tmux is not
//! installed (`.ci/run` installs it).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use xtcq_testkit::*;

/// A private tmux server, killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    fn capture(&self) -> String {
        stdout(&run_bounded(self.cmd().args(["capture-pane", "-p", "-t", "s"]), None))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

#[test]
fn top_shows_the_blocks_in_use_per_size() {
    if !Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success()) {
        println!("SKIPPED: tmux is not installed (apt-get install -y tmux)");
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
    let t = Tmux { socket: d.dir().join("tmux.sock") };
    let script =
        format!("{} --socket {} top --interval 200ms; sleep 60", xtcq_exe().display(), d.socket.display());
    ok(&run_bounded(
        t.cmd()
            .args(["new-session", "-d", "-s", "s", "-x", "120", "-y", "30"])
            .arg(script)
            .env("TERM", "xterm-256color"),
        None,
    ));
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
