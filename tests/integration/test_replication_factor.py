"""The configured replication factor reaches the broker: a topic is created with that many
replicas, and a factor above the broker count (the test cluster has one broker) is refused with
an error naming ``THREADLINE_REPLICATION_FACTOR`` and leaves no topic behind."""

from __future__ import annotations

import uuid

import pytest

from threadline.kafka.admin import TopicAdmin


async def test_topics_get_the_configured_replicas_and_too_many_are_refused(cluster):
    ok = f"{cluster.prefix}.rf-one-{uuid.uuid4().hex[:6]}"
    refused = f"{cluster.prefix}.rf-two-{uuid.uuid4().hex[:6]}"
    one = TopicAdmin(cluster.bootstrap, replication_factor=1)
    two = TopicAdmin(cluster.bootstrap, replication_factor=2)
    await one.start()
    await two.start()
    try:
        await one.ensure([ok], partitions=3)
        assert await one.exists(ok)
        with pytest.raises(RuntimeError, match=r"replication factor 2 exceeds.*THREADLINE_REPLICATION_FACTOR"):
            await two.ensure([refused], partitions=1)
        assert not await two.exists(refused)
        assert refused not in two._known  # asked again next time, not taken as created
        assert one._client is not None
        meta = await one._client.describe_topics([ok])
        parts = meta[0]["partitions"]
        assert len(parts) == 3 and all(len(p["replicas"]) == 1 for p in parts)
    finally:
        await one.stop()
        await two.stop()
