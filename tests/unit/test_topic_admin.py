"""Topics are created with the configured replication factor (``THREADLINE_REPLICATION_FACTOR``),
not a hard-coded 1: the admin passes it on every creation, the fixed topics and the per-thread
chunk topics alike, and the service and the client build their admin from the setting."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from threadline.client.client import ThreadlineClient
from threadline.config import Settings
from threadline.kafka import admin as admin_mod
from threadline.kafka.admin import TopicAdmin
from threadline.service import Service


class _FakeAdminClient:
    """Stands in for ``AIOKafkaAdminClient``: records the ``NewTopic``s it is asked to create."""

    created: list[Any] = []
    answer_code = 0

    def __init__(self, **_kwargs: Any) -> None:
        pass

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def create_topics(self, new: list[Any]) -> Any:
        type(self).created.extend(new)
        return SimpleNamespace(topic_errors=[(t.name, type(self).answer_code, None) for t in new])

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return [{"topic": t, "error_code": 0, "partitions": [{"partition": 0, "leader": 1}]} for t in topics]


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch) -> type[_FakeAdminClient]:
    _FakeAdminClient.created = []
    _FakeAdminClient.answer_code = 0
    monkeypatch.setattr(admin_mod, "AIOKafkaAdminClient", _FakeAdminClient)
    return _FakeAdminClient


async def test_every_created_topic_gets_the_replication_factor(fake_client: type[_FakeAdminClient]) -> None:
    admin = TopicAdmin("broker:9092", replication_factor=3)
    await admin.start()
    await admin.ensure(["p.ingress", "p.step-tasks"], partitions=12)
    await admin.ensure_chunk_topic("p.chunks.r.t.abc", retention_ms=1000)
    await admin.stop()
    got = {t.name: (t.num_partitions, t.replication_factor) for t in fake_client.created}
    assert got == {"p.ingress": (12, 3), "p.step-tasks": (12, 3), "p.chunks.r.t.abc": (1, 3)}


async def test_default_is_one(fake_client: type[_FakeAdminClient]) -> None:
    admin = TopicAdmin("broker:9092")
    await admin.start()
    await admin.ensure(["p.lifecycle"], partitions=2)
    assert [t.replication_factor for t in fake_client.created] == [1]


async def test_too_many_replicas_names_the_setting(fake_client: type[_FakeAdminClient]) -> None:
    fake_client.answer_code = 38  # INVALID_REPLICATION_FACTOR
    admin = TopicAdmin("broker:9092", replication_factor=5)
    await admin.start()
    with pytest.raises(RuntimeError, match=r"replication factor 5 exceeds.*THREADLINE_REPLICATION_FACTOR"):
        await admin.ensure(["p.ingress"], partitions=1)


def test_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="replication_factor"):
        TopicAdmin("broker:9092", replication_factor=0)


def test_setting_reaches_service_and_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADLINE_REPLICATION_FACTOR", "3")
    settings = Settings()
    assert settings.replication_factor == 3
    assert Service(settings).admin.replication_factor == 3
    assert ThreadlineClient(settings)._admin.replication_factor == 3
    assert Settings(replication_factor=1).replication_factor == 1
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings(replication_factor=0)
