#!/usr/bin/env bash
# `xtcq work`'s cost per command against xargs: N `true` commands, J at a time, through
# `xtcq work -j J` (each on a fresh private daemon, the fence in force) and through
# `xargs -P J -n 1 true`, alternating, ROUNDS rounds; prints each round's seconds, the
# median ratio work / xargs, and whether it meets the goal (<= GOAL). Beside each wall time,
# the CPU time it took (user + system of the tool and its commands, and for `xtcq work` of
# xtcqd too): on a machine shared with other work, the tool with more runnable threads gets
# more of the cores, and the CPU ratio says what each costs whatever the load.
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

TICK=$(getconf CLK_TCK)
# The CPU seconds xtcqd (pid $1) has used.
daemon_cpu() { awk -v t="$TICK" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
# "wall cpu" of the command line given, from bash's `time` (its children included).
timed() {
    local TIMEFORMAT='%R %U %S' out
    out=$( { time "$@" >/dev/null; } 2>&1 )
    echo "$out" | awk '{ printf "%s %.3f\n", $1, $2 + $3 }'
}
MARK=$(mktemp -u)
trap 'rm -f "$MARK"' EXIT

work_once() {
    local dir daemon d0 d1 wc
    dir=$(mktemp -d)
    "$BIN/xtcqd" --socket "$dir/s" --segment "$dir/seg" >/dev/null 2>"$dir/daemon.log" &
    daemon=$!
    for _ in $(seq 200); do [ -S "$dir/s" ] && break; sleep 0.05; done
    "$BIN/xtcq" --socket "$dir/s" create q >/dev/null
    seq 1 "$N" | "$BIN/xtcq" --socket "$dir/s" push q >/dev/null
    d0=$(daemon_cpu "$daemon")
    wc=$(timed sh -c '"$1" --socket "$2" work q -j "$3" --max-jobs "$4" -- true 2>"$5"' \
        work "$BIN/xtcq" "$dir/s" "$J" "$N" "$dir/work.log")
    d1=$(daemon_cpu "$daemon")
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
    echo "$wc" | awk -v d="$(echo "$d1 - $d0" | bc)" '{ printf "%s %.3f\n", $1, $2 + d }'
}

xargs_once() {
    timed sh -c 'seq 1 "$1" | xargs -P "$2" -n 1 true' xargs "$N" "$J"
}

echo "N=$N J=$J ROUNDS=$ROUNDS on $(nproc) cores; xtcq from $BIN"
ratios=()
cpu_ratios=()
for r in $(seq "$ROUNDS"); do
    # Alternate which goes first, so that neither always meets a warmer machine.
    if [ $((r % 2)) -eq 1 ]; then
        w=$(work_once); x=$(xargs_once)
    else
        x=$(xargs_once); w=$(work_once)
    fi
    read -r tw cw <<<"$w"
    read -r tx cx <<<"$x"
    ratio=$(echo "scale=3; $tw / $tx" | bc)
    cpu_ratio=$(echo "scale=3; $cw / $cx" | bc)
    ratios+=("$ratio")
    cpu_ratios+=("$cpu_ratio")
    printf 'round %d: xtcq work %.2f s (cpu %.2f s), xargs %.2f s (cpu %.2f s), work/xargs %s (cpu %s)\n' \
        "$r" "$tw" "$cw" "$tx" "$cx" "$ratio" "$cpu_ratio"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
median=$(median "${ratios[@]}")
met=$(echo "$median <= $GOAL" | bc)
if [ "$met" -eq 1 ]; then verdict=met; else verdict="not met"; fi
echo "median work/xargs: $median (goal <= $GOAL: $verdict); cpu: $(median "${cpu_ratios[@]}")"
