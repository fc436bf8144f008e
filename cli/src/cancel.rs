//! `xtcq cancel QUEUE JOB...`: queued and delayed jobs withdrawn, running ones taken from
//! their holders with their commands stopped.
//!
//! Rules kept:
//! - one line per job, saying what the cancel did (or why there was nothing to cancel);
//! - exit 0 only when every job named was cancelled; 3 when some were not there to cancel
//!   (finished, dead, unknown, still being pushed); 5 when a command could not be stopped.

use anyhow::{Context, Result};
use clap::Args;
use xtcq_proto::CancelOutcome;

/// `xtcq cancel`: the arguments.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Queue name.
    queue: String,
    /// The jobs' ids, as `push --print-handle`, `$XTCQ_JOB` and `xtcq dead` give them (like 12.3).
    #[arg(required = true, value_parser = crate::flow::parse_job_id)]
    ids: Vec<xtcq_client::JobId>,
}

/// `xtcq cancel QUEUE JOB...`.
pub fn cancel(socket: Option<&std::path::Path>, args: CancelArgs) -> Result<i32> {
    let client = crate::cmd::connect(socket)?;
    let mut status = crate::exit::OK;
    for id in &args.ids {
        let out = client.cancel_job(&args.queue, *id).with_context(|| {
            format!("cannot cancel job {}.{} of queue {}", id.index, id.birth, args.queue)
        })?;
        println!("job {}.{} of {}: {}", id.index, id.birth, args.queue, describe(out));
        status = status.max(match out {
            CancelOutcome::WasQueued | CancelOutcome::WasDelayed | CancelOutcome::WasRunning { .. } => {
                crate::exit::OK
            }
            CancelOutcome::NotStopped { .. } => crate::exit::FAILED,
            _ => crate::exit::EMPTY,
        });
    }
    Ok(status)
}

fn describe(out: CancelOutcome) -> String {
    let by = |pid: Option<u32>| pid.map_or(String::new(), |p| format!(" by pid {p}"));
    match out {
        CancelOutcome::WasQueued => "cancelled (it was queued; it will not run)".into(),
        CancelOutcome::WasDelayed => "cancelled (it was delayed; it will not run)".into(),
        CancelOutcome::WasRunning { pid } => {
            format!("cancelled (it was running{}; its command was stopped)", by(pid))
        }
        CancelOutcome::NotStopped { pid } => format!(
            "NOT stopped: it was running{} and its command could not be stopped; it is a dead letter \
             (\"could not stop command\") and may still run",
            by(pid)
        ),
        CancelOutcome::Finished => "not cancelled: it had finished already".into(),
        CancelOutcome::Dead => "not cancelled: it is a dead letter (`xtcq dead purge` deletes it)".into(),
        CancelOutcome::BeingPushed => "not cancelled: its producer is still writing it; try again".into(),
        CancelOutcome::Busy => {
            "not cancelled: its holder is in the middle of giving it back or extending its lease; try again"
                .into()
        }
        CancelOutcome::Unknown => "not cancelled: the queue has no job with this id".into(),
    }
}
