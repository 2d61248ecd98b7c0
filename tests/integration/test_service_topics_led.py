"""A service consumes its topics only once they have leaders: the services start together and each
asks for the same topics; one that is answered "exists" while another's creation is still
settling used to join its group with metadata that did not show them, so it was assigned nothing
and read nothing until the next metadata refresh, minutes later (seen in `make bench`: an ingress
that answered no request for 70 s)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from threadline.config import Settings
from threadline.kafka.admin import TopicAdmin
from threadline.service import Service


class _Probe(Service):
    name = "probe"

    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(settings)
        self._topic = topic

    def topics_in(self) -> list[str]:
        return [self._topic]

    async def handle(self, record: Any) -> None:
        pass


async def test_a_topic_another_process_is_still_creating_is_assigned_from_the_start(
        own_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = f"{own_cluster.prefix}.probe-in.{uuid.uuid4().hex[:8]}"
    settings = Settings(kafka_bootstrap=own_cluster.bootstrap, pg_dsn=own_cluster.dsn,
                        topic_prefix=own_cluster.prefix, partitions=1)
    own_ensure = TopicAdmin.ensure

    async def answered_exists(self: TopicAdmin, topics: list[str], **kw: Any) -> set[str]:
        # another service's creation of the probe's topic is in flight: "exists", not there yet
        await own_ensure(self, [t for t in topics if t != topic], **kw)
        return set()

    monkeypatch.setattr(TopicAdmin, "ensure", answered_exists)
    other = TopicAdmin(own_cluster.bootstrap)
    await other.start()

    async def create_later() -> None:
        await asyncio.sleep(0.5)
        await own_ensure(other, [topic], partitions=1)

    creating = asyncio.create_task(create_later())
    service = _Probe(settings, topic)
    try:
        await service.start()
        await creating
        assert service.consumer is not None
        async with asyncio.timeout(20):
            while not service.consumer.joined:
                await asyncio.sleep(0.05)
        assigned = service.consumer._consumer.assignment()
        assert {(tp.topic, tp.partition) for tp in assigned} == {(topic, 0)}
    finally:
        creating.cancel()
        await service.stop()
        await other.stop()
