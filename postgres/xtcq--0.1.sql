-- xtcq 0.1: jobs pushed from SQL into xtcqd's queues (see docs/src/guide/postgres.md).
\echo Use "CREATE EXTENSION xtcq" to load this file. \quit

-- One job; returns its id (index << 32 | birth: xtcq work prints it as index.birth). At
-- `priority` (0 the most urgent) in a queue made with levels (xtcq create --levels), into
-- `batch` (opened with xtcq batch open, not yet sealed). With `key`, a unique job: refused
-- (SQLSTATE 23505) while a job of the queue pushed with that key is queued, delayed or
-- running, or with `or_existing` that job's id, nothing pushed.
CREATE FUNCTION push(queue text, payload bytea, delay interval DEFAULT NULL, priority int DEFAULT 0,
                     batch text DEFAULT NULL, key text DEFAULT NULL, or_existing boolean DEFAULT false)
    RETURNS bigint AS 'MODULE_PATHNAME', 'xtcq_push' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION push(queue text, payload text, delay interval DEFAULT NULL, priority int DEFAULT 0,
                     batch text DEFAULT NULL, key text DEFAULT NULL, or_existing boolean DEFAULT false)
    RETURNS bigint AS 'MODULE_PATHNAME', 'xtcq_push' LANGUAGE C VOLATILE PARALLEL UNSAFE;
-- One job per element, in order; returns their ids.
CREATE FUNCTION push(queue text, payloads bytea[], priority int DEFAULT 0, batch text DEFAULT NULL)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'xtcq_push_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION push(queue text, payloads text[], priority int DEFAULT 0, batch text DEFAULT NULL)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'xtcq_push_many' LANGUAGE C VOLATILE PARALLEL UNSAFE;
-- Pushed at commit; the workers run it only if the transaction committed.
CREATE FUNCTION push_on_commit(queue text, payload bytea) RETURNS void
    AS 'MODULE_PATHNAME', 'xtcq_push_on_commit' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION push_on_commit(queue text, payload text) RETURNS void
    AS 'MODULE_PATHNAME', 'xtcq_push_on_commit' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION stats_json(queue text DEFAULT NULL) RETURNS jsonb
    AS 'MODULE_PATHNAME', 'xtcq_stats_json_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION dead_json(queue text) RETURNS jsonb
    AS 'MODULE_PATHNAME', 'xtcq_dead_json_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The SQL functions name everything from pg_catalog: a caller's search_path (a schema
-- someone else may create functions in) never chooses the code they run.
-- A queue's (or every queue's) settings and counters, one row per queue.
CREATE FUNCTION stats(queue text DEFAULT NULL)
    RETURNS TABLE (queue text, queued bigint, running bigint, delayed bigint, dead bigint,
                   pushed bigint, acked bigint, failed bigint, dead_total bigint,
                   recovered bigint, max_attempts integer, lease_ms bigint)
    LANGUAGE sql VOLATILE AS $$
    SELECT r.queue, r.queued, r.running, r.delayed, r.dead, r.pushed, r.acked, r.failed,
           r.dead_total, r.recovered, r.max_attempts, r.lease_ms
    FROM jsonb_to_recordset(@extschema@.stats_json(queue)) AS r(
        queue text, queued bigint, running bigint, delayed bigint, dead bigint, pushed bigint,
        acked bigint, failed bigint, dead_total bigint, recovered bigint, max_attempts integer,
        lease_ms bigint)
$$ SET search_path = pg_catalog, pg_temp;

-- The dead letters of a queue (payloads cut to their first 8 KiB).
CREATE FUNCTION dead(queue text)
    RETURNS TABLE (id bigint, attempts integer, last_error text, payload bytea)
    LANGUAGE sql VOLATILE AS $$
    SELECT r.id, r.attempts, r.last_error, decode(r.payload_hex, 'hex')
    FROM jsonb_to_recordset(@extschema@.dead_json(queue)) AS r(
        id bigint, attempts integer, last_error text, payload_hex text)
$$ SET search_path = pg_catalog, pg_temp;

-- Which roles may push to which queues ('*': every queue), read by the C functions as the
-- caller; written only by its owner, through grant_push and revoke_push. A superuser may use
-- every queue. Kept by pg_dump, which writes a regrole as the role's name (an oid would name
-- another role, or none, in the database it is restored into).
CREATE TABLE queue_grants (
    queue text NOT NULL CHECK (queue <> ''),
    role regrole NOT NULL,
    PRIMARY KEY (queue, role)
);
SELECT pg_catalog.pg_extension_config_dump('queue_grants', '');

-- Lets `role` (and the roles that inherit its privileges) push to `queue` and read its dead
-- letters; '*' for every queue.
CREATE FUNCTION grant_push(queue text, role regrole) RETURNS void
    LANGUAGE sql VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO @extschema@.queue_grants VALUES ($1, $2) ON CONFLICT DO NOTHING
$$;
CREATE FUNCTION revoke_push(queue text, role regrole) RETURNS void
    LANGUAGE sql VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM @extschema@.queue_grants g WHERE g.queue = $1 AND g.role::oid = $2::oid
$$;

-- Who may do what: nobody but the owner, until granted. GRANT xtcq_user TO a role to let it
-- use the functions and read the counters, then xtcq.grant_push(queue, role) per queue.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'xtcq_user') THEN
        CREATE ROLE xtcq_user NOLOGIN;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA @extschema@ TO xtcq_user;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO xtcq_user;
REVOKE EXECUTE ON FUNCTION grant_push(text, regrole), revoke_push(text, regrole) FROM xtcq_user;
GRANT SELECT ON queue_grants TO xtcq_user;
