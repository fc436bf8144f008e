//! `xtcq pause QUEUE` and `xtcq resume QUEUE`.
//!
//! Rules kept:
//! - each says what it did and what the queue was before, so that a script that pauses a
//!   paused queue learns it did nothing;
//! - the daemon checks who may (the queue's owner, root, xtcqd's uid); a refusal is its
//!   message, with the usual exit status for it.

use anyhow::{Context, Result};
use clap::Args;

/// `xtcq pause` and `xtcq resume`: the arguments.
#[derive(Debug, Args)]
pub struct FlowArgs {
    /// Queue name.
    queue: String,
}

/// `xtcq pause QUEUE`: consumers take nothing from the queue until `xtcq resume QUEUE`.
pub fn pause(socket: Option<&std::path::Path>, args: FlowArgs) -> Result<i32> {
    let client = crate::cmd::connect(socket)?;
    let was =
        client.pause_queue(&args.queue).with_context(|| format!("cannot pause queue {}", args.queue))?;
    if was {
        println!("queue {} was paused already", args.queue);
    } else {
        println!("queue {} paused: its consumers take no job until `xtcq resume {}`", args.queue, args.queue);
    }
    Ok(crate::exit::OK)
}

/// `xtcq resume QUEUE`: consumers take the queue's jobs again.
pub fn resume(socket: Option<&std::path::Path>, args: FlowArgs) -> Result<i32> {
    let client = crate::cmd::connect(socket)?;
    let was =
        client.resume_queue(&args.queue).with_context(|| format!("cannot resume queue {}", args.queue))?;
    if was {
        println!("queue {} resumed", args.queue);
    } else {
        println!("queue {} was not paused", args.queue);
    }
    Ok(crate::exit::OK)
}

/// `xtcq job`: the arguments.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Queue name.
    queue: String,
    /// The job's id, as `push --print-handle`, `$XTCQ_JOB` and `xtcq dead` give it (like 12.3).
    #[arg(value_parser = parse_job_id)]
    id: xtcq_client::JobId,
    /// Print the state as JSON.
    #[arg(long)]
    json: bool,
}

pub fn parse_job_id(s: &str) -> std::result::Result<xtcq_client::JobId, String> {
    let bad = || format!("{s:?} is not a job id; give it as `push --print-handle` prints it (like 12.3)");
    let (i, b) = s.split_once('.').ok_or_else(bad)?;
    Ok(xtcq_client::JobId { index: i.parse().map_err(|_| bad())?, birth: b.parse().map_err(|_| bad())? })
}

/// `xtcq job QUEUE ID`: what became of the job. Exit 0 whatever its state, 3 when unknown.
pub fn job(socket: Option<&std::path::Path>, args: JobArgs) -> Result<i32> {
    let client = crate::cmd::connect(socket)?;
    let state = client.job_state(&args.queue, args.id).with_context(|| {
        format!("cannot look up job {}.{} of queue {}", args.id.index, args.id.birth, args.queue)
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&state)?);
    } else {
        println!("job {}.{} of {}: {}", args.id.index, args.id.birth, args.queue, state.describe());
    }
    Ok(if state == xtcq_proto::JobState::Unknown { crate::exit::EMPTY } else { crate::exit::OK })
}
