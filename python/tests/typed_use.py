"""Every class and call of the package, typed: `mypy --strict` checks this file against
the installed package's stubs (tests/python/main.rs). It is never run, only checked."""

from typing import List, Optional

import xtcq


def produce(socket: Optional[str]) -> int:
    with xtcq.Client(socket) as client:
        client.create_queue("typed", deques=1, capacity=64, max_attempts=3, lease_ms=1000, fifo=True, exist_ok=True)
        owner: xtcq.Owner = client.owner("typed")
        owner.push(b"bytes")
        owner.push("text")
        queued: int = owner.push_batch([b"a", "b", bytearray(b"c")])
        popped: Optional[xtcq.Job] = owner.pop()
        if popped is not None:
            popped.release()
        owner.close()
        injector = client.injector("typed")
        injector.push_delayed(b"later", 0.5)
        injector.close()
        problems: List[str] = client.check(quiescent=False)
        client.delete_queue("typed", force=True)
        return queued + len(problems) + xtcq.MAX_BATCH


def consume(client: xtcq.Client) -> List[bytes]:
    thief = client.thief("typed")
    got: List[bytes] = []
    job = thief.steal(timeout=None)
    if job is not None:
        with job:
            got.append(job.payload)
    for j in thief.steal_batch(8):
        index, generation, attempts, deadline = j.info
        assert j.id.count(".") == 1 and j.attempts == attempts and index + generation + deadline >= 0
        j.extend_lease(30.0)
        j.fail_after(1.5, reason="again")
    late = thief.steal(timeout=0.1)
    if late is not None:
        late.fail(ValueError("bad input"))
    try:
        thief.steal(timeout=float("inf"))
    except xtcq.Full as e:
        print(e.code, e.queued)
    except (xtcq.NotHeld, xtcq.Forked, xtcq.XtcqError):
        pass
    return got
