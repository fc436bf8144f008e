//! The extension's workers run each job as the role that pushed it, never with the
//! worker's own privileges, never as a superuser, and refuse (into the dead letters, with
//! the reason) the jobs of a role dropped or denied login since. A job cannot change the
//! session the next job runs in. Skips without PostgreSQL unless XTCQ_REQUIRE_PG=1.

use std::time::Duration;

use xtcq_testkit::postgres::{create_queue, extension_conf, shared_daemon, Postgres};
use xtcq_testkit::{wait_until, Daemon};

const WAIT: Duration = Duration::from_secs(120);

/// Moves every job of `from` (a queue no worker serves) to `to`, as it is: what lets a test
/// change a role between a push and the run, whatever the workers' speed.
fn move_jobs(d: &Daemon, from: &str, to: &str) -> usize {
    let c = d.client();
    let t = c.attach_thief(from).expect("thief");
    let i = c.attach_injector(to).expect("injector");
    let mut n = 0;
    while let Some(j) = t.steal().expect("steal") {
        i.push(&j.payload().expect("payload")).expect("push");
        j.ack().expect("ack");
        n += 1;
    }
    n
}

/// A server with 2 workers on `jobs`, roles r1 to r4 that may push to `jobs` and `later`
/// and write `inbox`, and a table only the worker's own role may write.
fn server(d: &Daemon, bin: &std::path::Path) -> Postgres {
    let pg = Postgres::start(bin, &extension_conf(d, 2, "jobs"));
    pg.sql(
        "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN;
         CREATE TABLE inbox(payload text, who text DEFAULT current_user);
         CREATE TABLE worker_only(n int); GRANT INSERT ON worker_only TO xtcq_worker;
         DO $$ BEGIN FOR i IN 1..4 LOOP
             EXECUTE format('CREATE ROLE r%s LOGIN IN ROLE xtcq_user', i);
             EXECUTE format('GRANT INSERT ON inbox TO r%s', i);
             PERFORM xtcq.grant_push('jobs', format('r%s', i)::regrole);
             PERFORM xtcq.grant_push('later', format('r%s', i)::regrole);
         END LOOP; END $$",
    );
    pg
}

#[test]
fn each_job_runs_as_its_pusher_and_a_changed_role_is_refused_with_the_reason() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    create_queue(&d, "jobs", &["--flavor", "fifo", "--max-attempts", "1"]);
    create_queue(&d, "later", &["--flavor", "fifo"]);
    let pg = server(&d, &bin);
    let pid = pg.postmaster_pid();

    pg.sql_as("r1", "SELECT xtcq.push('jobs', 'INSERT INTO inbox(payload) VALUES (''push'')')");
    pg.sql_as(
        "r2",
        "SELECT xtcq.push_on_commit('jobs', 'INSERT INTO inbox(payload) VALUES (''on commit'')')",
    );
    // The worker's role may write worker_only; r1 may not, so neither may r1's job.
    pg.sql_as("r1", "SELECT xtcq.push('jobs', 'INSERT INTO worker_only VALUES (1)')");
    // A superuser's job: never run as one (the worker's role may not be one).
    pg.sql("SELECT xtcq.push('jobs', 'INSERT INTO inbox(payload) VALUES (''superuser'')')");
    // r3 dropped and r4 denied login between their push and the run.
    pg.sql_as("r3", "SELECT xtcq.push('later', 'INSERT INTO inbox(payload) VALUES (''dropped'')')");
    pg.sql_as("r4", "SELECT xtcq.push('later', 'INSERT INTO inbox(payload) VALUES (''nologin'')')");
    pg.sql(
        "SELECT xtcq.revoke_push(q, 'r3') FROM unnest(array['jobs', 'later']) q;
         REVOKE INSERT ON inbox FROM r3; REVOKE xtcq_user FROM r3; DROP ROLE r3; ALTER ROLE r4 NOLOGIN",
    );
    assert_eq!(move_jobs(&d, "later", "jobs"), 2);

    wait_until(WAIT, "2 rows and 4 dead letters", || {
        pg.sql("SELECT (SELECT count(*) FROM inbox) || ' ' || (SELECT count(*) FROM xtcq.dead('jobs'))")
            == "2 4"
    });
    assert_eq!(
        pg.sql("SELECT string_agg(payload || '=' || who, ',' ORDER BY payload) FROM inbox"),
        "on commit=r2,push=r1"
    );
    assert_eq!(pg.sql("SELECT count(*) FROM worker_only"), "0");
    let why = pg.sql("SELECT string_agg(last_error, '|' ORDER BY last_error) FROM xtcq.dead('jobs')");
    let why: Vec<&str> = why.split('|').map(str::trim).collect();
    // A dead letter keeps the first 24 bytes of the reason; the server log has all of it.
    assert_eq!(
        why,
        [
            "permission denied for ta",
            "pusher is a superuser: r",
            "pusher may not log in: r",
            "pusher was dropped: the"
        ]
    );
    let log = pg.log_text();
    for full in [
        "permission denied for table worker_only",
        "pusher is a superuser: role postgres; jobs never run as a superuser",
        "pusher may not log in: role r4",
        "no longer exists",
    ] {
        assert!(log.contains(full), "the log lacks {full:?}: {log}");
    }
    pg.assert_no_crash(pid);
}

