#!/usr/bin/env bash
# The cost per job of `xtcq work`, side by side for two builds: N `true` jobs through
# `xtcq work -j J`, ROUNDS alternating runs, each on a fresh private daemon; prints each
# round's seconds and the median ratio B / A.
#   benches/benches/work_jobs.sh DIR_A DIR_B [N=2000] [J=2] [ROUNDS=5]
# DIR_* hold an `xtcq` and an `xtcqd` (e.g. target/release of two worktrees).
set -euo pipefail
a=$1 b=$2 n=${3:-2000} j=${4:-2} rounds=${5:-5}
once() {
    local bin=$1 dir
    dir=$(mktemp -d)
    "$bin/xtcqd" --socket "$dir/s" --segment "$dir/seg" >/dev/null 2>&1 &
    local daemon=$!
    for _ in $(seq 200); do [ -S "$dir/s" ] && break; sleep 0.05; done
    "$bin/xtcq" --socket "$dir/s" create q >/dev/null
    seq 1 "$n" | "$bin/xtcq" --socket "$dir/s" push q >/dev/null
    local t0 t1
    t0=$(date +%s.%N)
    "$bin/xtcq" --socket "$dir/s" work q -j "$j" --max-jobs "$n" -- true
    t1=$(date +%s.%N)
    kill "$daemon"; wait "$daemon" 2>/dev/null || true
    rm -rf "$dir"
    echo "$t1 - $t0" | bc
}
ratios=()
for r in $(seq "$rounds"); do
    ta=$(once "$a"); tb=$(once "$b")
    ratio=$(echo "scale=3; $tb / $ta" | bc)
    ratios+=("$ratio")
    echo "round $r: A $ta s, B $tb s, B/A $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {print "median B/A:", v[int((NR+1)/2)]}'
