//! The PostgreSQL extension (`postgres/`) in a real server with a real xtcqd: pushes from
//! SQL, push_on_commit across COMMIT, ROLLBACK, a rolled-back savepoint and a backend killed
//! before its commit, background workers running jobs once, retries and dead letters, an
//! xtcqd restart, grants, and bad input. Skips without PostgreSQL unless XTCQ_REQUIRE_PG=1.

xtcq_testkit::test_threads_per_core!();

mod attacks;
mod crash;
mod run_as;

use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::postgres::{
    create_queue as create, extension_conf, refused, shared_daemon, Postgres, SHARED_DAEMON_FLAGS as SHARED,
};
use xtcq_testkit::{ok, wait_until, Daemon};

const WAIT: Duration = Duration::from_secs(120);

/// postgresql.conf lines for the extension (and `workers` workers on queue `jobs`).
fn conf(d: &Daemon, workers: u32) -> Vec<String> {
    extension_conf(d, workers, "jobs")
}

#[test]
fn push_from_sql_steal_from_the_cli_and_bad_input_is_an_error() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create(&d, "q", &["--flavor", "fifo"]);
    let pg = Postgres::start(&bin, &conf(&d, 0));
    pg.sql("CREATE EXTENSION xtcq");
    let id: i64 = pg.sql("SELECT xtcq.push('q', 'one')").parse().expect("an id");
    assert!(id > 0);
    pg.sql("SELECT xtcq.push('q', array['two', 'three'])");
    pg.sql("SELECT xtcq.push('q', 'four'::bytea)");
    let stats = pg.sql("SELECT queued FROM xtcq.stats('q')");
    assert_eq!(stats, "4");
    let o = ok(&d.run(&["steal", "q", "-n", "0"]));
    // Each job: the header line the extension writes (the pushing role's oid, and no
    // transaction to wait for), then the payload as given.
    let h = format!("XTCQ-JOB {} 0", pg.sql("SELECT 'postgres'::regrole::oid"));
    let h = h.as_str();
    assert_eq!(o.lines().collect::<Vec<_>>(), [h, "one", h, "two", h, "three", h, "four"]);

    let pid = pg.postmaster_pid();
    refused(&pg.psql("SELECT xtcq.push('nope', 'x')"), &["42704", "no such queue", "HINT"]);
    refused(&pg.psql("SELECT xtcq.push('q', NULL::text)"), &["payload is NULL"]);
    refused(&pg.psql("SELECT xtcq.push(NULL, 'x')"), &["queue name is NULL"]);
    refused(&pg.psql("SELECT xtcq.push('q', array['a', NULL])"), &["NULL; nothing was pushed"]);
    refused(&pg.psql("SELECT xtcq.push('q', repeat('x', 1000000))"), &["54000", "payload too large"]);
    refused(&pg.psql("SELECT xtcq.push('q', 'x', interval '-1 day')"), &["delay"]);
    // The backends lived: no crash-restart, and the queue holds none of the refused jobs.
    assert_eq!(pg.postmaster_pid(), pid);
    assert!(!pg.log_text().contains("terminated by signal"), "{}", pg.log_text());
    assert_eq!(pg.sql("SELECT queued FROM xtcq.stats('q')"), "0");
}

#[test]
fn pushes_from_sql_at_priorities_are_taken_most_urgent_first() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create(&d, "levelled", &["--flavor", "fifo", "--levels", "3"]);
    let pg = Postgres::start(&bin, &conf(&d, 0));
    pg.sql("CREATE EXTENSION xtcq");
    pg.sql("SELECT xtcq.push('levelled', 'low', NULL, 2)");
    pg.sql("SELECT xtcq.push('levelled', array['mid-1', 'mid-2'], 1)");
    pg.sql("SELECT xtcq.push('levelled', 'urgent')");
    pg.sql("SELECT xtcq.push('levelled', 'urgent too'::bytea, priority => 0)");
    let pid = pg.postmaster_pid();
    refused(&pg.psql("SELECT xtcq.push('levelled', 'x', NULL, 3)"), &["--priority 3", "--levels 3"]);
    refused(&pg.psql("SELECT xtcq.push('levelled', array['x'], -1)"), &["priority must be 0"]);
    assert_eq!(pg.postmaster_pid(), pid, "the backend lived");
    let o = ok(&d.run(&["steal", "levelled", "-n", "0"]));
    let payloads: Vec<&str> = o.lines().filter(|l| !l.starts_with("XTCQ-JOB ")).collect();
    assert_eq!(payloads, ["urgent", "urgent too", "mid-1", "mid-2", "low"]);
}

