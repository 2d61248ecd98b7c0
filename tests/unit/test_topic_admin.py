"""Topics are created with the configured replication factor (``THREADLINE_REPLICATION_FACTOR``),
not a hard-coded 1: the admin passes it on every creation, the fixed topics and the per-thread
chunk topics alike, and the service and the client build their admin from the setting."""

from __future__ import annotations

import asyncio
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


async def test_three_replicas_or_more_need_a_majority_in_sync(fake_client: type[_FakeAdminClient]) -> None:
    # decision 205: an acks=all record is on a majority of replicas, whatever the broker's default
    admin = TopicAdmin("broker:9092", replication_factor=3)
    await admin.start()
    await admin.ensure(["p.ingress"], partitions=12)
    await admin.ensure_chunk_topic("p.chunks.r.t.abc", retention_ms=1000)
    await admin.ensure(["p.own"], config={"min.insync.replicas": "3"})  # a caller's own setting wins
    got = {t.name: t.topic_configs.get("min.insync.replicas") for t in fake_client.created}
    assert got == {"p.ingress": "2", "p.chunks.r.t.abc": "2", "p.own": "3"}


@pytest.mark.parametrize(("replicas", "min_isr"), [(1, None), (2, None), (3, "2"), (4, "3"), (5, "3")])
def test_min_insync_replicas_is_a_majority_from_three(replicas: int, min_isr: str | None) -> None:
    assert admin_mod.replication_config(replicas).get("min.insync.replicas") == min_isr


async def test_a_chunk_topic_is_indexed_every_mebibyte_not_every_4_kib(fake_client: type[_FakeAdminClient]) -> None:
    # decision 89: the first index entry of a fresh segment held a thread's produce for up to 170 ms
    admin = TopicAdmin("broker:9092")
    await admin.start()
    await admin.ensure_chunk_topic("p.chunks.r.t.abc", retention_ms=1000)
    [topic] = fake_client.created
    assert topic.topic_configs == {"retention.ms": "1000", "index.interval.bytes": str(1024 * 1024)}


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
    assert ThreadlineClient(settings).transport.admin.replication_factor == 3
    assert Settings(replication_factor=1).replication_factor == 1
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings(replication_factor=0)


class _FakeRegistry:
    """Stands in for ``ChunkTopicRegistry``: ``deleting`` topics are missing from ``use_many``'s
    answer and taken by ``use``; ``use`` fails for ``broken`` topics."""

    def __init__(self, deleting: frozenset[str] = frozenset(), broken: frozenset[str] = frozenset()) -> None:
        self.deleting, self.broken = set(deleting), set(broken)
        self.many: list[list[tuple[str, str, str]]] = []
        self.single: list[str] = []

    async def use_many(self, rows: list[tuple[str, str, str]]) -> list[str]:
        self.many.append(rows)
        return [r[0] for r in rows if r[0] not in self.deleting]

    async def use(self, topic: str, resource_id: str, thread_id: str) -> str:
        self.single.append(topic)
        if topic in self.broken:
            raise TimeoutError(f"{topic} still being deleted")
        return "inserted"


async def test_concurrent_chunk_topic_takes_are_one_registry_statement_and_one_broker_request(
        fake_client: type[_FakeAdminClient], monkeypatch: pytest.MonkeyPatch) -> None:
    describes: list[list[str]] = []
    original = _FakeAdminClient.describe_topics

    async def counted(self: _FakeAdminClient, topics: list[str]) -> list[dict[str, Any]]:
        describes.append(list(topics))
        return await original(self, topics)

    monkeypatch.setattr(_FakeAdminClient, "describe_topics", counted)
    registry = _FakeRegistry(deleting=frozenset({"p.chunks.t7", "p.chunks.t9"}), broken=frozenset({"p.chunks.t9"}))
    learned: list[list[str]] = []
    admin = TopicAdmin("broker:9092", registry=registry, on_taken=learned.append)  # type: ignore[arg-type] # the fake registry
    await admin.start()
    topics = [f"p.chunks.t{i}" for i in range(40)]
    got = await asyncio.gather(*(admin.ensure_chunk_topic(t, retention_ms=1000, thread=("r", t)) for t in topics),
                               return_exceptions=True)
    assert [i for i, g in enumerate(got) if isinstance(g, BaseException)] == [9] and isinstance(got[9], TimeoutError)
    assert len(registry.many) == 1 and len(registry.many[0]) == 40
    assert registry.single == ["p.chunks.t7", "p.chunks.t9"]  # the deleting ones, taken on their own
    ok = [t for t in topics if t != "p.chunks.t9"]
    assert sorted(t.name for t in fake_client.created) == sorted(ok)  # one CreateTopics request for the batch
    assert len(describes) == 1 and sorted(describes[0]) == sorted(ok)
    assert [sorted(b) for b in learned] == [sorted(ok)]
    # taken: trusted without asking again
    await asyncio.gather(*(admin.ensure_chunk_topic(t, retention_ms=1000, thread=("r", t)) for t in ok))
    assert len(registry.many) == 1
    await admin.stop()


