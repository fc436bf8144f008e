//! `xtcq-bridge`: carries jobs between xtcq queues on different hosts through a NATS
//! JetStream work-queue stream.
//!
//! - `out QUEUE`: takes jobs from the local queue, publishes each with a `Nats-Msg-Id` that
//!   is the same for every local attempt of the job and that nobody without `--id-secret`
//!   can compute (see `msg_id`), and acks locally only once the server has acked the publish.
//! - `in QUEUE`: fetches from a durable pull consumer no more than the local queue has room
//!   for, pushes each into the local queue, and acks upstream only once the local job is
//!   settled (see `inbound`).
//!
//! Both stop on SIGTERM or SIGINT after finishing what they hold (a second signal stops at
//! once, leaving unsettled messages to the server's redelivery); see docs/src/guarantees/across-hosts.md.

mod auth;
mod error;
mod inbound;
mod journal;
mod local;
mod msg_id;
mod nats;
mod out;
mod stats;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio::sync::watch;

use error::BridgeError;
use stats::Counters;

#[derive(Debug, Parser)]
#[command(
    name = "xtcq-bridge",
    bin_name = "xtcq-bridge",
    version,
    about = "Bridge xtcq queues between hosts through NATS JetStream"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Local queue -> stream: publish each job, then ack it locally.
    Out(OutArgs),
    /// Stream -> local queue: push each message, ack upstream once the local job is settled.
    In(InArgs),
}

/// What both directions take.
#[derive(Debug, Args)]
pub struct Common {
    /// The local queue.
    pub queue: String,
    /// The local daemon's socket (default: $XTCQ_SOCKET, then the usual paths).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The NATS server.
    #[arg(long, env = "XTCQ_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats: String,
    #[command(flatten)]
    pub auth: auth::NatsAuth,
    /// The JetStream stream.
    #[arg(long, value_parser = nats_name)]
    pub stream: String,
    /// The subject jobs travel on (default: xtcq.jobs.QUEUE).
    #[arg(long)]
    pub subject: Option<String>,
    /// Write the counters as JSON to this file, five times a second and at exit.
    #[arg(long)]
    pub stats_file: Option<PathBuf>,
    /// How often to log the counters.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub stats_interval: Duration,
}

impl Common {
    fn subject(&self) -> String {
        self.subject.clone().unwrap_or_else(|| format!("xtcq.jobs.{}", self.queue))
    }
}

/// `out`'s options.
#[derive(Debug, Args)]
pub struct OutArgs {
    #[command(flatten)]
    pub common: Common,
    /// The file of the secret under which job ids are made (created, mode 0600, if missing;
    /// keep it with this host: the same secret after a restart lets the stream drop a job
    /// published again after a crash; without it, anyone who may publish on the subject
    /// could publish a job's id first and make the job a "duplicate", run nowhere).
    #[arg(long, env = "XTCQ_BRIDGE_ID_SECRET")]
    pub id_secret: PathBuf,
    /// How long the stream remembers a job's id to drop a re-published copy (used when the
    /// bridge creates the stream). Longer than the longest local re-queue delay you expect.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub duplicate_window: Duration,
    /// Jobs taken and published per round (their publish acks are awaited together).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
}

/// `in`'s options.
#[derive(Debug, Args)]
pub struct InArgs {
    #[command(flatten)]
    pub common: Common,
    /// The durable pull consumer (created if missing).
    #[arg(long, value_parser = nats_name)]
    pub consumer: String,
    /// AckWait of the consumer when the bridge creates it; must exceed the queue's lease.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub ack_wait: Duration,
    /// Where a copy of each dead letter is published (default: xtcq.dead.QUEUE).
    #[arg(long)]
    pub dead_subject: Option<String>,
    /// The limits stream that keeps those copies, created if missing (default: STREAM_DEAD).
    #[arg(long, value_parser = nats_name)]
    pub dead_stream: Option<String>,
    /// The most messages held (pushed, not settled) at once (at least 1).
    #[arg(long, default_value_t = 256, value_parser = at_least_one)]
    pub max_inflight: usize,
    /// How often held jobs are looked at (and the longest a fetch waits).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub poll: Duration,
    /// After SIGTERM, how long to wait for held jobs to settle before leaving them to
    /// redelivery.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Keep which message each pushed job came from in this file, so that after a crash and
    /// restart a redelivered message whose job is already here is not pushed a second time.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Delay asked for with `-NAK` when a job could not be kept locally.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub nak_delay: Duration,
}

