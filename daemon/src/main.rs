//! `xtcqd`: the xtcq daemon's entry point. Parses flags, installs the log subscriber (ANSI
//! colours only on a terminal; no timestamps under the journal, which adds its own), runs
//! the daemon, and maps its outcome to the exit status documented in `--help`.

use clap::Parser;

fn main() {
    // `--config FILE` becomes flags before the command line's (see config_file).
    let argv = xtcqd::config_file::argv(std::env::args_os()).unwrap_or_else(|e| {
        eprintln!("xtcqd: error: {e}");
        std::process::exit(2)
    });
    let args = xtcqd::Args::parse_from(argv);
    xtcqd::init_logging_as(args.log_format);
    let result = xtcqd::Config::from_args(&args)
        .map_err(xtcqd::DaemonError::from)
        .and_then(xtcqd::run)
        .map_err(anyhow::Error::from);
    if let Err(e) = result {
        eprintln!("xtcqd: error: {e:#}");
        std::process::exit(1);
    }
}
