"""Unique jobs from Python against a real daemon: a push with a key is refused while a job of
the queue holding it lives (DuplicateKey names it), answered with it under or_existing, and
free again once the job is acked."""

import pytest

import xtcq


def test_a_key_is_held_while_its_job_lives(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("uniq")
    injector = client.injector("uniq")
    assert injector.push(b"plain") is None
    job_id, new = injector.push(b"first", key="order-42")
    assert new
    with pytest.raises(xtcq.DuplicateKey) as refused:
        injector.push(b"second", key=b"order-42")
    assert refused.value.existing == job_id
    assert refused.value.code == -19
    assert injector.push(b"second", key="order-42", or_existing=True) == (job_id, False)
    owner = client.owner("uniq")
    other_id, new = owner.push(b"other", key="order-43")
    assert new and other_id != job_id
    with pytest.raises(xtcq.InvalidArgument):
        injector.push(b"x", key="k" * 65)
    thief = client.thief("uniq")
    for _ in range(3):
        job = thief.steal(timeout=5)
        job.ack()
    again_id, new = injector.push(b"third", key="order-42")
    assert new and again_id != job_id
