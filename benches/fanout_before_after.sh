#!/usr/bin/env bash
# `fanout` from two builds, alternating in one session: what idle consumers cost before and
# after a change to how they wait. Each build is a fanout binary built with
# `--features cas-count` (so that each row says how many CASes on `top` the consumers lost
# per job) and the bench daemon built with it. Prints every round's table, tagged with the
# build, the poll mode and the round.
#
#   cargo bench -p xtcq-benches --bench fanout --features cas-count --no-run
#   mkdir -p /tmp/fo && cp target/release/deps/fanout-<hash> /tmp/fo/fanout-after \
#       && cp target/release/xtcq-bench-daemon /tmp/fo/daemon-after      # likewise -before
#   DIR=/tmp/fo ROUNDS=3 POLLS="wait spin" benches/fanout_before_after.sh
#
# XTCQ_BENCH_CONSUMERS (default 1,2,4,8), XTCQ_BENCH_N (200000) and XTCQ_BENCH_RUNS (3) pass
# through to the bench. On a machine with fewer cores than consumers + 1 the rows say
# "oversubscribed": they show what the herd costs, not how the path scales.
set -euo pipefail

DIR=${DIR:?DIR: the folder with fanout-before, daemon-before, fanout-after, daemon-after}
ROUNDS=${ROUNDS:-3}
POLLS=${POLLS:-wait spin}
export XTCQ_BENCH_CONSUMERS=${XTCQ_BENCH_CONSUMERS:-1,2,4,8}
export XTCQ_BENCH_N=${XTCQ_BENCH_N:-200000}
export XTCQ_BENCH_RUNS=${XTCQ_BENCH_RUNS:-3}

for round in $(seq "$ROUNDS"); do
    for poll in $POLLS; do
        for build in before after; do
            echo "=== $build poll=$poll round $round"
            XTCQ_BENCH_POLL=$poll XTCQ_BENCH_DAEMON="$DIR/daemon-$build" "$DIR/fanout-$build" | grep '^|'
        done
    done
done
