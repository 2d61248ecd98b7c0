"""Every record the services and the client produce is written with ``acks=all`` and an idempotent
producer: on a replicated cluster (RF 3, ``min.insync.replicas`` 2) a record is acknowledged only
once a majority of replicas has it, so a leader change loses no acknowledged record, and a retry
across the leader change does not write it twice (docs/operations.md, decision 205)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from threadline.kafka import producer as producer_mod
from threadline.kafka.producer import Producer

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "shared" / "threadline", ROOT / "services"]
"""Where the product's code is (the services' packages and the library)."""


class _Recorder:
    """Stands in for ``AIOKafkaProducer``: keeps the keyword arguments it was built with."""

    built: list[dict[str, Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        type(self).built.append(kwargs)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


async def test_the_producer_waits_for_every_in_sync_replica_and_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    _Recorder.built = []
    monkeypatch.setattr(producer_mod, "AIOKafkaProducer", _Recorder)
    async with Producer("a:9092,b:9092,c:9092", security={"security_protocol": "SASL_SSL"}):
        pass
    [kwargs] = _Recorder.built
    assert kwargs["acks"] == "all"
    assert kwargs["enable_idempotence"] is True
    assert kwargs["bootstrap_servers"] == "a:9092,b:9092,c:9092"  # every broker, as given
    assert kwargs["security_protocol"] == "SASL_SSL"  # the TLS / SASL arguments are passed on besides


def _producer_constructions(path: Path) -> list[int]:
    """Line numbers where ``path`` calls ``AIOKafkaProducer(...)``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "AIOKafkaProducer"]


def test_no_other_module_builds_its_own_producer() -> None:
    # a producer built elsewhere could miss acks=all or idempotence; every one goes through Producer
    found = {str(p.relative_to(ROOT)): lines for folder in PRODUCT for p in sorted(folder.rglob("*.py"))
             if (lines := _producer_constructions(p))}
    assert list(found) == ["shared/threadline/kafka/producer.py"], found