#[test]
fn a_job_cannot_change_the_session_the_next_job_runs_in() {
    let Some(bin) = Postgres::available() else { return };
    let d = shared_daemon();
    // One worker, FIFO: the jobs run one after the other in the same session.
    create_queue(&d, "jobs", &["--flavor", "fifo", "--max-attempts", "1"]);
    let pg = Postgres::start(&bin, &extension_conf(&d, 1, "jobs"));
    let pid = pg.postmaster_pid();
    pg.sql(
        "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN;
         CREATE ROLE r1 LOGIN IN ROLE xtcq_user; CREATE ROLE r2 LOGIN IN ROLE xtcq_user;
         SELECT xtcq.grant_push('jobs', r) FROM unnest(array['r1', 'r2']::regrole[]) r;
         CREATE TABLE inbox(payload text, who text DEFAULT current_user); GRANT INSERT ON inbox TO r1, r2;
         CREATE SCHEMA r1 AUTHORIZATION r1",
    );
    pg.sql_as(
        "r1",
        "CREATE FUNCTION r1.f() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN
             INSERT INTO public.inbox(payload) VALUES ('deferred'); RETURN NULL; END $f$;
         CREATE TABLE r1.t(n int); CREATE CONSTRAINT TRIGGER c AFTER INSERT ON r1.t
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION r1.f()",
    );
    let traps = [
        // Statements before a COMMIT must not commit as if the job had run.
        "INSERT INTO inbox(payload) VALUES ('before commit'); COMMIT",
        "SET ROLE xtcq_worker",
        "SET SESSION AUTHORIZATION xtcq_worker",
        // A temporary table would shadow the next job's table.
        "CREATE TEMP TABLE inbox(payload text, who text)",
        // A deferred trigger (r1's, below) would fire at commit, after the job, as the
        // worker's role.
        "INSERT INTO r1.t VALUES (1)",
        // A setting that outlives the job: r2's next job would resolve names in r1's schema.
        "CREATE TABLE r1.inbox(payload text, who text); GRANT INSERT ON r1.inbox TO r2; \
         SET search_path = r1, public; SELECT set_config('statement_timeout', '1', false)",
    ];
    for t in traps {
        pg.sql_as("r1", &format!("SELECT xtcq.push('jobs', $x${t}$x$)"));
    }
    pg.sql_as("r2", "SELECT xtcq.push('jobs', 'INSERT INTO inbox(payload) VALUES (''next'')')");
    wait_until(WAIT, "the last job run", || pg.sql("SELECT count(*) FROM public.inbox") != "0");
    assert_eq!(pg.sql("SELECT string_agg(payload || '=' || who, ',') FROM public.inbox"), "next=r2");
    assert_eq!(pg.sql("SELECT count(*) FROM r1.inbox"), "0");
    // The first five were refused, each with its reason; the last committed its table.
    let why = pg.sql("SELECT string_agg(last_error, '|' ORDER BY last_error) FROM xtcq.dead('jobs')");
    let why: Vec<&str> = why.split('|').collect();
    assert_eq!(why.len(), 5, "{why:?}");
    assert_eq!(why.iter().filter(|w| w.starts_with("cannot ")).count(), 4, "{why:?}");
    assert_eq!(why.iter().filter(|w| w.starts_with("COMMIT/ROLLBACK in a job")).count(), 1, "{why:?}");
    let log = pg.log_text();
    for full in [
        "cannot set parameter \"role\" within security-definer function",
        "cannot set parameter \"session_authorization\" within security-definer function",
        "cannot create temporary table within security-restricted operation",
        "cannot fire deferred trigger within security-restricted operation",
        "its SQL cannot run in a worker",
    ] {
        assert!(log.contains(full), "the log lacks {full:?}: {log}");
    }
    pg.assert_no_crash(pid);
}
