"""Client, Owner, Injector, Thief and Job: thin objects over the C API's handles.

Rules:
- Each object owns one C handle and frees it when garbage-collected or closed; an object
  inherited across fork() raises Forked on use and frees nothing of the parent's.
- Long waits are taken in 100 ms steps in Python, so Ctrl-C (KeyboardInterrupt) is seen
  between them; each step releases the GIL.
- A Job used as a context manager is acked when the block ends normally and nacked (with
  the exception as its reason) when it raises.
"""

import ctypes
import time

from . import _lib
from .errors import InvalidArgument, check

_c = _lib.lib
_STEP_MS = 100


def _name(value):
    if not isinstance(value, str):
        raise InvalidArgument(-1, "a queue name is a str, not %s" % type(value).__name__)
    return value.encode()


def _bytes(payload):
    if isinstance(payload, str):
        return payload.encode()
    return bytes(payload)


class _Handle:
    _free = None

    def __init__(self, ptr):
        self._ptr = ptr

    def _live(self):
        if not self._ptr:
            raise InvalidArgument(-1, "%s is closed" % type(self).__name__)
        return self._ptr

    def close(self):
        """Frees the handle now (also done when the object is collected)."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            type(self)._free(ptr)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client(_Handle):
    """A connection to xtcqd: `socket` None means $XTCQ_SOCKET, else the default path.
    Connect in each process, after fork(). Thread-safe."""

    _free = staticmethod(_c.xtcq_client_free)

    def __init__(self, socket=None):
        out = ctypes.c_void_p()
        check(_c.xtcq_connect(None if socket is None else str(socket).encode(), ctypes.byref(out)))
        super().__init__(out.value)

    def create_queue(self, name, deques=0, capacity=0, max_attempts=0, lease_ms=0, fifo=False, exist_ok=False):
        """Creates a queue (0: the defaults of 4 deques of 1024 jobs, no attempt limit, no lease)."""
        flags = (_lib.XTCQ_EXIST_OK if exist_ok else 0) | (_lib.XTCQ_FIFO if fifo else 0)
        check(_c.xtcq_create_queue(self._live(), _name(name), deques, capacity, max_attempts, lease_ms, flags))

    def delete_queue(self, name, force=False):
        """Deletes a queue; without `force`, refused (InUse) while it is in use or holds jobs."""
        check(_c.xtcq_delete_queue(self._live(), _name(name), int(force)))

    def check(self, quiescent=False):
        """The segment's problems as a list of one message (empty: consistent)."""
        problems = ctypes.c_uint32()
        check(_c.xtcq_check(self._live(), int(quiescent), ctypes.byref(problems)))
        return [] if problems.value == 0 else [(_c.xtcq_last_error() or b"").decode()]

    def owner(self, queue):
        """Takes a free deque of `queue` as its owner (a producer)."""
        return Owner(self, queue)

    def injector(self, queue):
        """A producer without a deque: pushes go to the queue's overflow ring."""
        return Injector(self, queue)

    def thief(self, queue):
        """A consumer of `queue`."""
        return Thief(self, queue)


def _attach(fn, client, queue):
    out = ctypes.c_void_p()
    check(fn(client._live(), _name(queue), ctypes.byref(out)))
    return out.value


class Owner(_Handle):
    """Owns one deque of a queue. One thread at a time."""

    _free = staticmethod(_c.xtcq_owner_free)

    def __init__(self, client, queue):
        super().__init__(_attach(_c.xtcq_owner_attach, client, queue))
        self.queue = queue

    def push(self, payload):
        """Queues a job (bytes or str). Raises Full when the deque and the ring are full."""
        data = _bytes(payload)
        check(_c.xtcq_owner_push(self._live(), data, len(data)))

    def pop(self):
        """The owner's next job, or None."""
        job = Job()
        rc = check(_c.xtcq_owner_pop(self._live(), job._live()))
        return job if rc == _lib.XTCQ_OK else None


class Injector(_Handle):
    """Pushes onto a queue's overflow ring. One thread at a time."""

    _free = staticmethod(_c.xtcq_injector_free)

    def __init__(self, client, queue):
        super().__init__(_attach(_c.xtcq_injector_attach, client, queue))
        self.queue = queue

    def push(self, payload):
        """Queues a job (bytes or str). Raises Full when the ring is full."""
        data = _bytes(payload)
        check(_c.xtcq_injector_push(self._live(), data, len(data)))


class Thief(_Handle):
    """A consumer of one queue. Thread-safe: several threads may steal through one Thief."""

    _free = staticmethod(_c.xtcq_thief_free)

    def __init__(self, client, queue):
        super().__init__(_attach(_c.xtcq_thief_attach, client, queue))
        self.queue = queue

    def steal(self, timeout=0):
        """One job, or None. `timeout`: seconds to wait for one (None: no limit, 0: none)."""
        job = Job()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left_ms = _STEP_MS if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            rc = check(_c.xtcq_thief_steal_wait(self._live(), job._live(), min(left_ms, _STEP_MS)))
            if rc == _lib.XTCQ_OK:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                return None


class Job(_Handle):
    """A claimed job: read `payload`, then ack(), nack(), fail(reason) or release().
    Collected without either, it is nacked. One thread at a time."""

    _free = staticmethod(_c.xtcq_job_free)

    def __init__(self):
        out = ctypes.c_void_p()
        check(_c.xtcq_job_new(ctypes.byref(out)))
        super().__init__(out.value)

    @property
    def payload(self):
        """The job's bytes."""
        data = ctypes.POINTER(ctypes.c_char)()
        size = ctypes.c_size_t()
        check(_c.xtcq_job_payload(self._live(), ctypes.byref(data), ctypes.byref(size)))
        return ctypes.string_at(data, size.value)

    @property
    def info(self):
        """(record index, generation, attempts before this claim, lease deadline ns or 0)."""
        info = _lib.JobInfo()
        check(_c.xtcq_job_get_info(self._live(), ctypes.byref(info)))
        return (info.index, info.generation, info.attempts, info.lease_deadline_ns)

    @property
    def attempts(self):
        """Times the job was given back before this claim."""
        return self.info[2]

    def ack(self):
        """Done. Raises NotHeld when the lease expired first (the result is not recorded)."""
        check(_c.xtcq_job_ack(self._live()))

    def nack(self):
        """Failed: re-queued with attempt + 1, or dead-lettered at the queue's limit."""
        check(_c.xtcq_job_nack(self._live()))

    def fail(self, reason):
        """Like nack(), keeping `reason` as the job's last error."""
        check(_c.xtcq_job_fail(self._live(), str(reason).encode("utf-8", "replace")))

    def release(self):
        """Not run after all: re-queued without counting an attempt."""
        check(_c.xtcq_job_release(self._live()))

    def extend_lease(self, seconds):
        """Sets the lease to `seconds` from now (a heartbeat for a long job)."""
        check(_c.xtcq_job_extend_lease(self._live(), int(seconds * 1000)))

    def __exit__(self, kind, value, tb):
        try:
            if kind is None:
                self.ack()
            else:
                self.fail("%s: %s" % (kind.__name__, value))
        finally:
            self.close()