#[test]
fn pushes_from_sql_join_the_batch_they_name_and_no_later_statement_does() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create(&d, "farmed", &[]);
    ok(&d.run(&["batch", "open", "farmed", "nightly"]));
    let pg = Postgres::start(&bin, &conf(&d, 0));
    pg.sql("CREATE EXTENSION xtcq");
    pg.sql("SELECT xtcq.push('farmed', 'one', batch => 'nightly')");
    pg.sql("SELECT xtcq.push('farmed', array['two', 'three'], batch => 'nightly')");
    // A failed statement naming the batch, then statements naming none: they join nothing.
    refused(&pg.psql("SELECT xtcq.push('farmed', array['x', NULL], batch => 'nightly')"), &["NULL"]);
    refused(&pg.psql("SELECT xtcq.push('farmed', 'x', batch => 'no such')"), &["batch no such"]);
    pg.sql("SELECT xtcq.push('farmed', 'outside')");
    pg.sql("BEGIN; SELECT xtcq.push_on_commit('farmed', 'outside too'); COMMIT;");
    let show = ok(&d.run(&["batch", "show", "farmed", "nightly", "--json"]));
    assert!(show.contains(r#""pushed":3"#), "{show}");
    ok(&d.run(&["batch", "seal", "farmed", "nightly"]));
    refused(
        &pg.psql("SELECT xtcq.push('farmed', 'late', batch => 'nightly')"),
        &["22023", "batch nightly", "sealed"],
    );
    let o = ok(&d.run(&["steal", "farmed", "-n", "0"]));
    let payloads: Vec<&str> = o.lines().filter(|l| !l.starts_with("XTCQ-")).collect();
    assert_eq!(payloads.len(), 5, "{o}");
    let waited = ok(&d.run(&["wait", "farmed", "--batch", "nightly", "--timeout", "30s"]));
    assert!(waited.contains("acked 3"), "{waited}");
}

#[test]
fn a_push_with_a_key_from_sql_is_refused_while_its_job_lives() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create(&d, "uq", &[]);
    let pg = Postgres::start(&bin, &conf(&d, 0));
    pg.sql("CREATE EXTENSION xtcq");
    let id: i64 = pg.sql("SELECT xtcq.push('uq', 'one', key => 'order-42')").parse().expect("an id");
    let (index, birth) = (id >> 32, id & 0xFFFF_FFFF);
    refused(
        &pg.psql("SELECT xtcq.push('uq', 'two', key => 'order-42')"),
        &["23505", &format!("holds key \"order-42\": {index}.{birth}")],
    );
    let again: i64 = pg
        .sql("SELECT xtcq.push('uq', 'two', key => 'order-42', or_existing => true)")
        .parse()
        .expect("an id");
    assert_eq!(again, id, "the existing job's id");
    refused(&pg.psql("SELECT xtcq.push('uq', 'x', interval '1 s', key => 'k')"), &["takes no delay"]);
    assert_eq!(pg.sql("SELECT queued FROM xtcq.stats('uq')"), "1");
    ok(&d.run(&["steal", "uq"]));
    let next: i64 = pg.sql("SELECT xtcq.push('uq', 'three', key => 'order-42')").parse().expect("an id");
    assert_ne!(next, id, "a new job once the first was acked");
}

