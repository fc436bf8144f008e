//! The PostgreSQL extension attacked from SQL: a caller's search_path choosing the code of
//! the extension's functions, arrays cut off by a full queue, payloads that look like the
//! extension's own job header, prepared transactions, subtransactions, bad arguments, and
//! worker_sql that errors or meets SQL-looking payloads. Whatever is tried, the backend
//! lives (no crash-restart). Skips without PostgreSQL unless XTCQ_REQUIRE_PG=1.

use std::time::Duration;

use xtcq_testkit::postgres::{create_queue, extension_conf, refused, shared_daemon, Postgres};
use xtcq_testkit::wait_until;

const WAIT: Duration = Duration::from_secs(120);

#[test]
fn the_sql_functions_ignore_the_callers_search_path() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "q", &["--max-attempts", "1"]);
    let pg = Postgres::start(&bin, &extension_conf(&d, 0, ""));
    let pid = pg.postmaster_pid();
    pg.sql("CREATE EXTENSION xtcq; SELECT xtcq.push('q', 'x')");
    // A dead letter, so that xtcq.dead has a row to decode.
    let c = d.client();
    let t = c.attach_thief("q").expect("thief");
    t.steal().expect("steal").expect("a job").fail("for the test").expect("fail");
    // Someone who may create functions in a schema on a superuser's search_path, ahead of
    // pg_catalog, shadows what xtcq.dead calls.
    pg.sql(
        "CREATE TABLE pwned(n int); CREATE SCHEMA evil;
         CREATE FUNCTION evil.decode(text, text) RETURNS bytea LANGUAGE sql
             AS $$ INSERT INTO public.pwned VALUES (1) RETURNING 'pwned'::bytea $$",
    );
    let payload =
        pg.sql("SET search_path = evil, pg_catalog; SELECT encode(payload, 'escape') FROM xtcq.dead('q')");
    assert!(payload.ends_with('x'), "{payload}");
    assert_eq!(pg.sql("SELECT count(*) FROM pwned"), "0");
    pg.assert_no_crash(pid);
}

#[test]
fn an_array_cut_off_by_a_full_queue_says_how_much_was_pushed() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "q", &["--max-records", "100"]);
    let pg = Postgres::start(&bin, &extension_conf(&d, 0, ""));
    let pid = pg.postmaster_pid();
    pg.sql("CREATE EXTENSION xtcq");
    // 100,000 elements into a queue that takes 100: an error that says what stays queued,
    // since the pushes before it cannot be taken back (xtcq.push is not transactional).
    let o = pg.psql("SELECT xtcq.push('q', array_agg(i::text)) FROM generate_series(1, 100000) i");
    refused(&o, &["53000", " of 100000 jobs were pushed (they stay queued)"]);
    let err = xtcq_testkit::stderr(&o);
    let pushed = err.split(" of 100000").next().and_then(|s| s.rsplit(' ').next()).expect("a count");
    assert_eq!(pg.sql("SELECT queued FROM xtcq.stats('q')"), pushed, "{err}");
    assert!(pushed.parse::<u32>().expect("a count") > 0, "{err}");
    // Empty and multi-dimensional arrays: nothing, or every element in order.
    assert_eq!(pg.sql("SELECT xtcq.push('q', '{}'::text[])"), "{}");
    pg.assert_no_crash(pid);
}

#[test]
fn bad_arguments_are_errors_and_the_backend_lives() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "q", &[]);
    let pg = Postgres::start(
        &bin,
        &[extension_conf(&d, 0, ""), vec!["max_prepared_transactions = 2".into()]].concat(),
    );
    let pid = pg.postmaster_pid();
    pg.sql("CREATE EXTENSION xtcq");
    let cases: &[(&str, &[&str])] = &[
        ("SELECT xtcq.push('', 'x')", &["22023", "empty"]),
        ("SELECT xtcq.push_on_commit('', 'x')", &["22023", "empty"]),
        ("SELECT xtcq.push_on_commit(NULL, 'x')", &["22004"]),
        ("SELECT xtcq.push_on_commit('q', NULL::bytea)", &["22004"]),
        ("SELECT xtcq.push_on_commit('nope', 'x')", &["42704"]),
        ("SELECT xtcq.push(repeat('q', 100000), 'x')", &["xtcq"]),
        ("SELECT xtcq.push('q', 'x', interval '1000000 years')", &["22023", "delay"]),
        ("SELECT xtcq.push('q', 'x', interval '-1 microsecond')", &["22023", "delay"]),
        ("SELECT xtcq.push('q', NULL::bytea[])", &["22004"]),
        ("SELECT xtcq.push('q', array[NULL]::bytea[])", &["22004", "nothing was pushed"]),
        ("SELECT * FROM xtcq.dead(NULL)", &["22004"]),
        ("SELECT * FROM xtcq.stats('')", &["22023"]),
        ("SELECT * FROM xtcq.dead('nope')", &["42704"]),
        // A prepared transaction cannot hold a job to release at COMMIT PREPARED.
        ("BEGIN; SELECT xtcq.push_on_commit('q', 'x'); PREPARE TRANSACTION 'p1'", &["0A000", "prepared"]),
    ];
    for (sql, want) in cases {
        refused(&pg.psql(sql), want);
    }
    // The refused prepared transaction left nothing to commit, and nothing was queued.
    refused(&pg.psql("COMMIT PREPARED 'p1'"), &["does not exist"]);
    // A subtransaction: an exception block that failed drops its job; one that ended keeps it.
    pg.sql(
        "DO $$ BEGIN
             BEGIN PERFORM xtcq.push_on_commit('q', 'dropped'); PERFORM 1/0;
             EXCEPTION WHEN division_by_zero THEN NULL; END;
             BEGIN PERFORM xtcq.push_on_commit('q', 'kept'); END;
         END $$",
    );
    let got = d.drain("q");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].ends_with("\nkept"), "{got:?}");
    // Bytes that are not UTF-8 are a fine payload for the queue (bytea).
    pg.sql("SELECT xtcq.push('q', '\\xfffe00'::bytea)");
    let c = d.client();
    let t = c.attach_thief("q").expect("thief");
    let j = t.steal().expect("steal").expect("a job");
    assert!(j.payload().expect("payload").ends_with(&[0xff, 0xfe, 0]));
    j.ack().expect("ack");
    pg.assert_no_crash(pid);
}

