"""A run's terminal chunks written outside its step (an abort of a run with no step running, a
stuck run failed by the sweeper): queued in the outbox on the run's thread topic and, for a child
run, nested on its parent's (decision 78), as a step's chunk writer mirrors every chunk — so a
parent's subscribers see each child end, whoever ended it (decision 219)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import orjson

from threadline.events.chunks import chunk_headers, nested_chunk
from threadline.orchestration.children import nested_target
from threadline.store import outbox
from threadline.topics import Topics, thread_key


async def add_terminal(conn: asyncpg.Connection, run: Mapping[str, Any], stamped: Sequence[Mapping[str, Any]],
                       topics: Topics) -> list[int]:
    """Queue ``stamped`` (enveloped chunks of ``run``, a ``runs`` row with its ``options``) on the
    run's chunk topic, and each also nested on the parent's topic when ``run`` is a child run.
    Returns the outbox ids, in order."""
    key = thread_key(run["resource_id"], run["thread_id"])
    topic = topics.chunks(run["resource_id"], run["thread_id"])
    parent = nested_target(run["options"] or {})
    ids: list[int] = []
    for chunk in stamped:
        ids.append(await outbox.add_raw(conn, topic, orjson.dumps(chunk), key=key, headers=chunk_headers()))
        if parent is not None:
            ids.append(await outbox.add_raw(conn, topics.chunks(parent["resource_id"], parent["thread_id"]),
                                            orjson.dumps(nested_chunk(chunk, parent)),
                                            key=thread_key(parent["resource_id"], parent["thread_id"]),
                                            headers=chunk_headers()))
    return ids
