"""Secure Kafka: every service, the client and the CLI reach Kafka over SASL_SSL
(TLS with SASL PLAIN or SCRAM) from the ``THREADLINE_KAFKA_*`` settings; a full turn with a tool
call runs over the native cluster's SASL_SSL listener (deploy/native/kafka.sh), and a wrong
password is refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from tests.e2e.helpers import collect_run, own_services
from threadline.client import ThreadlineClient
from threadline.client.client import BrokerUnavailableError
from threadline.config import Settings
from threadline.testing import model_script as ms

ROOT = Path(__file__).resolve().parents[2]
CA = Path(os.environ.get("THREADLINE_RUN_DIR") or ROOT / ".run") / "kafka" / "tls" / "ca.pem"


@pytest.fixture
def sasl(cluster) -> dict[str, str]:
    if not CA.is_file():
        pytest.skip("the SASL_SSL listener belongs to the native cluster (deploy/native/kafka.sh)")
    host, port = cluster.bootstrap.rsplit(":", 1)
    return {"THREADLINE_KAFKA_BOOTSTRAP": f"{host}:{int(port) + 2}", "THREADLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "THREADLINE_KAFKA_SASL_USERNAME": "threadline", "THREADLINE_KAFKA_SASL_PASSWORD": "threadline-secret",
            "THREADLINE_KAFKA_SSL_CAFILE": str(CA)}


def _settings(cluster, env: dict[str, str], **overrides: str) -> Settings:
    merged = {**env, **overrides}
    return Settings(kafka_bootstrap=merged["THREADLINE_KAFKA_BOOTSTRAP"], pg_dsn=cluster.dsn,
                    topic_prefix=cluster.prefix, partitions=4,
                    kafka_security_protocol=merged["THREADLINE_KAFKA_SECURITY_PROTOCOL"],
                    kafka_sasl_mechanism=merged.get("THREADLINE_KAFKA_SASL_MECHANISM", "PLAIN"),
                    kafka_sasl_username=merged["THREADLINE_KAFKA_SASL_USERNAME"],
                    kafka_sasl_password=merged["THREADLINE_KAFKA_SASL_PASSWORD"],
                    kafka_ssl_cafile=merged["THREADLINE_KAFKA_SSL_CAFILE"], reply_timeout_s=10)


async def test_a_full_turn_over_sasl_ssl(services, model, cluster, sasl):
    thread = f"th-sasl-{uuid.uuid4().hex[:6]}"
    model.queue([ms.tool_calls(ms.tool_call("nap", {"seconds": 0.1}, id="n1")), ms.text("rested over TLS")],
                model="threadline-sleepy")
    # the services authenticate with SCRAM-SHA-512, the client with PLAIN
    with own_services(services, "sasl", **sasl, THREADLINE_KAFKA_SASL_MECHANISM="SCRAM-SHA-512"):
        async with ThreadlineClient(_settings(cluster, sasl)) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            await (await tl.stream("nap", agent_id="sleepy-tools", resource_id="res-1", thread_id=thread)).accepted
            chunks = await collect_run(sub, timeout_s=60)
            await sub.unsubscribe()
        # the CLI too (SCRAM-SHA-256), from the environment
        env = {**os.environ, "PYTHONPATH": str(ROOT), **sasl, "THREADLINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
               "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix}
        listed = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "threadline.cli", "topics", "--chunks"],
                                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    kinds = [c["type"] for c in chunks]
    assert "tool-result" in kinds and kinds[-1] == "finish"
    assert "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta") == "rested over TLS"
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert any(thread in orjson.loads(line)["topic"] for line in listed.stdout.splitlines())


async def test_a_wrong_password_is_refused(cluster, sasl):
    with pytest.raises(BrokerUnavailableError):
        async with ThreadlineClient(_settings(cluster, sasl, THREADLINE_KAFKA_SASL_PASSWORD="wrong")):
            pass
