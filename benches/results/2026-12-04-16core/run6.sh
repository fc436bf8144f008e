#!/bin/bash
# Device run 6: after = 09d3395, final = 1ee66f8+ (the thief's rotating start without a
# locked add). 5 alternating quick ipc_handoff runs each, xtcq only.
cd "$(dirname "$0")"
{ date; nproc; uptime; } > $OUT/machine.txt 2>&1
for r in 1 2 3 4 5; do for v in after final; do
  echo "=== $v round $r"
  XTCQ_BENCH_DAEMON=$PWD/after/xtcqd XTCQ_BENCH_ONLY=xtcq XTCQ_BENCH_QUICK=1 timeout 60 ./$v/ipc_handoff --bench; echo "rc $?"
done; done > $OUT/ipc.txt 2>&1
uptime >> $OUT/machine.txt
grep -c "rc 0" $OUT/ipc.txt
