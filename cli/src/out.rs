//! Everything `xtcq` writes to stdout goes through here, so that a reader that closes the pipe
//! early (`xtcq dead q | head -5`) ends the command quietly instead of panicking in
//! `println!` ("failed printing to stdout: Broken pipe", exit 101).
//!
//! Two ways to write: [`print`] for output that is the command's whole point (a listing):
//! a closed stdout stops the command, and `main` exits 0 as the reader had what it wanted;
//! [`say`] for reports beside work that must finish anyway (`demo`, `check`): a closed stdout
//! is ignored and the command goes on to its own exit status.

use std::io::{ErrorKind, Write};

/// Stdout was closed by its reader: the command stops, and `xtcq` exits 0.
#[derive(Debug)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for Closed {}

/// Whether `e` (or what it wraps) is a closed stdout.
pub fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Closed>())
}

/// Writes `bytes` to stdout and flushes; `Err(Closed)` when the reader closed the pipe.
pub fn print(bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let out = std::io::stdout();
    let mut out = out.lock();
    match out.write_all(bytes.as_ref()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(Closed.into()),
        Err(e) => Err(anyhow::Error::from(e).context("cannot write to stdout")),
    }
}

/// As [`print`], but a closed stdout is not an error: the command's work goes on.
pub fn say(bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    match print(bytes) {
        Err(e) if is_closed(&e) => Ok(()),
        r => r,
    }
}

/// `println!` through [`print`]: returns from the enclosing function on a closed stdout.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::print(format!("{}\n", format_args!($($arg)*)))?
    };
}

/// `println!` through [`say`]: a closed stdout is ignored.
macro_rules! sayln {
    ($($arg:tt)*) => {
        $crate::out::say(format!("{}\n", format_args!($($arg)*)))?
    };
}

pub(crate) use {outln, sayln};
