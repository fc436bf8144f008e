//! Red-team pass 7 on `xtcq top` in a terminal that claims a huge size (tmux allows up to
//! 10000 x 10000; a resize can ask for it while top runs).
//!
//! - Before: ratatui kept two buffers of the whole terminal (tens of bytes a cell): at
//!   3000 x 3000 top's peak memory was about 700 MB, at 10000 x 10000 it passed 7.8 GB and a
//!   frame took seconds.
//! - Kept here: top draws at most 512 x 1024 cells, so its memory does not grow with the
//!   size the terminal claims; it still draws, resizes and quits as before. Skipped, with a
//!   message, when tmux is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use xtcq_testkit::*;

/// A private tmux server, killed when dropped.
struct Server(PathBuf);

impl Server {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.0);
        c
    }

    fn capture(&self) -> String {
        stdout(&run_bounded(self.cmd().args(["capture-pane", "-p", "-t", "s"]), None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// The peak resident memory of process `pid`, in KiB.
fn peak_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("top's /proc status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number of kB")
}

fn start_top(d: &Daemon, pid_file: &Path, cols: &str, rows: &str) -> Server {
    let t = Server(d.dir().join("tmux.sock"));
    let script = format!(
        "echo $$ > {}; exec {} --socket {} top --interval 200ms",
        pid_file.display(),
        xtcq_exe().display(),
        d.socket.display()
    );
    ok(&run_bounded(
        t.cmd()
            .args(["new-session", "-d", "-s", "s", "-x", cols, "-y", rows])
            .arg(script)
            .env("TERM", "xterm-256color"),
        None,
    ));
    t
}

#[test]
fn top_in_a_huge_terminal_keeps_its_memory_bounded() {
    if !Tmux::installed() {
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "farm"]));
    ok(&d.run(&["push", "farm", "a", "b", "c"]));
    let pid_file = d.dir().join("top.pid");
    let t = start_top(&d, &pid_file, "3000", "3000");
    wait_until(Duration::from_secs(60), "top to draw the queue", || {
        t.capture().lines().any(|l| l.contains("farm") && l.split_whitespace().any(|w| w == "3"))
    });
    let pid = std::fs::read_to_string(&pid_file).expect("pid file").trim().to_string();
    let peak = peak_kib(&pid);
    assert!(peak < 300 * 1024, "top at 3000 x 3000 peaked at {peak} KiB");
    // Resized small while running, it draws there too, then quits cleanly.
    ok(&run_bounded(t.cmd().args(["resize-window", "-t", "s", "-x", "100", "-y", "20"]), None));
    ok(&d.run(&["push", "farm", "d"]));
    wait_until(Duration::from_secs(60), "top to redraw at 100 x 20", || {
        t.capture().lines().any(|l| l.contains("farm") && l.split_whitespace().any(|w| w == "4"))
    });
    ok(&run_bounded(t.cmd().args(["send-keys", "-t", "s", "q"]), None));
    wait_until(Duration::from_secs(30), "top to quit", || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
}
