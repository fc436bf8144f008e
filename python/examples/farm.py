"""A job farm: the parent pushes jobs, a pool of worker processes steals, runs and acks
them, and sends each result back; started with fork or spawn (multiprocessing).

    python3 python/examples/farm.py SOCKET [--jobs 5000] [--workers 4] [--start fork|spawn]

(with xtcq installed: pip install ./python).

Each worker connects after it starts (an inherited Client raises xtcq.Forked, which a
forked worker shows), takes jobs until the parent says stop, and acks each one after its
result is sent. A worker that dies holding a job has it re-queued by xtcqd.
"""

import argparse
import multiprocessing
import os
import sys

import xtcq

QUEUE = "farm"


def work(payload):
    """The job itself: square a number."""
    n = int(payload)
    return n * n


def worker(socket, results, stop, inherited=None):
    if inherited is not None:  # forked: the parent's connection is not ours to use
        try:
            inherited.thief(QUEUE)
            results.put(("error", os.getpid(), "an inherited client worked in a forked child"))
        except xtcq.Forked:
            results.put(("forked", os.getpid(), None))
    client = xtcq.Client(socket)
    thief = client.thief(QUEUE)
    while not stop.is_set():
        job = thief.steal(timeout=0.1)
        if job is None:
            continue
        with job:  # acked when the block ends, nacked if work() raises
            n = int(job.payload)
            results.put(("done", n, work(job.payload)))


def farm(socket, jobs=5000, workers=4, start="spawn"):
    """Runs `jobs` jobs through `workers` processes; returns {job: [results]} and the
    number of workers that found their inherited handle refused."""
    ctx = multiprocessing.get_context(start)
    client = xtcq.Client(socket)
    client.create_queue(QUEUE, deques=1, exist_ok=True, fifo=True)
    owner = client.owner(QUEUE)
    results, stop = ctx.Queue(), ctx.Event()
    inherited = client if start == "fork" else None
    procs = [ctx.Process(target=worker, args=(socket, results, stop, inherited)) for _ in range(workers)]
    for p in procs:
        p.start()
    done, refused, pushed = {}, 0, 0
    while len(done) < jobs:
        while pushed < jobs:
            try:
                owner.push(str(pushed))
                pushed += 1
            except xtcq.Full:
                break
        kind, a, b = results.get(timeout=60)
        if kind == "done":
            done.setdefault(a, []).append(b)
        elif kind == "forked":
            refused += 1
        else:
            raise RuntimeError(b)
    stop.set()
    for p in procs:
        p.join(30)
    while not results.empty():
        kind, a, b = results.get()
        if kind == "done":
            done.setdefault(a, []).append(b)
    owner.close()
    return done, refused


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("socket")
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--start", choices=["fork", "spawn", "forkserver"], default="spawn")
    args = ap.parse_args()
    done, _ = farm(args.socket, args.jobs, args.workers, args.start)
    twice = [n for n, r in done.items() if len(r) != 1]
    print("farm: %d jobs done by %d %s workers, %d done more than once" % (len(done), args.workers, args.start, len(twice)))
    return 1 if twice or len(done) != args.jobs else 0


if __name__ == "__main__":
    sys.exit(main())
