"""xtcq from Python: a work-stealing job queue in shared memory, over the Rust client
(a native extension, xtcq._xtcq).

    import xtcq
    client = xtcq.Client()                       # $XTCQ_SOCKET or the default socket
    client.create_queue("jobs", exist_ok=True)
    xtcq.Client().owner("jobs").push(b"hello")   # usually in another process
    job = client.thief("jobs").steal(timeout=1.0)  # None when nothing came in time
    if job:
        with job:                                # acked when the block ends, nacked on error
            print(job.payload)

Every call that waits (for the daemon, or for a job) releases the GIL; a waiting steal
sees Ctrl-C (KeyboardInterrupt) within 100 ms.
"""

from ._xtcq import MAX_BATCH, Client, Injector, Job, Owner, Thief
from .errors import (
    DuplicateKey,
    Forked,
    Full,
    InUse,
    InvalidArgument,
    JobCancelled,
    NoRoom,
    NoSuchQueue,
    NotHeld,
    OutOfResources,
    Panic,
    QueueExists,
    QueueMismatch,
    SegmentError,
    TooLarge,
    Unauthorized,
    Unreachable,
    XtcqError,
)

__all__ = [
    "Client", "Owner", "Injector", "Thief", "Job", "XtcqError", "InvalidArgument",
    "Unreachable", "Unauthorized", "NoSuchQueue", "QueueExists", "QueueMismatch", "Full", "TooLarge",
    "NotHeld", "JobCancelled", "Forked", "SegmentError", "NoRoom", "InUse", "OutOfResources", "Panic", "DuplicateKey",
    "MAX_BATCH",
]
