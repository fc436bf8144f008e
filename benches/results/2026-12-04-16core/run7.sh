#!/bin/bash
# Device run 7: a1cba9f (push_batch in the batch row, XTCQ_BENCH_PUSH_BATCH=1) against the same
# binary without it: 5 alternating quick ipc_handoff runs each, xtcq and pipe.
cd "$(dirname "$0")"
{ date; nproc; uptime; } > $OUT/machine.txt 2>&1
for r in 1 2 3 4 5; do for pb in 0 1; do
  echo "=== push_batch=$pb round $r"
  XTCQ_BENCH_PUSH_BATCH=$pb XTCQ_BENCH_DAEMON=$PWD/pushbatch/xtcqd XTCQ_BENCH_ONLY=xtcq,pipe XTCQ_BENCH_QUICK=1 timeout 60 ./pushbatch/ipc_handoff --bench; echo "rc $?"
done; done > $OUT/ipc.txt 2>&1
uptime >> $OUT/machine.txt
grep -c "rc 0" $OUT/ipc.txt
