"""The C API's negative status codes as exceptions: one class per code, all XtcqError."""

from . import _lib


class XtcqError(Exception):
    """An xtcq call failed; `code` is the C status, the message says what to do."""

    code = None

    def __init__(self, code, message):
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

    def __str__(self):  # KeyError would quote the message
        return Exception.__str__(self)


class QueueExists(XtcqError):
    """The queue already exists (XTCQ_E_EXISTS)."""


class Full(XtcqError):
    """The queue or the segment's records are full; retry later (XTCQ_E_FULL)."""


class TooLarge(XtcqError, ValueError):
    """The payload does not fit a record (XTCQ_E_TOO_LARGE)."""


class NotHeld(XtcqError):
    """The job's lease expired or it was recovered; its result was not recorded."""


class Forked(XtcqError):
    """The handle was inherited across fork(): connect again in this process."""


class SegmentError(XtcqError):
    """The segment is corrupt or was replaced, or this process's slot was lost."""


class NoRoom(XtcqError):
    """No free deque, process slot or queue-table entry (XTCQ_E_NO_ROOM)."""


class InUse(XtcqError):
    """A delete without force was refused: the queue is in use or holds jobs."""


class OutOfResources(XtcqError, OSError):
    """This process ran out of file descriptors or memory (XTCQ_E_RESOURCE): close some or
    raise the limit (`ulimit -n`); the daemon and the segment may be fine."""


class Panic(XtcqError):
    """A bug inside libxtcq was caught (XTCQ_E_PANIC); please report it."""


_BY_CODE = {
    -1: InvalidArgument,
    -2: Unreachable,
    -3: Unauthorized,
    -4: NoSuchQueue,
    -5: QueueExists,
    -6: Full,
    -7: TooLarge,
    -8: NotHeld,
    -9: Forked,
    -10: SegmentError,
    -11: NoRoom,
    -13: Panic,
    -15: InUse,
    -16: OutOfResources,
}


def check(rc):
    """Returns `rc` when it is XTCQ_OK or XTCQ_EMPTY, else raises its exception."""
    if rc >= 0:
        return rc
    message = (_lib.lib.xtcq_last_error() or b"").decode("utf-8", "replace")
    name = (_lib.lib.xtcq_strerror(rc) or b"").decode()
    raise _BY_CODE.get(rc, XtcqError)(rc, message or name)
