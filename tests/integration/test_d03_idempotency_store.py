"""D03 (cases-3), the store part (migration 0031, decision 213): a key is claimed once, two claims
at once see one row, the first answer is kept once, and a key older than its 24 hours is claimed
anew (and deleted by the sweep)."""

from __future__ import annotations

import asyncio
import uuid

from threadline.store import idempotency as keys


async def test_a_key_is_claimed_once_its_answer_kept_once_and_it_expires(readers) -> None:
    db, conn = readers
    scope, key = f"res-{uuid.uuid4().hex[:8]}", "k-1"

    async def claim(request_id: str) -> keys.KeyRow:
        async with db.connection() as c:
            return await keys.claim(c, scope=scope, key=key, fingerprint="fp", request_id=request_id)

    one, two = await asyncio.gather(claim("req-a"), claim("req-b"))  # at once: one row
    assert sorted([one.claimed, two.claimed]) == [False, True]
    assert one.request_id == two.request_id
    first = one.request_id
    await keys.record(conn, scope=scope, key=key, request_id=first, status=202, answer={"run_id": "run_1"})
    await keys.record(conn, scope=scope, key=key, request_id=first, status=202, answer={"run_id": "other"})
    again = await claim("req-c")
    assert (again.claimed, again.request_id, again.status, again.answer) == (False, first, 202, {"run_id": "run_1"})
    other = await keys.claim(conn, scope=f"{scope}-b", key=key, fingerprint="fp", request_id="req-d")
    assert other.claimed and other.request_id == "req-d"  # another resource's same key: another key

    await conn.execute("UPDATE idempotency_keys SET created_at = now() - make_interval(secs => $2) "
                       "WHERE scope = $1", scope, float(keys.KEEP_S + 60))
    renewed = await claim("req-e")
    assert (renewed.claimed, renewed.request_id, renewed.status) == (True, "req-e", None)
    await conn.execute("UPDATE idempotency_keys SET created_at = now() - make_interval(secs => $2) "
                       "WHERE scope = $1", scope, float(keys.KEEP_S + 60))
    assert await keys.forget_expired(conn) >= 1
    assert await conn.fetchval("SELECT count(*) FROM idempotency_keys WHERE scope = $1", scope) == 0


async def test_one_request_id_awaited_twice_is_answered_twice(cluster) -> None:
    """A write retried under its key on the same gateway while the first still waits sends the same
    request id: one reply must answer both waiters, not only the latest (decision 213)."""
    from aiokafka import AIOKafkaProducer

    from threadline.client.replies import ReplyListener
    from threadline.events.codec import encode
    from threadline.events.replies import Accepted, RunResult
    from threadline.kafka.admin import TopicAdmin

    topic = f"{cluster.prefix}.d03-replies.{uuid.uuid4().hex[:8]}"
    admin, listener = TopicAdmin(cluster.bootstrap), ReplyListener(cluster.bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    try:
        await admin.ensure([topic], partitions=1)
        await listener.start()
        await producer.start()
        first, retried = listener.expect("req-1", "accepted"), listener.expect("req-1", "accepted")
        results = [listener.expect_first("req-1", ("result",)), listener.expect_first("req-1", ("result",))]
        for reply in (Accepted(request_id="req-1", action="wake", run_id="run_1"),
                      RunResult(request_id="req-1", run_id="run_1", text="done", finish_reason="stop")):
            value, headers = encode(reply)
            await producer.send_and_wait(topic, value, headers=headers)
        async with asyncio.timeout(20):
            answered = await asyncio.gather(first, retried, *results)
        assert [r.type for r in answered] == ["accepted", "accepted", "result", "result"]
        assert {r.run_id for r in answered} == {"run_1"}
    finally:
        await producer.stop()
        await listener.stop()
        await admin.delete_and_wait([topic])
        await admin.stop()
