//! A real PostgreSQL server for the extension's tests (`postgres/`): `initdb` in a
//! temporary directory, `pg_ctl start` on a private Unix socket (no TCP), run as the
//! `postgres` OS user, with the extension built and installed from this tree against the
//! `libxtcq.a` cargo built with the tests.
//!
//! - Without PostgreSQL (or without root, which installing the extension and switching to
//!   the `postgres` user need) [`Postgres::available`] says why and the test skips, unless
//!   `XTCQ_REQUIRE_PG=1` (CI), where that fails the test.
//! - A [`Postgres`] is a guard: dropping it stops the server (`-m immediate`).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use crate::child::{code, run_within, stderr, stdout};
use crate::exe::artifact_dir;
use crate::users::is_root;
use crate::workspace_root;

/// How long one command (initdb, pg_ctl, psql, make) may take before the test fails.
const LIMIT: Duration = Duration::from_secs(300);

/// PostgreSQL's programs (`initdb`, `pg_ctl`, `psql`, `pgbench`, `pg_config`): the newest
/// `/usr/lib/postgresql/N/bin` (Debian's layout), else the directory of `pg_config --bindir`.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p): &(u32, PathBuf)| p.join("initdb").is_file() && p.join("pg_config").is_file())
        .collect();
    versions.sort();
    if let Some((_, p)) = versions.pop() {
        return Some(p);
    }
    let o = Command::new("pg_config").arg("--bindir").output().ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    p.join("initdb").is_file().then_some(p)
}

/// The `postgres` OS user's uid and gid.
fn postgres_ids() -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, "postgres"]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Builds and installs the extension once per test process; `Err` says why it could not.
fn install_extension(bin: &Path) -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let lib = artifact_dir().join("deps/libxtcq.a");
        let o = run_within(
            Command::new("make")
                .arg("-C")
                .arg(workspace_root().join("postgres"))
                .arg("install")
                .arg(format!("PG_CONFIG={}", bin.join("pg_config").display()))
                .arg(format!("XTCQ_LIB={}", lib.display())),
            LIMIT,
        );
        if code(&o) == 0 {
            Ok(())
        } else {
            Err(format!("make -C postgres install failed: {}{}", stdout(&o), stderr(&o)))
        }
    })
    .clone()
}

/// A running server.
pub struct Postgres {
    bin: PathBuf,
    /// The data directory.
    pub data: PathBuf,
    /// The directory of its Unix socket (psql's `-h`).
    pub socket_dir: PathBuf,
    /// Its log.
    pub log: PathBuf,
    ids: (u32, u32),
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// PostgreSQL's bin directory with the extension installed, or `None` after printing
    /// why the test skips; with `XTCQ_REQUIRE_PG=1`, a missing server fails the test.
    pub fn available() -> Option<PathBuf> {
        let why = match (bin_dir(), is_root(), postgres_ids()) {
            (None, _, _) => {
                "PostgreSQL is not installed (apt-get install postgresql postgresql-server-dev-all make)"
                    .to_string()
            }
            (_, false, _) => {
                "needs root to install the extension and run the server as the postgres user".into()
            }
            (_, _, None) => "there is no postgres OS user".into(),
            (Some(bin), true, Some(_)) => match install_extension(&bin) {
                Ok(()) => return Some(bin),
                Err(e) => e,
            },
        };
        assert!(std::env::var("XTCQ_REQUIRE_PG").as_deref() != Ok("1"), "XTCQ_REQUIRE_PG=1 but {why}");
        crate::skipped(&why);
        None
    }

