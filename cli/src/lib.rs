//! `xtcq`: the command line of the xtcq job queue, as a library whose [`main`] is the `xtcq`
//! binary (and the tests' copy of it). Parses arguments (clap), runs one
//! subcommand against the daemon at `--socket` / `$XTCQ_SOCKET` / the default path, and maps
//! the outcome to the exit status documented in `--help` (see [`exit`]).
//!
//! Invariants: every error is printed as one `xtcq: error: …` line that names what was wrong
//! (the socket, the queue, the sizes); a job is acked only after its payload was written in
//! full, and a job whose output failed is nacked, never dropped.

// `eprintln!` and `eprint!` panic when stderr is a closed pipe (`xtcq work ... 2>&1 | head`);
// these two, defined before every module and so in scope in all of them, shadow the standard
// ones: a message that cannot be written is dropped, and the command goes on to its own exit
// status (what is said on stderr never decides it).
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod batches;
mod cancel;
mod cgroup;
mod cmd;
mod delay;
mod demo;
mod docs;
mod exit;
mod export;
mod fence;
mod flow;
mod hold;
mod leftovers;
mod out;
mod progress;
mod quota;
mod rate;
mod room;
mod runnable;
mod spawn;
mod stats;
mod top;
mod unique;
mod work;
mod work_pool;
mod work_start;
mod work_summary;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// xtcq: a job queue for processes that share memory on one Linux host.
///
/// Talks to the daemon `xtcqd` over its control socket; pushes and steals happen in shared
/// memory, with no system call on the fast path.
#[derive(Debug, Parser)]
#[command(name = "xtcq", bin_name = "xtcq", version, after_long_help = exit::HELP)]
pub struct Cli {
    /// Control socket of xtcqd [default: $XDG_RUNTIME_DIR/xtcq/xtcqd.sock, else
    /// /tmp/xtcq-$UID/xtcqd.sock; then the system daemon's /run/xtcq/xtcqd.sock if that one is
    /// absent].
    #[arg(long, global = true, env = "XTCQ_SOCKET", value_name = "PATH")]
    socket: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

/// A duration such as `500ms`, `2s`, `1m 30s`, or a plain number of seconds; at most 100 years
/// (the syntax `xtcqd`'s flags take too).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    xtcq_proto::duration::parse(s)
}

/// A refresh interval of `stats --watch` and `top`: as [`parse_duration`], but at least
/// 10ms, so that a zero does not spin asking the daemon and printing as fast as it can.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!(
            "{s:?} is under 10ms; give a refresh interval of at least 10ms (e.g. 500ms, 2s)"
        ));
    }
    Ok(d)
}

/// A queue's lease: a duration the daemon can honour (0: none; else whole ms, >= 1ms).
pub fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    xtcq_proto::lease::lease_ms(d).map_err(|e| e.to_string())?;
    Ok(d)
}