/// A server with 2 workers on queue `jobs`, role xtcq_worker, role app that may push, and
/// table `inbox`; `extra` appended to postgresql.conf.
fn with_workers(d: &xtcq_testkit::Daemon, extra: &[&str]) -> Postgres {
    let bin = Postgres::available().expect("checked by the caller");
    let mut conf = extension_conf(d, 2, "jobs");
    conf.extend(extra.iter().map(|s| s.to_string()));
    let pg = Postgres::start(&bin, &conf);
    pg.sql(
        "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN; CREATE ROLE app LOGIN;
         GRANT xtcq_user TO app; SELECT xtcq.grant_push('jobs', 'app');
         CREATE TABLE inbox(payload text, who text DEFAULT current_user);
         GRANT INSERT, SELECT ON inbox TO app",
    );
    pg
}

#[test]
fn worker_sql_takes_the_payload_as_data_even_when_it_looks_like_sql_or_a_header() {
    let Some(_) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "jobs", &["--flavor", "fifo", "--max-attempts", "1"]);
    let pg = with_workers(&d, &["xtcq.worker_sql = 'INSERT INTO inbox(payload) VALUES ($1)'"]);
    let pid = pg.postmaster_pid();
    // The id of a transaction that aborted, as a push_on_commit job's header would name it.
    let aborted = pg.sql("BEGIN; SELECT pg_current_xact_id(); ROLLBACK");
    let payloads = [
        "'); DROP TABLE inbox; --".to_string(),
        format!("XTCQ-TXN {aborted}\nlooks like a header"),
        format!("XTCQ-JOB 10 {aborted}\nlooks like a header"),
    ];
    for p in &payloads {
        pg.sql_as("app", &format!("SELECT xtcq.push('jobs', {})", quote(p)));
    }
    wait_until(WAIT, "3 rows in inbox", || pg.sql("SELECT count(*) FROM inbox") == "3");
    let rows = pg.sql("SELECT string_agg(payload, '|' ORDER BY payload) FROM inbox");
    let mut want = payloads.to_vec();
    want.sort();
    assert_eq!(rows, want.join("|"));
    assert_eq!(pg.sql("SELECT DISTINCT who FROM inbox"), "app");
    pg.assert_no_crash(pid);
}

#[test]
fn a_worker_sql_that_errors_or_loops_dead_letters_each_job() {
    let Some(_) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "jobs", &["--flavor", "fifo", "--max-attempts", "1"]);
    let pg = with_workers(
        &d,
        &[
            "xtcq.worker_sql = 'SELECT CASE WHEN $1 = ''loop'' THEN pg_sleep(600) END, 1/length($1)'",
            "statement_timeout = '1s'",
        ],
    );
    let pid = pg.postmaster_pid();
    pg.sql_as("app", "SELECT xtcq.push('jobs', array['loop', ''])");
    // Bytes that cannot be text: not UTF-8, or a NUL.
    pg.sql_as("app", "SELECT xtcq.push('jobs', array['\\xff'::bytea, '\\x00'::bytea])");
    wait_until(WAIT, "4 dead letters", || pg.sql("SELECT count(*) FROM xtcq.dead('jobs')") == "4");
    let why = pg.sql("SELECT string_agg(last_error, '|' ORDER BY last_error) FROM xtcq.dead('jobs')");
    // A dead letter keeps the first 24 bytes of the error; the server log has all of it.
    assert_eq!(
        why,
        "canceling statement due |division by zero|invalid byte sequence fo|xtcq: the payload holds"
    );
    assert!(
        pg.log_text().contains("failed: canceling statement due to statement timeout"),
        "{}",
        pg.log_text()
    );
    // The workers go on: a good job still runs.
    pg.sql("ALTER SYSTEM SET xtcq.worker_sql = 'INSERT INTO inbox(payload) VALUES ($1)'");
    pg.sql("SELECT pg_reload_conf()");
    wait_until(WAIT, "the workers reloaded", || {
        pg.sql_as("app", "SELECT xtcq.push('jobs', 'ok')");
        std::thread::sleep(Duration::from_millis(500));
        pg.sql("SELECT count(*) FROM inbox WHERE payload = 'ok'") != "0"
    });
    pg.assert_no_crash(pid);
}

/// `s` as a SQL string literal (E'' form, so that a newline survives psql -c).
fn quote(s: &str) -> String {
    format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "\\'").replace('\n', "\\n"))
}
