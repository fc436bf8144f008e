#!/usr/bin/env bash
# Pushes per second from SQL (xtcq.push, many-row form, vs INSERT into a queue table) and end
# to end jobs per second (pushed by pgbench clients, run by 4 background workers, each job a
# trivial statement in its own transaction) for xtcq.push, xtcq.push_on_commit and a SKIP
# LOCKED table, in one run on one machine, as ratios; and the latency from a push to its job's
# SQL running (p50, p99) for xtcq.push, xtcq.push_on_commit and LISTEN/NOTIFY (a libpq
# consumer running each notification's payload), beside the round trip of the same statement
# run by the client itself. Run as root from the repository root:
#   cargo build --release -p xtcq-capi -p xtcqd -p xtcq-cli && benches/postgres/run.sh
# Knobs: SECONDS_PER_RUN (default 5), CLIENTS (default 4), SYNC (synchronous_commit, on),
# LAT_JOBS (jobs per latency run, 500), LAT_RATE (their pace per second, 50: with synchronous_commit on, each job's commit
# waits for a WAL flush, and a pace near one flush per job would measure a queue), PERF_OUT
# (a file: perf records the whole machine, with call graphs, during (a)'s xtcq.push run; read
# it with perf report -i FILE --comm postgres --no-children), ONLY_A (1: run (a) alone, and
# ROUNDS_A times, default 1, each round's three statements one after the other, so that
# before/after comparisons on a noisy machine take minutes, not a quarter of an hour), A_TX
# (statements per client in each of (a)'s runs, default 40; at most 100, as the segment
# holds 524,288 jobs).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${SECONDS_PER_RUN:-5}
C=${CLIENTS:-4}
SYNC=${SYNC:-on}
LAT_JOBS=${LAT_JOBS:-500}
LAT_RATE=${LAT_RATE:-50}
A_TX=${A_TX:-40}
REL=target/release
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$REL/xtcqd" ] && [ -f "$REL/libxtcq.a" ] || { echo "build first: cargo build --release -p xtcq-capi -p xtcqd -p xtcq-cli" >&2; exit 2; }
make -s -C postgres clean >/dev/null
make -s -C postgres install PG_CONFIG="$BIN/pg_config" XTCQ_LIB="$PWD/$REL/libxtcq.a" >/dev/null

dir=$(mktemp -d); chmod 755 "$dir"
pgdir="$dir/pg"; mkdir "$pgdir"; chown postgres "$pgdir"
cleanup() {
    su postgres -s /bin/sh -c "$BIN/pg_ctl -D $pgdir/data stop -m immediate" >/dev/null 2>&1 || true
    [ -n "${xpid:-}" ] && kill "$xpid" 2>/dev/null || true
    rm -rf "$dir" "${seg:-}"
}
trap cleanup EXIT
# The segment in /dev/shm, as xtcqd's default: on a disk filesystem (/tmp here is ext4) every
# push that dirties a page takes a page fault into the filesystem and the kernel writes the
# segment back to disk, which perf showed as a tenth of the pushing backends' time.
seg=/dev/shm/xtcq-bench-$$
"$REL/xtcqd" --socket "$dir/xtcqd.sock" --segment "$seg" --state "$dir/state" --queues 8 \
    --records 524288 --payload-bytes 128 --process-slots 128 --overflow-capacity 524288 \
    --group postgres --allow-uid postgres >"$dir/xtcqd.log" 2>&1 &
xpid=$!
for _ in $(seq 100); do [ -S "$dir/xtcqd.sock" ] && break; sleep 0.1; done
for q in push e2e e2c lat; do
    "$REL/xtcq" --socket "$dir/xtcqd.sock" create "$q" --allow-uid postgres --flavor fifo >/dev/null
done
asp() { su postgres -s /bin/sh -c "$*"; }
asp "$BIN/initdb -D $pgdir/data -A trust -U postgres" >/dev/null
cat >>"$pgdir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$pgdir'
synchronous_commit = $SYNC
max_connections = 50
shared_preload_libraries = 'xtcq'
xtcq.socket = '$dir/xtcqd.sock'
xtcq.workers = 5
xtcq.worker_queues = 'e2e,e2c,e2e,e2c,lat'
xtcq.worker_role = 'xtcq_worker'
CONF
asp "$BIN/pg_ctl -D $pgdir/data -l $pgdir/log -w start" >/dev/null
psql() { asp "$BIN/psql -h $pgdir -X -qAt -v ON_ERROR_STOP=1 -d postgres -c \"$1\""; }
# Jobs run as the role that pushed them (never a superuser): app pushes, the workers
# connect as xtcq_worker.
psql "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN; CREATE ROLE app LOGIN IN ROLE xtcq_user;
      SELECT xtcq.grant_push('*', 'app');
      CREATE TABLE qtable(id bigserial PRIMARY KEY, payload text NOT NULL);
      CREATE TABLE done(n int); CREATE TABLE lat(kind text, pushed timestamptz, ran timestamptz);
      GRANT INSERT, SELECT, UPDATE, DELETE ON qtable, done, lat TO app; GRANT USAGE ON SEQUENCE qtable_id_seq TO app;"
