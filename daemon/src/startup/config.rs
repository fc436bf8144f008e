//! `xtcqd`'s command line, and the configuration resolved from it.
//!
//! Flags are the interface scripts and unit files rely on: `--socket PATH` (env
//! `XTCQ_SOCKET`) and `--segment PATH` are fixed names. Segment sizes given explicitly must
//! match an existing segment that the daemon adopts (else it refuses, and says to use
//! `--recreate`); sizes left out take the existing segment's values, or the defaults for a
//! new one.
//!
//! Invariant: a [`Config`] is fully resolved — paths absolute or as given, the allow lists
//! final, modes never world-accessible.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use xtcq_proto::{duration, names};
use xtcq_shm::SegmentConfig;

/// xtcqd: the xtcq shared-memory job-queue daemon.
///
/// Creates (or adopts) one shared-memory segment holding fixed-capacity work-stealing deques
/// and job records, and serves the control socket through which processes create queues and
/// attach as owners (producers with a deque) or thieves (consumers). It is never on the hot
/// path: pushes and steals are done by the processes themselves, in shared memory.
///
/// Runs in the foreground; logs to stderr (`RUST_LOG` filters, default `info`); stops
/// cleanly on SIGTERM or SIGINT; sends READY=1 to `$NOTIFY_SOCKET` under systemd.
///
/// Defaults: socket `$RUNTIME_DIRECTORY/xtcqd.sock` (systemd), else
/// `$XDG_RUNTIME_DIR/xtcq/xtcqd.sock`, else `/tmp/xtcq-$UID/xtcqd.sock`; segment
/// `/dev/shm/xtcq-$UID`.
///
/// Exit status: 0 after a clean stop, 1 on a startup or runtime error (including "another
/// xtcqd is already running"), 2 on bad arguments.
#[derive(Debug, Clone, Parser)]
#[command(name = "xtcqd", bin_name = "xtcqd", version, args_override_self = true)]
pub struct Args {
    /// Read options from this TOML file: each key a flag's long name (`records = 65536`,
    /// `lease-scan-interval = "100ms"`, `allow-uid = ["alice"]`, `recreate = true`). Flags on
    /// the command line, and the environment variables flags read, override the file.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Control socket path.
    #[arg(long, env = "XTCQ_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Segment file (any path works: /dev/shm, hugetlbfs, disk). Default /dev/shm/xtcq-$UID.
    #[arg(long, env = "XTCQ_SEGMENT", value_name = "PATH")]
    pub segment: Option<PathBuf>,

    /// The daemon-private state file: who holds each process slot and each queue's
    /// permissions, for the next daemon (never kept in the segment, which attached processes
    /// can write). Its directory must be the daemon's own [default: SOCKET.state].
    #[arg(long, value_name = "PATH")]
    pub state: Option<PathBuf>,

    /// Remove an existing segment (and every job in it) and create a new one.
    #[arg(long)]
    pub recreate: bool,

    /// Queue-table entries [default: 16].
    #[arg(long, value_name = "N")]
    pub queues: Option<u32>,

    /// Deques each queue may have (owners per queue) [default: 16].
    #[arg(long, value_name = "N")]
    pub deques_per_queue: Option<u32>,

    /// Largest deque capacity, a power of two [default: 1024].
    #[arg(long, value_name = "N")]
    pub deque_capacity: Option<u32>,

    /// Job records shared by all queues (jobs queued or running at once) [default: 65536].
    #[arg(long, value_name = "N")]
    pub records: Option<u32>,

    /// The largest payload a job may carry [default: 448]. Payloads up to --inline-bytes
    /// live in the job's record; larger ones in a payload block (see --payload-blocks).
    #[arg(long, value_name = "BYTES")]
    pub payload_bytes: Option<u32>,

    /// Payload bytes kept in each job record, rounded up to 64 [default: 64]: every record
    /// costs 64 bytes plus this, whatever its payload.
    #[arg(long, value_name = "BYTES")]
    pub inline_bytes: Option<u32>,

