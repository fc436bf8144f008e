//! The extension under load and across crashes: 10,000 jobs from 8 concurrent clients run
//! exactly once; `pg_ctl stop -m immediate` with jobs queued and in hand loses none (a job
//! whose worker was killed after its commit may run twice: at least once is the promise);
//! an xtcqd restart under a connected backend, whose next push attaches again. Skips without
//! PostgreSQL unless XTCQ_REQUIRE_PG=1.

use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::postgres::{create_queue, extension_conf, shared_daemon, Postgres, SHARED_DAEMON_FLAGS};
use xtcq_testkit::{code, stderr, stdout, wait_until, Daemon};

const WAIT: Duration = Duration::from_secs(300);

/// A server with `workers` workers on `jobs`, role app that may push to it, and tables
/// `done` (one row per id: a second run fails) and `runs` (one row per run).
fn server(d: &Daemon, bin: &std::path::Path, workers: u32) -> Postgres {
    let pg = Postgres::start(bin, &extension_conf(d, workers, "jobs"));
    pg.sql(
        "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN; CREATE ROLE app LOGIN IN ROLE xtcq_user;
         SELECT xtcq.grant_push('jobs', 'app');
         CREATE TABLE done(id int PRIMARY KEY); CREATE TABLE runs(id int NOT NULL);
         GRANT INSERT, SELECT ON done, runs TO app;
         CREATE FUNCTION run(i int) RETURNS void LANGUAGE sql
             AS $$ INSERT INTO done VALUES (i); INSERT INTO runs VALUES (i) $$",
    );
    pg
}

/// `clients` psql processes at once, client `c` pushing ids `c*per+1 ..= (c+1)*per`, each
/// job `body` with `%s` the id; waits for all.
fn push_concurrently(pg: &Postgres, clients: u32, per: u32, body: &str) {
    let children: Vec<_> = (0..clients)
        .map(|c| {
            let sql = format!(
                "SELECT count(xtcq.push('jobs', format($j${body}$j$, i, i))) FROM generate_series({}, {}) i",
                c * per + 1,
                (c + 1) * per
            );
            pg.psql_command("app", &sql).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("psql")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().expect("psql");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn ten_thousand_jobs_from_eight_clients_run_exactly_once() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "jobs", &["--max-attempts", "1"]);
    let pg = server(&d, &bin, 4);
    let pid = pg.postmaster_pid();
    // Short jobs (a function call), so that 10,000 fit in the test daemon's records even
    // if the workers fall behind.
    push_concurrently(&pg, 8, 1250, "SELECT run(%s) -- %s");
    wait_until(WAIT, "10,000 jobs run", || {
        pg.sql("SELECT queued + running + delayed FROM xtcq.stats('jobs')") == "0"
    });
    // Each id once, each job run once (a second run would have failed on the key and shown
    // in the counters), nothing dead.
    assert_eq!(
        pg.sql("SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || min(id) || ' ' || max(id) FROM runs"),
        "10000 10000 1 10000"
    );
    assert_eq!(pg.sql("SELECT count(*) FROM done"), "10000");
    assert_eq!(
        pg.sql("SELECT pushed || ' ' || acked || ' ' || failed || ' ' || dead FROM xtcq.stats('jobs')"),
        "10000 10000 0 0"
    );
    pg.assert_no_crash(pid);
}

#[test]
fn an_immediate_stop_with_jobs_queued_and_in_hand_loses_none() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "jobs", &["--flavor", "fifo"]);
    let pg = server(&d, &bin, 4);
    // Each job sleeps a little, so that many are queued and 4 in hand when the server stops.
    push_concurrently(
        &pg,
        4,
        500,
        "INSERT INTO runs VALUES (%s); INSERT INTO done VALUES (%s) ON CONFLICT DO NOTHING; SELECT pg_sleep(0.01)",
    );
    wait_until(WAIT, "some jobs run", || pg.sql("SELECT count(*) >= 100 FROM done") == "t");
    pg.pg_ctl(&["stop", "-m", "immediate"]);
    pg.pg_ctl(&["start", "-w"]);
    wait_until(WAIT, "every job run", || pg.sql("SELECT count(*) FROM done") == "2000");
    wait_until(WAIT, "the queue drained", || {
        pg.sql("SELECT queued + running FROM xtcq.stats('jobs')") == "0"
    });
    // At least once: only a job whose worker was killed between its commit and its ack runs
    // twice, so at most one per worker.
    let twice: u32 = pg
        .sql("SELECT count(*) FROM (SELECT id FROM runs GROUP BY id HAVING count(*) > 1) t")
        .parse()
        .expect("a count");
    assert!(twice <= 4, "{twice} jobs ran twice");
    assert_eq!(pg.sql("SELECT count(*) FROM (SELECT id FROM runs GROUP BY id HAVING count(*) > 2) t"), "0");
    assert_eq!(pg.sql("SELECT dead FROM xtcq.stats('jobs')"), "0");
}

#[test]
fn a_connected_backend_pushes_again_after_an_xtcqd_restart() {
    let Some(bin) = Postgres::available() else { return };
    let mut d = shared_daemon();
    create_queue(&d, "q", &[]);
    let pg = Postgres::start(&bin, &extension_conf(&d, 0, ""));
    pg.sql("CREATE EXTENSION xtcq");
    let dir = &pg.socket_dir;
    let script = dir.join("session.sql");
    std::fs::write(
        &script,
        format!(
            "SELECT pg_backend_pid() AS first \\gset\n\
             SELECT xtcq.push('q', 'before') > 0;\n\
             \\! touch {d}/pushed; while [ ! -e {d}/go ]; do sleep 0.05; done\n\
             SELECT xtcq.push('q', 'after') > 0;\n\
             SELECT pg_backend_pid() = :first;\n",
            d = dir.display()
        ),
    )
    .expect("write the script");
    let mut psql = pg.cmd("psql");
    psql.arg("-h").arg(dir).args([
        "-X",
        "-qAt",
        "-v",
        "ON_ERROR_STOP=1",
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-f",
    ]);
    let session = psql.arg(&script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("psql");
    wait_until(WAIT, "the first push", || dir.join("pushed").exists());
    d.kill();
    d.restart_with(SHARED_DAEMON_FLAGS, |_| {});
    std::fs::write(dir.join("go"), "").expect("go");
    let o = session.wait_with_output().expect("psql");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().collect::<Vec<_>>(), ["t", "t", "t"], "{}", stderr(&o));
    let after: Vec<String> = d.drain("q").into_iter().filter(|p| p.ends_with("\nafter")).collect();
    assert_eq!(after.len(), 1);
}
