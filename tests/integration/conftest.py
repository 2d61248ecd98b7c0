"""Fixtures of the integration tests beside those of ``tests/conftest.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from threadline.testing.harness import create_database, drop_database


@pytest.fixture
def fresh_db(cluster) -> Iterator[str]:
    """The DSN of an empty database of the test's own (not migrated), dropped after it."""
    name = f"tl_mig_{uuid.uuid4().hex[:8]}"
    asyncio.run(create_database(cluster.admin_dsn, name))
    yield cluster.admin_dsn.rsplit("/", 1)[0] + "/" + name
    asyncio.run(drop_database(cluster.admin_dsn, name))
