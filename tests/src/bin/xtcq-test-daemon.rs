//! `xtcqd` for this package's tests and benches: the daemon's own `main` (the same `Args`,
//! `Config` and `run` from the `xtcqd` library), built as a binary of this package so that
//! `CARGO_BIN_EXE_xtcq-test-daemon` names it and `cargo test -p xtcq-tests` builds it.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() {
    let args = xtcqd::Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
    let result = xtcqd::Config::from_args(&args).map_err(xtcqd::DaemonError::from).and_then(xtcqd::run);
    if let Err(e) = result {
        eprintln!("xtcqd: error: {e}");
        std::process::exit(1);
    }
}