pgbench() { # script-file clients -T seconds | -t transactions-per-client [more flags] -> transactions per second
    local f=$1 c=$2; shift 2
    asp "$BIN/pgbench -h $pgdir -U app -n -c $c -j $c $* -f $f postgres" 2>"$dir/pgbench.err" |
        tee "$dir/pgbench.out" | awk '/^tps = / { printf "%d\n", $3 }'
}
s="$dir/scripts"; mkdir "$s"; chmod 755 "$s"
# cardinality(): the INSERT sends nothing back, so neither does the push (its 1,000 ids as
# text cost the server array_out and the socket about 12 KB per statement).
echo "SELECT cardinality(xtcq.push('push', array_agg('job ' || i))) FROM generate_series(1, 1000) i;" >"$s/push_many.sql"
echo "INSERT INTO qtable(payload) SELECT 'job ' || i FROM generate_series(1, 1000) i;" >"$s/insert_many.sql"
# The floor both share: the same statement building the same array, pushing nothing.
echo "SELECT cardinality(array_agg('job ' || i)) FROM generate_series(1, 1000) i;" >"$s/build_many.sql"
echo "SELECT xtcq.push('e2e', 'INSERT INTO done VALUES (1)');" >"$s/e2e_push.sql"
printf "BEGIN;\nSELECT xtcq.push_on_commit('e2c', 'INSERT INTO done VALUES (1)');\nCOMMIT;\n" >"$s/e2e_on_commit.sql"
echo "INSERT INTO qtable(payload) VALUES ('INSERT INTO done VALUES (1)');" >"$s/sk_push.sql"
# No queue: the clients run the jobs' statement themselves.
echo "INSERT INTO done VALUES (1);" >"$s/no_queue.sql"
# The consumer: take the oldest row nobody holds, run its statement's effect, in one transaction.
# (c) latency: each job records when it was pushed and when it ran.
job() { echo "format('INSERT INTO lat VALUES (''$1'', %L, clock_timestamp())', clock_timestamp())"; }
echo "SELECT xtcq.push('lat', $(job xtcq.push));" >"$s/lat_push.sql"
printf "BEGIN;\nSELECT xtcq.push_on_commit('lat', %s);\nCOMMIT;\n" "$(job xtcq.push_on_commit)" >"$s/lat_on_commit.sql"
echo "SELECT pg_notify('lat', $(job LISTEN/NOTIFY));" >"$s/lat_notify.sql"
echo "INSERT INTO lat VALUES ('direct', clock_timestamp(), clock_timestamp());" >"$s/lat_direct.sql"
printf "WITH j AS (DELETE FROM qtable WHERE id = (SELECT id FROM qtable ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id)\nINSERT INTO done SELECT 1 FROM j;\n" >"$s/sk_take.sql"
chmod 644 "$s"/*.sql

# (a) pushes per second from SQL, 1,000 jobs per statement, 40 statements per client (the
# segment holds what is pushed: nobody takes these jobs).
if [ -n "${PERF_OUT:-}" ]; then
    perf record -a -g -o "$PERF_OUT" 2>"$dir/perf.err" &
    perf_pid=$!
    sleep 1
fi
part_a() {
    xtcq_push=$(( $(pgbench "$s/push_many.sql" "$C" -t "$A_TX") * 1000 ))
    if [ -n "${PERF_OUT:-}" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; PERF_OUT=; fi
    table_push=$(( $(pgbench "$s/insert_many.sql" "$C" -t "$A_TX") * 1000 ))
    floor=$(( $(pgbench "$s/build_many.sql" "$C" -t "$A_TX") * 1000 ))
    psql "TRUNCATE qtable"
}
a_line() {
    echo "(a) pushes/s from SQL, 1,000 per statement: xtcq.push $xtcq_push, INSERT into a table $table_push: $(awk "BEGIN { printf \"%.1f\", $xtcq_push / $table_push }")x; the statement building the array alone: $floor/s (the most any push could reach: $(awk "BEGIN { printf \"%.1f\", $floor / $table_push }")x)"
}
if [ "${ONLY_A:-}" = 1 ]; then
    echo "synchronous_commit=$SYNC, $C pushing clients, $(nproc) cores, PostgreSQL $("$BIN/pg_config" --version | cut -d' ' -f2)"
    for _ in $(seq "${ROUNDS_A:-1}"); do
        part_a
        a_line
        # Room for the next round (a round leaves up to 400,000 jobs of 524,288 records): the queue
        # made again, once pgbench's backends, its injectors, are gone.
        for _ in $(seq 100); do
            "$REL/xtcq" --socket "$dir/xtcqd.sock" delete push --force >/dev/null 2>&1 && break
            sleep 0.2
        done
        "$REL/xtcq" --socket "$dir/xtcqd.sock" create push --allow-uid postgres --flavor fifo >/dev/null
    done
    exit 0
fi
part_a

# (b) end to end: jobs run per second while C clients push for T seconds.
e2e() { # push-script [consumer-script] -> jobs done per second
    # The workers first finish what the previous run left queued.
    until [ "$(psql "SELECT coalesce(sum(queued + running), 0) FROM xtcq.stats() WHERE queue IN ('e2e', 'e2c')")" = 0 ]; do sleep 0.2; done
    psql "TRUNCATE done"
    if [ $# -gt 1 ]; then pgbench "$2" 4 -T "$T" >/dev/null & fi
    pgbench "$1" "$C" -T "$T" >/dev/null
    wait
    echo $(( $(psql "SELECT count(*) FROM done") / T ))
}
# (c) latency, one client at LAT_RATE jobs per second, so that none waits behind another.
lat() { # script kind
    pgbench "$1" 1 -t "$LAT_JOBS" -R "$LAT_RATE" >/dev/null
    until [ "$(psql "SELECT count(*) FROM lat WHERE kind = '$2'")" -ge "$LAT_JOBS" ]; do sleep 0.2; done
}
lat "$s/lat_push.sql" xtcq.push
lat "$s/lat_on_commit.sql" xtcq.push_on_commit
cc -O2 -I"$("$BIN/pg_config" --includedir)" benches/postgres/listen.c -L"$("$BIN/pg_config" --libdir)" -lpq -o "$dir/listen"
"$dir/listen" "host=$pgdir dbname=postgres user=app" lat "$LAT_JOBS" >"$dir/listen.out" &
lpid=$!
until grep -q listening "$dir/listen.out"; do sleep 0.1; done
lat "$s/lat_notify.sql" LISTEN/NOTIFY
wait "$lpid"
# Not paced: with --rate, pgbench's latency counts from each transaction's scheduled start.
pgbench "$s/lat_direct.sql" 1 -t "$LAT_JOBS" >/dev/null
direct_ms=$(awk '/^latency average = / { print $4 }' "$dir/pgbench.out")
latency=$(psql "SELECT string_agg(format('%s p50 %s us, p99 %s us', kind, p50, p99), '; ' ORDER BY p50) FROM (
    SELECT kind, round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ran - pushed)) * 1e6) p50,
           round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM ran - pushed)) * 1e6) p99
    FROM lat WHERE kind <> 'direct' GROUP BY kind) t")

x=$(e2e "$s/e2e_push.sql")
xc=$(e2e "$s/e2e_on_commit.sql")
sk=$(e2e "$s/sk_push.sql" "$s/sk_take.sql")
nq=$(e2e "$s/no_queue.sql")
echo "synchronous_commit=$SYNC, $C pushing clients, $T s per run, $(nproc) cores, PostgreSQL $("$BIN/pg_config" --version | cut -d' ' -f2)"
a_line
echo "(c) push to the job's SQL running, $LAT_RATE jobs/s: $latency; the statement run by the client itself: $(awk "BEGIN { printf \"%d\", $direct_ms * 1000 }") us (pgbench's latency average)"
echo "(b) jobs run/s end to end (4 workers): xtcq.push $x, xtcq.push_on_commit $xc, SKIP LOCKED table $sk, no queue (the clients run the statement) $nq: $(awk "BEGIN { printf \"%.1fx and %.1fx\", $x / ($sk > 0 ? $sk : 1), $xc / ($sk > 0 ? $sk : 1) }")"