    /// Payload blocks for payloads larger than --inline-bytes, per block size (a power of
    /// two from 128 to 16MiB; a payload takes the smallest block that holds it, or a larger
    /// one when those are all in use), e.g. `4KiB=1024,64KiB=16`. Given, the classes it does
    /// not list have none. [default: every size from the first above --inline-bytes to the
    /// first that holds --payload-bytes gets a quarter of --records blocks, at most 8 MiB of
    /// them]. Repeatable: the lists add up, and a size given twice is refused.
    #[arg(long, value_name = "SIZE=COUNT,...", action = clap::ArgAction::Append)]
    pub payload_blocks: Vec<String>,

    /// Process slots (processes attached at once) [default: 256].
    #[arg(long, value_name = "N")]
    pub process_slots: Option<u32>,

    /// Cells per queue's overflow ring, a power of two [default: 65536].
    #[arg(long, value_name = "N")]
    pub overflow_capacity: Option<u32>,

    /// Entries of the key table, which unique jobs (`xtcq push --key`) hold while they are
    /// queued, delayed or running; 0: no table, pushes with a key are refused. Keep it a few
    /// times the keys live at once: a key lives in one of 32 entries from its hash
    /// [default: 4096].
    #[arg(long, value_name = "N")]
    pub keys: Option<u32>,

    /// Also allow peers with this user (name or uid; repeatable). The daemon's own uid is
    /// always allowed unless --no-allow-self.
    #[arg(long, value_name = "USER")]
    pub allow_uid: Vec<String>,

    /// Allow peers whose primary or supplementary group is this group (name or gid;
    /// repeatable).
    #[arg(long, value_name = "GROUP")]
    pub allow_gid: Vec<String>,

    /// Share with a group (name or gid): the socket and segment become 0660 owned by it, and
    /// its members are allowed.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,

    /// Do not allow the daemon's own uid implicitly (only the --allow-* lists).
    #[arg(long)]
    pub no_allow_self: bool,

    /// Most control connections at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_connections: usize,

    /// Most control connections one user may hold at once [default: half of
    /// --max-connections]. The daemon's own uid and root are not limited: they can stop the
    /// daemon anyway.
    #[arg(long, value_name = "N")]
    pub max_connections_per_uid: Option<usize>,

    /// Most process slots one user's processes may hold at once [default: half the
    /// segment's process slots]. The daemon's own uid and root are not limited.
    #[arg(long, value_name = "N")]
    pub process_slots_per_uid: Option<u32>,

    /// Most queues one user may own [default: half the segment's --queues; at most all of
    /// them]. The daemon's own uid and root are not limited.
    #[arg(long, value_name = "N")]
    pub queues_per_uid: Option<u32>,

    /// Most job records the queues of one user may hold, as the sum of their record quotas
    /// (each of its queues gets an even slice unless `xtcq limits` gives it more) [default:
    /// half the segment's --records; at most all of them]. The daemon's own uid and root are
    /// not limited.
    #[arg(long, value_name = "N")]
    pub records_per_uid: Option<u32>,

    /// How long a connection that holds no process slot may stay silent before xtcqd closes
    /// it (clients reconnect by themselves), e.g. 60s, 5m; 0: never. A bare number is seconds.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration::parse)]
    pub idle_timeout: Duration,

    /// How long a new connection has to send its Hello, and a started frame to complete,
    /// e.g. 10s, 500ms (more than 0). A bare number is seconds.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_io_timeout)]
    pub io_timeout: Duration,

    /// Time between scans for expired job leases (claims of live but hung consumers, whose
    /// jobs are re-queued), e.g. 100ms, 1s; 0 disables lease expiry. Say the unit: a bare
    /// number (which once meant milliseconds here) is refused.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = parse_scan_interval)]
    pub lease_scan_interval: Duration,

