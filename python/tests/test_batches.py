"""Batches from Python: open with a callback, push through an owner, seal, wait."""

import xtcq


def test_a_batch_completes_once_its_jobs_ran_and_pushes_its_callback(daemon):
    client = xtcq.Client(daemon)
    client.create_queue("b")
    opened = client.open_batch("b", "farm", on_complete="done")
    assert opened["status"] == "open" and opened["pushed"] == 0
    owner = client.owner("b")
    owner.set_batch(client, "farm")
    for i in range(3):
        owner.push(str(i))
    owner.set_batch(client, None)
    owner.push("outside")
    assert client.seal_batch("b", "farm")["status"] == "sealed"
    assert client.wait_batch("b", "farm", timeout=0.2) is None, "its jobs are still queued"
    thief = client.thief("b")
    ran = []
    for _ in range(4):
        job = thief.steal(timeout=5)
        ran.append(job.payload)
        job.ack()
    done = client.wait_batch("b", "farm", timeout=30)
    assert done == {
        "name": "farm",
        "status": "complete",
        "pushed": 3,
        "running": 0,
        "acked": 3,
        "dead": 0,
        "cancelled": 0,
    }
    callback = thief.steal(timeout=5)
    assert callback.payload == b"done"
    callback.ack()
    assert client.batch_progress("b", "farm")["status"] == "complete"
