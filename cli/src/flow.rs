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
