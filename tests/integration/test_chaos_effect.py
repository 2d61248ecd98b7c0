"""The chaos test's counted side effect survives the PostgreSQL restart the test itself injects
(chaos seed 1 failed on "tool call executed 0 times": the tool's own connect met the restart, the
tool ended as a tool-error and its effect was never recorded)."""

from __future__ import annotations

import types
from typing import Any

import asyncpg
import pytest

from tests.e2e.agents import crashes


class _Writer:
    async def custom(self, chunk: dict[str, Any]) -> None:
        pass


async def test_the_effect_is_recorded_once_through_a_lost_connection(cluster, monkeypatch: pytest.MonkeyPatch):
    admin = await asyncpg.connect(cluster.dsn)
    await admin.execute("CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                        "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    real_connect, calls = asyncpg.connect, 0

    async def flaky_connect(*args: Any, **kwargs: Any) -> asyncpg.Connection:
        nonlocal calls
        calls += 1
        if calls == 1:  # what asyncpg raised in the chaos run while PostgreSQL restarted
            raise ConnectionError("unexpected connection_lost() call")
        return await real_connect(*args, **kwargs)

    monkeypatch.setattr(crashes.asyncpg, "connect", flaky_connect)
    monkeypatch.setattr(crashes, "get_settings", lambda: types.SimpleNamespace(pg_dsn=cluster.dsn))
    context = types.SimpleNamespace(writer=_Writer(), run_id="run-effect-1", tool_call_id="call-1",
                                    idempotency_key="run-effect-1:call-1")
    assert await crashes.chaos_effect(crashes.EffectInput(n=1), context) == {"done": 1}
    assert calls == 2
    assert await admin.fetchval("SELECT count(*) FROM chaos_effects WHERE run_id = 'run-effect-1'") == 1
    await admin.close()