    /// Serve the queues' metrics in the Prometheus text format at http://ADDR/metrics, e.g.
    /// 127.0.0.1:9187 (off by default; anyone who can reach ADDR can read them).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,

    /// How long one scan of the records answers `/metrics` scrapes, e.g. 1s, 250ms; 0: each
    /// scrape scans. However many scrape, the daemon scans at most once in this time.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration::parse)]
    pub metrics_max_age: Duration,

    /// How log lines on stderr are written: text, or json (one object per line, the event's
    /// fields at the top level).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub log_format: crate::LogFormat,

    /// On a clean stop (SIGTERM, SIGINT, `xtcq shutdown`), write every queue, queued job and
    /// dead letter to this dump file (JSON lines), for `--import-on-start` after a reboot or
    /// an upgrade. Jobs still running are written as queued: they run again.
    #[arg(long, value_name = "FILE")]
    pub export_on_stop: Option<PathBuf>,

    /// On start, import this dump file (or a segment file of this or an older layout
    /// version) into the segment, then rename it FILE.imported so it is never imported
    /// twice. A missing file is nothing to import.
    #[arg(long, value_name = "FILE")]
    pub import_on_start: Option<PathBuf>,
}

/// `--io-timeout`: a duration above zero (a zero one would drop every connection at once).
fn parse_io_timeout(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d.is_zero() {
        return Err("must be more than 0, e.g. 10s or 500ms".into());
    }
    Ok(d)
}