/// A claim's lease (a heartbeat): as [`parse_lease`], but 0 is refused.
pub fn parse_claim_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    xtcq_proto::lease::check_lease(d).map_err(|e| e.to_string())
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a queue.
    Create(cmd::CreateArgs),
    /// Delete a queue, freeing its place in the queue table. Refused while any process is
    /// attached to it or runs one of its jobs, and (without --force) while it holds jobs.
    Delete(cmd::DeleteArgs),
    /// List queues.
    #[command(alias = "list")]
    Ls(cmd::LsArgs),
    /// Push jobs: one PAYLOAD per argument, or one job per line of stdin.
    Push(cmd::PushArgs),
    /// Steal jobs and print their payloads, one per line; each is acked once written.
    Steal(cmd::StealArgs),
    /// Change a queue's record quota or dead-letter cap (the limits `create` sets).
    Limits(quota::LimitsArgs),
    /// Pause a queue: its consumers, in every process, take no job until it is resumed
    /// (jobs being run finish; pushes are still taken). Kept across daemon restarts.
    Pause(flow::FlowArgs),
    /// Resume a paused queue, waking its sleeping consumers.
    Resume(flow::FlowArgs),
    /// What became of a job, by the id `push --print-handle` prints: queued, delayed,
    /// running (by which pid, lease left), dead (why), finished, or unknown (exit 3).
    Job(flow::JobArgs),
    /// Cancel jobs by id: a queued or delayed job never runs; a running one is taken from its
    /// holder and its command stopped before this returns (exit 0: all cancelled; 3: some were
    /// not there to cancel; 5: a command could not be stopped).
    Cancel(cancel::CancelArgs),
    /// Open, seal or show a batch: jobs pushed under one name (`push --batch NAME`) that
    /// completes when it is sealed and its last job was acked, dead or cancelled.
    Batch(batches::BatchArgs),
    /// Wait until a batch completes, then print its counts (exit 0: every job acked; 5: some
    /// dead or cancelled; 3: --timeout passed first).
    Wait(batches::WaitArgs),
    /// Show counters: records by state, deques, processes (a table, or --json).
    Stats(stats::StatsArgs),
    /// A live full-screen view of the queues: rates, depths, oldest job, consumers (q quits).
    Top(top::TopArgs),
    /// List, re-queue or purge a queue's dead letters (jobs past their attempt limit).
    Dead(cmd::DeadArgs),
    /// Verify every invariant of the daemon's segment (or of --segment PATH).
    Check(cmd::CheckArgs),
    /// Write every queue, queued job and dead letter of the segment (the daemon's, or
    /// --segment PATH of this or an older layout version) to a dump file, for
    /// `xtcqd --import-on-start FILE` after a reboot or an upgrade.
    Export(export::ExportArgs),
    /// Import a dump (or a segment file of this or an older layout version) into the
    /// daemon's segment: its missing queues, queued jobs and dead letters; once.
    Import(export::ImportArgs),
    /// Long-running producer: owns a deque and pushes each line of stdin as a job.
    Produce(work::ProduceArgs),
    /// Long-running worker: runs CMD once per job (payload on stdin and in $XTCQ_PAYLOAD);
    /// acks on exit 0, nacks otherwise.
    Work(work::WorkArgs),
    /// Start a private xtcqd, farm 100,000 jobs from a producer process to worker
    /// processes, verify each ran exactly once, print throughput and latency, clean up.
    Demo(demo::DemoArgs),
    /// Ask the daemon to stop.
    Shutdown,
    /// Print a completion script for bash, zsh, fish, elvish or powershell.
    Completions(docs::CompletionsArgs),
    /// Write the man pages of xtcq, its subcommands and xtcqd into a directory.
    Man(docs::ManArgs),
    /// Runs the daemon in this process (the daemon `xtcq demo` starts); takes xtcqd's
    /// flags.
    #[command(name = "__xtcqd", hide = true, disable_help_flag = true)]
    EmbeddedDaemon {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A process of `xtcq demo` (internal).
    #[command(name = "__demo-role", hide = true)]
    DemoRole(demo::RoleArgs),
}

pub fn main() {
    // An empty `XTCQ_SOCKET` means unset, as xtcqd and the client library read it; clap
    // would take it for `--socket` given no value and name the flag, not the variable.
    if std::env::var_os(xtcq_proto::paths::SOCKET_ENV).is_some_and(|v| v.is_empty()) {
        std::env::remove_var(xtcq_proto::paths::SOCKET_ENV);
    }
    let cli = Cli::parse();
    let socket = cli.socket.as_deref();
    let result = match cli.command {
        Command::Create(a) => cmd::create(socket, a),
        Command::Delete(a) => cmd::delete(socket, a),
        Command::Ls(a) => cmd::ls(socket, a),
        Command::Push(a) => cmd::push(socket, a),
        Command::Steal(a) => cmd::steal(socket, a),
        Command::Limits(a) => quota::limits(socket, a),
        Command::Pause(a) => flow::pause(socket, a),
        Command::Resume(a) => flow::resume(socket, a),
        Command::Job(a) => flow::job(socket, a),
        Command::Cancel(a) => cancel::cancel(socket, a),
        Command::Batch(a) => batches::batch(socket, a),
        Command::Wait(a) => batches::wait(socket, a),
        Command::Stats(a) => stats::stats(socket, a),
        Command::Top(a) => top::top(socket, a),
        Command::Dead(a) => cmd::dead(socket, a),
        Command::Check(a) => cmd::check(socket, a),
        Command::Export(a) => export::export(socket, a),
        Command::Import(a) => export::import(socket, a),
        Command::Shutdown => cmd::shutdown(socket),
        Command::Completions(a) => docs::completions(a),
        Command::Man(a) => docs::man(a),
        Command::Produce(a) => work::produce(socket, a),
        Command::Work(a) => work::work(socket, a),
        Command::Demo(a) => demo::demo(a),
        Command::EmbeddedDaemon { args } => demo::embedded_daemon(socket, args),
        Command::DemoRole(a) => demo::role(socket, a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        // The reader of stdout had enough (`| head`): not an error.
        Err(e) if out::is_closed(&e) => std::process::exit(exit::OK),
        Err(e) => {
            eprintln!("xtcq: error: {}", exit::message(&e));
            std::process::exit(exit::for_error(&e));
        }
    }
}
