"""xtcq from Python against a real daemon: pools started with fork and with spawn, a
worker killed holding a job, a thread blocked in steal while another works, Ctrl-C in a
blocked steal, and errors as exceptions."""

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import farm
import xtcq


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_pool_acks_each_of_5000_jobs_once(daemon, start):
    done, refused = farm.farm(daemon, jobs=5000, workers=3, start=start)
    assert sorted(done) == list(range(5000))
    assert all(r == [n * n] for n, r in done.items()), "a job was done twice or wrongly"
    assert refused == (3 if start == "fork" else 0), "every forked worker's inherited client raises Forked"
    assert xtcq.Client(daemon).check() == []


def _hold_one_job(socket, ready):
    thief = xtcq.Client(socket).thief("held")
    job = thief.steal(timeout=10)
    ready.send(int(job.payload))
    signal.pause()  # hangs holding it, as a stuck worker would


def test_a_killed_workers_job_is_requeued(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("held", deques=1)
    client.owner("held").push(b"7")
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    worker = ctx.Process(target=_hold_one_job, args=(daemon, theirs))
    worker.start()
    assert mine.recv() == 7
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    job = client.thief("held").steal(timeout=30)
    assert job is not None, "the killed worker's job never came back"
    assert (job.payload, job.attempts) == (b"7", 1)
    job.ack()
    assert client.check() == []


def test_a_thread_blocked_in_steal_does_not_stall_another(daemon):
    """A thread waits in steal() while the main thread works. With a switch interval of
    1000 s a thread that holds the GIL keeps it until it blocks or releases it: if the
    waiting steal held the GIL, the main thread could not push the job that wakes it, and
    the steal would return None after 30 s instead."""
    client = xtcq.Client(daemon)
    client.create_queue("wake", deques=1)
    client.create_queue("busy", deques=1)
    thief = client.thief("wake")
    returned = {}
    main_done = threading.Event()

    def blocked():
        job = thief.steal(timeout=30)
        returned["payload"] = None if job is None else job.payload
        returned["main_done_first"] = main_done.is_set()
        if job is not None:
            job.ack()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    try:
        t = threading.Thread(target=blocked)
        t.start()
        busy_owner, busy_thief = client.owner("busy"), client.thief("busy")
        for i in range(1000):
            busy_owner.push(str(i))
            busy_thief.steal().ack()
        main_done.set()
        client.owner("wake").push(b"wake up")
        t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert returned == {"payload": b"wake up", "main_done_first": True}


def test_errors_are_exceptions_with_the_message(daemon):
    client = xtcq.Client(daemon)
    with pytest.raises(xtcq.Unreachable, match="not running"):
        xtcq.Client("/nonexistent/xtcqd.sock")
    with pytest.raises(xtcq.NoSuchQueue, match="missing"):
        client.thief("missing")
    client.create_queue("q", deques=1)
    with pytest.raises(xtcq.QueueExists):
        client.create_queue("q")
    client.create_queue("q", deques=1, exist_ok=True)
    with pytest.raises(xtcq.QueueMismatch, match="deques is 1, not 4"):
        client.create_queue("q", exist_ok=True)
    with pytest.raises(xtcq.QueueMismatch, match="flavor is lifo, not fifo") as refused:
        client.create_queue("q", deques=1, fifo=True, exist_ok=True)
    assert refused.value.code == -17
    owner = client.owner("q")
    with pytest.raises(xtcq.NoRoom):
        client.owner("q")
    with pytest.raises(xtcq.TooLarge):
        owner.push(b"x" * (1 << 20))
    with pytest.raises(xtcq.InUse):
        client.delete_queue("q")
    owner.push("failing")
    job = client.thief("q").steal(timeout=5)
    first_id = job.id
    with pytest.raises(ZeroDivisionError):
        with job:
            1 / 0
    again = client.thief("q").steal(timeout=5)
    assert (again.payload, again.attempts) == (b"failing", 1), "a raising block nacks its job"
    assert again.id == first_id, "one job, one id across its attempts"
    again.release()


def test_a_block_that_settles_its_job_itself_is_left_as_it_is(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("self", deques=1)
    client.owner("self").push(b"j")
    thief = client.thief("self")
    with thief.steal(timeout=5) as job:
        job.release()  # not run after all: the block's end must not ack it
    again = thief.steal(timeout=5)
    assert (again.payload, again.attempts) == (b"j", 0)
    again.ack()
    with pytest.raises(xtcq.InvalidArgument, match="settled"):
        again.ack()


def test_no_free_file_descriptor_is_out_of_resources_not_unreachable(daemon):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
    held = []
    try:
        while True:
            try:
                held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
        with pytest.raises(xtcq.OutOfResources, match="Too many open files") as e:
            xtcq.Client(daemon)
        assert isinstance(e.value, OSError) and not isinstance(e.value, xtcq.Unreachable)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    xtcq.Client(daemon).create_queue("after", exist_ok=True)


def test_a_batch_steal_takes_what_is_there_and_each_job_settles_alone(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("batch", deques=1, fifo=True)
    owner = client.owner("batch")
    for i in range(10):
        owner.push("job-%d" % i)
    thief = client.thief("batch")
    jobs = thief.steal_batch(4)
    assert [j.payload for j in jobs] == [b"job-0", b"job-1", b"job-2", b"job-3"]
    jobs[0].fail("boom")
    for j in jobs[1:]:
        j.ack()
    # The failed job comes back first, alone: a batch takes from the overflow ring while
    # it holds any, else from one deque.
    again = thief.steal_batch(128)
    assert [(j.payload, j.attempts) for j in again] == [(b"job-0", 1)]
    again[0].ack()
    rest = thief.steal_batch(128)
    assert [j.payload for j in rest] == [b"job-%d" % i for i in range(4, 10)]
    for j in rest:
        j.ack()
    assert thief.steal_batch(8) == []
    for bad in (0, 129, -1, 2.0, True, "3"):
        with pytest.raises(xtcq.InvalidArgument):
            thief.steal_batch(bad)


def test_an_inherited_client_raises_forked_in_the_child(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("f", deques=1)
    owner = client.owner("f")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            owner.push(b"from the child")
            os.write(w, b"pushed")
        except xtcq.Forked:
            os.write(w, b"forked")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"forked"
    owner.push(b"parent")  # the parent's handles still work
    assert client.thief("f").steal(timeout=5).payload == b"parent"


def test_bad_arguments_are_invalid_argument_not_silently_changed(daemon):
    client = xtcq.Client(daemon)
    with pytest.raises(xtcq.InvalidArgument, match="NUL"):
        client.create_queue("pyq\0junk")
    with pytest.raises(xtcq.InvalidArgument, match="NUL"):
        xtcq.Client(daemon + "\0x")
    for bad in (2**32 + 1, -1, 1.5, True):
        with pytest.raises(xtcq.InvalidArgument, match="deques"):
            client.create_queue("sizes", deques=bad)
    with pytest.raises(xtcq.InvalidArgument, match="lease_ms"):
        client.create_queue("sizes", lease_ms=-1)
    with pytest.raises(xtcq.NoSuchQueue):
        client.thief("pyq")  # nothing was created under a cut name
    client.create_queue("sizes", deques=1)
    owner = client.owner("sizes")
    with pytest.raises(xtcq.InvalidArgument, match="not int"):
        owner.push(5)
    with pytest.raises(xtcq.InvalidArgument, match="timeout"):
        client.thief("sizes").steal(timeout=-1)
    owner.push(b"j")
    job = client.thief("sizes").steal(timeout=5)
    with pytest.raises(xtcq.InvalidArgument, match="lease"):
        job.extend_lease(-1)
    job.ack()


def test_an_interrupt_during_a_waiting_steal_gives_the_job_back_unrun(daemon):
    """Ctrl-C landing while steal() waits, as a job comes in: steal raises
    KeyboardInterrupt and the job stays queued with no attempt counted (max_attempts=1 would
    dead-letter a job that was claimed and then nacked when its object was collected)."""
    client = xtcq.Client(daemon)
    client.create_queue("kb", deques=1, max_attempts=1)
    owner = client.owner("kb")
    thief = client.thief("kb")

    def interrupt_then_push():
        time.sleep(0.2)  # let the main thread wait in steal first (either order must pass)
        os.kill(os.getpid(), signal.SIGINT)
        owner.push(b"once")

    t = threading.Thread(target=interrupt_then_push)
    with pytest.raises(KeyboardInterrupt):
        t.start()
        thief.steal(timeout=30)
    t.join(30)
    again = thief.steal(timeout=5)
    assert again is not None, "the interrupted claim was lost (dead-lettered at max_attempts=1)"
    assert (again.payload, again.attempts) == (b"once", 0)
    again.ack()


_WAIT_FOREVER = """
import sys, xtcq
thief = xtcq.Client(sys.argv[1]).thief("ctrlc")
try:
    print("waiting", flush=True)
    thief.steal(timeout=None)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_ends_a_steal_that_waits_without_a_limit(daemon, tmp_path):
    """SIGINT to a process blocked in steal(timeout=None) on an empty queue, as Ctrl-C in
    a terminal sends it: the steal raises KeyboardInterrupt (a steal that never looked at
    signals would wait on, and the child would be killed after 60 s)."""
    xtcq.Client(daemon).create_queue("ctrlc", deques=1)
    child = subprocess.Popen(
        [sys.executable, "-c", _WAIT_FOREVER, daemon],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
    )
    try:
        assert child.stdout.readline() == "waiting\n", child.stderr.read()
        time.sleep(0.5)  # into the steal (an interrupt before it passes too, unseen)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert (out, child.returncode) == ("interrupted\n", 3), err


def _hang_guard(seconds, what):
    """Fails the test with `what` if it is still running after `seconds` (SIGALRM): a
    steal that loops in Python or checks signals is interrupted by it."""

    def hung(*_):
        raise AssertionError("%s did not return in %d s" % (what, seconds))

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)


def test_a_nan_timeout_is_refused_naming_the_argument(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("nan", deques=1)
    thief = client.thief("nan")
    previous = signal.getsignal(signal.SIGALRM)
    try:
        _hang_guard(20, "steal(timeout=nan)")
        with pytest.raises(ValueError, match="timeout") as err:
            thief.steal(timeout=float("nan"))
        assert isinstance(err.value, xtcq.InvalidArgument)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    for bad in (-0.5, "1", True, [1]):
        with pytest.raises(xtcq.InvalidArgument, match="timeout"):
            thief.steal(timeout=bad)


@pytest.mark.parametrize("limit", [float("inf"), 1e300, None])
def test_an_infinite_timeout_waits_until_a_job_comes(daemon, limit):
    """steal(timeout=inf) waits without a limit, as None does: a job pushed 0.3 s later (by
    a SIGALRM handler, which runs while the steal waits) is the one it returns."""
    client = xtcq.Client(daemon)
    client.create_queue("inf", deques=1)
    owner, thief = client.owner("inf"), client.thief("inf")
    previous = signal.signal(signal.SIGALRM, lambda *_: owner.push(b"late"))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        job = thief.steal(timeout=limit)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert job is not None and job.payload == b"late"
    job.ack()


def test_a_delayed_push_and_a_retry_after_a_delay_wait_their_time(daemon):
    import time

    client = xtcq.Client(daemon)
    client.create_queue("later", deques=1)
    thief = client.thief("later")
    t0 = time.monotonic()
    client.injector("later").push_delayed(b"x", 0.5)
    assert thief.steal() is None, "seen before it was due"
    job = thief.steal(timeout=20)
    assert job.payload == b"x" and time.monotonic() - t0 >= 0.5
    t1 = time.monotonic()
    job.fail_after(0.3, "again")
    job = thief.steal(timeout=20)
    assert job.attempts == 1 and time.monotonic() - t1 >= 0.3
    job.ack()
    with pytest.raises(xtcq.InvalidArgument):
        client.injector("later").push_delayed(b"y", -1)


def test_a_paused_queue_takes_pushes_and_gives_nothing_until_resumed(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("held", deques=1)
    thief = client.thief("held")
    assert client.pause_queue("held") is False, "was not paused"
    assert client.pause_queue("held") is True, "already paused"
    client.injector("held").push(b"x")
    assert thief.steal() is None, "taken from a paused queue"
    got = []
    waiter = threading.Thread(target=lambda: got.append(thief.steal(timeout=20)))
    waiter.start()
    time.sleep(0.2)
    assert not got, "a waiting steal took from a paused queue"
    assert client.resume_queue("held") is True
    waiter.join(30)
    assert got and got[0] is not None and got[0].payload == b"x"
    got[0].ack()
    assert client.resume_queue("held") is False, "was not paused any more"
    with pytest.raises(xtcq.XtcqError):
        client.pause_queue("no-such-queue")


@pytest.mark.parametrize("kind", ["futex", "datagram"])
def test_steal_async_is_woken_by_a_push_from_another_process(daemon, kind, monkeypatch):
    import asyncio

    # XTCQ_WAKE_FD picks the wake descriptor's kind (read when the thief makes it): the futex
    # kind (an io_uring futex wait) where the kernel allows it, and the datagram fallback.
    monkeypatch.setenv("XTCQ_WAKE_FD", kind)
    queue = "aq"
    xtcq.Client(daemon).create_queue(queue)
    wake_dir = daemon + ".wake"

    async def main():
        thief = xtcq.Client(daemon).thief(queue)
        task = asyncio.ensure_future(thief.steal_async())
        await asyncio.sleep(0.2)
        if task.done() and kind == "futex" and isinstance(task.exception(), xtcq.XtcqError):
            pytest.skip(f"futex-kind wake descriptors: {task.exception()}")
        assert not task.done(), "steal_async returned with nothing queued"
        sockets = os.listdir(wake_dir) if os.path.isdir(wake_dir) else []
        # Only the datagram kind asks the daemon for a socket.
        assert (len(sockets) == 1) == (kind == "datagram"), f"{kind}: {sockets}"
        push = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            f"import xtcq; xtcq.Client({daemon!r}).owner({queue!r}).push(b'from afar')",
        )
        assert await push.wait() == 0
        job = await asyncio.wait_for(task, 30)
        with job:
            assert job.payload == b"from afar"

    asyncio.run(main())


def test_two_tasks_stealing_from_one_thief_are_both_woken(daemon):
    # One Thief, two tasks in steal_async: each job pushed while both wait reaches one of
    # them, and the second job reaches the other while the first holds its job (a busy
    # loop): neither waits on a descriptor nobody watches.
    import asyncio

    queue = "shared"
    xtcq.Client(daemon).create_queue(queue)

    async def main():
        client = xtcq.Client(daemon)
        thief = client.thief(queue)
        owner = client.owner(queue)
        tasks = [asyncio.ensure_future(thief.steal_async()) for _ in range(2)]
        await asyncio.sleep(0.2)
        assert not any(t.done() for t in tasks), "a steal returned with nothing queued"
        owner.push(b"one")
        done, pending = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, "the first push woke no task"
        first = done.pop().result()
        owner.push(b"two")
        try:
            second = await asyncio.wait_for(pending.pop(), 10)
        except asyncio.TimeoutError:
            pytest.fail("the second task was never woken while a job was queued")
        with first, second:
            assert sorted([first.payload, second.payload]) == [b"one", b"two"]

    asyncio.run(main())


def test_cancelled_async_steals_take_nothing(daemon):
    import asyncio
    import random

    # As the tokio test (tests/client/wake_fd.rs): 1,000 jobs across two consumer tasks whose
    # steals a timer cancels at random points; every job taken once, none left claimed.
    queue = "cq"
    xtcq.Client(daemon).create_queue(queue)
    total = 1000

    async def main():
        client = xtcq.Client(daemon)
        got = []
        cancelled = 0

        async def consumer(seed):
            nonlocal cancelled
            thief = client.thief(queue)
            rng = random.Random(seed)
            while len(got) < total:
                try:
                    job = await asyncio.wait_for(thief.steal_async(), rng.uniform(0, 0.003))
                except asyncio.TimeoutError:
                    cancelled += 1
                    continue
                with job:
                    got.append(job.payload)

        async def producer():
            owner = client.owner(queue)
            for i in range(total):
                owner.push(b"job %d" % i)
                if i % 10 == 0:
                    await asyncio.sleep(0.002)

        await asyncio.wait_for(asyncio.gather(consumer(1), consumer(2), producer()), 120)
        return got, cancelled

    got, cancelled = asyncio.run(main())
    assert cancelled > 0, "no steal was cancelled"
    assert sorted(got) == sorted(b"job %d" % i for i in range(total)), "each job once"
    assert xtcq.Client(daemon).thief(queue).steal() is None, "a job left behind"
    assert xtcq.Client(daemon).check(quiescent=True) == [], "a job left claimed"


def test_steal_batch_async_refuses_a_bad_n_before_it_waits(daemon):
    import asyncio

    xtcq.Client(daemon).create_queue("bq")
    thief = xtcq.Client(daemon).thief("bq")
    for bad in (0, 129, True, 1.5):
        with pytest.raises(xtcq.InvalidArgument, match="n is 1 to 128"):
            asyncio.run(asyncio.wait_for(thief.steal_batch_async(bad), 5))


def test_cancel_job_and_flow_limits(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("limited", deques=1)
    injector = client.injector("limited")
    for p in (b"a", b"b", b"c"):
        injector.push(p)
    thief = client.thief("limited")
    held = thief.steal()
    assert held is not None
    held_id = held.id
    assert not held.cancelled()
    state = client.job_state("limited", held_id)
    assert state["state"] == "running" and state["pid"] == os.getpid(), state
    assert state["attempts"] == 0 and state["lease_left_ms"] is None, state
    assert client.cancel_job("limited", held_id) == "was_running"
    assert client.job_state("limited", held_id) == {"state": "cancelled"}
    assert client.job_state("limited", "9999.1") == {"state": "unknown"}
    assert held.cancelled()
    with pytest.raises(xtcq.JobCancelled) as raised:
        held.ack()
    assert isinstance(raised.value, xtcq.NotHeld)
    assert raised.value.code == -18
    assert not held.cancelled(), "settled: nothing held"
    assert client.cancel_job("limited", held_id) == "finished"
    assert client.cancel_job("limited", "9999.1") == "unknown"
    with pytest.raises(xtcq.InvalidArgument):
        client.cancel_job("limited", "not-an-id")
    # One start an hour: the next job is not taken until the limit is lifted.
    client.set_max_rate("limited", 1 / 3600, burst=1)
    first = thief.steal()
    assert first is not None
    first.ack()
    assert thief.steal() is None, "taken an hour early"
    client.set_max_rate("limited", 0)
    second = thief.steal()
    assert second is not None
    client.set_max_running("limited", 1)
    assert client.cancel_job("limited", "9999.1") == "unknown"
    second.ack()
    with pytest.raises(xtcq.InvalidArgument):
        client.set_max_rate("limited", -1.0)
    with pytest.raises(xtcq.InvalidArgument):
        client.set_max_rate("limited", 5.0, burst=-1)