#[test]
fn a_role_pushes_only_to_the_queues_granted_to_it() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create(&d, "a", &[]);
    create(&d, "b", &[]);
    let pg = Postgres::start(&bin, &conf(&d, 0));
    pg.sql(
        "CREATE EXTENSION xtcq; CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; CREATE ROLE carol LOGIN;
         GRANT xtcq_user TO alice, carol; SELECT xtcq.grant_push('a', 'alice');
         CREATE SCHEMA alice AUTHORIZATION alice; GRANT USAGE ON SCHEMA alice TO carol",
    );
    // Without xtcq_user: not even the functions.
    refused(&pg.psql_as("bob", "SELECT xtcq.push('a', 'x')"), &["42501", "permission denied"]);
    refused(&pg.psql_as("bob", "SELECT * FROM xtcq.stats()"), &["permission denied"]);
    refused(&pg.psql_as("bob", "SELECT xtcq.push_on_commit('a', 'x')"), &["permission denied"]);
    // With xtcq_user, only the queues granted, by every function that names one.
    assert_eq!(pg.sql_as("alice", "SELECT count(*) FROM xtcq.push('a', array['x', 'y'])"), "1");
    for sql in [
        "SELECT xtcq.push('b', 'x')",
        "SELECT xtcq.push('b', array['x'])",
        "SELECT xtcq.push_on_commit('b', 'x')",
        "SELECT * FROM xtcq.dead('b')",
    ] {
        refused(&pg.psql_as("alice", sql), &["42501", "queue b", "xtcq.grant_push('b', 'alice')"]);
    }
    refused(&pg.psql_as("carol", "SELECT xtcq.push('a', 'x')"), &["42501"]);
    // Nor may a granted role grant itself more.
    refused(&pg.psql_as("alice", "SELECT xtcq.grant_push('b', 'alice')"), &["permission denied"]);
    refused(
        &pg.psql_as("alice", "INSERT INTO xtcq.queue_grants VALUES ('b', 'alice')"),
        &["permission denied"],
    );
    // A SECURITY DEFINER function of alice's pushes to her queue for whoever may call it.
    pg.sql_as(
        "alice",
        "CREATE FUNCTION alice.push_for(p text) RETURNS bigint LANGUAGE sql SECURITY DEFINER
             SET search_path = pg_catalog AS $$ SELECT xtcq.push('a', p) $$",
    );
    pg.sql_as("carol", "SELECT alice.push_for('via alice')");
    // pg_dump keeps the grants by role name, which a restore maps to that role's new oid.
    let mut dump = pg.cmd("pg_dump");
    dump.arg("-h").arg(&pg.socket_dir).args([
        "-U",
        "postgres",
        "--data-only",
        "-t",
        "xtcq.queue_grants",
        "postgres",
    ]);
    let dump = xtcq_testkit::stdout(&xtcq_testkit::run_within(&mut dump, WAIT));
    assert!(dump.contains("a\talice"), "{dump}");
    // '*' grants every queue; revoke_push takes a grant back.
    pg.sql("SELECT xtcq.grant_push('*', 'carol')");
    pg.sql_as("carol", "SELECT xtcq.push('b', 'z')");
    pg.sql("SELECT xtcq.revoke_push('*', 'carol'); SELECT xtcq.revoke_push('a', 'alice')");
    refused(&pg.psql_as("carol", "SELECT xtcq.push('b', 'x')"), &["42501"]);
    refused(&pg.psql_as("alice", "SELECT xtcq.push('a', 'x')"), &["42501"]);
    let payloads = |q: &str| -> Vec<String> {
        d.drain(q).into_iter().map(|p| p.split_once('\n').expect("a header").1.to_string()).collect()
    };
    assert_eq!(payloads("a"), ["via alice", "x", "y"]);
    assert_eq!(payloads("b"), ["z"]);
}

/// Ids in table `done`, sorted.
fn done(pg: &Postgres) -> Vec<i64> {
    let s = pg.sql("SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM done");
    s.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("an id")).collect()
}

