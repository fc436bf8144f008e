#!/bin/bash
# Device run 5 (issue 13): the same binaries as run 4; 5 alternating quick ipc_handoff runs
# each (the issue's "5 runs"), fanout batch(32) twice more each, the deque bench once each.
cd "$(dirname "$0")"
{ date; nproc; uptime; } > $OUT/machine.txt 2>&1
for r in 1 2 3 4 5; do for v in before after; do
  echo "=== $v round $r"
  XTCQ_BENCH_DAEMON=$PWD/$v/xtcqd XTCQ_BENCH_ONLY=xtcq,pipe XTCQ_BENCH_QUICK=1 timeout 60 ./$v/ipc_handoff --bench; echo "rc $?"
done; done > $OUT/ipc.txt 2>&1
for r in 1 2; do for v in before after; do for b in 1 32; do
  echo "=== $v round $r batch=$b"
  XTCQ_BENCH_DAEMON=$PWD/$v/xtcqd XTCQ_BENCH_BATCH=$b XTCQ_BENCH_CONSUMERS=1,2 timeout 40 ./$v/fanout --bench; echo "rc $?"
done; done; done > $OUT/fanout.txt 2>&1
for v in before after; do echo "=== $v"; XTCQ_BENCH_QUICK=1 timeout 90 ./$v/deque --bench 2>&1 | sed -n '/== deque/,$p'; echo "rc $?"; done > $OUT/deque.txt 2>&1
uptime >> $OUT/machine.txt
grep -c "rc 0" $OUT/ipc.txt $OUT/fanout.txt $OUT/deque.txt
