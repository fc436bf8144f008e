//! The daemon's one entry point, for the `xtcqd` binary and for `xtcq __xtcqd` (the daemon
//! built into `xtcq`, which `xtcq demo` falls back to): `--config FILE` folded into the
//! flags, the flags parsed, logging installed, the daemon run.

use std::ffi::OsString;

use clap::Parser;

/// Why the daemon did not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// `--config FILE` could not be read or parsed.
    #[error(transparent)]
    ConfigFile(#[from] crate::startup::config_file::ConfigFileError),
    /// The flags did not parse (or `--help` / `--version` was asked for: clap prints it).
    #[error(transparent)]
    Args(#[from] clap::Error),
    /// The daemon failed.
    #[error(transparent)]
    Daemon(#[from] crate::DaemonError),
}

/// Runs the daemon with `argv` (the program name first), until it stops.
pub fn run_with_args(argv: impl IntoIterator<Item = OsString>) -> Result<(), EntryError> {
    let argv = crate::startup::config_file::argv(argv)?;
    let args = crate::Args::try_parse_from(argv)?;
    crate::init_logging_as(args.log_format);
    let cfg = crate::Config::from_args(&args).map_err(crate::DaemonError::from)?;
    crate::run(cfg)?;
    Ok(())
}

/// The `xtcqd` process: runs the daemon with this process's arguments and exits with the
/// status documented in `--help`: 2 for bad flags or configuration, 1 for a daemon that
/// failed. Every binary that is the daemon (`xtcqd`, the tests' and benches' copies) is this
/// one call.
pub fn main() -> ! {
    match run_with_args(std::env::args_os()) {
        Ok(()) => std::process::exit(0),
        // clap prints help, version and its own errors, with its exit status.
        Err(EntryError::Args(e)) => e.exit(),
        Err(e @ EntryError::ConfigFile(_)) => {
            eprintln!("xtcqd: error: {e}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("xtcqd: error: {}", said_once(&anyhow::Error::from(e)));
            std::process::exit(1);
        }
    }
}

/// The error and its causes, `: `-joined, leaving out a cause its message already quotes (many
/// errors here name their cause in their own text and keep it as `source` too).
fn said_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
