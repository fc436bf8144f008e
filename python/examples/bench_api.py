"""The Python package's cost per job, in one process and one thread: push N 64-byte jobs,
then steal, read and ack them, REPS times; prints the median ns per job of each phase as
"push_ns=P steal_ack_ns=S" (benches/benches/api_cost.rs runs it).

    python3 python/examples/bench_api.py SOCKET QUEUE N REPS

(with xtcq installed: pip install ./python).
"""

import statistics
import sys
import time

import xtcq


def main(socket, queue, n, reps):
    client = xtcq.Client(socket)
    owner, thief = client.owner(queue), client.thief(queue)
    msg = b"x" * 64
    push, take = [], []
    for _ in range(reps):
        t0 = time.monotonic_ns()
        for _ in range(n):
            owner.push(msg)
        t1 = time.monotonic_ns()
        for _ in range(n):
            job = thief.steal()
            job.payload
            job.ack()
        t2 = time.monotonic_ns()
        push.append((t1 - t0) / n)
        take.append((t2 - t1) / n)
    print("push_ns=%.1f steal_ack_ns=%.1f" % (statistics.median(push), statistics.median(take)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
