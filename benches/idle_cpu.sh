#!/usr/bin/env bash
# CPU an idle xtcqd uses (no queue, no client), by segment size, and the kill-to-re-queue
# latency at the largest size.
#
#   cargo build --release -p xtcqd -p xtcq-benches --bin xtcqd --bin xtcq-kill-requeue
#   benches/idle_cpu.sh                       # 65536, 1000000, 4000000 records, 30 s each
#   RECORDS="1000000" SECS=10 benches/idle_cpu.sh
#
# For each size: starts xtcqd on a fresh segment, waits for its socket and 2 s more, reads
# utime + stime from /proc/PID/stat, sleeps SECS, reads them again, prints % of one core.
# Then (KILL_ROUNDS > 0, the last size only) runs xtcq-kill-requeue against it. BIN names the
# directory of the binaries (default target/release).
set -euo pipefail

BIN=${BIN:-target/release}
SECS=${SECS:-30}
RECORDS=${RECORDS:-"65536 1000000 4000000"}
KILL_ROUNDS=${KILL_ROUNDS:-20}
TICK=$(getconf CLK_TCK)

cpu_ticks() { # utime + stime of PID: fields 14 and 15, counted after the ")" of comm
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

last=${RECORDS##* }
for n in $RECORDS; do
    dir=$(mktemp -d)
    seg=/dev/shm/xtcq-idle-cpu-$$-$n
    "$BIN/xtcqd" --socket "$dir/s.sock" --segment "$seg" --records "$n" --recreate 2>"$dir/log" &
    pid=$!
    for _ in $(seq 600); do [ -S "$dir/s.sock" ] && break; sleep 0.1; done
    [ -S "$dir/s.sock" ] || { cat "$dir/log"; exit 1; }
    sleep 2
    t0=$(date +%s.%N); c0=$(cpu_ticks $pid)
    sleep "$SECS"
    t1=$(date +%s.%N); c1=$(cpu_ticks $pid)
    awk -v n="$n" -v c="$((c1 - c0))" -v hz="$TICK" -v s0="$t0" -v s1="$t1" \
        'BEGIN { printf "idle xtcqd, --records %9d: %6.2f%% of a core over %.1f s\n", n, 100 * c / hz / (s1 - s0), s1 - s0 }'
    if [ "$n" = "$last" ] && [ "$KILL_ROUNDS" -gt 0 ]; then
        "$BIN/xtcq-kill-requeue" "$dir/s.sock" "$KILL_ROUNDS" | tail -1 | sed "s/^/--records $n: /"
    fi
    kill -TERM $pid; wait $pid || true
    rm -rf "$dir" "$seg"
done