async def test_a_topic_without_a_leader_is_asked_about_again_alone(
        fake_client: type[_FakeAdminClient], monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []

    async def lagging(self: _FakeAdminClient, topics: list[str]) -> list[dict[str, Any]]:
        asked.append(list(topics))
        late = len(asked) == 1
        return [{"topic": t, "error_code": 0,
                 "partitions": [{"partition": 0, "leader": -1 if late and t == "p.b" else 1}]} for t in topics]

    monkeypatch.setattr(_FakeAdminClient, "describe_topics", lagging)
    admin = TopicAdmin("broker:9092", registry=_FakeRegistry())  # type: ignore[arg-type] # the fake registry
    await admin.start()
    await asyncio.gather(*(admin.ensure_chunk_topic(t, retention_ms=1, thread=("r", t)) for t in ("p.a", "p.b")))
    assert asked == [["p.a", "p.b"], ["p.b"]]


async def test_a_new_topics_leader_is_asked_for_soon_then_less_often(
        fake_client: type[_FakeAdminClient], monkeypatch: pytest.MonkeyPatch) -> None:
    # decision 90: a fixed 50 ms between metadata requests made every new thread's topic take >= 50 ms
    asked: list[list[str]] = []

    async def late(self: _FakeAdminClient, topics: list[str]) -> list[dict[str, Any]]:
        asked.append(list(topics))
        leader = 1 if len(asked) > 7 else -1
        return [{"topic": t, "error_code": 0, "partitions": [{"partition": 0, "leader": leader}]} for t in topics]

    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(_FakeAdminClient, "describe_topics", late)
    monkeypatch.setattr(admin_mod.asyncio, "sleep", sleep)
    admin = TopicAdmin("broker:9092")
    await admin.start()
    await admin.ensure_one("p.chunks.r.t.new")
    assert slept == [0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05]
    assert sum(admin_mod.LEADER_POLL_S) > 2.4  # as long a wait in all as before


class _Metadata:
    def __init__(self, topics: list[dict[str, Any]]) -> None:
        self.topics = topics

    def to_object(self) -> dict[str, Any]:
        return {"topics": self.topics}


async def test_a_take_asks_whether_the_topic_is_there_before_creating_it(
        fake_client: type[_FakeAdminClient], monkeypatch: pytest.MonkeyPatch) -> None:
    # decision 101: a subscriber usually made the thread's topic; a CreateTopics for it is a wasted request
    sent: list[Any] = []

    async def metadata(self: _FakeAdminClient, request: Any) -> _Metadata:
        sent.append(request)
        return _Metadata([{"topic": t, "error_code": 0, "partitions": [{"partition": 0, "leader": 1}]}
                          if t == "p.there" else {"topic": t, "error_code": 3, "partitions": []}
                          for t in request._topics])

    monkeypatch.setattr(_FakeAdminClient, "_send_request", metadata, raising=False)
    learned: list[list[str]] = []
    admin = TopicAdmin("broker:9092", registry=_FakeRegistry(), on_taken=learned.append)  # type: ignore[arg-type] # the fake registry
    await admin.start()
    await asyncio.gather(*(admin.ensure_chunk_topic(t, retention_ms=1, thread=("r", t)) for t in ("p.there", "p.new")))
    assert len(sent) == 1 and sent[0]._allow_auto_topic_creation is False  # it never makes a topic with the broker's defaults
    assert [t.name for t in fake_client.created] == ["p.new"]
    assert learned == [["p.there"], ["p.new"]]  # the producer learns the one there at once


async def test_a_take_whose_question_fails_creates_as_before(
        fake_client: type[_FakeAdminClient], monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(self: _FakeAdminClient, request: Any) -> Any:
        raise ConnectionError("node went away")

    monkeypatch.setattr(_FakeAdminClient, "_send_request", broken, raising=False)
    admin = TopicAdmin("broker:9092", registry=_FakeRegistry())  # type: ignore[arg-type] # the fake registry
    await admin.start()
    await admin.ensure_chunk_topic("p.a", retention_ms=1, thread=("r", "p.a"))
    assert [t.name for t in fake_client.created] == ["p.a"]


async def test_a_batch_of_takes_creates_its_topics_in_one_request_per_retention(
        fake_client: type[_FakeAdminClient], monkeypatch: pytest.MonkeyPatch) -> None:
    requests: list[list[tuple[str, str]]] = []
    original = _FakeAdminClient.create_topics

    async def recorded(self: _FakeAdminClient, new: list[Any]) -> Any:
        requests.append([(t.name, t.topic_configs["retention.ms"]) for t in new])
        return await original(self, new)

    monkeypatch.setattr(_FakeAdminClient, "create_topics", recorded)
    admin = TopicAdmin("broker:9092", registry=_FakeRegistry())  # type: ignore[arg-type] # the fake registry
    await admin.start()
    takes = [("p.a", 9000), ("p.b", 1000), ("p.c", 9000), ("p.d", 1000)]
    await asyncio.gather(*(admin.ensure_chunk_topic(t, retention_ms=ms, thread=("r", t)) for t, ms in takes))
    assert requests == [[("p.b", "1000"), ("p.d", "1000")], [("p.a", "9000"), ("p.c", "9000")]]
