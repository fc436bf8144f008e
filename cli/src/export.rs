//! `xtcq export`: every queue, queued job and dead letter of a segment into a dump file
//! (JSON lines, `xtcqd::dump`), for `xtcqd --import-on-start` after a reboot or upgrade.
//!
//! Rules kept:
//! - the segment is mapped read-only: an export changes nothing, and reads a segment of
//!   this or an older readable layout version (one a newer build refuses to adopt);
//! - with a daemon running, the copy is racy (jobs move while it is taken): stop producers
//!   and consumers first, or use `xtcqd --export-on-stop`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::exit;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The dump file to write (replaced if it exists).
    output: PathBuf,
    /// Read this segment file instead of the running daemon's (e.g. one an older xtcqd left).
    #[arg(long, value_name = "PATH")]
    segment: Option<PathBuf>,
}

pub fn export(socket: Option<&std::path::Path>, args: ExportArgs) -> Result<i32> {
    let path = match args.segment {
        Some(p) => p,
        None => crate::cmd::connect(socket)?.stats(None)?.segment.path,
    };
    let (queues, jobs, skipped) = xtcqd::dump::export_file(&path, &args.output)
        .with_context(|| format!("cannot export the segment {}", path.display()))?;
    eprintln!("xtcq export: {queues} queue(s), {jobs} job(s) written to {}", args.output.display());
    if skipped > 0 {
        eprintln!("xtcq export: {skipped} job(s) kept changing while copied and were left out; stop producers and consumers first");
    }
    Ok(exit::OK)
}
