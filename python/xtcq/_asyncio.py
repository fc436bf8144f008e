"""Waiting for a job in asyncio: Thief.steal_async() and Thief.steal_batch_async().

The thief's wake descriptor becomes readable when a job may be there (or when the daemon
went away); the loop watches it with add_reader. The steal itself never blocks, so the
event loop is never held. A cancelled wait (asyncio.wait_for, task.cancel()) has taken
nothing: the descriptor is disarmed, and a wake it was sent is handed on to another waiter.
"""

import asyncio
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from ._xtcq import Job, Thief

# A thief has one wake descriptor, armed as one waiter: tasks of one loop that steal from
# the same thief take turns waiting on it. Two at once would each add_reader the one fd (the
# second replacing the first's reader, then removing it), and one's steal disarms the other:
# a task left awaiting a descriptor nobody watches while jobs wait. Keyed by the ids of the
# thief and the loop, with the number of tasks using the entry: while it is non-zero a task
# holds the thief, so its id is not reused.
_turns: Dict[Tuple[int, int], Tuple[asyncio.Lock, int]] = {}


async def steal_async(thief: "Thief") -> "Job":
    key = (id(thief), id(asyncio.get_running_loop()))
    lock, users = _turns.get(key, (None, 0))
    if lock is None:
        lock = asyncio.Lock()
    _turns[key] = (lock, users + 1)
    try:
        async with lock:
            return await _wait_and_steal(thief)
    finally:
        lock, users = _turns[key]
        if users == 1:
            del _turns[key]
        else:
            _turns[key] = (lock, users - 1)


async def _wait_and_steal(thief: "Thief") -> "Job":
    loop = asyncio.get_running_loop()
    while True:
        fd = thief._wake_fileno()
        job: Optional["Job"] = thief._steal_or_arm()
        if job is not None:
            return job
        ready: "asyncio.Future[None]" = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        except BaseException:
            thief._wait_cancel()
            raise
        finally:
            loop.remove_reader(fd)


async def steal_batch_async(thief: "Thief", n: int) -> List["Job"]:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 128:
        from .errors import InvalidArgument

        raise InvalidArgument(-1, f"n is 1 to 128, not {n!r}")
    first = await steal_async(thief)
    return [first] + (thief.steal_batch(n - 1) if n > 1 else [])
