//! `xtcqd` for this package's tests and benches: the daemon's own `main` (the same `Args`,
//! logging, `Config` and `run` from the `xtcqd` library), built as a binary of this package so
//! that `CARGO_BIN_EXE_xtcq-test-daemon` names it and `cargo test -p xtcq-tests` builds it.

use clap::Parser;

fn main() {
    let args = xtcqd::Args::parse();
    xtcqd::init_logging();
    let result = xtcqd::Config::from_args(&args).map_err(xtcqd::DaemonError::from).and_then(xtcqd::run);
    if let Err(e) = result {
        eprintln!("xtcqd: error: {e}");
        std::process::exit(1);
    }
}
