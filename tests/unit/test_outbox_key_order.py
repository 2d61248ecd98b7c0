"""The outbox relay keeps a key's order across topics (decision 65): a run's ``finish`` chunk (its
thread's chunk topic) and its step result (step-results) share the thread's key, and a relay
pass (``_send(..., key_order=True)``) that carries both sends the result only once the ``finish``
was acknowledged, and not at all when the ``finish`` was not. Before, the pass sent each topic's rows side by side: a result
could be applied by the orchestrator (the run ended, its lease released) while its ``finish``
waited for the chunk topic's metadata, or was refused and left for a later pass — the stream
ended without its ``finish`` at a subscriber reading at that moment.

A fake producer stands in for Kafka: these check which records the outbox hands to the
producer, and when, which is pure logic of :meth:`Outbox._send`."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from threadline.flows import publish
from threadline.flows.publish import Outbox
from threadline.store.db import Database
from threadline.store.outbox import OutboxRow

pytestmark = pytest.mark.unit

CHUNKS, RESULTS, OTHER = "tl.chunks.res.th", "tl.step-results", "tl.lifecycle"


class FakeProducer:
    """Acknowledges records of ``RESULTS`` and ``OTHER`` at once; a chunk-topic record after
    ``chunk_delay_s``, or fails it with ``chunk_error``. ``events``: what happened, in order."""

    def __init__(self, *, chunk_delay_s: float = 0.0, chunk_error: BaseException | None = None) -> None:
        self.chunk_delay_s = chunk_delay_s
        self.chunk_error = chunk_error
        self.events: list[str] = []

    async def send_raw(self, topic: str, value: bytes, *, key: Any = None, headers: Any = None,
                       partition: int | None = None) -> asyncio.Future[Any]:
        self.events.append(f"send {value.decode()}")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if topic != CHUNKS:
            self.events.append(f"ack {value.decode()}")
            fut.set_result(None)
            return fut

        async def settle() -> None:
            await asyncio.sleep(self.chunk_delay_s)
            if self.chunk_error is not None:
                self.events.append(f"refused {value.decode()}")
                fut.set_exception(self.chunk_error)
            else:
                self.events.append(f"ack {value.decode()}")
                fut.set_result(None)

        asyncio.get_running_loop().create_task(settle())
        return fut


def _row(box_id: int, topic: str, key: str | None, name: str) -> OutboxRow:
    return OutboxRow(box_id, topic, key, [], name.encode())


def _box(producer: FakeProducer, ack_timeout_s: float = 2.0) -> Outbox:
    return Outbox(cast(Database, None), cast(Any, producer), ack_timeout_s=ack_timeout_s)  # _send reads no row


async def test_a_result_is_sent_only_after_its_finish_was_acknowledged():
    producer = FakeProducer(chunk_delay_s=0.05)
    rows = [_row(1, CHUNKS, "k", "finish"), _row(2, RESULTS, "k", "result"), _row(3, RESULTS, "other", "r2")]
    acked, failed = await _box(producer)._send(rows, key_order=True)
    assert failed == {} and acked == [1, 2, 3]
    assert producer.events.index("send result") > producer.events.index("ack finish")
    assert producer.events.index("send r2") < producer.events.index("ack finish")  # another key does not wait


async def test_a_result_whose_finish_was_refused_is_not_sent_and_both_stay_for_the_relay():
    producer = FakeProducer(chunk_error=RuntimeError("refused"))
    rows = [_row(1, CHUNKS, "k", "finish"), _row(2, RESULTS, "k", "result"), _row(3, RESULTS, "other", "r2")]
    acked, failed = await _box(producer)._send(rows, key_order=True)
    assert "send result" not in producer.events
    assert set(failed) == {1, 2} and acked == [3]


async def test_a_result_whose_finish_was_not_acknowledged_in_time_is_not_sent():
    producer = FakeProducer(chunk_delay_s=5.0)
    rows = [_row(1, CHUNKS, "k", "finish"), _row(2, RESULTS, "k", "result")]
    loop = asyncio.get_running_loop()
    started = loop.time()
    acked, failed = await _box(producer, ack_timeout_s=0.2)._send(rows, key_order=True)
    assert loop.time() - started < 1.0  # one deadline for all rounds
    assert "send result" not in producer.events and acked == [] and set(failed) == {1, 2}
    assert isinstance(failed[1], TimeoutError)


def test_key_rounds_split_a_key_at_each_change_of_topic_and_keep_id_order():
    rows = [_row(1, CHUNKS, "k", "finish"), _row(2, RESULTS, "k", "result"), _row(3, RESULTS, "j", "j1"),
            _row(4, RESULTS, "k", "result2"), _row(5, OTHER, None, "nokey"), _row(6, CHUNKS, "k", "late-chunk"),
            _row(7, RESULTS, "j", "j2")]
    assert [[r.id for r in batch] for batch in publish.key_rounds(rows)] == [[1, 3, 5, 7], [2, 4], [6]]
    assert [[r.id for r in batch] for batch in publish.key_rounds(rows[2:3])] == [[3]]
    assert publish.key_rounds([]) == []


async def test_a_handlers_own_flush_sends_every_row_at_once():
    """Off the relay (``key_order`` off: a handler's flush on its path) nothing waits for another
    topic's acknowledgement."""
    producer = FakeProducer(chunk_delay_s=0.05)
    rows = [_row(1, CHUNKS, "k", "finish"), _row(2, RESULTS, "k", "result")]
    acked, failed = await _box(producer)._send(rows)
    assert failed == {} and acked == [1, 2]
    assert producer.events.index("send result") < producer.events.index("ack finish")
