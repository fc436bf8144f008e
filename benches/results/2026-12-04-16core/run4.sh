#!/bin/bash
# Device run 4 (issue 13): before = main ec7115d (before the batch path and the payload
# blocks), after = main 09d3395 (both merged). Alternating quick ipc_handoff runs, then
# fanout single vs batch(32), and with 2 µs of work per job.
cd "$(dirname "$0")"
{ date; nproc; uptime; } > $OUT/machine.txt 2>&1
for r in 1 2; do for v in before after; do
  echo "=== $v round $r"
  XTCQ_BENCH_DAEMON=$PWD/$v/xtcqd XTCQ_BENCH_ONLY=xtcq,pipe XTCQ_BENCH_QUICK=1 timeout 80 ./$v/ipc_handoff --bench; echo "rc $?"
done; done > $OUT/ipc.txt 2>&1
for v in before after; do for b in 1 32; do
  echo "=== $v batch=$b poll=spin"
  XTCQ_BENCH_DAEMON=$PWD/$v/xtcqd XTCQ_BENCH_BATCH=$b XTCQ_BENCH_CONSUMERS=1,2,4,8,15 timeout 60 ./$v/fanout --bench; echo "rc $?"
done; done > $OUT/fanout.txt 2>&1
echo "=== after work_ns=2000 poll=spin" >> $OUT/fanout.txt
XTCQ_BENCH_DAEMON=$PWD/after/xtcqd XTCQ_BENCH_WORK_NS=2000 XTCQ_BENCH_N=300000 XTCQ_BENCH_CONSUMERS=1,2,4,8,15 timeout 60 ./after/fanout --bench >> $OUT/fanout.txt 2>&1; echo "rc $?" >> $OUT/fanout.txt
uptime >> $OUT/machine.txt
grep -c "rc 0" $OUT/ipc.txt $OUT/fanout.txt