    /// `initdb` and `pg_ctl start` with `conf` appended to postgresql.conf.
    pub fn start(bin: &Path, conf: &[String]) -> Postgres {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ids = postgres_ids().expect("the postgres user");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::os::unix::fs::chown(dir.path(), Some(ids.0), Some(ids.1)).expect("chown");
        let pg = Postgres {
            bin: bin.to_path_buf(),
            data: dir.path().join("data"),
            socket_dir: dir.path().to_path_buf(),
            log: dir.path().join("server.log"),
            ids,
            _dir: dir,
        };
        let mut initdb = pg.cmd("initdb");
        initdb.arg("-D").arg(&pg.data).args(["-A", "trust", "-U", "postgres", "--no-sync"]);
        let o = run_within(&mut initdb, LIMIT);
        assert_eq!(code(&o), 0, "initdb: {}{}", stdout(&o), stderr(&o));
        let mut lines = vec![
            "listen_addresses = ''".to_string(),
            format!("unix_socket_directories = '{}'", pg.socket_dir.display()),
            "fsync = off".into(),
        ];
        lines.extend(conf.iter().cloned());
        let conf_path = pg.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).expect("postgresql.conf");
        text.push_str(&lines.join("\n"));
        text.push('\n');
        std::fs::write(&conf_path, text).expect("write postgresql.conf");
        pg.pg_ctl(&["start", "-w"]);
        pg
    }

    /// A command for one of PostgreSQL's programs, run as the postgres OS user.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.uid(self.ids.0).gid(self.ids.1).current_dir(&self.socket_dir).env_remove("PGHOST");
        c
    }

    /// `pg_ctl ARGS` on this server (start, stop, restart); fails the test if it fails.
    pub fn pg_ctl(&self, args: &[&str]) {
        let mut c = self.cmd("pg_ctl");
        c.arg("-D").arg(&self.data).arg("-l").arg(&self.log).args(args);
        let o = run_within(&mut c, LIMIT);
        assert_eq!(code(&o), 0, "pg_ctl {args:?}: {}{}\nlog:\n{}", stdout(&o), stderr(&o), self.log_text());
    }

    /// The `psql` command that runs `sql` as `role` on database postgres, stopping at the
    /// first error; tuples only; errors with their SQLSTATE. For a test that runs it alongside
    /// others (`spawn`); [`psql_as`](Self::psql_as) runs it to its end.
    pub fn psql_command(&self, role: &str, sql: &str) -> Command {
        let mut c = self.cmd("psql");
        c.arg("-h").arg(&self.socket_dir).args([
            "-X",
            "-qAt",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-U",
            role,
            "-d",
            "postgres",
        ]);
        c.arg("-c").arg(sql);
        c
    }

    /// `psql` as `role`, run to its end (see [`psql_command`](Self::psql_command)).
    pub fn psql_as(&self, role: &str, sql: &str) -> Output {
        run_within(&mut self.psql_command(role, sql), LIMIT)
    }

    /// `psql` as the superuser.
    pub fn psql(&self, sql: &str) -> Output {
        self.psql_as("postgres", sql)
    }

    /// `sql` as the superuser; its output, or the test fails.
    pub fn sql(&self, sql: &str) -> String {
        let o = self.psql(sql);
        assert_eq!(code(&o), 0, "psql {sql:?}: {}{}", stdout(&o), stderr(&o));
        stdout(&o).trim().to_string()
    }

    /// `sql` as `role`; its output, or the test fails.
    #[track_caller]
    pub fn sql_as(&self, role: &str, sql: &str) -> String {
        let o = self.psql_as(role, sql);
        assert_eq!(code(&o), 0, "psql as {role} {sql:?}: {}{}", stdout(&o), stderr(&o));
        stdout(&o).trim().to_string()
    }

    /// Fails the test if the server crash-restarted since its postmaster was `pid` (a
    /// backend died of a signal, or the postmaster changed).
    #[track_caller]
    pub fn assert_no_crash(&self, pid: u32) {
        assert_eq!(self.postmaster_pid(), pid, "the postmaster changed:\n{}", self.log_text());
        let log = self.log_text();
        assert!(!log.contains("terminated by signal") && !log.contains("server process"), "{log}");
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The postmaster's pid.
    pub fn postmaster_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).expect("postmaster.pid");
        text.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            let mut c = self.cmd("pg_ctl");
            c.arg("-D").arg(&self.data).args(["stop", "-m", "immediate"]);
            let _ = run_within(&mut c, LIMIT);
        }
    }
}

/// Flags of a daemon the postgres OS user may use (it is not the daemon's user).
pub const SHARED_DAEMON_FLAGS: &[&str] = &[
    "--queues",
    "8",
    "--records",
    "16384",
    "--payload-bytes",
    "256",
    "--process-slots",
    "128",
    "--overflow-capacity",
    "16384",
    "--group",
    "postgres",
    "--allow-uid",
    "postgres",
];

/// A daemon started with [`SHARED_DAEMON_FLAGS`] in a directory the postgres user can enter.
pub fn shared_daemon() -> crate::Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    crate::Daemon::builder().in_dir(dir).flags(SHARED_DAEMON_FLAGS).start()
}

/// `xtcq create QUEUE --allow-uid postgres EXTRA...` on `d`.
pub fn create_queue(d: &crate::Daemon, queue: &str, extra: &[&str]) {
    let mut args = vec!["create", queue, "--allow-uid", "postgres"];
    args.extend(extra);
    crate::ok(&d.run(&args));
}

/// postgresql.conf lines for the extension on `d`, and `workers` background workers on
/// `queues` as role `xtcq_worker`.
pub fn extension_conf(d: &crate::Daemon, workers: u32, queues: &str) -> Vec<String> {
    let mut c = vec![format!("xtcq.socket = '{}'", d.socket.display())];
    if workers > 0 {
        c.extend([
            "shared_preload_libraries = 'xtcq'".to_string(),
            format!("xtcq.workers = {workers}"),
            format!("xtcq.worker_queues = '{queues}'"),
            "xtcq.worker_role = 'xtcq_worker'".into(),
        ]);
    }
    c
}

/// A failed statement: its stderr, which must hold each of `want`.
#[track_caller]
pub fn refused(o: &Output, want: &[&str]) {
    assert_ne!(code(o), 0, "expected an error, got {}", stdout(o));
    for w in want {
        assert!(stderr(o).contains(w), "stderr lacks {w:?}: {}", stderr(o));
    }
}
