"""Loads libxtcq and declares the C API's prototypes (see include/xtcq.h).

Rules:
- The library is found once per process: $XTCQ_LIB, then the repository's target/ builds
  (release before debug), then the system's library path.
- Every call goes through ctypes.CDLL, which releases the GIL for its duration, so a
  thread blocked in a steal does not stall the others.
"""

import ctypes
import ctypes.util
import os
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent.parent


def _candidates():
    env = os.environ.get("XTCQ_LIB")
    if env:
        yield Path(env)
        return
    for profile in ("release", "debug"):
        yield _REPO / "target" / profile / "libxtcq.so"
        yield _REPO / "target" / profile / "deps" / "libxtcq.so"
    found = ctypes.util.find_library("xtcq")
    if found:
        yield Path(found)


def _load():
    tried = []
    for path in _candidates():
        if path.is_absolute() and not path.exists():
            tried.append(str(path))
            continue
        return ctypes.CDLL(str(path))
    raise OSError(
        "libxtcq.so not found (tried %s); build it with `cargo build --release -p xtcq-capi` "
        "or point $XTCQ_LIB at it" % (", ".join(tried) or "nothing")
    )


class JobInfo(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint32),
        ("generation", ctypes.c_uint32),
        ("birth", ctypes.c_uint32),
        ("attempts", ctypes.c_uint32),
        ("lease_deadline_ns", ctypes.c_uint64),
    ]


lib = _load()
_p = ctypes.c_void_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_int, _u32, _size = ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t
_str = ctypes.c_char_p

_PROTOTYPES = {
    "xtcq_connect": (_int, [_str, _pp]),
    "xtcq_client_free": (None, [_p]),
    "xtcq_create_queue": (_int, [_p, _str, _u32, _u32, _u32, _u32, _u32]),
    "xtcq_delete_queue": (_int, [_p, _str, _int]),
    "xtcq_check": (_int, [_p, _int, ctypes.POINTER(_u32)]),
    "xtcq_owner_attach": (_int, [_p, _str, _pp]),
    "xtcq_owner_free": (None, [_p]),
    "xtcq_owner_push": (_int, [_p, _str, _size]),
    "xtcq_owner_push_batch": (_int, [_p, ctypes.POINTER(_str), ctypes.POINTER(_size), _size, ctypes.POINTER(_size)]),
    "xtcq_owner_pop": (_int, [_p, _p]),
    "xtcq_injector_attach": (_int, [_p, _str, _pp]),
    "xtcq_injector_free": (None, [_p]),
    "xtcq_injector_push": (_int, [_p, _str, _size]),
    "xtcq_injector_push_delayed": (_int, [_p, _str, _size, ctypes.c_uint64]),
    "xtcq_thief_attach": (_int, [_p, _str, _pp]),
    "xtcq_thief_free": (None, [_p]),
    "xtcq_thief_steal": (_int, [_p, _p]),
    "xtcq_thief_steal_wait": (_int, [_p, _p, _u32]),
    "xtcq_thief_steal_batch": (_int, [_p, ctypes.POINTER(_p), _size, ctypes.POINTER(_size)]),
    "xtcq_job_new": (_int, [_pp]),
    "xtcq_job_free": (None, [_p]),
    "xtcq_job_payload": (_int, [_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(_size)]),
    "xtcq_job_get_info": (_int, [_p, ctypes.POINTER(JobInfo)]),
    "xtcq_job_held": (_int, [_p]),
    "xtcq_job_ack": (_int, [_p]),
    "xtcq_job_nack": (_int, [_p]),
    "xtcq_job_fail": (_int, [_p, _str]),
    "xtcq_job_fail_after": (_int, [_p, _str, ctypes.c_uint64]),
    "xtcq_job_release": (_int, [_p]),
    "xtcq_job_extend_lease": (_int, [_p, _u32]),
    "xtcq_strerror": (_str, [_int]),
    "xtcq_last_error": (_str, []),
}

for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

XTCQ_OK = 0
XTCQ_EMPTY = 1
XTCQ_EXIST_OK = 1
XTCQ_FIFO = 2
XTCQ_WAIT_FOREVER = 0xFFFFFFFF
XTCQ_MAX_BATCH = 128
