#!/usr/bin/env bash
# `xtcq work`'s cost per command against xargs: N `true` commands, J at a time, through
# `xtcq work -j J` (each on a fresh private daemon, the fence in force) and through
# `xargs -P J -n 1 true`, alternating, ROUNDS rounds; prints each round's seconds, the
# median ratio work / xargs, and whether it meets the goal (<= GOAL).
#
#   cargo build --release -p xtcq-cli -p xtcqd --bin xtcq --bin xtcqd
#   benches/work_vs_xargs.sh                     # N=5000 J=2 ROUNDS=3 GOAL=1.25
#   N=2000 ROUNDS=5 BIN=target/release benches/work_vs_xargs.sh
#
# The push of the jobs and the daemon's start are outside the timed part; `xtcq work`'s
# first line says which fence is in force (cgroup or process group), printed once. Every
# run must end with N jobs ok, or the script fails.
set -euo pipefail

BIN=${BIN:-target/release}
N=${N:-5000}
J=${J:-2}
ROUNDS=${ROUNDS:-3}
GOAL=${GOAL:-1.25}

now() { date +%s.%N; }
MARK=$(mktemp -u)
trap 'rm -f "$MARK"' EXIT

work_once() {
    local dir daemon t0 t1
    dir=$(mktemp -d)
    "$BIN/xtcqd" --socket "$dir/s" --segment "$dir/seg" >/dev/null 2>"$dir/daemon.log" &
    daemon=$!
    for _ in $(seq 200); do [ -S "$dir/s" ] && break; sleep 0.05; done
    "$BIN/xtcq" --socket "$dir/s" create q >/dev/null
    seq 1 "$N" | "$BIN/xtcq" --socket "$dir/s" push q >/dev/null
    t0=$(now)
    "$BIN/xtcq" --socket "$dir/s" work q -j "$J" --max-jobs "$N" -- true 2>"$dir/work.log"
    t1=$(now)
    kill "$daemon"
    wait "$daemon" 2>/dev/null || true
    if ! grep -q ": $N job(s) ok" "$dir/work.log"; then
        echo "xtcq work did not end with $N jobs ok:" >&2
        cat "$dir/work.log" >&2
        exit 1
    fi
    if [ ! -e "$MARK" ]; then
        : >"$MARK"
        grep -m1 '^xtcq: fence:' "$dir/work.log" | cut -c1-100 >&2 || true
    fi
    rm -rf "$dir"
    echo "$t1 - $t0" | bc
}

xargs_once() {
    local t0 t1
    t0=$(now)
    seq 1 "$N" | xargs -P "$J" -n 1 true
    t1=$(now)
    echo "$t1 - $t0" | bc
}

echo "N=$N J=$J ROUNDS=$ROUNDS on $(nproc) cores; xtcq from $BIN"
ratios=()
for r in $(seq "$ROUNDS"); do
    # Alternate which goes first, so that neither always meets a warmer machine.
    if [ $((r % 2)) -eq 1 ]; then
        tw=$(work_once); tx=$(xargs_once)
    else
        tx=$(xargs_once); tw=$(work_once)
    fi
    ratio=$(echo "scale=3; $tw / $tx" | bc)
    ratios+=("$ratio")
    printf 'round %d: xtcq work %.2f s, xargs %.2f s, work/xargs %s\n' "$r" "$tw" "$tx" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
met=$(echo "$median <= $GOAL" | bc)
if [ "$met" -eq 1 ]; then verdict=met; else verdict="not met"; fi
echo "median work/xargs: $median (goal <= $GOAL: $verdict)"