/// `--lease-scan-interval`: a duration with its unit (or 0), at most an hour (so that
/// leases still expire), and in whole milliseconds (the scan runs on a 1 ms clock).
fn parse_scan_interval(s: &str) -> Result<Duration, String> {
    let d = duration::parse_with_unit(s)?;
    if d > Duration::from_secs(3600) {
        return Err(format!("{s:?} is longer than 1h: leases would not expire for that long"));
    }
    if !d.is_zero() && d < Duration::from_millis(1) {
        return Err(format!("{s:?} is under 1ms, the scan's resolution; say 1ms or more"));
    }
    Ok(d)
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Control socket.
    pub socket: PathBuf,
    /// Segment file.
    pub segment: PathBuf,
    /// The daemon-private state file.
    pub state: PathBuf,
    /// Recreate the segment.
    pub recreate: bool,
    /// Segment configuration for a new segment.
    pub segment_config: SegmentConfig,
    /// Fields given explicitly (must match an adopted segment).
    pub explicit: Vec<(&'static str, u32)>,
    /// Allowed uids.
    pub allow_uids: Vec<u32>,
    /// Allowed gids.
    pub allow_gids: Vec<u32>,
    /// Group to share the socket and segment with.
    pub group: Option<u32>,
    /// Connection cap.
    pub max_connections: usize,
    /// Connection cap of one uid (other than ours and root).
    pub max_connections_per_uid: usize,
    /// Process-slot cap of one uid (`None`: half the segment's, known once it is open).
    pub process_slots_per_uid: Option<u32>,
    /// Queues one uid may own (`None`: half the segment's).
    pub queues_per_uid: Option<u32>,
    /// Records one uid's queues may hold (`None`: half the segment's).
    pub records_per_uid: Option<u32>,
    /// How long a connection holding no slot may be silent (`None`: forever).
    pub idle_timeout: Option<Duration>,
    /// Hello / frame-completion timeout.
    pub io_timeout: Duration,
    /// Period of the lease-expiry scan (`None`: disabled).
    pub lease_scan_interval: Option<Duration>,
    /// Dump file written on a clean stop.
    pub export_on_stop: Option<PathBuf>,
    /// Dump (or older segment) imported on start.
    pub import_on_start: Option<PathBuf>,
    /// Where to serve `/metrics` (`--metrics`), if anywhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// How long one scan answers scrapes (`--metrics-max-age`).
    pub metrics_max_age: Duration,
}

/// Bad arguments.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A user or group flag named no user or group.
    #[error("{flag}: {source}")]
    Name {
        /// The flag, e.g. `--allow-uid`.
        flag: &'static str,
        /// What the name service said.
        source: xtcq_proto::names::NameError,
    },
    /// Another bad value.
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Uids no per-uid limit applies to: ours (it can stop the daemon and rewrite its
    /// segment anyway) and root.
    pub fn unlimited_uids() -> [u32; 2] {
        [rustix::process::getuid().as_raw(), 0]
    }

    /// Resolves `args` against the environment.
    pub fn from_args(args: &Args) -> Result<Config, ConfigError> {
        let socket = xtcq_proto::paths::resolve_socket(args.socket.as_deref());
        let segment = args.segment.clone().unwrap_or_else(xtcq_proto::paths::default_segment_path);
        let (segment_config, explicit) = segment_config_from(args)?;
        let Access { allow_uids, allow_gids, group } = access_from(args)?;
        check_socket_len(&socket)?;
        check_connection_limits(args)?;
        let state = args.state.clone().unwrap_or_else(|| crate::persistence::state::default_path(&socket));
        Ok(Config {
            socket,
            segment,
            state,
            recreate: args.recreate,
            segment_config,
            explicit,
            allow_uids,
            allow_gids,
            group,
            max_connections: args.max_connections,
            max_connections_per_uid: args
                .max_connections_per_uid
                .unwrap_or((args.max_connections / 2).max(1)),
            process_slots_per_uid: args.process_slots_per_uid,
            queues_per_uid: args.queues_per_uid,
            records_per_uid: args.records_per_uid,
            idle_timeout: Some(args.idle_timeout).filter(|d| !d.is_zero()),
            io_timeout: args.io_timeout,
            lease_scan_interval: Some(args.lease_scan_interval).filter(|d| !d.is_zero()),
            export_on_stop: args.export_on_stop.clone(),
            import_on_start: args.import_on_start.clone(),
            metrics: args.metrics,
            metrics_max_age: args.metrics_max_age,
        })
    }

    /// Mode of the socket and segment files.
    pub fn file_mode(&self) -> u32 {
        if self.group.is_some() {
            0o660
        } else {
            0o600
        }
    }
}

/// A size flag given on the command line: the `SegmentConfig` field it sets, and its value.
type SizeFlag = (&'static str, u32);

/// The segment's sizes: the defaults with each size flag given laid over them, validated,
/// and the flags that were given (name, value), which a reused segment must match.
fn segment_config_from(args: &Args) -> Result<(SegmentConfig, Vec<SizeFlag>), ConfigError> {
    let mut c = SegmentConfig::default();
    let mut explicit = Vec::new();
    let fields: [(&'static str, Option<u32>, &mut u32); 9] = [
        ("queues", args.queues, &mut c.queues),
        ("deques_per_queue", args.deques_per_queue, &mut c.deques_per_queue),
        ("deque_capacity", args.deque_capacity, &mut c.deque_capacity),
        ("job_records", args.records, &mut c.job_records),
        ("payload_bytes", args.payload_bytes, &mut c.payload_bytes),
        ("process_slots", args.process_slots, &mut c.process_slots),
        ("overflow_capacity", args.overflow_capacity, &mut c.overflow_capacity),
        ("inline_bytes", args.inline_bytes, &mut c.inline_bytes),
        ("keys", args.keys, &mut c.keys),
    ];
    for (name, v, field) in fields {
        if let Some(v) = v {
            *field = v;
            explicit.push((name, v));
        }
    }
    if !args.payload_blocks.is_empty() {
        // Each repeat adds its classes (`parse` refuses a size named twice): last-wins, as
        // the other flags do, would drop the earlier classes without a word.
        let spec = args.payload_blocks.join(",");
        c.payload_blocks = crate::startup::payload_blocks::parse(&spec).map_err(ConfigError::Invalid)?;
        let names = xtcq_shm::layout::payload::CLASS_FIELDS;
        explicit.extend(names.iter().zip(c.payload_blocks).map(|(&name, n)| (name, n)));
    }
    c.validate().map_err(|e| ConfigError::Invalid(format!("segment size flags: {e}")))?;
    Ok((c, explicit))
}

/// Who may connect: the allow lists (sorted, deduplicated) and the group of the files.
struct Access {
    allow_uids: Vec<u32>,
    allow_gids: Vec<u32>,
    group: Option<u32>,
}

/// Resolves the allow flags and `--group`, refusing lists that nothing would enforce or
/// that would allow nobody.
fn access_from(args: &Args) -> Result<Access, ConfigError> {
    let group = args
        .group
        .as_deref()
        .map(|g| names::resolve_gid(g).map_err(|source| ConfigError::Name { flag: "--group", source }))
        .transpose()?;
    let me = rustix::process::getuid().as_raw();
    let mut allow_uids = resolve_ids("--allow-uid", &args.allow_uid, names::resolve_uid)?;
    if !args.no_allow_self {
        allow_uids.push(me);
    }
    allow_uids.sort_unstable();
    allow_uids.dedup();
    let mut allow_gids = resolve_ids("--allow-gid", &args.allow_gid, names::resolve_gid)?;
    allow_gids.extend(group);
    allow_gids.sort_unstable();
    allow_gids.dedup();
    if group.is_none() && !(args.allow_uid.is_empty() && args.allow_gid.is_empty()) {
        // The socket and segment stay 0600 without --group, so the kernel lets no other
        // user open them: the allow lists would be a promise nothing keeps.
        return Err(ConfigError::Invalid(
            "--allow-uid / --allow-gid have no effect without --group: the socket and segment stay \
             0600, so no other user can open them. Add --group GROUP (a group the allowed users are \
             in), which makes them 0660 owned by that group"
                .into(),
        ));
    }
    if allow_uids.is_empty() && allow_gids.is_empty() {
        return Err(ConfigError::Invalid(
            "--no-allow-self with no --allow-uid, --allow-gid or --group would allow nobody".into(),
        ));
    }
    Ok(Access { allow_uids, allow_gids, group })
}

/// The connection and process-slot limits must each leave room for one.
fn check_connection_limits(args: &Args) -> Result<(), ConfigError> {
    if args.max_connections == 0 {
        return Err(ConfigError::Invalid("--max-connections must be at least 1".into()));
    }
    if args.max_connections_per_uid == Some(0) || args.process_slots_per_uid == Some(0) {
        return Err(ConfigError::Invalid(
            "--max-connections-per-uid and --process-slots-per-uid must be at least 1".into(),
        ));
    }
    if args.queues_per_uid == Some(0) || args.records_per_uid == Some(0) {
        return Err(ConfigError::Invalid("--queues-per-uid and --records-per-uid must be at least 1".into()));
    }
    Ok(())
}

/// The longest socket path `bind` takes (`sun_path` holds 108 bytes with the final NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Refuses a socket path too long to bind, before anything is created for it.
fn check_socket_len(socket: &std::path::Path) -> Result<(), ConfigError> {
    let len = socket.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ConfigError::Invalid(format!(
            "--socket {} is {len} bytes; a Unix socket path may be at most {MAX_SOCKET_PATH}: use a shorter path",
            socket.display()
        )));
    }
    Ok(())
}

/// Each of `given` (names or numbers) to an id with `resolve`, the flag named in the error.
fn resolve_ids(
    flag: &'static str,
    given: &[String],
    resolve: fn(&str) -> Result<u32, names::NameError>,
) -> Result<Vec<u32>, ConfigError> {
    given.iter().map(|v| resolve(v).map_err(|source| ConfigError::Name { flag, source })).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::{Args, Config};

    #[test]
    fn users_and_groups_are_names_or_numbers() {
        let a = Args::parse_from([
            "xtcqd",
            "--group",
            "root",
            "--allow-uid",
            "root",
            "--allow-uid",
            "1234",
            "--allow-gid",
            "0",
        ]);
        let c = Config::from_args(&a).unwrap();
        assert_eq!(c.group, Some(0));
        assert!(c.allow_uids.contains(&0) && c.allow_uids.contains(&1234));
        assert!(c.allow_gids.contains(&0));
        for (flag, value) in [("--group", "no-such-group-xyz"), ("--allow-gid", "no-such-group-xyz")] {
            let e = Config::from_args(&Args::parse_from(["xtcqd", flag, value])).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{flag}: no such group \"{value}\"")), "{e}");
        }
        let e =
            Config::from_args(&Args::parse_from(["xtcqd", "--allow-uid", "no-such-user-xyz"])).unwrap_err();
        assert!(e.to_string().starts_with("--allow-uid: no such user \"no-such-user-xyz\""), "{e}");
    }

    #[test]
    fn sizes_given_are_explicit_and_validated() {
        let a = Args::parse_from(["xtcqd", "--socket", "/s", "--segment", "/g", "--queues", "4"]);
        let c = Config::from_args(&a).unwrap();
        assert_eq!(c.segment_config.queues, 4);
        assert_eq!(c.explicit, vec![("queues", 4)]);
        assert_eq!(c.file_mode(), 0o600);
        assert_eq!(c.lease_scan_interval, Some(Duration::from_millis(100)));
        let off = Args::parse_from(["xtcqd", "--lease-scan-interval", "0"]);
        assert_eq!(Config::from_args(&off).unwrap().lease_scan_interval, None);
        let bad = Args::parse_from(["xtcqd", "--deque-capacity", "1000"]);
        assert!(Config::from_args(&bad).is_err());
        let nobody = Args::parse_from(["xtcqd", "--no-allow-self"]);
        assert!(Config::from_args(&nobody).is_err());
        let long = format!("/tmp/{}/xtcqd.sock", "d".repeat(100));
        let e = Config::from_args(&Args::parse_from(["xtcqd", "--socket", &long])).unwrap_err();
        assert!(e.to_string().contains("at most 107"), "{e}");
    }

    #[test]
    fn allow_lists_without_a_group_are_refused_saying_to_add_one() {
        for flag in ["--allow-uid", "--allow-gid"] {
            let e = Config::from_args(&Args::parse_from(["xtcqd", flag, "0"])).unwrap_err();
            assert!(
                e.to_string().contains("without --group") && e.to_string().contains("Add --group"),
                "{e}"
            );
            assert!(Config::from_args(&Args::parse_from(["xtcqd", flag, "0", "--group", "0"])).is_ok());
        }
    }

    #[test]
    fn durations_take_the_humantime_form_and_unitless_scan_intervals_are_refused() {
        let a = Args::parse_from([
            "xtcqd",
            "--idle-timeout",
            "2m",
            "--io-timeout",
            "500ms",
            "--lease-scan-interval",
            "20ms",
        ]);
        let c = Config::from_args(&a).unwrap();
        assert_eq!(c.idle_timeout, Some(Duration::from_secs(120)));
        assert_eq!(c.io_timeout, Duration::from_millis(500));
        assert_eq!(c.lease_scan_interval, Some(Duration::from_millis(20)));
        // Bare seconds, as they always were for these two (and for every `xtcq` duration).
        let a = Args::parse_from(["xtcqd", "--idle-timeout", "0", "--io-timeout", "3"]);
        let c = Config::from_args(&a).unwrap();
        assert_eq!((c.idle_timeout, c.io_timeout), (None, Duration::from_secs(3)));
        let e = Args::try_parse_from(["xtcqd", "--lease-scan-interval", "20"]).unwrap_err().to_string();
        assert!(e.contains("say 20ms or 20s"), "{e}");
        let e = Args::try_parse_from(["xtcqd", "--io-timeout", "0"]).unwrap_err().to_string();
        assert!(e.contains("more than 0"), "{e}");
    }
}
