"""Push three jobs as a queue's owner, then steal, run and ack each as a thief.

The socket comes from $XTCQ_SOCKET or the default, as for `xtcq`.
"""

import xtcq

client = xtcq.Client()  # connect in each process, after fork()
client.create_queue("example-py", exist_ok=True)
owner = client.owner("example-py")  # a deque of our own: no system call a push
for i in range(3):
    owner.push(f"job {i}".encode())
thief = client.thief("example-py")  # usually in another process
while (job := thief.steal(timeout=0.1)) is not None:  # the GIL is released while it waits
    with job:  # acked at the end, nacked (failed) on an exception
        print("ran", job.payload.decode())
