"""xtcq's errors as exceptions: one class per kind, all XtcqError. The extension raises
them with the C API's status code (`code`, as in include/xtcq.h) and the message."""

from typing import Optional


class XtcqError(Exception):
    """An xtcq call failed; `code` is the C status, the message says what to do."""

    code: Optional[int] = None
    #: push_batch: how many of the batch's first payloads were queued before it failed.
    queued: int = 0

    def __init__(self, code: Optional[int], message: str) -> None:
        super().__init__(message)
        self.code = code


class InvalidArgument(XtcqError, ValueError):
    """A bad argument (XTCQ_E_INVALID)."""


class Unreachable(XtcqError, ConnectionError):
    """xtcqd is not running, not accessible, or did not answer (XTCQ_E_UNREACHABLE)."""


class Unauthorized(XtcqError, PermissionError):
    """The daemon refused this process or request (XTCQ_E_UNAUTHORIZED)."""


class NoSuchQueue(XtcqError, KeyError):
    """No such queue (XTCQ_E_NO_SUCH_QUEUE)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


class QueueExists(XtcqError):
    """The queue already exists (XTCQ_E_EXISTS)."""


class QueueMismatch(XtcqError):
    """create_queue(exist_ok=True) found the queue with other settings (XTCQ_E_MISMATCH);
    the message names each (flavor, deques, capacity, max_attempts, lease_ms)."""


class Full(XtcqError):
    """The queue or the segment's records are full; retry later (XTCQ_E_FULL)."""


class TooLarge(XtcqError, ValueError):
    """The payload does not fit a record (XTCQ_E_TOO_LARGE)."""


class NotHeld(XtcqError):
    """The job's lease expired or it was recovered; its result was not recorded."""


class JobCancelled(NotHeld):
    """The job was cancelled (`xtcq cancel`) while this process held it (XTCQ_E_CANCELLED);
    its result is not recorded and there is nothing to settle."""


class Forked(XtcqError):
    """The handle was inherited across fork(): connect again in this process."""


class SegmentError(XtcqError):
    """The segment is corrupt or was replaced, or this process's slot was lost."""


class DuplicateKey(XtcqError):
    """A push with a key was refused: a live job of the queue (queued, delayed or running)
    holds the key (XTCQ_E_DUPLICATE); `existing` is that job's id."""

    #: The id ("index.birth") of the job that holds the key.
    existing: Optional[str] = None


class NoRoom(XtcqError):
    """No free deque, process slot or queue-table entry (XTCQ_E_NO_ROOM)."""


class InUse(XtcqError):
    """A delete without force was refused: the queue is in use or holds jobs."""


class OutOfResources(XtcqError, OSError):
    """This process ran out of file descriptors or memory (XTCQ_E_RESOURCE): close some or
    raise the limit (`ulimit -n`); the daemon and the segment may be fine."""


class Panic(XtcqError):
    """A bug inside xtcq was caught (XTCQ_E_PANIC); please report it."""
