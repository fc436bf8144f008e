#!/usr/bin/env bash
# Pushes per second from SQL (xtcq.push, many-row form, vs INSERT into a queue table) and end
# to end jobs per second (pushed by pgbench clients, run by 4 background workers, each job a
# trivial statement in its own transaction) for xtcq.push, xtcq.push_on_commit and a SKIP
# LOCKED table, in one run on one machine, as ratios. Run as root from the repository root:
#   cargo build --release -p xtcq-capi -p xtcqd -p xtcq-cli && benches/postgres/run.sh
# Knobs: SECONDS_PER_RUN (default 5), CLIENTS (default 4), SYNC (synchronous_commit, on).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${SECONDS_PER_RUN:-5}
C=${CLIENTS:-4}
SYNC=${SYNC:-on}
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
    rm -rf "$dir"
}
trap cleanup EXIT
"$REL/xtcqd" --socket "$dir/xtcqd.sock" --segment "$dir/segment" --state "$dir/state" --queues 8 \
    --records 524288 --payload-bytes 128 --process-slots 128 --overflow-capacity 524288 \
    --group postgres --allow-uid postgres >"$dir/xtcqd.log" 2>&1 &
xpid=$!
for _ in $(seq 100); do [ -S "$dir/xtcqd.sock" ] && break; sleep 0.1; done
for q in push e2e e2c; do
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
xtcq.workers = 4
xtcq.worker_queues = 'e2e,e2c'
xtcq.worker_role = 'xtcq_worker'
CONF
asp "$BIN/pg_ctl -D $pgdir/data -l $pgdir/log -w start" >/dev/null
psql() { asp "$BIN/psql -h $pgdir -X -qAt -v ON_ERROR_STOP=1 -d postgres -c \"$1\""; }
psql "CREATE EXTENSION xtcq; CREATE ROLE xtcq_worker LOGIN; GRANT xtcq_user TO xtcq_worker;
      CREATE TABLE qtable(id bigserial PRIMARY KEY, payload text NOT NULL);
      CREATE TABLE done(n int); GRANT INSERT ON done TO xtcq_worker;"
pgbench() { # script-file clients -T seconds | -t transactions-per-client -> transactions per second
    asp "$BIN/pgbench -h $pgdir -n -c $2 -j $2 $3 $4 -f $1 postgres" 2>"$dir/pgbench.err" |
        awk '/^tps = / { printf "%d\n", $3 }'
}
s="$dir/scripts"; mkdir "$s"; chmod 755 "$s"
echo "SELECT xtcq.push('push', array_agg('job ' || i)) FROM generate_series(1, 1000) i;" >"$s/push_many.sql"
echo "INSERT INTO qtable(payload) SELECT 'job ' || i FROM generate_series(1, 1000) i;" >"$s/insert_many.sql"
echo "SELECT xtcq.push('e2e', 'INSERT INTO done VALUES (1)');" >"$s/e2e_push.sql"
printf "BEGIN;\nSELECT xtcq.push_on_commit('e2c', 'INSERT INTO done VALUES (1)');\nCOMMIT;\n" >"$s/e2e_on_commit.sql"
echo "INSERT INTO qtable(payload) VALUES ('INSERT INTO done VALUES (1)');" >"$s/sk_push.sql"
# The consumer: take the oldest row nobody holds, run its statement's effect, in one transaction.
printf "WITH j AS (DELETE FROM qtable WHERE id = (SELECT id FROM qtable ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id)\nINSERT INTO done SELECT 1 FROM j;\n" >"$s/sk_take.sql"
chmod 644 "$s"/*.sql

# (a) pushes per second from SQL, 1,000 jobs per statement, 40 statements per client (the
# segment holds what is pushed: nobody takes these jobs).
xtcq_push=$(( $(pgbench "$s/push_many.sql" "$C" -t 40) * 1000 ))
table_push=$(( $(pgbench "$s/insert_many.sql" "$C" -t 40) * 1000 ))
psql "TRUNCATE qtable"

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
x=$(e2e "$s/e2e_push.sql")
xc=$(e2e "$s/e2e_on_commit.sql")
sk=$(e2e "$s/sk_push.sql" "$s/sk_take.sql")
echo "synchronous_commit=$SYNC, $C pushing clients, $T s per run, $(nproc) cores, PostgreSQL $("$BIN/pg_config" --version | cut -d' ' -f2)"
echo "(a) pushes/s from SQL, 1,000 per statement: xtcq.push $xtcq_push, INSERT into a table $table_push: $(awk "BEGIN { printf \"%.1f\", $xtcq_push / $table_push }")x"
echo "(b) jobs run/s end to end (4 workers): xtcq.push $x, xtcq.push_on_commit $xc, SKIP LOCKED table $sk: $(awk "BEGIN { printf \"%.1fx and %.1fx\", $x / ($sk > 0 ? $sk : 1), $xc / ($sk > 0 ? $sk : 1) }")"
