"""Priority levels from Python against a real daemon: a queue created with levels, pushes
at a priority from an owner and an injector (a delayed one too), a thief taking the most
urgent level first, and a priority past the levels refused."""

import pytest

import xtcq


def test_a_thief_takes_the_most_urgent_level_first(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("p", deques=1, fifo=True, levels=4, aging=0)
    owner, injector = client.owner("p"), client.injector("p")
    owner.push(b"3-owner", priority=3)
    injector.push(b"2-injector", 2)
    owner.push(b"1-owner", priority=1)
    injector.push(b"0-injector")
    owner.push(b"0-owner")
    with pytest.raises(xtcq.InvalidArgument, match="--levels 4"):
        owner.push(b"x", priority=4)
    thief = client.thief("p")
    got = []
    while (job := thief.steal()) is not None:
        got.append(job.payload)
        job.ack()
    assert got == [b"0-injector", b"0-owner", b"1-owner", b"2-injector", b"3-owner"]


def test_a_delayed_job_joins_its_level_once_due(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("d", deques=1, fifo=True, levels=2)
    injector = client.injector("d")
    injector.push_delayed(b"1-delayed", 0.2, priority=1)
    thief = client.thief("d")
    first = thief.steal(timeout=20)
    assert first.payload == b"1-delayed"
    first.nack()
    injector.push(b"1-fresh", priority=1)
    injector.push(b"0-fresh")
    got = []
    while (job := thief.steal()) is not None:
        got.append(job.payload)
        job.ack()
    assert got == [b"0-fresh", b"1-delayed", b"1-fresh"]
