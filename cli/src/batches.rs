//! `xtcq batch open|seal|show` and `xtcq wait QUEUE --batch B`: jobs pushed under one name
//! (`push --batch B`), and a wait that returns when the last of them ended.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use xtcq_client::{BatchInfo, BatchStatus};

use crate::cmd::connect;
use crate::{exit, out, parse_duration};

#[derive(Debug, Args)]
pub struct BatchArgs {
    #[command(subcommand)]
    action: BatchAction,
}

#[derive(Debug, Subcommand)]
enum BatchAction {
    /// Open a batch: `push --batch NAME` adds jobs to it until it is sealed.
    Open(OpenArgs),
    /// Seal a batch: it takes no more jobs, and completes when its last job ended.
    Seal(NamedArgs),
    /// Show a batch's counts.
    Show(NamedArgs),
}

#[derive(Debug, Args)]
struct OpenArgs {
    /// The queue its jobs go to.
    queue: String,
    /// The batch's name (1 to 64 bytes), unique among the queue's batches not complete.
    name: String,
    /// A callback job: this payload is pushed once when the batch completes.
    #[arg(long, value_name = "PAYLOAD")]
    on_complete: Option<String>,
    /// The queue the callback job goes to [default: the batch's queue].
    #[arg(long, value_name = "QUEUE", requires = "on_complete")]
    on_complete_queue: Option<String>,
}

#[derive(Debug, Args)]
struct NamedArgs {
    /// The queue.
    queue: String,
    /// The batch.
    name: String,
    /// One JSON object instead of a line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The queue.
    queue: String,
    /// The batch to wait for.
    #[arg(long, value_name = "NAME")]
    batch: String,
    /// Give up after this long (exit 3).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// One JSON object instead of a line.
    #[arg(long)]
    json: bool,
}

pub fn batch(socket: Option<&Path>, args: BatchArgs) -> Result<i32> {
    let client = connect(socket)?;
    let (info, json) = match args.action {
        BatchAction::Open(a) => {
            let on_complete = a.on_complete.map(|p| xtcq_client::proto::OnComplete {
                queue: a.on_complete_queue.unwrap_or_else(|| a.queue.clone()),
                payload: p.into_bytes(),
            });
            (client.open_batch(&a.queue, &a.name, on_complete)?, false)
        }
        BatchAction::Seal(a) => (client.seal_batch(&a.queue, &a.name)?, a.json),
        BatchAction::Show(a) => (client.batch_progress(&a.queue, &a.name)?, a.json),
    };
    print(&info, json)?;
    Ok(exit::OK)
}

/// `xtcq wait QUEUE --batch B`: 0 when every job was acked, 5 when some are dead or
/// cancelled, 3 when the timeout passed first.
pub fn wait(socket: Option<&Path>, args: WaitArgs) -> Result<i32> {
    let client = connect(socket)?;
    let Some(info) = client.wait_batch(&args.queue, &args.batch, args.timeout)? else {
        let now = client.batch_progress(&args.queue, &args.batch)?;
        print(&now, args.json)?;
        return Ok(exit::EMPTY);
    };
    print(&info, args.json)?;
    Ok(if info.dead + info.cancelled == 0 { exit::OK } else { exit::FAILED })
}

fn print(b: &BatchInfo, json: bool) -> Result<()> {
    let text = if json {
        let v = serde_json::json!({
            "batch": b.name,
            "status": status_name(b.status),
            "pushed": b.pushed,
            "running": b.running,
            "acked": b.acked,
            "dead": b.dead,
            "cancelled": b.cancelled,
        });
        format!("{v}\n")
    } else {
        format!("{}\n", line(b))
    };
    out::print(text)
}

/// One line of a batch's counts, as `wait`, `batch` and `stats` print it. The name is
/// printed escaped: any user of the queue picks it (any bytes), or an attached process
/// scribbles it, and it must not drive the reader's terminal.
pub fn line(b: &BatchInfo) -> String {
    format!(
        "batch {} {}: pushed {} running {} acked {} dead {} cancelled {}",
        xtcq_proto::queue_name::escaped(&b.name),
        status_name(b.status),
        b.pushed,
        b.running,
        b.acked,
        b.dead,
        b.cancelled
    )
}

fn status_name(s: BatchStatus) -> &'static str {
    match s {
        BatchStatus::Open => "open",
        BatchStatus::Sealed => "sealed",
        BatchStatus::Complete => "complete",
    }
}
