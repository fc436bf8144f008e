//! A progress line on stderr for long bulk operations, shown only on a terminal (in a log it
//! would be noise) and at most five times a second.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

pub struct Progress {
    on: bool,
    last: Option<Instant>,
    shown: bool,
}

const EVERY: Duration = Duration::from_millis(200);

impl Progress {
    pub fn new() -> Progress {
        Progress { on: std::io::stderr().is_terminal(), last: None, shown: false }
    }

    /// Shows `line()` in place of the previous one, if it is time to.
    pub fn say(&mut self, line: impl FnOnce() -> String) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < EVERY) {
            return;
        }
        self.last = Some(now);
        self.shown = true;
        eprint!("\r{}\x1b[K", line());
    }

    /// Clears the line before the final message.
    pub fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}
