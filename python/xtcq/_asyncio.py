"""Waiting for a job in asyncio: Thief.steal_async() and Thief.steal_batch_async().

The thief's wake descriptor becomes readable when a job may be there (or when the daemon
went away); the loop watches it with add_reader. The steal itself never blocks, so the
event loop is never held. A cancelled wait (asyncio.wait_for, task.cancel()) has taken
nothing: the descriptor is disarmed, and a wake it was sent is handed on to another waiter.
"""

import asyncio
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    from ._xtcq import Job, Thief


async def steal_async(thief: "Thief") -> "Job":
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
