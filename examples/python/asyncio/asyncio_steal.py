"""A consumer in asyncio: `steal_async` waits on the thief's wake descriptor with
`loop.add_reader` (no thread, no polling) while a producer thread pushes the jobs.

The socket comes from $XTCQ_SOCKET or the default, as for `xtcq`.
"""

import asyncio
import threading

import xtcq

JOBS = 3


def produce() -> None:
    client = xtcq.Client()  # another connection, as another process would have
    owner = client.owner("example-asyncio")
    for i in range(JOBS):
        owner.push(f"async job {i}".encode())


async def main() -> None:
    client = xtcq.Client()
    client.create_queue("example-asyncio", exist_ok=True)
    thief = client.thief("example-asyncio")
    producer = threading.Thread(target=produce)
    producer.start()
    for _ in range(JOBS):
        job = await thief.steal_async()  # cancelling it (wait_for, task.cancel()) takes nothing
        with job:
            print("ran", job.payload.decode())
    producer.join()


asyncio.run(main())
