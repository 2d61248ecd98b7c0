"""Test session wiring.

Every test is marked by its folder (:func:`pytest_collection_modifyitems`): ``tests/unit`` and
``tests/contract`` are ``unit`` (pure logic, no cluster: ``make test-fast`` runs ``-m unit``),
``tests/integration`` is ``integration``, ``tests/e2e`` is ``e2e``. A test in a new folder must be
given a marker here, or collection fails.

Integration and end-to-end tests run against a real Kafka and a real PostgreSQL: containers
(testcontainers) when a Docker engine answers, else the native cluster of ``make infra-up``
(started here if it is not running). Every session gets its own topic prefix and its own
database, so tests can share a cluster with a running ``make up``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from threadline.testing.harness import create_database, drop_database, ensure_native_cluster

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent


MARKER_BY_FOLDER = {"unit": "unit", "contract": "unit", "integration": "integration", "e2e": "e2e",
                    "parity": "parity", "clients": "clients",
                    "clients_aisdk": "clients", "studio": "clients"}
"""The marker each top-level folder of ``tests/`` gives its tests."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every collected test ``unit``, ``integration`` or ``e2e`` by its folder under ``tests/``.

    Raises ``pytest.UsageError`` for a test outside those folders, so none goes unmarked.
    """
    for item in items:
        folder = Path(item.path).resolve().relative_to(ROOT / "tests").parts[0]
        marker = MARKER_BY_FOLDER.get(folder)
        if marker is None:
            raise pytest.UsageError(f"{item.nodeid}: tests/{folder}/ has no marker in MARKER_BY_FOLDER (tests/conftest.py)")
        item.add_marker(marker)


@pytest.fixture(autouse=True)
def _serial_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tell :func:`tests.e2e.faults.alone_or_fail` whether the running test is marked ``serial``."""
    os.environ["THREADLINE_TEST_SERIAL"] = "1" if request.node.get_closest_marker("serial") else "0"
    yield
    os.environ.pop("THREADLINE_TEST_SERIAL", None)


@dataclass
class Cluster:
    bootstrap: str
    admin_dsn: str  # the cluster's main database
    dsn: str  # this session's database
    prefix: str


def _docker_engine() -> bool:
    if os.environ.get("THREADLINE_DOCKER") == "0" or shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if os.environ.get("THREADLINE_NO_CLUSTER") == "1":  # set by `make test-fast`
        raise RuntimeError("THREADLINE_NO_CLUSTER=1 but a test asked for the cluster: mark it integration or e2e")
    containers = []
    if _docker_engine():
        from threadline.testing.containers import start_kafka, start_postgres

        kafka, bootstrap = start_kafka()
        pg, admin_dsn = start_postgres()
        containers = [kafka, pg]
    else:
        native = ensure_native_cluster(ROOT)
        bootstrap, admin_dsn = native.bootstrap, native.admin_dsn
    tag = uuid.uuid4().hex[:10]
    dbname = f"tl_test_{tag}"
    dsn = asyncio.run(create_database(admin_dsn, dbname))  # (hosts and parameters kept: a standby's too)
    from threadline.store.migrate import migrate

    migrate(dsn, contract=True)
    yield Cluster(bootstrap=bootstrap, admin_dsn=admin_dsn, dsn=dsn, prefix=f"tltest-{tag}")
    asyncio.run(drop_database(admin_dsn, dbname))
    for c in containers:
        c.stop()


@pytest.fixture(scope="module")
def own_cluster(cluster: Cluster) -> Iterator[Cluster]:
    """The session's Kafka and PostgreSQL with a database (migrated) and a topic prefix of the
    module's own, which no service of the session reads or relays: for tests that must see every
    outbox row and every record of their topics as theirs alone (the session's services relay any
    outbox row older than 2 s, which on a loaded machine races a test's own publishing)."""
    from threadline.store.migrate import migrate

    tag = uuid.uuid4().hex[:10]
    dbname = f"tl_own_{tag}"
    dsn = asyncio.run(create_database(cluster.admin_dsn, dbname))
    migrate(dsn, contract=True)
    yield Cluster(bootstrap=cluster.bootstrap, admin_dsn=cluster.admin_dsn, dsn=dsn, prefix=f"tlown-{tag}")
    asyncio.run(drop_database(cluster.admin_dsn, dbname))
