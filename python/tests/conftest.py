"""A real xtcqd per test, on a socket and segment of its own.

$XTCQ_DAEMON names the daemon binary (cargo's test runner sets it); else the repository's
target/debug/xtcqd. `xtcq` is the installed package (tests/python/main.rs installs the
wheel in a fresh venv), never python/xtcq/ from the source tree: that has no extension.
"""

import os
import socket as sock
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "python" / "examples"))


def _daemon_binary():
    path = Path(os.environ.get("XTCQ_DAEMON", REPO / "target" / "debug" / "xtcqd"))
    if not path.exists():
        pytest.fail("xtcqd not found at %s: cargo build -p xtcqd, or set $XTCQ_DAEMON" % path)
    return path


@pytest.fixture
def daemon():
    """Starts xtcqd; yields its socket path; stops it and checks it did not crash."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        socket_path = os.path.join(tmp, "xtcqd.sock")
        log = open(os.path.join(tmp, "xtcqd.log"), "w+")
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "XTCQ_SOCKET")}
        proc = subprocess.Popen(
            [str(_daemon_binary()), "--socket", socket_path, "--segment", os.path.join(tmp, "segment")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
        )
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, "xtcqd exited early: " + Path(log.name).read_text()
            try:
                with sock.socket(sock.AF_UNIX, sock.SOCK_STREAM) as s:
                    s.connect(socket_path)
                break
            except OSError:
                assert time.monotonic() < deadline, "xtcqd not ready in 20 s: " + Path(log.name).read_text()
                time.sleep(0.01)
        try:
            yield socket_path
        finally:
            proc.terminate()
            proc.wait(20)
            log.close()
