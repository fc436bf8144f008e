//! `xtcqd`: the xtcq daemon's entry point. Parses flags, installs the log subscriber (ANSI
//! colours only on a terminal; no timestamps under the journal, which adds its own), runs
//! the daemon, and maps its outcome to the exit status documented in `--help`.

use clap::Parser;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

fn main() {
    let args = xtcqd::Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        fmt.without_time().init();
    } else {
        fmt.init();
    }
    let result = xtcqd::Config::from_args(&args)
        .map_err(xtcqd::DaemonError::from)
        .and_then(xtcqd::run)
        .map_err(anyhow::Error::from);
    if let Err(e) = result {
        eprintln!("xtcqd: error: {e:#}");
        std::process::exit(1);
    }
}