#[test]
fn workers_run_jobs_once_follow_commits_retry_and_survive_an_xtcqd_restart() {
    let Some(bin) = Postgres::available() else { return };
    let mut d = shared_daemon();
    create(&d, "jobs", &["--flavor", "fifo", "--max-attempts", "2"]);
    let pg = Postgres::start(&bin, &conf(&d, 4));
    pg.sql(
        "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN; CREATE ROLE app LOGIN;
         GRANT xtcq_user TO app; SELECT xtcq.grant_push('jobs', 'app');
         CREATE TABLE done(id bigint PRIMARY KEY); GRANT INSERT, SELECT ON done TO app",
    );

    // 2,000 jobs pushed by 4 concurrent clients, each one row: every id exactly once (the
    // primary key would fail a second run, which would then be retried and dead-lettered).
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let sql = format!(
                "SELECT xtcq.push('jobs', array_agg(format('INSERT INTO done VALUES (%s)', i)))
                 FROM generate_series({}, {}) i",
                c * 500 + 1,
                c * 500 + 500
            );
            pg.psql_command("app", &sql).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("psql")
        })
        .collect();
    for c in clients {
        let o = c.wait_with_output().expect("psql");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    wait_until(WAIT, "2,000 jobs run", || done(&pg).len() >= 2000);

    // push_on_commit: COMMIT runs it; ROLLBACK and a rolled-back savepoint do not.
    pg.sql_as("app", "BEGIN; SELECT xtcq.push_on_commit('jobs', 'INSERT INTO done VALUES (3001)'); COMMIT");
    pg.sql_as("app", "BEGIN; SELECT xtcq.push_on_commit('jobs', 'INSERT INTO done VALUES (3002)'); ROLLBACK");
    pg.sql_as(
        "app",
        "BEGIN; SAVEPOINT a; SELECT xtcq.push_on_commit('jobs', 'INSERT INTO done VALUES (3003)');
         ROLLBACK TO a; SELECT xtcq.push_on_commit('jobs', 'INSERT INTO done VALUES (3004)'); COMMIT",
    );
    // A transaction whose backend is killed before it commits pushes nothing.
    let mut held = pg
        .psql_command(
            "app",
            "BEGIN; SELECT xtcq.push_on_commit('jobs', 'INSERT INTO done VALUES (3005)'); SELECT pg_sleep(600); COMMIT",
        )
        .stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("psql");
    wait_until(WAIT, "the killed transaction sleeping", || {
        pg.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%VALUES (3005)%' AND wait_event = 'PgSleep'")
            == "1"
    });
    pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%VALUES (3005)%' AND pid <> pg_backend_pid()");
    let _ = held.wait();
    // A marker pushed last: once it ran (FIFO, and the workers drain the queue), the jobs
    // before it did too.
    pg.sql_as("app", "SELECT xtcq.push('jobs', 'INSERT INTO done VALUES (3999)')");
    wait_until(WAIT, "the marker job run", || done(&pg).contains(&3999));
    wait_until(WAIT, "the queue drained", || {
        pg.sql("SELECT queued + running FROM xtcq.stats('jobs')") == "0"
    });
    let tail: Vec<i64> = done(&pg).into_iter().filter(|&i| i > 2000).collect();
    assert_eq!(tail, [3001, 3004, 3999]);
    assert_eq!(done(&pg).len(), 2003);

    // A failing job: retried once (max-attempts 2), then a dead letter with the error.
    pg.sql_as("app", "SELECT xtcq.push('jobs', 'SELECT 1/0')");
    wait_until(WAIT, "the failing job dead-lettered", || {
        pg.sql("SELECT count(*) FROM xtcq.dead('jobs')") == "1"
    });
    let dead = pg.sql("SELECT attempts || ' ' || last_error FROM xtcq.dead('jobs')");
    assert!(dead.starts_with("2 division by zero"), "{dead}");

    // SIGTERM of the worker running a job (pg_terminate_backend): the job is given back
    // without counting an attempt and runs again (the sequence is not rolled back, so the
    // second run does not sleep).
    pg.sql("CREATE SEQUENCE tries1; CREATE SEQUENCE tries2; GRANT USAGE ON tries1, tries2 TO app");
    let failed_before = pg.sql("SELECT failed FROM xtcq.stats('jobs')");
    pg.sql_as(
        "app",
        "SELECT xtcq.push('jobs', 'SELECT CASE WHEN nextval(''tries1'') = 1 THEN pg_sleep(600) END; \
         INSERT INTO done VALUES (5001)')",
    );
    let running = |seq: &str| {
        format!(
            "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE backend_type = 'xtcq worker' \
             AND query LIKE '%{seq}%' AND wait_event = 'PgSleep'"
        )
    };
    wait_until(WAIT, "a worker sleeping in the job", || pg.sql(&running("tries1")) != "0");
    pg.sql(&format!("SELECT pg_terminate_backend(({}))", running("tries1")));
    wait_until(WAIT, "the job run again", || done(&pg).contains(&5001));
    assert_eq!(pg.sql("SELECT failed FROM xtcq.stats('jobs')"), failed_before);

    // xtcqd restarts: the workers and the backends attach to the new one.
    d.kill();
    let flags: Vec<&str> = SHARED.to_vec();
    d.restart_with(&flags, |_| {});
    pg.sql_as("app", "SELECT xtcq.push('jobs', 'INSERT INTO done VALUES (4001)')");
    wait_until(WAIT, "a job run after the restart", || done(&pg).contains(&4001));
    assert!(!pg.log_text().contains("terminated by signal"), "{}", pg.log_text());

    // kill -9 of the worker running a job: the postmaster restarts every backend, xtcqd
    // re-queues the dead process's job, and it runs again.
    pg.sql_as(
        "app",
        "SELECT xtcq.push('jobs', 'SELECT CASE WHEN nextval(''tries2'') = 1 THEN pg_sleep(600) END; \
         INSERT INTO done VALUES (5002)')",
    );
    wait_until(WAIT, "a worker sleeping in the job", || pg.sql(&running("tries2")) != "0");
    let pid: i32 = pg.sql(&running("tries2")).parse().expect("a pid");
    // The sequence's advance must outlive the crash-restart (its WAL may still be in buffers).
    pg.sql("CHECKPOINT");
    // SAFETY: kill has no memory preconditions; pid is the worker's.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_until(WAIT, "the killed worker's job run again", || {
        pg.psql("SELECT 1 FROM done WHERE id = 5002").stdout.starts_with(b"1")
    });
    assert_eq!(done(&pg).iter().filter(|&&i| i == 5002).count(), 1);
}

