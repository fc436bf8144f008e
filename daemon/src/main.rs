//! `xtcqd`: the xtcq daemon's entry point (see `xtcqd::entry`), mapping its outcome to the
//! exit status documented in `--help`: 2 for bad flags or configuration, 1 for a daemon
//! that failed.

fn main() {
    match xtcqd::entry::run_with_args(std::env::args_os()) {
        Ok(()) => {}
        // clap prints help, version and its own errors, with its exit status.
        Err(xtcqd::entry::EntryError::Args(e)) => e.exit(),
        Err(e @ xtcqd::entry::EntryError::ConfigFile(_)) => {
            eprintln!("xtcqd: error: {e}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("xtcqd: error: {:#}", anyhow::Error::from(e));
            std::process::exit(1);
        }
    }
}
