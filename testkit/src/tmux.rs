//! A real terminal for the tests of `xtcq top`: a private tmux server per test.
//!
//! - Each server has its own socket in the test's directory, and is killed when its guard is
//!   dropped: a failing test leaves no tmux behind.
//! - Tests skip (saying so) where tmux is not installed; `.ci/run` installs it.

use std::path::PathBuf;
use std::process::Command;

use crate::{ok, run_bounded, stdout, xtcq_exe, Daemon};

/// A private tmux server with one session, `s`; killed when dropped.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// `tmux -S <our socket>`, for any tmux command.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    /// What session `s` shows now.
    pub fn capture(&self) -> String {
        stdout(&run_bounded(self.cmd().args(["capture-pane", "-p", "-t", "s"]), None))
    }

    /// Types `keys` (tmux key names, e.g. `q`, `C-c`) into session `s`.
    pub fn keys(&self, keys: &[&str]) {
        ok(&run_bounded(self.cmd().args(["send-keys", "-t", "s"]).args(keys), None));
    }

    /// Starts `xtcq top --interval 200ms` for `d` in a fresh 120x30 session, on a server of
    /// its own named `name` (a server just killed may not be gone yet, so each start of a
    /// test gets a new name). The shell then prints `TOP-EXITED <status>` and waits.
    pub fn top(d: &Daemon, name: &str) -> Tmux {
        let t = Tmux { socket: d.dir().join(format!("{name}.sock")) };
        let script = format!(
            "{} --socket {} top --interval 200ms; echo TOP-EXITED $?; sleep 60",
            xtcq_exe().display(),
            d.socket.display()
        );
        ok(&run_bounded(
            t.cmd()
                .args(["new-session", "-d", "-s", "s", "-x", "120", "-y", "30"])
                .arg(script)
                .env("TERM", "xterm-256color"),
            None,
        ));
        t
    }

    /// Whether tmux runs here; when not, prints why the caller skips.
    pub fn installed() -> bool {
        let yes = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
        if !yes {
            crate::skipped("tmux is not installed (apt-get install -y tmux)");
        }
        yes
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}