#[test]
fn a_revoke_holds_from_the_next_statement_of_a_connected_session() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create(&d, "a", &[]);
    let pg = Postgres::start(&bin, &conf(&d, 0));
    pg.sql("CREATE EXTENSION xtcq; CREATE ROLE alice LOGIN IN ROLE xtcq_user; SELECT xtcq.grant_push('a', 'alice')");
    // One session, one transaction: it pushes, waits while another session revokes, pushes.
    let dir = &pg.socket_dir;
    let script = dir.join("revoke.sql");
    std::fs::write(
        &script,
        format!(
            "BEGIN;\n\
             SELECT xtcq.push('a', 'before') > 0;\n\
             \\! touch {d}/pushed; while [ ! -e {d}/go ]; do sleep 0.05; done\n\
             SELECT xtcq.push('a', 'after') > 0;\n\
             COMMIT;\n",
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
        "alice",
        "-d",
        "postgres",
        "-f",
    ]);
    let session = psql.arg(&script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("psql");
    wait_until(WAIT, "the first push", || dir.join("pushed").exists());
    pg.sql("SELECT xtcq.revoke_push('a', 'alice')");
    std::fs::write(dir.join("go"), "").expect("go");
    let o = session.wait_with_output().expect("psql");
    refused(&o, &["permission denied to push to queue a"]);
    assert_eq!(xtcq_testkit::stdout(&o).trim(), "t");
    assert_eq!(d.drain("a").len(), 1);
}
