"""Owner.push_batch against a real daemon: every payload queued once and in order, past the
deque's room and past 128; bad arguments refused before anything is queued; a part-way
failure says how many went in."""

import multiprocessing
import os

import pytest

import xtcq


def _steal_all(thief):
    got = []
    while True:
        jobs = thief.steal_batch(32)
        if not jobs:
            return got
        for job in jobs:
            got.append(job.payload)
            job.ack()


def test_a_batch_past_the_deque_and_past_128_queues_every_payload_once(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("batch", deques=1, capacity=64, fifo=True)
    owner = client.owner("batch")
    payloads = [b"%d" % i for i in range(300)] + [b"", b"a\0b", "text"]
    assert owner.push_batch(payloads) == 303
    assert owner.push_batch([]) == 0
    got = _steal_all(client.thief("batch"))
    assert sorted(got) == sorted(payloads[:-1] + [b"text"]), "a job was lost or came twice"
    assert client.check(quiescent=True) == []


def _consume(socket, n, out):
    thief = xtcq.Client(socket).thief("apart")
    got = []
    while len(got) < n:
        job = thief.steal(timeout=30)
        if job is None:
            break
        got.append(int(job.payload))
        job.ack()
    out.send(got)


def test_jobs_pushed_in_batches_are_taken_once_by_another_process(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("apart", deques=2)
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    worker = ctx.Process(target=_consume, args=(daemon, 1000, theirs))
    worker.start()
    owner = client.owner("apart")
    for first in range(0, 1000, 100):
        assert owner.push_batch([str(i) for i in range(first, first + 100)]) == 100
    got = mine.recv()
    worker.join()
    assert sorted(got) == list(range(1000))


@pytest.mark.parametrize("bad", ["abc", b"abc", 5, None])
def test_a_batch_that_is_not_a_sequence_of_payloads_is_refused(daemon, bad):
    client = xtcq.Client(daemon)
    client.create_queue("bad", deques=1)
    with pytest.raises((TypeError, ValueError)):
        client.owner("bad").push_batch(bad)


def test_a_bad_payload_in_the_middle_queues_nothing(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("middle", deques=1)
    owner = client.owner("middle")
    with pytest.raises(xtcq.InvalidArgument):
        owner.push_batch([b"1", 2, b"3"])
    with pytest.raises(xtcq.TooLarge) as err:
        owner.push_batch([b"1", b"x" * 1_000_000, b"3"])
    assert err.value.queued == 0
    assert _steal_all(client.thief("middle")) == []


def test_a_full_queue_stops_the_batch_and_says_how_many_went_in(daemon):
    client = xtcq.Client(daemon)
    # The default segment's overflow ring holds far more than this; a queue of one small
    # deque fills at its deque plus the ring, so push until Full and count.
    client.create_queue("full", deques=1, capacity=64)
    owner = client.owner("full")
    total = 0
    payloads = [b"%d" % i for i in range(1_000_000)]
    with pytest.raises(xtcq.Full) as err:
        for first in range(0, len(payloads), 10_000):
            total += owner.push_batch(payloads[first : first + 10_000])
    total += err.value.queued
    got = _steal_all(client.thief("full"))
    assert sorted(got, key=int) == payloads[:total], "exactly the jobs said queued came out"


def test_an_inherited_owner_refuses_a_batch_in_the_child(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("forked", deques=1)
    owner = client.owner("forked")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            owner.push_batch([b"from", b"the child"])
            os.write(w, b"pushed")
        except xtcq.Forked as e:
            os.write(w, b"forked %d" % e.queued)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"forked 0"
    assert owner.push_batch([b"parent"]) == 1  # the parent's handle still works
    assert _steal_all(client.thief("forked")) == [b"parent"]