/// `250ms`, `10s`, `5m`, `1h`; a bare number is seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 =
        n.parse().map_err(|_| format!("{s:?}: expected a number and a unit, e.g. 250ms, 10s, 5m"))?;
    let ms = match unit {
        "ms" => n,
        "" | "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    Ok(Duration::from_millis(ms))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    // journald stamps each line itself.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        fmt.without_time().init();
    } else {
        fmt.init();
    }
}

/// A count of at least 1: `--max-inflight 0` would hold nothing, so fetch nothing, for ever.
/// A JetStream stream or consumer name: NATS refuses whitespace, `.`, `*`, `>` and path
/// separators in them, and a create with one only timed out ("timed out", after 10 s).
fn nats_name(s: &str) -> Result<String, String> {
    let bad = s.chars().find(|c| c.is_whitespace() || c.is_control() || ".*>/\\".contains(*c));
    match bad {
        _ if s.is_empty() => Err("an empty name; give one".into()),
        Some(c) => Err(format!(
            "{s:?} has {c:?}, which JetStream does not take in a stream or consumer name (nor \
             whitespace, '.', '*', '>', '/', '\\')"
        )),
        None => Ok(s.to_string()),
    }
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 would let the bridge take no message at all; give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?} is not a count: {e}")),
    }
}

/// 0 while running; 1 after the first SIGTERM/SIGINT (finish what is held); 2 after the
/// second (stop now).
pub type Stop = watch::Receiver<u8>;

fn watch_signals(tx: watch::Sender<u8>) -> Result<(), std::io::Error> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        for level in 1..=2u8 {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            if level == 1 {
                tracing::info!("stopping: finishing the jobs held (signal again to stop now)");
            } else {
                tracing::warn!("stopping now: unsettled messages are left to the server's redelivery");
            }
            let _ = tx.send(level);
        }
    });
    Ok(())
}

/// Logs the counters every `interval`, and writes them to the stats file five times a second.
fn report_stats(counters: Arc<Counters>, common: &Common) {
    let (interval, file) = (common.stats_interval.max(Duration::from_millis(10)), common.stats_file.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut logged = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            if logged.elapsed() >= interval {
                logged = tokio::time::Instant::now();
                tracing::info!("counters: {}", counters.line());
            }
            if let Some(f) = &file {
                counters.write(f);
            }
        }
    });
}

async fn run(cli: Cli) -> Result<(), BridgeError> {
    let (tx, stop) = watch::channel(0u8);
    watch_signals(tx).map_err(|e| BridgeError::nats("-", format!("cannot install signal handlers: {e}")))?;
    let counters = Arc::new(Counters::default());
    let common = match &cli.command {
        Command::Out(a) => &a.common,
        Command::In(a) => &a.common,
    };
    report_stats(counters.clone(), common);
    let result = match &cli.command {
        Command::Out(a) => out::run(a, stop, counters.clone()).await,
        Command::In(a) => inbound::run(a, stop, counters.clone()).await,
    };
    tracing::info!("final counters: {}", counters.line());
    if let Some(f) = &common.stats_file {
        counters.write(f);
    }
    result
}

/// The `xtcq-bridge` process (the binary, and the tests' copy of it).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xtcq-bridge: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("xtcq-bridge: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("5 parsecs").is_err());
    }
}
